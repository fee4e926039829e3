package mem

import "unsafe"

// addrOf returns the virtual address of b's first byte (b non-empty). Go's
// collector does not move heap objects, and mmap'd regions never move, so
// the address is stable while b is referenced.
func addrOf(b []byte) uint64 {
	return uint64(uintptr(unsafe.Pointer(unsafe.SliceData(b))))
}
