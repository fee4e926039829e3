package atomics

import (
	"errors"
	"unsafe"
)

// Errors of the registered-memory forms. Both leave memory untouched.
var (
	// ErrOutOfRange: the 8-byte word at the offset does not lie inside the
	// slice. The engine normally rejects this earlier, as a base-or-bounds
	// violation, when it checks the STag's bounds.
	ErrOutOfRange = errors.New("atomics: target word out of range")
	// ErrMisaligned: the resolved address is not 64-bit aligned (RFC 7306
	// §5.2.1, §8.2: Terminate RDMAP / Remote Operation / 0x07).
	ErrMisaligned = errors.New("atomics: target address not 64-bit aligned")
)

// Word resolves the 64-bit word at byte offset off of mem. It checks the
// bounds first (overflow-safe: any off > len(mem)-8 is refused, including
// offsets near 2^64) and then the alignment of the address &mem[off], not of
// off: a registered region may start at any address.
func Word(mem []byte, off uint64) (*uint64, error) {
	n := uint64(len(mem))
	if n < 8 || off > n-8 {
		return nil, ErrOutOfRange
	}
	ptr := unsafe.Pointer(unsafe.SliceData(mem[off:]))
	if uintptr(ptr)&7 != 0 {
		return nil, ErrMisaligned
	}
	return (*uint64)(ptr), nil
}

// FetchAddAt is FetchAdd on the word at byte offset off of mem. On error
// memory is not touched and orig is 0.
func FetchAddAt(mem []byte, off uint64, add, mask uint64) (orig uint64, err error) {
	p, err := Word(mem, off)
	if err != nil {
		return 0, err
	}
	return FetchAdd(p, add, mask), nil
}

// CmpSwapAt is CmpSwap on the word at byte offset off of mem. On error
// memory is not touched, orig is 0 and matched is false.
func CmpSwapAt(mem []byte, off uint64, cmp, cmpMask, swap, swapMask uint64) (orig uint64, matched bool, err error) {
	p, err := Word(mem, off)
	if err != nil {
		return 0, false, err
	}
	orig, matched = CmpSwap(p, cmp, cmpMask, swap, swapMask)
	return orig, matched, nil
}
