package atomics

import (
	"runtime"
	"sync/atomic"
	"testing"
)

// Compare sub-benchmarks within a group: BenchmarkUnmasked/{FetchAdd,
// AddUint64}, BenchmarkMasked/{FetchAdd,CmpSwap,CmpSwapExact,
// CompareAndSwapUint64}, BenchmarkContended/{FetchAddMasked,AddUint64}.

var sink uint64

func BenchmarkUnmasked(b *testing.B) {
	b.Run("AddUint64", func(b *testing.B) {
		b.ReportAllocs()
		var w paddedWord
		for i := range b.N {
			atomic.AddUint64(&w.v, uint64(i))
		}
		sink = w.v
	})
	b.Run("FetchAdd", func(b *testing.B) {
		b.ReportAllocs()
		var w paddedWord
		var s uint64
		for i := range b.N {
			s += FetchAdd(&w.v, uint64(i), 0)
		}
		sink = s
	})
}

func BenchmarkMasked(b *testing.B) {
	b.Run("CompareAndSwapUint64", func(b *testing.B) {
		b.ReportAllocs()
		var w paddedWord
		o := uint64(0)
		for range b.N {
			if atomic.CompareAndSwapUint64(&w.v, o, o+1) {
				o++
			}
		}
		sink = w.v
	})
	b.Run("FetchAdd", func(b *testing.B) {
		b.ReportAllocs()
		var w paddedWord
		var s uint64
		for range b.N {
			s += FetchAdd(&w.v, 0x0101010101010101, 0x8080808080808080)
		}
		sink = s
	})
	b.Run("CmpSwap", func(b *testing.B) {
		// Masked compare of the low half, swap of the high half: always
		// matches, always writes.
		b.ReportAllocs()
		var w paddedWord
		var s uint64
		for i := range b.N {
			o, _ := CmpSwap(&w.v, 0, 0xFFFFFFFF, uint64(i)<<32, 0xFFFFFFFF00000000)
			s += o
		}
		sink = s
	})
	b.Run("CmpSwapExact", func(b *testing.B) {
		// cmpMask all-ones with a partial swap mask: the single-CAS path.
		b.ReportAllocs()
		var w paddedWord
		var s uint64
		o := uint64(0)
		for range b.N {
			n := (o + 1) & 0xFFFF
			if orig, ok := CmpSwap(&w.v, o, ^uint64(0), n, 0xFFFF); ok {
				o = n
				s += orig
			}
		}
		sink = s
	})
}

// contended runs body on exactly two goroutines (GOMAXPROCS 2) sharing one
// word; i counts each goroutine's own iterations.
func contended(b *testing.B, body func(p *uint64, i uint64)) {
	prev := runtime.GOMAXPROCS(2)
	defer runtime.GOMAXPROCS(prev)
	b.ReportAllocs()
	var w paddedWord
	b.RunParallel(func(pb *testing.PB) {
		for i := uint64(0); pb.Next(); i++ {
			body(&w.v, i)
		}
	})
	sink = atomic.LoadUint64(&w.v)
}

func BenchmarkContended(b *testing.B) {
	b.Run("AddUint64", func(b *testing.B) {
		contended(b, func(p *uint64, _ uint64) { atomic.AddUint64(p, 0x0000000100000001) })
	})
	b.Run("FetchAddMasked", func(b *testing.B) {
		contended(b, func(p *uint64, _ uint64) { FetchAdd(p, 0x0000000100000001, 0x8000000080000000) })
	})
	b.Run("CmpSwapMasked", func(b *testing.B) {
		// Bit 0 stays 0, so it always matches; the swap value changes
		// with i, so most matches write.
		contended(b, func(p *uint64, i uint64) { CmpSwap(p, 0, 1, i<<8, 0xFF00) })
	})
}

func BenchmarkMaskedAdd(b *testing.B) {
	b.ReportAllocs()
	var s uint64
	for i := range b.N {
		s = MaskedAdd(s, uint64(i), 0x8080808080808080)
	}
	sink = s
}
