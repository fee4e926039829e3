package tcp

import (
	"math/rand/v2"
	"testing"
)

func TestSeqTable(t *testing.T) {
	const max = 0xffffffff
	tests := []struct {
		a, b       Seq
		lt, le, gt bool
		size       uint32 // a.Size(b)
	}{
		{1, 2, true, true, false, 1},
		{2, 1, false, false, true, max},
		{5, 5, false, true, false, 0},
		{max, 0, true, true, false, 1},    // wrap
		{0, max, false, false, true, max}, // wrap the other way
		{max - 10, 20, true, true, false, 31},
		{0, 1<<31 - 1, true, true, false, 1<<31 - 1},
		{1<<31 - 1, 0, false, false, true, 1<<31 + 1},
	}
	for _, tc := range tests {
		if got := tc.a.LessThan(tc.b); got != tc.lt {
			t.Errorf("%#x.LessThan(%#x) = %v", tc.a, tc.b, got)
		}
		if got := tc.a.LessThanEq(tc.b); got != tc.le {
			t.Errorf("%#x.LessThanEq(%#x) = %v", tc.a, tc.b, got)
		}
		if got := tc.a.GreaterThan(tc.b); got != tc.gt {
			t.Errorf("%#x.GreaterThan(%#x) = %v", tc.a, tc.b, got)
		}
		if got := tc.a.GreaterThanEq(tc.b); got != !tc.lt {
			t.Errorf("%#x.GreaterThanEq(%#x) = %v", tc.a, tc.b, got)
		}
		if got := tc.a.Size(tc.b); got != tc.size {
			t.Errorf("%#x.Size(%#x) = %#x, want %#x", tc.a, tc.b, got, tc.size)
		}
	}
	win := []struct {
		s, start Seq
		size     uint32
		in       bool
	}{
		{10, 10, 1, true},
		{10, 10, 0, false},
		{11, 10, 1, false},
		{9, 10, 100, false},
		{109, 10, 100, true},
		{110, 10, 100, false},
		{3, max - 5, 10, true}, // window wraps
		{4, max - 5, 10, false},
		{max, max - 5, 10, true},
		{max - 6, max - 5, 10, false},
	}
	for _, tc := range win {
		if got := tc.s.InWindow(tc.start, tc.size); got != tc.in {
			t.Errorf("%#x.InWindow(%#x, %d) = %v", tc.s, tc.start, tc.size, got)
		}
		if got := tc.s.InRange(tc.start, tc.start.Add(tc.size)); got != tc.in {
			t.Errorf("%#x.InRange(%#x, +%d) = %v", tc.s, tc.start, tc.size, got)
		}
	}
	if Seq(max).Add(2) != 1 || Seq(1).Sub(2) != max || Seq(max).Max(1) != 1 || Seq(max).Min(1) != max {
		t.Error("Add/Sub/Max/Min across the wrap")
	}
}

// TestSeqModel compares against arithmetic on unbounded integers: a base
// point plus offsets within ±2^31 of it, unwrapped.
func TestSeqModel(t *testing.T) {
	const seed = 0x9293
	r := rand.New(rand.NewPCG(seed, seed))
	defer func() {
		if t.Failed() {
			t.Logf("rand seed %#x", seed)
		}
	}()
	for i := 0; i < 100000; i++ {
		base := int64(r.Uint32())
		da := r.Int64N(1<<30) - 1<<29
		db := r.Int64N(1<<30) - 1<<29
		ua, ub := base+da, base+db // unwrapped values
		a, b := Seq(uint32(ua)), Seq(uint32(ub))
		if a.LessThan(b) != (ua < ub) || a.LessThanEq(b) != (ua <= ub) ||
			a.GreaterThan(b) != (ua > ub) || a.GreaterThanEq(b) != (ua >= ub) {
			t.Fatalf("compare %d %d", ua, ub)
		}
		size := uint32(r.Int64N(1 << 30))
		if a.InWindow(b, size) != (ub <= ua && ua < ub+int64(size)) {
			t.Fatalf("InWindow(%d, %d, %d)", ua, ub, size)
		}
		if ua <= ub && a.Size(b) != uint32(ub-ua) {
			t.Fatalf("Size %d %d", ua, ub)
		}
		if a.Add(size) != Seq(uint32(ua+int64(size))) || a.Sub(size) != Seq(uint32(ua-int64(size))) {
			t.Fatalf("Add/Sub %d %d", ua, size)
		}
	}
}
