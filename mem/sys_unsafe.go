//go:build linux

package mem

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// mapAligned maps n bytes (a multiple of the page size in use) at an address
// aligned to align (a power of two, 0 for no alignment requirement beyond
// the kernel's). fd < 0 maps anonymous memory. flags are added to
// MAP_PRIVATE|MAP_ANONYMOUS (anonymous) or MAP_SHARED (fd).
//
// For alignment it reserves n+align bytes of PROT_NONE address space, maps
// the memory over the aligned part with MAP_FIXED and unmaps the slack.
func mapAligned(n, align uintptr, fd int, flags int) ([]byte, error) {
	const prot = unix.PROT_READ | unix.PROT_WRITE
	base := unix.MAP_SHARED
	if fd < 0 {
		base = unix.MAP_PRIVATE | unix.MAP_ANONYMOUS
	}
	if align == 0 {
		p, err := unix.MmapPtr(fd, 0, nil, n, prot, base|flags)
		if err != nil {
			return nil, err
		}
		return unsafe.Slice((*byte)(p), n), nil
	}
	resv, err := unix.MmapPtr(-1, 0, nil, n+align, unix.PROT_NONE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_NORESERVE)
	if err != nil {
		return nil, err
	}
	head := (align - uintptr(resv)&(align-1)) & (align - 1)
	at := unsafe.Add(resv, head)
	p, err := unix.MmapPtr(fd, 0, at, n, prot, base|flags|unix.MAP_FIXED)
	if err != nil {
		unix.MunmapPtr(resv, n+align)
		return nil, err
	}
	if head > 0 {
		unix.MunmapPtr(resv, head)
	}
	if tail := align - head; tail > 0 {
		unix.MunmapPtr(unsafe.Add(at, n), tail)
	}
	return unsafe.Slice((*byte)(p), n), nil
}

// unmap releases a mapping made by mapAligned.
func unmap(b []byte) error {
	if len(b) == 0 {
		return nil
	}
	return unix.MunmapPtr(unsafe.Pointer(unsafe.SliceData(b)), uintptr(len(b)))
}
