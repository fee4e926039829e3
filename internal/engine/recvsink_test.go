package engine

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"xrnic/mem"
)

// A sink QP (QPAttr.RecvSink) hands each successful receive to the sink
// and reposts it on the receive path: the receive queue stays full with
// nobody polling the receive CQ, and every posted receive still
// completes on it exactly once, when it leaves the queue.

const sinkBuf = 256

// sinkRec records what a RecvSink was handed, and the first byte of the
// buffer at that moment.
type sinkRec struct {
	s     *side
	mu    sync.Mutex
	got   []Completion
	first []byte
	n     atomic.Int64
}

func (r *sinkRec) sink(c Completion) {
	r.mu.Lock()
	r.got = append(r.got, c)
	r.first = append(r.first, r.s.buf[int(c.ID)*sinkBuf])
	r.mu.Unlock()
	r.n.Add(1)
}

func (r *sinkRec) wait(t *testing.T, n int64) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); r.n.Load() < n; {
		if time.Now().After(deadline) {
			t.Fatalf("the sink got %d messages, want %d", r.n.Load(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// sinkPair connects a client to a sink QP of depth receives (IDs 0 to
// depth-1, buffer i at offset i*sinkBuf) whose RecvSink is sink.
func sinkPair(t *testing.T, depth int, sink func(Completion)) (c, s *side) {
	t.Helper()
	c = newSide(t, 1<<16, QPAttr{SQDepth: 64, RQDepth: 1})
	s = newSide(t, 1<<16, QPAttr{SQDepth: 4, RQDepth: depth, RecvSink: sink})
	for i := range depth {
		mustRecv(t, s.qp, RecvWR{ID: uint64(i), SGL: []SGE{s.sge(i*sinkBuf, sinkBuf)}})
	}
	connectSidesWith(t, c, s, ConnParams{}, ConnParams{})
	return c, s
}

// roundTrip posts a FetchAdd and waits for everything signalled before
// it: its response leaves the peer after every message before it was
// handled there.
func roundTrip(t *testing.T, c, s *side, signalled int) {
	t.Helper()
	mustPost(t, c.qp, SendWR{ID: 99, Op: OpFetchAdd, Flags: FlagSignaled, SGL: []SGE{c.sge(8192, 8)}, RemoteSTag: s.mr.STag(), RemoteTO: s.to(8192), CompareAdd: 1})
	for _, x := range poll(t, c.scq, signalled+1) {
		if x.Status != StatusSuccess {
			t.Fatalf("client completion %+v (QP error %v, peer's %v)", x, c.qp.Err(), s.qp.Err())
		}
	}
}

// flushed closes the client and checks that the sink's receives then
// complete once each, flushed, except those in want (ID: status).
func flushed(t *testing.T, c, s *side, depth int, want map[uint64]Status) {
	t.Helper()
	c.qp.Close()
	got := poll(t, s.rcq, depth)
	var ids []uint64
	for _, x := range got {
		st, ok := want[x.ID]
		if !ok {
			st = StatusWRFlushErr
		}
		if x.Status != st {
			t.Errorf("receive %d: %v, want %v", x.ID, x.Status, st)
		}
		ids = append(ids, x.ID)
	}
	slices.Sort(ids)
	for i, id := range ids {
		if id != uint64(i) {
			t.Fatalf("receives completed %v, want each of 0..%d once", ids, depth-1)
		}
	}
	time.Sleep(20 * time.Millisecond)
	if n := s.rcq.Len(); n != 0 {
		t.Fatalf("%d more receive completions", n)
	}
}

// TestRecvSinkReposts: 25 rounds of depth messages (Send, Send with SE,
// Immediate Data, Write with Immediate) each followed by a FetchAdd round
// trip; nobody polls the sink's CQ. Each message reaches the sink in
// order, in the buffers in posting order, with its data; the queue is
// full after every round.
func TestRecvSinkReposts(t *testing.T) {
	const depth, rounds = 4, 25
	rec := &sinkRec{}
	c, s := sinkPair(t, depth, rec.sink)
	rec.s = s
	for r := range rounds {
		for i := range depth {
			k := r*depth + i
			c.buf[k] = byte(k)
			sge := []SGE{c.sge(k, 10+i)}
			switch i {
			case 0:
				mustPost(t, c.qp, SendWR{ID: uint64(k), Op: OpSend, Flags: FlagSignaled, SGL: sge})
			case 1:
				mustPost(t, c.qp, SendWR{ID: uint64(k), Op: OpSend, Flags: FlagSignaled | FlagSolicited, SGL: sge})
			case 2:
				mustPost(t, c.qp, SendWR{ID: uint64(k), Op: OpImm, Flags: FlagSignaled, Imm: uint64(k) << 8})
			case 3:
				mustPost(t, c.qp, SendWR{ID: uint64(k), Op: OpWriteWithImm, Flags: FlagSignaled, SGL: sge, RemoteSTag: s.mr.STag(), RemoteTO: s.to(32768), Imm: uint64(k)})
			}
		}
		roundTrip(t, c, s, depth)
		if q := s.qp.Queues(); q.RQPosted != depth {
			t.Fatalf("round %d: %d receives posted, want %d", r, q.RQPosted, depth)
		}
		if n := s.rcq.Len(); n != 0 {
			t.Fatalf("round %d: %d completions on the receive CQ, want none", r, n)
		}
	}
	rec.mu.Lock()
	got, first := slices.Clone(rec.got), slices.Clone(rec.first)
	rec.mu.Unlock()
	if len(got) != rounds*depth {
		t.Fatalf("the sink got %d messages, want %d", len(got), rounds*depth)
	}
	for k, x := range got {
		i := k % depth
		if x.ID != uint64(k%depth) || x.Status != StatusSuccess || x.QPNum != s.qp.Num() {
			t.Fatalf("message %d: %+v, want receive %d", k, x, k%depth)
		}
		switch i {
		case 0, 1:
			if x.Op != OpRecv || x.ByteLen != uint32(10+i) || first[k] != byte(k) {
				t.Errorf("Send %d: %+v, first byte %d", k, x, first[k])
			}
			if (x.Flags&WCSolicited != 0) != (i == 1) {
				t.Errorf("Send %d: flags %v", k, x.Flags)
			}
		case 2:
			if x.Op != OpRecvImm || x.Flags&WCWithImm == 0 || x.Imm != uint64(k)<<8 {
				t.Errorf("Immediate %d: %+v", k, x)
			}
		case 3:
			if x.Op != OpRecvWriteImm || x.ByteLen != uint32(10+i) || x.Imm != uint64(k) {
				t.Errorf("Write with Immediate %d: %+v", k, x)
			}
		}
	}
	flushed(t, c, s, depth, nil)
}

// TestRecvSinkTooLong: a Send longer than its buffer completes that
// receive with an error on the CQ (Terminate DDP 1/2/0x05), the others
// are flushed: each once.
func TestRecvSinkTooLong(t *testing.T) {
	const depth = 4
	rec := &sinkRec{}
	c, s := sinkPair(t, depth, rec.sink)
	rec.s = s
	for i := range 6 { // wraps the queue once
		mustPost(t, c.qp, SendWR{ID: uint64(i), Op: OpSend, SGL: []SGE{c.sge(0, 8)}})
		if i%depth == depth-1 {
			roundTrip(t, c, s, 0)
		}
	}
	roundTrip(t, c, s, 0)
	mustPost(t, c.qp, SendWR{ID: 7, Op: OpSend, SGL: []SGE{c.sge(0, sinkBuf+1)}})
	// Receive 6 mod 4 = 2 is at the head.
	flushed(t, c, s, depth, map[uint64]Status{2: StatusLocLenErr})
	if rec.n.Load() != 6 {
		t.Errorf("the sink got %d messages, want 6", rec.n.Load())
	}
}

// TestRecvSinkRemoteInvalidate: a Send with Invalidate's receive waits
// for the grace period and completes on the CQ, not reposted; the sink
// goes on with the others, and the application may post it again.
func TestRecvSinkRemoteInvalidate(t *testing.T) {
	const depth = 4
	rec := &sinkRec{}
	c, s := sinkPair(t, depth, rec.sink)
	rec.s = s
	x, err := s.dev.RegMR(make([]byte, 64), mem.MROptions{PD: s.pd, Access: mem.LocalWrite | mem.RemoteWrite, RemoteInvalidate: true})
	if err != nil {
		t.Fatal(err)
	}
	mustPost(t, c.qp, SendWR{ID: 1, Op: OpSend, SGL: []SGE{c.sge(0, 8)}})
	mustPost(t, c.qp, SendWR{ID: 2, Op: OpSendWithInv, InvalidateSTag: x.STag(), SGL: []SGE{c.sge(0, 8)}})
	roundTrip(t, c, s, 0)
	inv := poll(t, s.rcq, 1)[0]
	if inv.ID != 1 || inv.Status != StatusSuccess || inv.Flags&WCWithInv == 0 || inv.InvalidatedSTag != x.STag() {
		t.Fatalf("receive %+v, want receive 1 reporting the invalidation", inv)
	}
	// Once it is delivered, Sends go to the sink again (a Send handled
	// while it was held would have completed on the CQ behind it).
	mustPost(t, c.qp, SendWR{ID: 3, Op: OpSend, SGL: []SGE{c.sge(0, 8)}})
	roundTrip(t, c, s, 0)
	rec.wait(t, 2)
	if q := s.qp.Queues(); q.RQPosted != depth-1 {
		t.Fatalf("%d receives posted, want %d", q.RQPosted, depth-1)
	}
	mustRecv(t, s.qp, RecvWR{ID: 1, SGL: []SGE{s.sge(sinkBuf, sinkBuf)}})
	for i := range depth {
		mustPost(t, c.qp, SendWR{ID: uint64(10 + i), Op: OpSend, SGL: []SGE{c.sge(0, 8)}})
	}
	roundTrip(t, c, s, 0)
	rec.mu.Lock()
	var ids []uint64
	for _, g := range rec.got {
		ids = append(ids, g.ID)
	}
	rec.mu.Unlock()
	if want := []uint64{0, 2, 3, 0, 2, 1}; !slices.Equal(ids, want) {
		t.Errorf("the sink got receives %v, want %v", ids, want)
	}
	flushed(t, c, s, depth, nil)
}

// TestRecvSinkAllocs: a Send into a sink QP, handed to the sink and
// reposted, allocates nothing (sender and receiver side).
func TestRecvSinkAllocs(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	got := make(chan struct{}, 1)
	c, s := sinkPair(t, 8, func(Completion) {
		select {
		case got <- struct{}{}:
		default:
		}
	})
	wc := make([]Completion, 4)
	ctx := context.Background()
	send := SendWR{ID: 1, Op: OpSend, Flags: FlagSignaled, SGL: []SGE{c.sge(0, 64)}}
	step := func() {
		if err := c.qp.PostSend(&send); err != nil {
			t.Fatal(err)
		}
		for c.scq.Poll(wc) == 0 {
			c.scq.Wait(ctx)
		}
		<-got // one Send at a time: it is the one handed over
	}
	for range 100 {
		step()
	}
	if a := testing.AllocsPerRun(500, step); a != 0 {
		t.Errorf("%v allocs per Send into a sink", a)
	}
	if q := s.qp.Queues(); q.RQPosted != 8 {
		t.Errorf("%d receives posted, want 8", q.RQPosted)
	}
}
