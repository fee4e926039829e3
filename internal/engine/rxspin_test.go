package engine

import (
	"encoding/binary"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestRxSpin (Config.RxSpin, kernel transport): a responder whose reader
// spins answers every request correctly, keeps spinning for RxSpin after
// the last one and then sleeps again, never with more spinning readers
// than the device allows, and a QP closed while its reader spins ends.
func TestRxSpin(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2)) // one spinner's place
	// Long enough that the checks right after the last request see the
	// spin on a loaded machine, short enough to wait out.
	const spin = 3 * time.Second
	d, err := Open(Config{RxSpin: spin, ConnTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if d.rxSpinnersMax != 1 {
		t.Fatalf("GOMAXPROCS 2: %d spinner places, want 1", d.rxSpinnersMax)
	}
	const qps, rounds = 3, 200
	var cs, ss [qps]*side
	for i := range qps {
		ss[i] = newSideOn(t, d, 1<<12, QPAttr{})
		cs[i] = newSide(t, 1<<12, QPAttr{})
		connectSides(t, cs[i], ss[i])
	}
	// Sample the spinners while all three QPs' responders work.
	var most atomic.Int32
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			if n := d.rxSpinners.Load(); n > most.Load() {
				most.Store(n)
			}
			runtime.Gosched()
		}
	})
	var work sync.WaitGroup
	for q := range qps {
		c, s := cs[q], ss[q]
		work.Go(func() {
			for i := range rounds {
				mustPost(t, c.qp, SendWR{ID: uint64(i), Op: OpFetchAdd, Flags: FlagSignaled, SGL: []SGE{c.sge(0, 8)},
					RemoteSTag: s.mr.STag(), RemoteTO: s.to(0), CompareAdd: 1})
				cc := poll(t, c.scq, 1)[0]
				if cc.Status != StatusSuccess || cc.AtomicOrig != uint64(i) {
					t.Errorf("QP %d round %d: %+v, want original %d", q, i, cc, i)
					return
				}
			}
		})
	}
	work.Wait()
	if n := d.rxSpinners.Load(); n != 1 {
		t.Fatalf("right after the last request %d readers spin, want 1 (RxSpin %v)", n, spin)
	}
	close(stop)
	wg.Wait()
	if m := most.Load(); m > d.rxSpinnersMax {
		t.Fatalf("%d readers spun at once, at most %d may", m, d.rxSpinnersMax)
	}
	for q := range qps {
		if got := binary.NativeEndian.Uint64(ss[q].buf); got != rounds {
			t.Fatalf("QP %d: target %#x after %d FetchAdds", q, ss[q].buf[:8], rounds)
		}
	}
	// The spin ends RxSpin after the last data: the reader sleeps.
	for end := time.Now().Add(spin + 2*time.Second); d.rxSpinners.Load() != 0; {
		if time.Now().After(end) {
			t.Fatalf("a reader still spins %v after the last data (RxSpin %v)", spin+2*time.Second, spin)
		}
		time.Sleep(5 * time.Millisecond)
	}
	// A QP closed while its reader spins ends without waiting for the spin
	// (a long one here), and its spinner's place is free again.
	d2, err := Open(Config{RxSpin: time.Minute, ConnTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer d2.Close()
	s := newSideOn(t, d2, 1<<12, QPAttr{})
	c := newSide(t, 1<<12, QPAttr{})
	connectSides(t, c, s)
	mustPost(t, c.qp, SendWR{ID: 99, Op: OpFetchAdd, Flags: FlagSignaled, SGL: []SGE{c.sge(0, 8)},
		RemoteSTag: s.mr.STag(), RemoteTO: s.to(0), CompareAdd: 1})
	poll(t, c.scq, 1)
	if d2.rxSpinners.Load() != 1 {
		t.Fatal("the reader is not spinning after a request")
	}
	done := make(chan struct{})
	go func() { s.qp.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Close waits for the reader's spin (RxSpin 1m)")
	}
	for deadline := time.Now().Add(10 * time.Second); d2.rxSpinners.Load() != 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the closed QP's reader still holds a spinner's place (%d) 10 s after Close", d2.rxSpinners.Load())
		}
	}
}
