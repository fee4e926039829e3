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

// lazyResponder connects a fresh engine side (attr, cfg), as initiator,
// to a raw responder peer with options o.
func lazyResponder(t *testing.T, attr QPAttr, cfg Config, o enginetest.Options) (*side, *enginetest.Peer) {
	t.Helper()
	return rawResponderWith(t, 4096+8<<20, attr, ConnParams{}, cfg, o)
}

// isWake reports whether u is a zero-length RDMA Write to STag 1.
func isWake(u []byte) bool {
	seg, err := ddp.Parse(u)
	return err == nil && seg.IsTagged() && rdmap.Control(seg.RsvdULP()).OpCode() == rdmap.OpWrite &&
		seg.Last() && len(seg.Payload()) == 0 && seg.Tagged().STag() == 1
}

// answerRead answers the Read Request rr with its whole range of zeros
// then 0xAB bytes.
func answerRead(t *testing.T, p *enginetest.Peer, rr rdmap.ReadRequest) {
	t.Helper()
	b := make([]byte, ddp.TaggedHeaderLen+int(rr.Size()))
	rdmap.PutReadResponse(b, rr.SinkSTag(), rr.SinkTO(), true, int(rr.Size()))
	for i := ddp.TaggedHeaderLen; i < len(b); i++ {
		b[i] = 0xAB
	}
	if err := p.Send(b); err != nil {
		t.Fatal(err)
	}
}

// TestWakeSiwResponder reproduces siw's race: a responder that sends its
// MPA Reply before it attaches its QP to the socket does not see the
// Read Request that arrived in between until another segment arrives.
// The raw responder here reads the request but acts on it only after a
// later segment. Without the wake the Read never completes; with it the
// QP sends one zero-length Write and the Read completes.
func TestWakeSiwResponder(t *testing.T) {
	for _, tc := range []struct {
		name string
		wake time.Duration
	}{{"wake", 0}, {"off", -1}} {
		t.Run(tc.name, func(t *testing.T) {
			s, p := lazyResponder(t, QPAttr{WakeAfter: tc.wake}, Config{}, enginetest.Options{})
			mustPost(t, s.qp, SendWR{ID: 1, Op: OpRead, Flags: FlagSignaled, SGL: []SGE{s.sge(0, 64)}, RemoteSTag: 0x1234})
			u, err := p.Next(5 * time.Second)
			if err != nil || u[1]&0xF != byte(rdmap.OpReadRequest) {
				t.Fatalf("Read Request: %x %v", u, err)
			}
			rr := rdmap.ReadRequest(append([]byte(nil), u[ddp.UntaggedHeaderLen:]...))
			next, err := p.Next(time.Second) // "attached" only once another segment comes
			if tc.wake < 0 {
				if !errors.Is(err, os.ErrDeadlineExceeded) {
					t.Fatalf("with the wake off the peer got %x, %v", next, err)
				}
				if n := s.qp.Wakes(); n != 0 {
					t.Fatalf("Wakes %d with the wake off", n)
				}
				return
			}
			if err != nil || !isWake(next) {
				t.Fatalf("no wake: %x %v (the Read would wait forever)", next, err)
			}
			answerRead(t, p, rr)
			if c := poll(t, s.scq, 1)[0]; c.ID != 1 || c.Status != StatusSuccess || s.buf[63] != 0xAB {
				t.Fatalf("Read: %+v", c)
			}
			if n := s.qp.Wakes(); n != 1 {
				t.Fatalf("Wakes %d, want 1", n)
			}
		})
	}
}

// TestWakeBounded: a responder that never answers gets at most maxWakes
// wakes per request, each one the zero-length Write, until the request
// times out.
func TestWakeBounded(t *testing.T) {
	s, p := lazyResponder(t, QPAttr{WakeAfter: 20 * time.Millisecond}, Config{RequestTimeout: 600 * time.Millisecond}, enginetest.Options{})
	mustPost(t, s.qp, SendWR{ID: 1, Op: OpRead, Flags: FlagSignaled, SGL: []SGE{s.sge(0, 64)}, RemoteSTag: 0x1234})
	if _, err := p.Next(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	wakes := 0
	for {
		u, err := p.Next(5 * time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if isWake(u) {
			wakes++
			continue
		}
		if seg, _ := ddp.Parse(u); !seg.IsTagged() && rdmap.Control(seg.RsvdULP()).OpCode() == rdmap.OpTerminate {
			break
		}
		t.Fatalf("unexpected segment %x", u)
	}
	if wakes != maxWakes || s.qp.Wakes() != maxWakes {
		t.Fatalf("%d wakes on the wire, Wakes %d, want %d", wakes, s.qp.Wakes(), maxWakes)
	}
	if c := poll(t, s.scq, 1)[0]; c.Status != StatusRetryExcErr {
		t.Fatalf("Read: %+v", c)
	}
}

// TestWakeNeverCutsAMessage: while a long Write is stuck in the middle
// (the peer stops reading), an unanswered Read gets no wake inside the
// Write; a wake may come only between messages.
func TestWakeNeverCutsAMessage(t *testing.T) {
	s, p := lazyResponder(t, QPAttr{WakeAfter: 20 * time.Millisecond}, Config{}, enginetest.Options{RcvBuf: 1 << 16})
	const n = 8 << 20
	mustPost(t, s.qp, SendWR{ID: 1, Op: OpRead, Flags: FlagSignaled, SGL: []SGE{s.sge(0, 64)}, RemoteSTag: 0x1234})
	mustPost(t, s.qp, SendWR{ID: 2, Op: OpWrite, SGL: []SGE{s.sge(4096, n)}, RemoteSTag: 0x77})
	u, err := p.Next(5 * time.Second)
	if err != nil || u[1]&0xF != byte(rdmap.OpReadRequest) {
		t.Fatalf("Read Request: %x %v", u, err)
	}
	rr := rdmap.ReadRequest(append([]byte(nil), u[ddp.UntaggedHeaderLen:]...))
	time.Sleep(300 * time.Millisecond) // stuck mid-Write: wakes would be due
	var got uint64
	inWrite, wakes := false, 0
	for got < n {
		u, err := p.Next(5 * time.Second)
		if err != nil {
			t.Fatalf("after %d bytes of the Write: %v", got, err)
		}
		if isWake(u) {
			if inWrite {
				t.Fatalf("a wake inside the Write, after %d of its bytes", got)
			}
			wakes++
			continue
		}
		seg, _ := ddp.Parse(u)
		if !seg.IsTagged() || seg.Tagged().STag() != 0x77 {
			t.Fatalf("unexpected segment %x", u[:min(len(u), 32)])
		}
		got += uint64(len(seg.Payload()))
		inWrite = !seg.Last()
	}
	answerRead(t, p, rr)
	if c := poll(t, s.scq, 1)[0]; c.ID != 1 || c.Status != StatusSuccess {
		t.Fatalf("Read: %+v", c)
	}
	t.Logf("%d wakes between messages", wakes)
}
