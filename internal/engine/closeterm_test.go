package engine

import (
	"bytes"
	"context"
	"testing"
	"time"

	"xrnic/internal/engine/enginetest"
	"xrnic/wire/rdmap"
	"xrnic/wire/term"
)

// closeAfterError makes the engine's QP s fail on a Send with the wrong
// MSN from the raw peer p, closes the QP the moment it is in error, and checks that p still
// receives exactly the Terminate, then the end of the stream.
func closeAfterError(t *testing.T, s *side, p *enginetest.Peer) {
	t.Helper()
	seg := make([]byte, 18+1)
	rdmap.PutSend(seg, rdmap.OpSend, 0, 7, 0, true, 1) // MSN 7, expected 1
	if err := p.WriteRaw(p.FPDU(seg)); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for s.qp.State() != QPError {
		if time.Now().After(deadline) {
			t.Fatalf("QP did not go to error: %v", s.qp.State())
		}
		time.Sleep(20 * time.Microsecond)
	}
	closed := make(chan struct{})
	go func() { s.qp.Close(); close(closed) }()
	tm, ulpdu, err := p.ExpectTerminate(5 * time.Second)
	if err != nil {
		t.Fatalf("the peer got no Terminate (closed right after the error): %v", err)
	}
	want := wantTerminate(byte(term.DDPUntaggedMSNRange.Layer), term.DDPUntaggedMSNRange.EType, term.DDPUntaggedMSNRange.Code, seg, 18)
	if tm.Err != term.DDPUntaggedMSNRange || !bytes.Equal(ulpdu, want) {
		t.Fatalf("Terminate %v\n got %x\nwant %x", tm, ulpdu, want)
	}
	if err := p.ExpectEOF(5 * time.Second); err != nil {
		t.Fatalf("stream not closed after the Terminate: %v", err)
	}
	p.Close()
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not return")
	}
}

// TestCloseRightAfterErrorSendsTerminate: QP.Close on a QP that has just
// gone to error waits for tx to send the Terminate and half-close, so the
// peer sees the Terminate, not a lost connection. Repeated because the
// race it guards against (Close cutting the connection before tx ran) is
// timing dependent.
func TestCloseRightAfterErrorSendsTerminate(t *testing.T) {
	for i := range 40 {
		s, p := rawPair(t, enginetest.Options{})
		closeAfterError(t, s, p)
		if t.Failed() {
			t.Fatalf("iteration %d", i)
		}
	}
}

// TestIntegrationXDPCloseRightAfterError is the same over the afxdp
// transport: the engine's QP lives on the user-space TCP in namespace A,
// the raw peer dials it over kernel TCP from namespace B.
func TestIntegrationXDPCloseRightAfterError(t *testing.T) {
	e := newXDPEnv(t, 0, true)
	a := e.open(t, e.nsA, e.devA, trAFXDP)
	ln := e.listenA(t, a)
	for i := range 10 {
		s := newQPSide(t, a, 1<<16)
		mustRecv(t, s.qp, RecvWR{ID: 1, SGL: []SGE{s.sge(0, 64)}})
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		errc := acceptAsync(ctx, ln, s.qp, ConnParams{})
		var p *enginetest.Peer
		if err := e.in(t, e.nsB, func() (err error) {
			p, err = enginetest.Dial(ctx, ln.Addr().String(), enginetest.Options{})
			return err
		}); err != nil {
			cancel()
			t.Fatal(err)
		}
		if err := <-errc; err != nil {
			cancel()
			t.Fatal(err)
		}
		cancel()
		closeAfterError(t, s, p)
		if t.Failed() {
			t.Fatalf("iteration %d", i)
		}
	}
}
