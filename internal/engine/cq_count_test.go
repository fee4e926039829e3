package engine

import "testing"

// TestCQCountPushes: the push counter counts every completion queued, so
// pushed minus polled is what waits (the C ABI skips empty polls on it).
func TestCQCountPushes(t *testing.T) {
	cq, pc := countedCQ(t)
	pushed := &pc.Pushed
	for i := range 5 {
		if !cq.reserve() {
			t.Fatal("reserve")
		}
		cq.push(&Completion{ID: uint64(i)})
	}
	wc := make([]Completion, 3)
	polled := cq.Poll(wc)
	if got := pushed.Load(); got != 5 || uint64(polled)+uint64(cq.Len()) != got {
		t.Fatalf("pushed %d, polled %d, waiting %d", got, polled, cq.Len())
	}
	cq.CountPushes(nil)
	cq.reserve()
	cq.push(&Completion{ID: 9})
	if got := pushed.Load(); got != 5 {
		t.Fatalf("counted after CountPushes(nil): %d", got)
	}
}

// countedCQ is a CQ of 8 on a fresh device, counting into a PushCounter.
func countedCQ(t *testing.T) (*CQ, *PushCounter) {
	d, err := Open(Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	cq, err := d.CreateCQ(8)
	if err != nil {
		t.Fatal(err)
	}
	pc := new(PushCounter)
	cq.CountPushes(pc)
	return cq, pc
}
