// Package abitest proves the rdma-core ABI of xrnic (bin/lib, make abi):
// Debian's unmodified rping, ibv_devices, ibv_devinfo and perftest, and
// our own C test program (c/abitest.c), run with LD_LIBRARY_PATH=bin/lib
// between two network namespaces on a veth pair, over the kernel and the
// afxdp transports. Everything is in the _test.go files; `go test
// ./abi/test` runs it (root; `make abi` first).
package abitest
