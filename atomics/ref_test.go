package atomics

import (
	"math/bits"
	"math/rand/v2"
	"sync/atomic"
	"testing"

	"xrnic/wire/wiretest/vectors"
)

// refFetchAdd is the RFC 7306 §5.1.1 pseudocode transcribed bit by bit: the
// oracle for MaskedAdd and FetchAdd. It shares no code with the package.
func refFetchAdd(orig, addData, addMask uint64) uint64 {
	bitLocation := uint64(1)
	carry := uint64(0)
	var remote uint64
	for bit := 0; bit <= 63; bit++ {
		if bit != 0 {
			bitLocation <<= 1
		}
		val1 := (orig & bitLocation) >> bit
		val2 := (addData & bitLocation) >> bit
		sum := carry + val1 + val2
		carry = (sum & 2) >> 1
		sum &= 1
		if sum != 0 {
			remote |= bitLocation
		}
		if carry != 0 && addMask&bitLocation == 0 {
			carry = 1
		} else {
			carry = 0
		}
	}
	return remote
}

// refCmpSwap is RFC 7306 §5.1.2 evaluated one bit at a time: every bit
// selected by the compare mask must be equal, and every bit selected by the
// swap mask takes the swap bit on a match.
func refCmpSwap(orig, cmp, cmpMask, swap, swapMask uint64) (uint64, bool) {
	match := true
	for i := range 64 {
		if cmpMask>>i&1 == 1 && cmp>>i&1 != orig>>i&1 {
			match = false
		}
	}
	if !match {
		return orig, false
	}
	var n uint64
	for i := range 64 {
		b := orig >> i & 1
		if swapMask>>i&1 == 1 {
			b = swap >> i & 1
		}
		n |= b << i
	}
	return n, true
}

// TestReferenceModel pins the oracle itself to hand-computed cases so that
// a bug shared by the oracle and the code cannot go unnoticed.
func TestReferenceModel(t *testing.T) {
	cases := []struct{ o, a, m, want uint64 }{
		{0, 0, 0, 0},
		{1, 1, 0, 2},
		{0xFF, 1, 0, 0x100},
		{0xFF, 1, 0x80, 0},
		{0xFF, 1, 0x01, 0xFE},    // bit 0 is a 1-bit field: 1^1 = 0, no carry
		{0x3, 1, 0x02, 0x0},      // field bits 0-1: 3+1 wraps to 0
		{0x3, 1, 0x04, 0x4},      // field bits 0-2: 3+1 = 4
		{^uint64(0), 1, 0, 0},    // 64-bit wrap
		{1 << 63, 1 << 63, 0, 0}, // carry out of bit 63 dropped
		{0x5, 0x3, ^uint64(0), 0x6},
	}
	for _, c := range cases {
		if got := refFetchAdd(c.o, c.a, c.m); got != c.want {
			t.Errorf("refFetchAdd(%#x, %#x, %#x) = %#x, want %#x", c.o, c.a, c.m, got, c.want)
		}
	}
	if n, ok := refCmpSwap(0xF0, 0x0F, 0xF0, 0xAA, 0x0F); ok || n != 0xF0 {
		t.Errorf("refCmpSwap mismatch case = %#x, %v", n, ok)
	}
	if n, ok := refCmpSwap(0xF0, 0xFF, 0xF0, 0xAA, 0x0F); !ok || n != 0xFA {
		t.Errorf("refCmpSwap match case = %#x, %v", n, ok)
	}
}

type fetchAddVector struct{ o, a, m, n uint64 }

type cmpSwapVector struct {
	o, c, cm, s, sm, n uint64
	match              bool
}

// fetchAddVectors and cmpSwapVectors read the masked-atomics vectors of
// wire/testdata/vectors.txt (docs/spec/vectors.md#masked-atomics): the
// worked examples of docs/spec/rfc7306.md#fetchadd and #cmpswap, plus the
// corner cases Compare Mask 0 (always matches) and Swap Mask 0 (never
// writes).
func fetchAddVectors(t testing.TB) []fetchAddVector {
	t.Helper()
	var out []fetchAddVector
	for _, v := range vectors.Kind(t, "fetchadd", "fetchadd-two-counters", "fetchadd-plain", "fetchadd-eight-counters",
		"fetchadd-wrap", "fetchadd-xor", "fetchadd-three-fields") {
		out = append(out, fetchAddVector{v.Uint64(t, "o"), v.Uint64(t, "a"), v.Uint64(t, "m"), v.Uint64(t, "n")})
	}
	return out
}

func cmpSwapVectors(t testing.TB) []cmpSwapVector {
	t.Helper()
	var out []cmpSwapVector
	for _, v := range vectors.Kind(t, "cmpswap", "cmpswap-unmasked", "cmpswap-upper-half", "cmpswap-upper-half-mismatch",
		"cmpswap-compare-mask-zero", "cmpswap-swap-mask-zero", "cmpswap-unmasked-mismatch") {
		out = append(out, cmpSwapVector{v.Uint64(t, "o"), v.Uint64(t, "c"), v.Uint64(t, "cm"), v.Uint64(t, "s"),
			v.Uint64(t, "sm"), v.Uint64(t, "n"), v.Bool(t, "match")})
	}
	return out
}

func TestVectors(t *testing.T) {
	for _, v := range fetchAddVectors(t) {
		if got := refFetchAdd(v.o, v.a, v.m); got != v.n {
			t.Errorf("refFetchAdd(%016x, %016x, %016x) = %016x, want %016x", v.o, v.a, v.m, got, v.n)
		}
		if got := MaskedAdd(v.o, v.a, v.m); got != v.n {
			t.Errorf("MaskedAdd(%016x, %016x, %016x) = %016x, want %016x", v.o, v.a, v.m, got, v.n)
		}
		w := v.o
		if orig := FetchAdd(&w, v.a, v.m); orig != v.o || w != v.n {
			t.Errorf("FetchAdd(%016x, %016x, %016x): orig %016x, word %016x; want %016x, %016x", v.o, v.a, v.m, orig, w, v.o, v.n)
		}
	}
	for _, v := range cmpSwapVectors(t) {
		if n, ok := refCmpSwap(v.o, v.c, v.cm, v.s, v.sm); n != v.n || ok != v.match {
			t.Errorf("refCmpSwap(%016x, ...) = %016x, %v; want %016x, %v", v.o, n, ok, v.n, v.match)
		}
		if n, ok := MaskedCmpSwap(v.o, v.c, v.cm, v.s, v.sm); n != v.n || ok != v.match {
			t.Errorf("MaskedCmpSwap(%016x, %016x, %016x, %016x, %016x) = %016x, %v; want %016x, %v", v.o, v.c, v.cm, v.s, v.sm, n, ok, v.n, v.match)
		}
		w := v.o
		if orig, ok := CmpSwap(&w, v.c, v.cm, v.s, v.sm); orig != v.o || ok != v.match || w != v.n {
			t.Errorf("CmpSwap(%016x, %016x, %016x, %016x, %016x): orig %016x, match %v, word %016x; want %016x, %v, %016x", v.o, v.c, v.cm, v.s, v.sm, orig, ok, w, v.o, v.match, v.n)
		}
	}
}

// gen draws operands and masks from several distributions.
type gen struct{ r *rand.Rand }

// fieldMask returns a mask with a field MSB every w bits (w in 1..64),
// shifted so fields need not start at bit 0.
func fieldMask(w, shift uint) uint64 {
	var m uint64
	for i := w - 1; i < 64; i += w {
		m |= 1 << i
	}
	return bits.RotateLeft64(m, int(shift))
}

var boundaryMasks = []uint64{
	0x8000000080000000, 0x8080808080808080, 0x0000800000008000,
	0x8000800080008000, 0xAAAAAAAAAAAAAAAA, 0x5555555555555555,
	0x0000000080000000, 0x8000000000000000, 0x0000000000000001,
	0x7FFFFFFFFFFFFFFF, 0xFFFFFFFFFFFFFFFE, 0x4000000000000000,
}

func (g gen) mask() uint64 {
	r := g.r
	switch r.IntN(8) {
	case 0:
		return r.Uint64()
	case 1: // sparse
		return r.Uint64() & r.Uint64() & r.Uint64() & r.Uint64()
	case 2: // dense
		return r.Uint64() | r.Uint64() | r.Uint64()
	case 3:
		return 0
	case 4:
		return ^uint64(0)
	case 5: // single bit
		return 1 << r.IntN(64)
	case 6:
		return boundaryMasks[r.IntN(len(boundaryMasks))]
	default: // periodic fields of random width and phase
		return fieldMask(uint(1+r.IntN(64)), uint(r.IntN(64)))
	}
}

// value draws operands biased toward carry chains: all-ones runs make
// carries cross (or be stopped at) field boundaries.
func (g gen) value() uint64 {
	r := g.r
	switch r.IntN(6) {
	case 0, 1:
		return r.Uint64()
	case 2:
		return ^uint64(0)
	case 3:
		return r.Uint64() | r.Uint64() | r.Uint64()
	case 4:
		return uint64(r.IntN(4))
	default:
		return ^uint64(0) << r.IntN(64)
	}
}

const randomCases = 1_000_000

func TestFetchAddRandom(t *testing.T) {
	seed := rand.Uint64()
	g := gen{rand.New(rand.NewPCG(seed, 0x7306))}
	var w uint64
	for i := range randomCases {
		o, a, m := g.value(), g.value(), g.mask()
		want := refFetchAdd(o, a, m)
		if got := MaskedAdd(o, a, m); got != want {
			t.Fatalf("seed %#x case %d: MaskedAdd(%016x, %016x, %016x) = %016x, want %016x", seed, i, o, a, m, got, want)
		}
		atomic.StoreUint64(&w, o)
		if orig := FetchAdd(&w, a, m); orig != o || atomic.LoadUint64(&w) != want {
			t.Fatalf("seed %#x case %d: FetchAdd(%016x, %016x, %016x): orig %016x word %016x, want word %016x", seed, i, o, a, m, orig, atomic.LoadUint64(&w), want)
		}
	}
}

func TestCmpSwapRandom(t *testing.T) {
	seed := rand.Uint64()
	g := gen{rand.New(rand.NewPCG(seed, 0x7307))}
	var w uint64
	for i := range randomCases {
		o, s, cm, sm := g.value(), g.value(), g.mask(), g.mask()
		c := g.value()
		if g.r.IntN(2) == 0 {
			// Half the cases agree with o under the compare mask, so
			// both outcomes are well represented.
			c = o&cm | c&^cm
		}
		want, wantOK := refCmpSwap(o, c, cm, s, sm)
		if got, ok := MaskedCmpSwap(o, c, cm, s, sm); got != want || ok != wantOK {
			t.Fatalf("seed %#x case %d: MaskedCmpSwap(%016x, %016x, %016x, %016x, %016x) = %016x, %v; want %016x, %v", seed, i, o, c, cm, s, sm, got, ok, want, wantOK)
		}
		atomic.StoreUint64(&w, o)
		orig, ok := CmpSwap(&w, c, cm, s, sm)
		if got := atomic.LoadUint64(&w); orig != o || ok != wantOK || got != want {
			t.Fatalf("seed %#x case %d: CmpSwap(%016x, %016x, %016x, %016x, %016x): orig %016x match %v word %016x; want %v %016x", seed, i, o, c, cm, s, sm, orig, ok, got, wantOK, want)
		}
	}
}

// TestFieldSplit checks the field-split formulation of
// docs/spec/rfc7306.md#fetchadd (each field an independent modular counter)
// against the oracle: a third, independent
// derivation.
func TestFieldSplit(t *testing.T) {
	seed := rand.Uint64()
	g := gen{rand.New(rand.NewPCG(seed, 1))}
	for i := range 100_000 {
		o, a, m := g.value(), g.value(), g.mask()
		var n uint64
		lo := 0
		for hi := range 64 {
			if m>>hi&1 == 0 && hi != 63 {
				continue
			}
			var f uint64 = ^uint64(0) >> (63 - hi) &^ (1<<lo - 1)
			n |= ((o & f) + (a & f)) & f
			lo = hi + 1
		}
		if want := refFetchAdd(o, a, m); n != want {
			t.Fatalf("seed %#x case %d: field split %016x != reference %016x (o %016x a %016x m %016x)", seed, i, n, want, o, a, m)
		}
	}
}

func TestNoAllocs(t *testing.T) {
	var w uint64
	mem := make([]uint64, 2)
	b := wordsAsBytes(mem)
	allocs := testing.AllocsPerRun(100, func() {
		FetchAdd(&w, 1, 0)
		FetchAdd(&w, 1, 0x80)
		CmpSwap(&w, 0, ^uint64(0), 1, ^uint64(0))
		CmpSwap(&w, 0, 0xFF, 1, 0xFF)
		FetchAddAt(b, 8, 1, 0x80)
		CmpSwapAt(b, 8, 0, 1, 1, 1)
		FetchAddAt(b, 3, 1, 0)
	})
	if allocs != 0 {
		t.Fatalf("allocs = %v, want 0", allocs)
	}
}

func TestScopeString(t *testing.T) {
	for s, want := range map[Scope]string{ScopeNone: "none", ScopeRNIC: "rnic", ScopeGlobal: "global", 9: "invalid"} {
		if s.String() != want {
			t.Errorf("Scope(%d).String() = %q, want %q", s, s.String(), want)
		}
	}
	if Supported != ScopeGlobal {
		t.Errorf("Supported = %v", Supported)
	}
}
