package afxdp

import "unsafe"

// frameAddr returns the UMEM address (offset in base) of a frame handed
// out by xskLink.RecvBatch, which lies inside base.
func frameAddr(base, frame []byte) uint64 {
	return uint64(uintptr(unsafe.Pointer(unsafe.SliceData(frame))) - uintptr(unsafe.Pointer(unsafe.SliceData(base))))
}

// inUMEM reports whether frame lies inside base (else it is a reassembly
// buffer of a multi-buffer packet).
func inUMEM(base, frame []byte) bool {
	p := uintptr(unsafe.Pointer(unsafe.SliceData(frame)))
	b := uintptr(unsafe.Pointer(unsafe.SliceData(base)))
	return p >= b && p < b+uintptr(len(base))
}
