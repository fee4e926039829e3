package tcpstack

import (
	"testing"
	"time"
)

// TestRTTHistogram: every RTT sample that feeds the RTO estimator lands in
// Stats.RTT, in the bucket of its value.
func TestRTTHistogram(t *testing.T) {
	w := newFzWorld(t, 2) // no timestamps: segments are timed with the clock
	w.deliverAll()
	a := w.conns[0][0]
	st := w.st[0]
	if st.Stats.RTT.Count == 0 {
		t.Fatal("the handshake produced no RTT sample")
	}
	before := st.Stats.RTT
	w.write(a, 2*a.MSS()) // two full segments: the peer ACKs at once
	w.poll()              // a sends and starts timing
	w.clock.Advance(3 * time.Millisecond)
	w.deliverAll()
	h := st.Stats.RTT
	if h.Count != before.Count+1 {
		t.Fatalf("RTT samples %d -> %d, want one more", before.Count, h.Count)
	}
	// 3 ms lies in (2.5 ms, 5 ms].
	i := 0
	for RTTBounds[i] < 3*time.Millisecond {
		i++
	}
	if RTTBounds[i] != 5*time.Millisecond || h.Counts[i] != before.Counts[i]+1 {
		t.Fatalf("bucket <= %v: %d -> %d, want one more", RTTBounds[i], before.Counts[i], h.Counts[i])
	}
	if d := h.Sum - before.Sum; d != 3*time.Millisecond {
		t.Fatalf("sum grew by %v, want 3ms", d)
	}
	var sum RTTHistogram
	sum.Add(&h)
	sum.Add(&h)
	if sum.Count != 2*h.Count || sum.Counts[i] != 2*h.Counts[i] {
		t.Fatal("Add does not accumulate")
	}
	w.finish()
}
