package datapath

import "unsafe"

// frameAddr returns the UMEM address (offset in base) of a frame handed
// out by xskLink.RecvBatch, which lies inside base.
func frameAddr(base, frame []byte) uint64 {
	return uint64(uintptr(unsafe.Pointer(unsafe.SliceData(frame))) - uintptr(unsafe.Pointer(unsafe.SliceData(base))))
}
