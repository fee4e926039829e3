package atomics

import (
	"bytes"
	"testing"
	"unsafe"
)

func FuzzMaskedAdd(f *testing.F) {
	for _, v := range fetchAddVectors(f) {
		f.Add(v.o, v.a, v.m)
	}
	f.Fuzz(func(t *testing.T, o, a, m uint64) {
		want := refFetchAdd(o, a, m)
		if got := MaskedAdd(o, a, m); got != want {
			t.Fatalf("MaskedAdd(%#x, %#x, %#x) = %#x, want %#x", o, a, m, got, want)
		}
		w := o
		if orig := FetchAdd(&w, a, m); orig != o || w != want {
			t.Fatalf("FetchAdd(%#x, %#x, %#x): orig %#x word %#x, want %#x", o, a, m, orig, w, want)
		}
	})
}

func FuzzMaskedCmpSwap(f *testing.F) {
	for _, v := range cmpSwapVectors(f) {
		f.Add(v.o, v.c, v.cm, v.s, v.sm)
	}
	f.Fuzz(func(t *testing.T, o, c, cm, s, sm uint64) {
		want, wantOK := refCmpSwap(o, c, cm, s, sm)
		if got, ok := MaskedCmpSwap(o, c, cm, s, sm); got != want || ok != wantOK {
			t.Fatalf("MaskedCmpSwap(%#x, %#x, %#x, %#x, %#x) = %#x, %v; want %#x, %v", o, c, cm, s, sm, got, ok, want, wantOK)
		}
		w := o
		if orig, ok := CmpSwap(&w, c, cm, s, sm); orig != o || ok != wantOK || w != want {
			t.Fatalf("CmpSwap(%#x, %#x, %#x, %#x, %#x): orig %#x match %v word %#x; want %v %#x", o, c, cm, s, sm, orig, ok, w, wantOK, want)
		}
	})
}

// FuzzAt checks the registered-memory forms against an independent
// statement of the rules: a region of n bytes starting base bytes into
// aligned storage, an arbitrary offset.
func FuzzAt(f *testing.F) {
	f.Add(uint8(0), uint16(64), uint64(0), uint64(1), uint64(0))
	f.Add(uint8(1), uint16(64), uint64(7), uint64(1), uint64(0x80))
	f.Add(uint8(3), uint16(17), uint64(5), uint64(1), uint64(0))
	f.Add(uint8(0), uint16(64), ^uint64(0)-7, uint64(1), uint64(0))
	f.Fuzz(func(t *testing.T, base uint8, n uint16, off, add, mask uint64) {
		backing := make([]uint64, 128+2)
		all := wordsAsBytes(backing)
		for i := range all {
			all[i] = byte(i*7 + 1)
		}
		b := int(base % 8)
		ln := int(n % 1024)
		mem := all[b : b+ln]
		before := bytes.Clone(all)

		var want error
		switch {
		case ln < 8 || off > uint64(ln) || uint64(ln)-off < 8:
			want = ErrOutOfRange
		case (uint64(b)+off)%8 != 0: // storage is 8-aligned
			want = ErrMisaligned
		}
		orig, err := FetchAddAt(mem, off, add, mask)
		if err != want {
			t.Fatalf("base %d len %d off %#x: err %v, want %v", b, ln, off, err, want)
		}
		if want != nil {
			if orig != 0 || !bytes.Equal(all, before) {
				t.Fatalf("base %d len %d off %#x: refused but orig %#x / memory changed", b, ln, off, orig)
			}
			if _, ok, err := CmpSwapAt(mem, off, 0, 0, ^uint64(0), ^uint64(0)); err != want || ok || !bytes.Equal(all, before) {
				t.Fatalf("CmpSwapAt base %d len %d off %#x: err %v ok %v", b, ln, off, err, ok)
			}
			return
		}
		idx := (uint64(b) + off) / 8
		old := *(*uint64)(unsafe.Pointer(&before[idx*8]))
		if orig != old || backing[idx] != refFetchAdd(old, add, mask) {
			t.Fatalf("FetchAddAt: orig %#x (want %#x), word %#x", orig, old, backing[idx])
		}
		// Nothing outside the word moved.
		for i := range all {
			if uint64(i)/8 != idx && all[i] != before[i] {
				t.Fatalf("byte %d outside the target changed", i)
			}
		}
	})
}
