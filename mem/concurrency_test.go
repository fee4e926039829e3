package mem

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"xrnic/wire/term"
)

// TestConcurrentCheck races lock-free Checks against registration,
// re-registration, invalidation and deregistration (run with -race). It
// asserts that a Check that starts after an invalidation was published
// fails, and that every successful window lies inside the MR it was
// registered for.
func TestConcurrentCheck(t *testing.T) {
	tb, _ := NewTable(8)
	pd := tb.AllocPD()
	const nbuf = 8
	bufs := make([][]byte, nbuf)
	for i := range bufs {
		bufs[i] = make([]byte, 256)
	}
	type pub struct {
		stag uint32
		buf  int
		dead atomic.Bool // set after Invalidate/Deregister/Reregister returned
	}
	var cur [nbuf]atomic.Pointer[pub]
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var hits, misses atomic.Uint64
	for g := range 2 {
		wg.Go(func() {
			r := tb.NewReader()
			defer r.Close()
			i := g
			for {
				select {
				case <-stop:
					return
				default:
				}
				r.Enter()
				for range 64 {
					i++
					p := cur[i%nbuf].Load()
					if p == nil {
						continue
					}
					wasDead := p.dead.Load()
					w, e := tb.Check(p.stag, pd, 0, RemoteWrite, uint64(i%200), 56, OpWrite)
					if e == nil {
						if wasDead {
							t.Errorf("Check of %08x succeeded after it was invalidated", p.stag)
							return
						}
						if len(w) != 56 || &w[0] != &bufs[p.buf][i%200] {
							t.Errorf("window outside its MR")
							return
						}
						hits.Add(1)
					} else {
						if e != term.DDPTaggedInvalidSTag {
							t.Errorf("unexpected %v", e)
							return
						}
						misses.Add(1)
					}
				}
				r.Exit()
				runtime.Gosched() // 2-core machines: let the writer run
			}
		})
	}
	rng := newTestRand(t)
	var mrs [nbuf]*MR
	deadline := time.Now().Add(300 * time.Millisecond)
	for n := 0; time.Now().Before(deadline) || n < 500; n++ {
		i := rng.IntN(nbuf)
		old := cur[i].Load()
		switch m := mrs[i]; {
		case m == nil:
			m2, err := tb.Register(bufs[i], MROptions{PD: pd, Access: LocalWrite | RemoteWrite, TO: TOZeroBased})
			if err != nil {
				t.Fatal(err)
			}
			mrs[i] = m2
			cur[i].Store(&pub{stag: m2.STag(), buf: i})
		case rng.IntN(3) == 0:
			if err := tb.Deregister(m); err != nil {
				t.Fatal(err)
			}
			mrs[i] = nil
			old.dead.Store(true)
		case rng.IntN(2) == 0:
			if err := tb.Invalidate(m.STag(), pd); err != nil {
				t.Fatal(err)
			}
			old.dead.Store(true)
		default:
			m2, err := tb.Reregister(m, nil, m.Options())
			if err != nil {
				t.Fatal(err)
			}
			mrs[i] = m2
			old.dead.Store(true)
			cur[i].Store(&pub{stag: m2.STag(), buf: i})
		}
	}
	close(stop)
	wg.Wait()
	t.Logf("hits %d, misses %d", hits.Load(), misses.Load())
	if hits.Load() == 0 || misses.Load() == 0 {
		t.Errorf("race did not exercise both outcomes: hits %d misses %d", hits.Load(), misses.Load())
	}
}

// TestDeregisterWaitsForReaders: Deregister must not return while a reader
// that may hold a window is inside its section.
func TestDeregisterWaitsForReaders(t *testing.T) {
	tb, _ := NewTable(4)
	pd := tb.AllocPD()
	m, _ := tb.Register(make([]byte, 64), MROptions{PD: pd, Access: LocalWrite | RemoteWrite})
	idle := tb.NewReader() // never enters: must not block Synchronize
	defer idle.Close()
	r := tb.NewReader()
	r.Enter()
	if _, e := tb.Check(m.STag(), pd, 0, RemoteWrite, m.BaseTO(), 8, OpWrite); e != nil {
		t.Fatal(e)
	}
	done := make(chan struct{})
	go func() {
		tb.Deregister(m)
		close(done)
	}()
	select {
	case <-done:
		t.Fatal("Deregister returned while a reader was inside its section")
	case <-time.After(50 * time.Millisecond):
	}
	// A section entered after Deregister started is not waited for, but
	// the one in progress is.
	r.Exit()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Deregister did not return after the reader left")
	}
	r.Close()
	tb.Synchronize() // no readers: returns at once
}
