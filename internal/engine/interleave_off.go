//go:build !xrnic_interleave

package engine

// interleaveForTest, set only by the xrnic_interleave build tag, brings
// back the old transmitter that cut an RDMA Write with a Read Response:
// the siw interop suite must fail with it (docs/INTEROP.md).
const interleaveForTest = false
