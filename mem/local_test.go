package mem

import "testing"

func TestCheckLocal(t *testing.T) {
	tb, err := NewTable(16)
	if err != nil {
		t.Fatal(err)
	}
	pd := tb.AllocPD()
	other := tb.AllocPD()
	buf := make([]byte, 64)
	m, err := tb.Register(buf, MROptions{PD: pd, Access: LocalWrite, TO: TOZeroBased, Stream: 7})
	if err != nil {
		t.Fatal(err)
	}
	ro, err := tb.Register(make([]byte, 8), MROptions{PD: pd, TO: TOZeroBased})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name       string
		stag       uint32
		pd         PD
		need       Access
		to, length uint64
		ok         bool
		wantLen    int
	}{
		{"whole", m.STag(), pd, LocalWrite, 0, 64, true, 64},
		{"middle", m.STag(), pd, LocalWrite, 8, 8, true, 8},
		{"empty at end", m.STag(), pd, LocalWrite, 64, 0, true, 0},
		{"past end", m.STag(), pd, LocalWrite, 60, 8, false, 0},
		{"wrap", m.STag(), pd, 0, 1<<64 - 4, 8, false, 0},
		{"wrong pd", m.STag(), other, 0, 0, 8, false, 0},
		{"bad key", m.STag() ^ 1, pd, 0, 0, 8, false, 0},
		{"no local write", ro.STag(), pd, LocalWrite, 0, 8, false, 0},
		{"read only ok", ro.STag(), pd, 0, 0, 8, true, 8},
	}
	before := tb.Counts()
	for _, c := range cases {
		w, ok := tb.CheckLocal(c.stag, c.pd, c.need, c.to, c.length)
		if ok != c.ok || len(w) != c.wantLen {
			t.Errorf("%s: ok=%v len=%d, want %v %d", c.name, ok, len(w), c.ok, c.wantLen)
		}
	}
	if tb.Counts() != before {
		t.Error("CheckLocal counted failures")
	}
	if err := tb.Invalidate(m.STag(), pd); err != nil {
		t.Fatal(err)
	}
	if _, ok := tb.CheckLocal(m.STag(), pd, 0, 0, 8); ok {
		t.Error("invalidated STag accepted")
	}
}
