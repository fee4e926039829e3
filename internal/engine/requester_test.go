package engine

import (
	"context"
	"net"
	"testing"
	"time"

	"xrnic/internal/engine/enginetest"
	"xrnic/wire/ddp"
	"xrnic/wire/rdmap"
	"xrnic/wire/term"
)

// rawResponder connects a fresh engine side, as initiator, to a raw peer
// playing the responder, so a test can answer the engine's requests
// with crafted segments.
func rawResponder(t *testing.T) (*side, *enginetest.Peer) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	pc := make(chan *enginetest.Peer, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			pc <- nil
			return
		}
		p, err := enginetest.Respond(c, enginetest.Options{})
		if err != nil {
			c.Close()
			p = nil
		}
		pc <- p
	}()
	s := newSide(t, 4096, QPAttr{})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.qp.Connect(ctx, ln.Addr().String(), ConnParams{}); err != nil {
		t.Fatal(err)
	}
	p := <-pc
	if p == nil {
		t.Fatal("raw responder: MPA exchange failed")
	}
	t.Cleanup(func() { p.Close() })
	return s, p
}

// TestReadResponseMustCoverSink: a Read completes only when the Read
// Responses cover the whole requested sink range, in order. Responses
// that skip bytes or end short draw DDP tagged base/bounds (1/1/0x01,
// RFC 5041 §7.2) and a bad-response completion, never a short success.
func TestReadResponseMustCoverSink(t *testing.T) {
	type part struct {
		off, n int
		last   bool
	}
	for _, tc := range []struct {
		name  string
		parts []part
	}{
		{"skips bytes", []part{{0, 16, false}, {32, 32, true}}},
		{"ends short", []part{{0, 32, true}}},
		{"starts late", []part{{8, 56, true}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, p := rawResponder(t)
			fill(s.buf, 0x5A)
			mustPost(t, s.qp, SendWR{ID: 7, Op: OpRead, Flags: FlagSignaled, SGL: []SGE{s.sge(0, 64)}, RemoteSTag: 0x1234, RemoteTO: 0})
			u, err := p.Next(5 * time.Second)
			if err != nil || u[1]&0xF != byte(rdmap.OpReadRequest) {
				t.Fatalf("Read Request: %x %v", u[:min(len(u), 14)], err)
			}
			rr := rdmap.ReadRequest(u[ddp.UntaggedHeaderLen:])
			for _, pt := range tc.parts {
				b := make([]byte, ddp.TaggedHeaderLen+pt.n)
				if _, err := rdmap.PutReadResponse(b, rr.SinkSTag(), rr.SinkTO()+uint64(pt.off), pt.last, pt.n); err != nil {
					t.Fatal(err)
				}
				if err := p.Send(b); err != nil {
					t.Fatal(err)
				}
			}
			tm, _, err := p.ExpectTerminate(5 * time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if e := tm.Err; e == nil || e.Layer != term.LayerDDP || e.EType != 1 || e.Code != 0x01 {
				t.Errorf("Terminate %v, want DDP tagged base/bounds 1/1/0x01", tm)
			}
			cs := poll(t, s.scq, 1)
			if cs[0].ID != 7 || cs[0].Status == StatusSuccess {
				t.Fatalf("Read completed %+v, want an error status", cs[0])
			}
			if cs[0].Status != StatusBadRespErr {
				t.Errorf("Read status %v, want %v", cs[0].Status, StatusBadRespErr)
			}
		})
	}
}
