package engine

import (
	"context"
	"encoding/binary"
	"errors"
	"testing"
	"time"

	"xrnic/mem"
	"xrnic/wire/term"
)

// srqBuf is the size of each SRQ receive buffer in these tests; receive
// ID i owns bytes [i*srqBuf, (i+1)*srqBuf) of the server's buffer.
const srqBuf = 256

// srqServer is one device with an SRQ and n QPs created with it, each
// with its own send and receive CQ, all on one PD and one MR.
type srqServer struct {
	dev   *Device
	srq   *SRQ
	sides []*side // sides[i].qp is server QP i (shared buf and mr)
}

func newSRQServer(t *testing.T, n int, a SRQAttr, qa QPAttr) *srqServer {
	t.Helper()
	d, err := Open(Config{ConnTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	pd := d.AllocPD()
	a.PD = pd
	srq, err := d.CreateSRQ(a)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1<<16)
	mr, err := d.RegMR(buf, mem.MROptions{PD: pd, Access: mem.LocalWrite | mem.RemoteRead | mem.RemoteWrite | mem.RemoteAtomic})
	if err != nil {
		t.Fatal(err)
	}
	s := &srqServer{dev: d, srq: srq}
	for range n {
		sd := &side{dev: d, pd: pd, buf: buf, mr: mr}
		sd.scq, _ = d.CreateCQ(16)
		sd.rcq, _ = d.CreateCQ(a.Depth)
		q := qa
		q.PD, q.SendCQ, q.RecvCQ, q.SRQ = pd, sd.scq, sd.rcq, srq
		if q.SQDepth == 0 {
			q.SQDepth = 8
		}
		if sd.qp, err = d.CreateQP(q); err != nil {
			t.Fatal(err)
		}
		s.sides = append(s.sides, sd)
	}
	return s
}

func (s *srqServer) post(t *testing.T, id uint64, n int) {
	t.Helper()
	sd := s.sides[0]
	if err := s.srq.PostRecv(&RecvWR{ID: id, SGL: []SGE{sd.sge(int(id)*srqBuf, n)}}); err != nil {
		t.Fatalf("SRQ PostRecv %d: %v", id, err)
	}
}

// connectSRQ connects a fresh client to each server QP.
func connectSRQ(t *testing.T, s *srqServer) []*side {
	t.Helper()
	var cs []*side
	for _, sd := range s.sides {
		c := newSide(t, 1<<16, QPAttr{SQDepth: 64, RQDepth: 1})
		connectSidesWith(t, c, sd, ConnParams{}, ConnParams{})
		cs = append(cs, c)
	}
	return cs
}

// sendTagged posts a Send of 16 bytes naming (client, seq) from c.
func sendTagged(t *testing.T, c *side, client, seq int) {
	t.Helper()
	off := 4096 + (seq%64)*16
	binary.BigEndian.PutUint64(c.buf[off:], uint64(client))
	binary.BigEndian.PutUint64(c.buf[off+8:], uint64(seq))
	mustPost(t, c.qp, SendWR{ID: uint64(seq), Op: OpSend, SGL: []SGE{c.sge(off, 16)}})
}

// TestSRQTwoQPs: two QPs on one SRQ receive many Sends; every receive is
// consumed exactly once, each completion lands on the receiving QP's CQ
// with its QP number, and each QP's messages arrive in order.
func TestSRQTwoQPs(t *testing.T) {
	const depth, rounds, per = 64, 4, 30
	s := newSRQServer(t, 2, SRQAttr{Depth: depth, MaxSGE: 2}, QPAttr{})
	for id := range depth {
		s.post(t, uint64(id), srqBuf)
	}
	cs := connectSRQ(t, s)
	next := [2]int{}
	for round := range rounds {
		for k := range per {
			for i, c := range cs {
				sendTagged(t, c, i, round*per+k)
			}
		}
		seen := map[uint64]bool{}
		for i, sd := range s.sides {
			for _, x := range poll(t, sd.rcq, per) {
				if x.Status != StatusSuccess || x.Op != OpRecv || x.ByteLen != 16 {
					t.Fatalf("QP %d: completion %+v (err %v)", i, x, sd.qp.Err())
				}
				if x.QPNum != sd.qp.Num() {
					t.Fatalf("completion on QP %d's CQ names QP %d, want %d", i, x.QPNum, sd.qp.Num())
				}
				if seen[x.ID] {
					t.Fatalf("receive %d completed twice", x.ID)
				}
				seen[x.ID] = true
				b := sd.buf[int(x.ID)*srqBuf:]
				if cl, seq := binary.BigEndian.Uint64(b), binary.BigEndian.Uint64(b[8:]); cl != uint64(i) || seq != uint64(next[i]) {
					t.Fatalf("QP %d: receive %d holds client %d message %d, want client %d message %d", i, x.ID, cl, seq, i, next[i])
				}
				next[i]++
			}
		}
		if got := s.srq.Query().Posted; got != depth-2*per {
			t.Fatalf("round %d: %d receives left in the SRQ, want %d", round, got, depth-2*per)
		}
		for id := range seen {
			s.post(t, id, srqBuf)
		}
	}
	for i, c := range cs {
		if e := c.qp.Err(); e != nil {
			t.Errorf("client %d: %v", i, e)
		}
	}
}

// TestSRQEmptyTerminatesOneStream: a Send that finds the SRQ empty ends
// its own stream with DDP 2/0x02 (no buffer); the SRQ and the other QP go
// on receiving.
func TestSRQEmptyTerminatesOneStream(t *testing.T) {
	s := newSRQServer(t, 2, SRQAttr{Depth: 8}, QPAttr{})
	s.post(t, 0, srqBuf)
	s.post(t, 1, srqBuf)
	cs := connectSRQ(t, s)
	for k := range 3 {
		sendTagged(t, cs[0], 0, k)
	}
	waitDone(t, s.sides[0].qp)
	if e := s.sides[0].qp.Err(); e != term.DDPUntaggedNoBuffer {
		t.Fatalf("server QP 0 ended with %v, want %v", e, term.DDPUntaggedNoBuffer)
	}
	for _, x := range poll(t, s.sides[0].rcq, 2) {
		if x.Status != StatusSuccess || x.QPNum != s.sides[0].qp.Num() {
			t.Fatalf("QP 0 completion %+v", x)
		}
	}
	waitDone(t, cs[0].qp)
	if e := cs[0].qp.PeerTerminate(); e != term.DDPUntaggedNoBuffer {
		t.Errorf("client 0 got Terminate %v, want %v", e, term.DDPUntaggedNoBuffer)
	}
	s.post(t, 2, srqBuf)
	sendTagged(t, cs[1], 1, 0)
	x := poll(t, s.sides[1].rcq, 1)[0]
	if x.Status != StatusSuccess || x.ID != 2 || x.QPNum != s.sides[1].qp.Num() {
		t.Fatalf("QP 1 completion %+v (err %v)", x, s.sides[1].qp.Err())
	}
	if st := s.sides[1].qp.State(); st != QPRTS {
		t.Errorf("QP 1 state %v, want RTS", st)
	}
	if n := s.sides[0].rcq.Len(); n != 0 {
		t.Errorf("%d more completions on QP 0's CQ", n)
	}
}

// TestSRQShortReceive: a receive too short for the Send completes with a
// length error on the receiving QP, which terminates (DDP 2/0x05); the
// SRQ's next receive serves the other QP.
func TestSRQShortReceive(t *testing.T) {
	s := newSRQServer(t, 2, SRQAttr{Depth: 8}, QPAttr{})
	s.post(t, 0, 8)
	s.post(t, 1, srqBuf)
	cs := connectSRQ(t, s)
	sendTagged(t, cs[0], 0, 0)
	x := poll(t, s.sides[0].rcq, 1)[0]
	if x.Status != StatusLocLenErr || x.ID != 0 || x.QPNum != s.sides[0].qp.Num() {
		t.Fatalf("QP 0 completion %+v, want receive 0 with a length error", x)
	}
	waitDone(t, s.sides[0].qp)
	if e := s.sides[0].qp.Err(); e != term.DDPUntaggedTooLong {
		t.Errorf("QP 0 ended with %v, want %v", e, term.DDPUntaggedTooLong)
	}
	sendTagged(t, cs[1], 1, 0)
	x = poll(t, s.sides[1].rcq, 1)[0]
	if x.Status != StatusSuccess || x.ID != 1 || x.QPNum != s.sides[1].qp.Num() {
		t.Fatalf("QP 1 completion %+v (err %v)", x, s.sides[1].qp.Err())
	}
}

// TestSRQLimit: the armed limit raises one event when fewer receives than
// the limit remain, and disarms.
func TestSRQLimit(t *testing.T) {
	s := newSRQServer(t, 1, SRQAttr{Depth: 8}, QPAttr{})
	if err := s.srq.SetLimit(9); !errors.Is(err, ErrBadAttr) {
		t.Errorf("SetLimit above the depth: %v, want ErrBadAttr", err)
	}
	for id := range 8 {
		s.post(t, uint64(id), srqBuf)
	}
	if err := s.srq.SetLimit(4); err != nil {
		t.Fatal(err)
	}
	if l := s.srq.Query().Limit; l != 4 {
		t.Errorf("Query limit %d, want 4", l)
	}
	cs := connectSRQ(t, s)
	for k := range 4 { // 4 left: not below the limit
		sendTagged(t, cs[0], 0, k)
	}
	poll(t, s.sides[0].rcq, 4)
	select {
	case <-s.srq.LimitEvents():
		t.Fatal("limit event with 4 receives left (limit 4)")
	default:
	}
	sendTagged(t, cs[0], 0, 4)
	poll(t, s.sides[0].rcq, 1)
	select {
	case <-s.srq.LimitEvents():
	case <-time.After(5 * time.Second):
		t.Fatal("no limit event with 3 receives left")
	}
	if l := s.srq.Query().Limit; l != 0 {
		t.Errorf("limit %d after the event, want 0 (disarmed)", l)
	}
	sendTagged(t, cs[0], 0, 5)
	poll(t, s.sides[0].rcq, 1)
	select {
	case <-s.srq.LimitEvents():
		t.Fatal("a second limit event without re-arming")
	default:
	}
}

// TestSRQBusyAndPostRecv: an SRQ with QPs cannot be closed; a QP on an
// SRQ refuses receives of its own; bad attributes are refused.
func TestSRQBusyAndPostRecv(t *testing.T) {
	s := newSRQServer(t, 2, SRQAttr{Depth: 4, MaxSGE: 1}, QPAttr{})
	sd := s.sides[0]
	if err := sd.qp.PostRecv(&RecvWR{ID: 1}); !errors.Is(err, ErrInvalidWR) {
		t.Errorf("PostRecv on a QP on an SRQ: %v, want ErrInvalidWR", err)
	}
	if err := s.srq.PostRecv(&RecvWR{SGL: []SGE{sd.sge(0, 1), sd.sge(1, 1)}}); !errors.Is(err, ErrInvalidWR) {
		t.Errorf("2 SGEs on an SRQ of 1: %v, want ErrInvalidWR", err)
	}
	for id := range 4 {
		s.post(t, uint64(id), 8)
	}
	if err := s.srq.PostRecv(&RecvWR{ID: 9}); !errors.Is(err, ErrQueueFull) {
		t.Errorf("PostRecv on a full SRQ: %v, want ErrQueueFull", err)
	}
	if q := sd.qp.Queues(); q.RQDepth != 0 || q.RQPosted != 0 {
		t.Errorf("QP on an SRQ reports RQ %d/%d, want 0/0", q.RQPosted, q.RQDepth)
	}
	if err := s.srq.Close(); !errors.Is(err, ErrSRQBusy) {
		t.Fatalf("Close with QPs: %v, want ErrSRQBusy", err)
	}
	s.sides[0].qp.Close()
	if err := s.srq.Close(); !errors.Is(err, ErrSRQBusy) {
		t.Fatalf("Close with one QP left: %v, want ErrSRQBusy", err)
	}
	s.sides[1].qp.Close()
	if err := s.srq.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if n := sd.rcq.Len(); n != 0 {
		t.Errorf("%d completions after closing: the SRQ's receives are dropped, not completed", n)
	}
	if _, err := s.dev.CreateQP(QPAttr{PD: sd.pd, SendCQ: sd.scq, RecvCQ: sd.rcq, SQDepth: 1, SRQ: s.srq}); !errors.Is(err, ErrClosed) {
		t.Errorf("CreateQP on a closed SRQ: %v, want ErrClosed", err)
	}
	for _, a := range []SRQAttr{{Depth: 0}, {Depth: 1 << 20}, {Depth: 4, MaxSGE: 1000}, {Depth: 4, Limit: 5}} {
		if _, err := s.dev.CreateSRQ(a); !errors.Is(err, ErrBadAttr) {
			t.Errorf("CreateSRQ(%+v): %v, want ErrBadAttr", a, err)
		}
	}
	if err := s.srq.PostRecv(&RecvWR{}); !errors.Is(err, ErrClosed) {
		t.Errorf("PostRecv on a closed SRQ: %v", err)
	}
}

// TestSRQErrorFlushesOwn: a QP that goes to error flushes the receive it
// had taken, and only that one; the SRQ keeps the rest for the other QP.
func TestSRQErrorFlushesOwn(t *testing.T) {
	s := newSRQServer(t, 2, SRQAttr{Depth: 8}, QPAttr{})
	for id := range 6 {
		s.post(t, uint64(id), srqBuf)
	}
	cs := connectSRQ(t, s)
	sendTagged(t, cs[0], 0, 0)
	poll(t, s.sides[0].rcq, 1)
	q0 := s.sides[0].qp
	// A message under way: QP 0 holds the next receive (ID 1).
	q0.mu.Lock()
	if e := q0.srqTakeLocked(); e != nil {
		t.Fatal(e)
	}
	q0.recvActive = true
	q0.mu.Unlock()
	q0.ToError()
	x := poll(t, s.sides[0].rcq, 1)[0]
	if x.Status != StatusWRFlushErr || x.ID != 1 || x.QPNum != q0.Num() {
		t.Fatalf("flush completion %+v, want receive 1 flushed on QP %d", x, q0.Num())
	}
	if n := s.sides[0].rcq.Len(); n != 0 {
		t.Fatalf("%d more completions on QP 0's CQ: it flushed the SRQ's receives", n)
	}
	if p := s.srq.Query().Posted; p != 4 {
		t.Fatalf("%d receives in the SRQ, want 4", p)
	}
	for k := range 4 {
		sendTagged(t, cs[1], 1, k)
	}
	for k, x := range poll(t, s.sides[1].rcq, 4) {
		if x.Status != StatusSuccess || x.ID != uint64(2+k) || x.QPNum != s.sides[1].qp.Num() {
			t.Fatalf("QP 1 completion %+v", x)
		}
	}
	q0.Close()
	if n := s.sides[0].rcq.Len(); n != 0 {
		t.Errorf("%d completions on QP 0's CQ after Close", n)
	}
}

// TestSRQImmediate: Immediate Data and Write with Immediate take SRQ
// receives too (RFC 7306), completing on the receiving QP's CQ.
func TestSRQImmediate(t *testing.T) {
	s := newSRQServer(t, 1, SRQAttr{Depth: 4}, QPAttr{})
	s.post(t, 0, 0)
	s.post(t, 1, srqBuf)
	cs := connectSRQ(t, s)
	c, sd := cs[0], s.sides[0]
	mustPost(t, c.qp, SendWR{ID: 1, Op: OpImm, Imm: 0x1122334455667788})
	mustPost(t, c.qp, SendWR{ID: 2, Op: OpWriteWithImm, SGL: []SGE{c.sge(0, 100)}, RemoteSTag: sd.mr.STag(), RemoteTO: sd.to(8192), Imm: 7})
	got := poll(t, sd.rcq, 2)
	if x := got[0]; x.Status != StatusSuccess || x.ID != 0 || x.Op != OpRecvImm || x.Imm != 0x1122334455667788 || x.QPNum != sd.qp.Num() {
		t.Errorf("Immediate Data completion %+v", x)
	}
	if x := got[1]; x.Status != StatusSuccess || x.ID != 1 || x.Op != OpRecvWriteImm || x.ByteLen != 100 || x.Imm != 7 {
		t.Errorf("Write with Immediate completion %+v", x)
	}
}

// TestSRQRecvSink: on a sink QP, a receive handed to the sink goes back
// to the SRQ; the SRQ stays full with nobody polling.
func TestSRQRecvSink(t *testing.T) {
	got := make(chan Completion, 64)
	s := newSRQServer(t, 1, SRQAttr{Depth: 4}, QPAttr{RecvSink: func(c Completion) { got <- c }})
	for id := range 4 {
		s.post(t, uint64(id), srqBuf)
	}
	cs := connectSRQ(t, s)
	for k := range 20 {
		sendTagged(t, cs[0], 0, k)
	}
	for k := range 20 {
		select {
		case x := <-got:
			if x.ID != uint64(k%4) || x.QPNum != s.sides[0].qp.Num() {
				t.Fatalf("sink message %d: %+v", k, x)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("the sink got %d messages, want 20 (err %v)", k, s.sides[0].qp.Err())
		}
	}
	if p := s.srq.Query().Posted; p != 4 {
		t.Errorf("%d receives in the SRQ, want 4", p)
	}
	if n := s.sides[0].rcq.Len(); n != 0 {
		t.Errorf("%d completions on the CQ", n)
	}
}

// TestSRQAllocs: posting to an SRQ and a Send taking its receive allocate
// nothing.
func TestSRQAllocs(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	s := newSRQServer(t, 1, SRQAttr{Depth: 8}, QPAttr{})
	cs := connectSRQ(t, s)
	c, sd := cs[0], s.sides[0]
	wc := make([]Completion, 4)
	ctx := context.Background()
	wr := RecvWR{ID: 1, SGL: []SGE{sd.sge(0, srqBuf)}}
	send := SendWR{ID: 1, Op: OpSend, Flags: FlagSignaled, SGL: []SGE{c.sge(0, 64)}}
	step := func() {
		if err := s.srq.PostRecv(&wr); err != nil {
			t.Fatal(err)
		}
		if err := c.qp.PostSend(&send); err != nil {
			t.Fatal(err)
		}
		for sd.rcq.Poll(wc) == 0 {
			sd.rcq.Wait(ctx)
		}
		for c.scq.Poll(wc) == 0 {
			c.scq.Wait(ctx)
		}
	}
	for range 100 {
		step()
	}
	if a := testing.AllocsPerRun(500, step); a != 0 {
		t.Errorf("%v allocs per Send into an SRQ", a)
	}
}
