package engine

import (
	"bytes"
	"errors"
	"net"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"xrnic/internal/engine/enginetest"
	"xrnic/transport"
)

// driving spins CQ.Drive on cqs in a goroutine until the test ends, as an
// application polling its CQs does; it counts the drives that did work.
func driving(t *testing.T, cqs ...*CQ) *atomic.Int64 {
	t.Helper()
	var work atomic.Int64
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			did := false
			for _, cq := range cqs {
				if cq.Drive() == transport.DriveWork {
					work.Add(1)
					did = true
				}
			}
			if !did {
				runtime.Gosched()
			}
		}
	}()
	t.Cleanup(func() { close(stop); <-done })
	return &work
}

// TestDriveKernel: pollers driving every CQ of both ends of a kernel TCP
// pair read the sockets beside the QPs' own readers: every operation still
// completes once with the right data (exercise), a ping-pong of Sends is
// received in order, the drives did part of the work, and once the QPs are
// closed their CQs have nothing left to drive.
func TestDriveKernel(t *testing.T) {
	c, s := newSide(t, 1<<20, QPAttr{}), newSide(t, 1<<20, QPAttr{})
	if r := c.scq.Drive(); r != transport.DriveNone {
		t.Fatalf("Drive before the QP is connected: %v, want DriveNone", r)
	}
	connectSides(t, c, s)
	cw, sw := driving(t, c.scq, c.rcq), driving(t, s.scq, s.rcq)
	exercise(t, c, s)
	const rounds = 300
	for i := range rounds {
		msg := []byte{byte(i), byte(i >> 8), 'p', 'i', 'n', 'g'}
		mustRecv(t, s.qp, RecvWR{ID: uint64(i), SGL: []SGE{s.sge(0, 64)}})
		copy(c.buf[100:], msg)
		mustPost(t, c.qp, SendWR{ID: uint64(i), Op: OpSend, SGL: []SGE{c.sge(100, len(msg))}})
		rc := poll(t, s.rcq, 1)[0]
		if rc.ID != uint64(i) || rc.Status != StatusSuccess || !bytes.Equal(s.buf[:rc.ByteLen], msg) {
			t.Fatalf("round %d: %+v %q", i, rc, s.buf[:rc.ByteLen])
		}
	}
	t.Logf("drives that did work: client %d, server %d", cw.Load(), sw.Load())
	if sw.Load() == 0 {
		t.Error("the server's drives never read anything")
	}
	c.qp.Close()
	s.qp.Close()
	for _, cq := range []*CQ{c.scq, c.rcq, s.scq, s.rcq} {
		if r := cq.Drive(); r != transport.DriveNone {
			t.Errorf("Drive after Close: %v, want DriveNone", r)
		}
	}
}

// connectSides connects c to s with default parameters.
func connectSides(t *testing.T, c, s *side) { connectSidesWith(t, c, s, ConnParams{}, ConnParams{}) }

// TestDrivePeerFIN: the peer's orderly close with a poller driving the
// QP's CQs is the same orderly close (whoever reads the FIN).
func TestDrivePeerFIN(t *testing.T) {
	for range 5 {
		s, p := rawPair(t, enginetest.Options{})
		driving(t, s.scq, s.rcq)
		peerFINAfterSend(t, s, p)
	}
}

// TestDrivePeerReset: a reset read by a driving poller is still a lost
// connection, not the peer's FIN (the socket reports a reset once, then
// reads as EOF): the QP goes to error, not to an orderly close.
func TestDrivePeerReset(t *testing.T) {
	for i := range 10 {
		s, p := rawPair(t, enginetest.Options{})
		work := driving(t, s.scq, s.rcq)
		peerSend(t, p, 1, []byte("before the reset"))
		if rc := poll(t, s.rcq, 1)[0]; rc.ID != 1 || rc.Status != StatusSuccess {
			t.Fatalf("the Send: %+v", rc)
		}
		p.Conn.(*net.TCPConn).SetLinger(0)
		p.Conn.Close()
		if rc := poll(t, s.rcq, 1)[0]; rc.ID != 2 || rc.Status != StatusWRFlushErr {
			t.Fatalf("round %d: the receive after the reset: %+v, want flushed", i, rc)
		}
		waitState(t, s.qp, QPError)
		if errors.Is(s.qp.Disconnected(), ErrPeerClosed) {
			t.Fatalf("round %d (drives with work %d): a reset taken for an orderly close", i, work.Load())
		}
	}
}

// TestDriveStopAndGo: a poller drives while each message arrives and
// stops right after; a message the reader left to it (the reader was
// woken while the poller held the stream) is still handled, so the
// blocking wait that follows never hangs.
func TestDriveStopAndGo(t *testing.T) {
	c, s := newSide(t, 1<<16, QPAttr{}), newSide(t, 1<<16, QPAttr{})
	connectSides(t, c, s)
	for i := range 1000 {
		mustRecv(t, s.qp, RecvWR{ID: uint64(i), SGL: []SGE{s.sge(0, 64)}})
		mustPost(t, c.qp, SendWR{ID: uint64(i), Op: OpSend, SGL: []SGE{c.sge(0, 8)}})
		for end := time.Now().Add(time.Duration(i%50) * time.Microsecond); time.Now().Before(end) && s.rcq.Len() == 0; {
			s.rcq.Drive()
		}
		if rc := poll(t, s.rcq, 1)[0]; rc.ID != uint64(i) || rc.Status != StatusSuccess {
			t.Fatalf("round %d: %+v", i, rc)
		}
	}
}
