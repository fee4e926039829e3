package mem

import "testing"

// TestSTagKeysUnpredictable: an STag's key says nothing about the next
// key (SECURITY.md, "Guess an STag": every key is random). A peer that
// saw the key of a registration must not learn the key that replaces it
// on re-registration, nor the key of a fresh slot from the keys of
// others. Uniform keys alone do not show this (a key that counts up is
// uniform too): here the step from one key to the next must be uniform
// over the 255 values it can take, and fresh slots must not share a key.
func TestSTagKeysUnpredictable(t *testing.T) {
	tb, err := NewTable(1 << 16)
	if err != nil {
		t.Fatal(err)
	}
	pd := tb.AllocPD()
	buf := make([]byte, 64)
	// Fresh slots: 1,000 registrations draw about 250 distinct keys of
	// 255; fewer than 200 does not happen by chance.
	fresh := map[uint8]int{}
	var m *MR
	for range 1000 {
		if m, err = tb.Register(buf, MROptions{PD: pd}); err != nil {
			t.Fatal(err)
		}
		fresh[uint8(m.STag())]++
	}
	if len(fresh) < 200 {
		t.Fatalf("1,000 fresh slots got only %d distinct keys: a fresh slot's key is predictable", len(fresh))
	}
	// Re-registration: the step between consecutive keys of one slot,
	// (new - old) mod 256, is uniform over 1..255.
	const rounds = 25500
	var steps [256]int
	for range rounds {
		m2, err := tb.Reregister(m, nil, m.Options())
		if err != nil {
			t.Fatal(err)
		}
		steps[uint8(m2.STag()-m.STag())]++
		m = m2
	}
	if steps[0] != 0 {
		t.Fatalf("%d re-registrations kept the key", steps[0])
	}
	// Chi-square over 255 steps (254 degrees of freedom): mean 254, the
	// 99.9999th percentile about 375.
	exp := float64(rounds) / 255
	chi := 0.0
	for _, n := range steps[1:] {
		chi += (float64(n) - exp) * (float64(n) - exp) / exp
	}
	if chi > 380 {
		t.Fatalf("key steps chi-square %.0f (254 d.f., bound 380): the next key is predictable from the last (most common step %d)", chi, mostCommon(steps[:]))
	}
	t.Logf("key steps of %d re-registrations: chi-square %.0f (254 d.f.); %d distinct keys in 1,000 fresh slots", rounds, chi, len(fresh))
}

func mostCommon(n []int) int {
	best := 0
	for i := range n {
		if n[i] > n[best] {
			best = i
		}
	}
	return best
}
