package verbs

import (
	"errors"
	"testing"
	"time"
)

// TestDisconnectedIsNotAnError: the client's Disconnect reaches the
// server as a disconnect (ErrPeerClosed), not an error; the server's
// posted receive is flushed and its Write after the FIN still lands.
func TestDisconnectedIsNotAnError(t *testing.T) {
	c, s := pair(t, 4096, QPAttr{})
	must(t, s.qp.PostRecvBuf(1, s.mr.SGE(0, 64)))
	done := make(chan error, 1)
	go func() { done <- c.qp.Disconnect(ctxT(t)) }()
	if x := poll(t, s.rcq, 1)[0]; x.Status != StatusWRFlushErr {
		t.Fatalf("receive %+v, want flushed", x)
	}
	if err := s.qp.Disconnected(); !errors.Is(err, ErrPeerClosed) || s.qp.Err() != nil {
		t.Fatalf("server: Disconnected %v, Err %v", err, s.qp.Err())
	}
	copy(s.mr.Bytes()[128:], "bye")
	must(t, s.qp.PostWrite(2, s.mr.SGE(128, 3), c.mr.STag(), c.mr.TO(256), FlagSignaled))
	if x := poll(t, s.scq, 1)[0]; x.Status != StatusSuccess {
		t.Fatalf("server Write %+v", x)
	}
	select {
	case err := <-done:
		must(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("Disconnect did not return")
	}
	if got := string(c.mr.Bytes()[256:259]); got != "bye" {
		t.Fatalf("client memory %q", got)
	}
	if c.qp.State() != QPError || c.qp.Err() != nil || !errors.Is(c.qp.Disconnected(), ErrPeerClosed) {
		t.Fatalf("client: state %v, Err %v, Disconnected %v", c.qp.State(), c.qp.Err(), c.qp.Disconnected())
	}
}
