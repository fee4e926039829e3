// Command engine is libxrnic.so, the xrnic engine as a C shared library
// (go build -buildmode=c-shared; `make abi` puts it in bin/lib). It
// implements abi/include/xrnic_engine.h on top of package xrnic/verbs, and
// the C libraries abi/ibverbs (libibverbs.so.1) and abi/rdmacm
// (librdmacm.so.1) give it the rdma-core ABI, so unmodified rdma-core
// applications (rping, perftest) run on xrnic with
// LD_LIBRARY_PATH=bin/lib. The engine runs inside the application
// process.
//
// Objects are named by uint64 handles (a generation in the high 32 bits,
// so a stale handle gives EBADF, never another object); post and poll look
// them up without a lock and allocate nothing. Completion, asynchronous
// and rdma_cm events go to channels: an eventfd in semaphore mode plus a
// queue (xrnic_chan_get). Configuration comes from XRNIC_TRANSPORT,
// XRNIC_IFACE, XRNIC_CONFIG, XRNIC_DEBUG and XRNIC_NO_INLINE_TX
// (docs/VERBS-ABI.md, which also lists what is supported).
//
// Built without cgo, the package is only a stub command that says so.
package main
