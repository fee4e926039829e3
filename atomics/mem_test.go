package atomics

import (
	"bytes"
	"errors"
	"testing"
	"unsafe"
)

// wordsAsBytes views 8-byte aligned storage as bytes, so the base alignment
// of the slice is known.
func wordsAsBytes(w []uint64) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(w))), len(w)*8)
}

func TestAtRefusals(t *testing.T) {
	const nWords = 8
	backing := make([]uint64, nWords)
	for i := range backing {
		backing[i] = 0x0102030405060708 * uint64(i+1)
	}
	mem := wordsAsBytes(backing)
	n := uint64(len(mem))
	type tc struct {
		name string
		mem  []byte
		off  uint64
		want error
	}
	var cases []tc
	for off := uint64(1); off <= 7; off++ {
		cases = append(cases, tc{"misaligned", mem, off, ErrMisaligned})
		cases = append(cases, tc{"misaligned", mem, 8*3 + off, ErrMisaligned})
	}
	// A slice starting one byte in: offset 0 is misaligned even though
	// off&7 == 0.
	cases = append(cases, tc{"unaligned base", mem[1:], 0, ErrMisaligned}, tc{"unaligned base", mem[1:], 8, ErrMisaligned})
	for off := n - 7; off <= n+1; off++ {
		cases = append(cases, tc{"past end", mem, off, ErrOutOfRange})
	}
	for _, off := range []uint64{^uint64(0), ^uint64(0) - 6, ^uint64(0) - 7, ^uint64(0) - 8, 1 << 63, -n, -n + 1, -n + 7} {
		cases = append(cases, tc{"near 2^64", mem, off, ErrOutOfRange})
	}
	cases = append(cases,
		tc{"nil", nil, 0, ErrOutOfRange},
		tc{"short", mem[:7], 0, ErrOutOfRange},
		tc{"short aligned", mem[:15], 8, ErrOutOfRange},
	)
	snapshot := bytes.Clone(mem)
	for _, c := range cases {
		if _, err := Word(c.mem, c.off); !errors.Is(err, c.want) {
			t.Errorf("%s: Word(len %d, off %#x) err = %v, want %v", c.name, len(c.mem), c.off, err, c.want)
		}
		if orig, err := FetchAddAt(c.mem, c.off, 1, 0); err != c.want || orig != 0 {
			t.Errorf("%s: FetchAddAt(len %d, off %#x) = %#x, %v; want 0, %v", c.name, len(c.mem), c.off, orig, err, c.want)
		}
		if _, err := FetchAddAt(c.mem, c.off, 0x0101010101010101, 0x8080808080808080); err != c.want {
			t.Errorf("%s: masked FetchAddAt off %#x err = %v", c.name, c.off, err)
		}
		// A compare that would match anything and a swap that writes all.
		if orig, ok, err := CmpSwapAt(c.mem, c.off, 0, 0, ^uint64(0), ^uint64(0)); err != c.want || orig != 0 || ok {
			t.Errorf("%s: CmpSwapAt(len %d, off %#x) = %#x, %v, %v; want 0, false, %v", c.name, len(c.mem), c.off, orig, ok, err, c.want)
		}
		if !bytes.Equal(mem, snapshot) {
			t.Fatalf("%s: off %#x: memory modified by a refused operation", c.name, c.off)
		}
	}
}

func TestAtAccepted(t *testing.T) {
	backing := make([]uint64, 4)
	mem := wordsAsBytes(backing)
	for off := uint64(0); off+8 <= uint64(len(mem)); off += 8 {
		i := off / 8
		backing[i] = 0x00000001FFFFFFFF
		orig, err := FetchAddAt(mem, off, 0x0000000100000001, 0x8000000080000000)
		if err != nil || orig != 0x00000001FFFFFFFF || backing[i] != 0x0000000200000000 {
			t.Fatalf("FetchAddAt off %d: %#x, %v, word %#x", off, orig, err, backing[i])
		}
		orig, ok, err := CmpSwapAt(mem, off, 0x0000000200000000, ^uint64(0), 7, ^uint64(0))
		if err != nil || !ok || orig != 0x0000000200000000 || backing[i] != 7 {
			t.Fatalf("CmpSwapAt off %d: %#x, %v, %v, word %#x", off, orig, ok, err, backing[i])
		}
	}
	// The last word of a region (off == len-8) is in range.
	if _, err := FetchAddAt(mem, uint64(len(mem)-8), 1, 0); err != nil || backing[3] != 8 {
		t.Fatalf("last word: %v, %#x", err, backing[3])
	}
	// A region starting 1 byte into the storage: offset 7 resolves to an
	// aligned address and is accepted; the word is backing[1].
	sub := mem[1:]
	if orig, err := FetchAddAt(sub, 7, 1, 0); err != nil || orig != 7 || backing[1] != 8 {
		t.Fatalf("unaligned base, off 7: %#x, %v, word %#x", orig, err, backing[1])
	}
	// Host order: the word's bytes in memory are the native encoding.
	backing[0] = 0
	if _, err := FetchAddAt(mem, 0, 0x0102030405060708, 0); err != nil {
		t.Fatal(err)
	}
	if got := *(*uint64)(unsafe.Pointer(&mem[0])); got != 0x0102030405060708 {
		t.Fatalf("host order: %#x", got)
	}
}
