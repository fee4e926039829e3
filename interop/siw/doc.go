// Package siw tests xrnic against Linux soft-iWARP (siw), the iWARP peer
// every Linux user has. It boots Debian's own kernel under QEMU with siw.ko
// built from Debian's linux-source of that kernel and Debian's rdma-core
// tools (prepare.sh; nothing is installed on the host), joins the guest to
// a test network namespace by a tap (198.18.60.0/24), and runs xrnic on the
// host against it on the kernel and afxdp transports. The guest's /init is
// the agent in guest/, which runs the host's commands over HTTP.
//
// `make interop` runs the matrix (docs/INTEROP.md). The tests need root and
// QEMU and skip otherwise, saying which is missing.
package siw
