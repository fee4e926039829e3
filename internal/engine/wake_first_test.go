package engine

import (
	"errors"
	"os"
	"testing"
	"time"

	"xrnic/internal/engine/enginetest"
	"xrnic/wire/ddp"
	"xrnic/wire/rdmap"
)

// TestWakeFirstContact: the message a siw responder misses may be a Send
// the application waits on (rping's first Send), not a Read. An initiator
// that has sent FPDUs and received none wakes the peer; once the peer has
// sent an FPDU it never does again.
func TestWakeFirstContact(t *testing.T) {
	for _, tc := range []struct {
		name string
		wake time.Duration
	}{{"wake", 0}, {"off", -1}} {
		t.Run(tc.name, func(t *testing.T) {
			s, p := lazyResponder(t, QPAttr{WakeAfter: tc.wake}, Config{}, enginetest.Options{})
			mustPost(t, s.qp, SendWR{ID: 1, Op: OpSend, SGL: []SGE{s.sge(0, 16)}})
			if u, err := p.Next(5 * time.Second); err != nil || u[1]&0xF != byte(rdmap.OpSend) {
				t.Fatalf("Send: %x %v", u, err)
			}
			next, err := p.Next(time.Second)
			if tc.wake < 0 {
				if !errors.Is(err, os.ErrDeadlineExceeded) {
					t.Fatalf("with the wake off the peer got %x, %v", next, err)
				}
				return
			}
			if err != nil || !isWake(next) {
				t.Fatalf("no wake after the first Send: %x %v", next, err)
			}
			// The peer speaks (a zero-length Write): no more wakes.
			w := make([]byte, ddp.TaggedHeaderLen)
			rdmap.PutWrite(w, 1, 0, true, 0)
			if err := p.Send(w); err != nil {
				t.Fatal(err)
			}
			deadline := time.Now().Add(5 * time.Second)
			for s.qp.Stats().RxFPDUs == 0 && time.Now().Before(deadline) {
				time.Sleep(time.Millisecond)
			}
			wakes := s.qp.Wakes()
			mustPost(t, s.qp, SendWR{ID: 2, Op: OpSend, SGL: []SGE{s.sge(0, 16)}})
			for {
				u, err := p.Next(500 * time.Millisecond)
				if errors.Is(err, os.ErrDeadlineExceeded) {
					break
				}
				if err != nil || isWake(u) {
					t.Fatalf("after the peer's FPDU: %x %v", u, err)
				}
			}
			if n := s.qp.Wakes(); n != wakes || n < 1 || n > maxWakes {
				t.Fatalf("Wakes %d (then %d)", wakes, n)
			}
		})
	}
}
