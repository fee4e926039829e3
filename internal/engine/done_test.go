package engine

import (
	"bytes"
	"context"
	"testing"
	"time"

	"xrnic/wire/term"
)

// A receive with no buffer takes Immediate Data (alone or after a Write)
// in its completion only; one of 1..7 bytes is a local length error.
func TestImmediateIntoEmptyReceive(t *testing.T) {
	c, s := connectPair(t, 1<<16, QPAttr{}, ConnParams{}, ConnParams{})
	mustRecv(t, s.qp, RecvWR{ID: 1})
	mustRecv(t, s.qp, RecvWR{ID: 2, SGL: []SGE{s.sge(0, 0)}})
	mustRecv(t, s.qp, RecvWR{ID: 3, SGL: []SGE{s.sge(0, 7)}})
	fill(c.buf[:1000], 3)
	mustPost(t, c.qp, SendWR{ID: 1, Op: OpImm, Imm: 0x1122334455667788})
	mustPost(t, c.qp, SendWR{ID: 2, Op: OpWriteWithImm, SGL: []SGE{c.sge(0, 1000)}, RemoteSTag: s.mr.STag(), RemoteTO: s.to(100), Imm: 5})
	rc := poll(t, s.rcq, 2)
	if rc[0].ID != 1 || rc[0].Status != StatusSuccess || rc[0].Op != OpRecvImm || rc[0].Imm != 0x1122334455667788 || rc[0].ByteLen != 0 || rc[0].Flags&WCWithImm == 0 {
		t.Fatalf("imm into empty receive: %+v", rc[0])
	}
	if rc[1].ID != 2 || rc[1].Status != StatusSuccess || rc[1].Op != OpRecvWriteImm || rc[1].Imm != 5 || rc[1].ByteLen != 1000 {
		t.Fatalf("write-imm into empty receive: %+v", rc[1])
	}
	if !bytes.Equal(s.buf[100:1100], c.buf[:1000]) {
		t.Fatal("write not placed")
	}
	if !bytes.Equal(s.buf[:100], make([]byte, 100)) {
		t.Fatal("immediate data placed into a receive with no buffer")
	}
	select {
	case <-s.qp.Done():
		t.Fatal("Done before the connection ended")
	default:
	}
	mustPost(t, c.qp, SendWR{ID: 3, Op: OpImm, Imm: 9})
	if rc := poll(t, s.rcq, 1)[0]; rc.ID != 3 || rc.Status != StatusLocLenErr {
		t.Fatalf("imm into 7 bytes: %+v", rc)
	}
	waitDone(t, s.qp)
	waitDone(t, c.qp)
	if s.qp.Err() != term.DDPUntaggedTooLong {
		t.Fatalf("responder error %v", s.qp.Err())
	}
	if c.qp.Err() == nil {
		t.Fatal("requester: no error after the peer's Terminate")
	}
}

func waitDone(t *testing.T, qp *QP) {
	t.Helper()
	select {
	case <-qp.Done():
	case <-time.After(10 * time.Second):
		t.Fatalf("QP %d: Done not closed (state %v)", qp.Num(), qp.State())
	}
}

// Done closes on the peer's orderly close (with no error) and on ToError.
func TestDoneOnDisconnectAndToError(t *testing.T) {
	c, s := connectPair(t, 1<<12, QPAttr{}, ConnParams{}, ConnParams{})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	go c.qp.Disconnect(ctx)
	waitDone(t, s.qp)
	if s.qp.Err() != nil || s.qp.Disconnected() != ErrPeerClosed {
		t.Fatalf("after the peer's close: err %v, disconnected %v", s.qp.Err(), s.qp.Disconnected())
	}
	waitDone(t, c.qp)

	c, _ = connectPair(t, 1<<12, QPAttr{}, ConnParams{}, ConnParams{})
	mustRecv(t, c.qp, RecvWR{ID: 7, SGL: []SGE{c.sge(0, 64)}})
	c.qp.ToError()
	waitDone(t, c.qp)
	if rc := poll(t, c.rcq, 1)[0]; rc.ID != 7 || rc.Status != StatusWRFlushErr {
		t.Fatalf("after ToError: %+v", rc)
	}
	if c.qp.Err() != nil || c.qp.State() != QPError {
		t.Fatalf("after ToError: err %v state %v", c.qp.Err(), c.qp.State())
	}
}
