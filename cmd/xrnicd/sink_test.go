package main

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"testing"
	"time"

	"xrnic/control"
	"xrnic/verbs"
)

// The sink's receive queue must not depend on the daemon's consumer
// goroutine (runSink) being scheduled: the engine reposts each buffer on
// its receive path. These tests run the daemon's own connection code
// (newConn, runSink) in this process, with the consumer stopped, and a
// client that sends exactly --sink-depth Sends per FetchAdd round trip,
// the most SECURITY.md lets a sender have unacknowledged. Before the
// engine reposted the buffers itself, the second round met an empty
// receive queue: Terminate DDP 1/2/0x02.

// sinkHarness is a daemon reduced to what a connection needs: device, PD,
// state, a counter region, a listener; and a client device.
type sinkHarness struct {
	d       *daemon
	ln      *verbs.Listener
	counter *verbs.MR
	cdev    *verbs.Device
	cpd     *verbs.PD
}

func newSinkHarness(t *testing.T, depth, bufLen int) *sinkHarness {
	t.Helper()
	cfg := defaultConfig()
	cfg.SinkDepth, cfg.SinkBuffer = depth, bufLen
	dev, err := verbs.Open(verbs.DeviceConfig{Transport: "kernel", ConnTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Close() })
	d := &daemon{cfg: cfg, log: slog.New(slog.DiscardHandler), dev: dev, state: control.NewState(dev)}
	d.ctx, d.cancel = context.WithCancel(context.Background())
	t.Cleanup(d.cancel)
	if d.pd, err = dev.AllocPD(); err != nil {
		t.Fatal(err)
	}
	h := &sinkHarness{d: d}
	if h.counter, err = d.pd.RegMR(make([]byte, 64), verbs.AccessLocalWrite|verbs.AccessRemoteAtomic); err != nil {
		t.Fatal(err)
	}
	if h.ln, err = dev.Listen("tcp", "127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.ln.Close() })
	if h.cdev, err = verbs.Open(verbs.DeviceConfig{Transport: "kernel", ConnTimeout: 5 * time.Second}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.cdev.Close() })
	if h.cpd, err = h.cdev.AllocPD(); err != nil {
		t.Fatal(err)
	}
	return h
}

// sinkClient is the sending side: one QP, its send CQ and a buffer.
type sinkClient struct {
	qp  *verbs.QP
	scq *verbs.CQ
	mr  *verbs.MR
}

// connect accepts one connection onto a new daemon conn (newConn, as
// serveRequest does; no consumer runs) and returns both ends.
func (h *sinkHarness) connect(t *testing.T, depth int) (*conn, *sinkClient) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	type accepted struct {
		c   *conn
		err error
	}
	ac := make(chan accepted, 1)
	go func() {
		req, err := h.ln.Accept(ctx)
		if err != nil {
			ac <- accepted{nil, err}
			return
		}
		c, err := h.d.newConn()
		if err != nil {
			req.Reject(nil)
			ac <- accepted{nil, err}
			return
		}
		h.d.state.AddQP(c.qp, "test")
		if err := req.Accept(ctx, c.qp, verbs.ConnParam{}); err != nil {
			h.d.closeConn(c)
			ac <- accepted{nil, err}
			return
		}
		ac <- accepted{c, nil}
	}()
	cl := &sinkClient{}
	var err error
	if cl.scq, err = h.cdev.CreateCQ(2 * (depth + 1)); err != nil {
		t.Fatal(err)
	}
	rcq, err := h.cdev.CreateCQ(1)
	if err != nil {
		t.Fatal(err)
	}
	if cl.qp, err = h.cpd.CreateQP(verbs.QPAttr{SendCQ: cl.scq, RecvCQ: rcq, SQDepth: 2 * (depth + 1), RQDepth: 1, MaxSGE: 1}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.qp.Close(); cl.scq.Close(); rcq.Close() })
	if cl.mr, err = h.cpd.RegMR(make([]byte, 4096), verbs.AccessLocalWrite); err != nil {
		t.Fatal(err)
	}
	if err := cl.qp.Dial(ctx, h.ln.Addr().String(), verbs.ConnParam{}); err != nil {
		t.Fatalf("dial: %v", err)
	}
	a := <-ac
	if a.err != nil {
		t.Fatalf("accept: %v", a.err)
	}
	return a.c, cl
}

// round posts n Sends of size bytes and a FetchAdd of 1 on the counter,
// and waits for all n+1 completions: the FetchAdd's response leaves the
// daemon only after it has handled every Send before it. It returns the
// first failure, naming the Terminate the QPs exchanged.
func (h *sinkHarness) round(c *conn, cl *sinkClient, r, n, size int) error {
	for i := range n {
		if err := cl.qp.PostSendBuf(uint64(i), cl.mr.SGE(0, size), verbs.FlagSignaled); err != nil {
			return fmt.Errorf("round %d: post Send %d: %v", r, i, err)
		}
	}
	if err := cl.qp.PostFetchAdd(uint64(n), cl.mr.SGE(1024, 8), h.counter.STag(), h.counter.TO(0), 1, 0, verbs.FlagSignaled); err != nil {
		return fmt.Errorf("round %d: post FetchAdd: %v", r, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	wc := make([]verbs.Completion, n+1)
	for got := 0; got < n+1; {
		k := cl.scq.Poll(wc[got:])
		for _, e := range wc[got : got+k] {
			if e.Status != verbs.StatusSuccess {
				return fmt.Errorf("round %d: WR %d: %v (client QP error %v; the daemon's %v)", r, e.ID, e.Status, cl.qp.Err(), c.qp.Err())
			}
		}
		got += k
		if k == 0 {
			if err := cl.scq.Wait(ctx); err != nil {
				return fmt.Errorf("round %d: %d of %d completions: %v", r, got, n+1, err)
			}
		}
	}
	if orig := wc[n].AtomicOrig; orig != uint64(r) {
		return fmt.Errorf("round %d: FetchAdd original %d, want %d", r, orig, r)
	}
	return nil
}

// sinkRounds is how many rounds of --sink-depth Sends each test sends.
const sinkRounds = 200

// TestSinkRepostsWithoutConsumer: the daemon's consumer never runs while
// a client sends --sink-depth Sends per FetchAdd round trip, 200 rounds.
// After each round the sink still has every buffer posted, the messages
// are counted, and nothing reached the receive CQ; when the client goes,
// each posted receive completes exactly once, flushed.
func TestSinkRepostsWithoutConsumer(t *testing.T) {
	const depth, size = 8, 100
	h := newSinkHarness(t, depth, 128)
	c, cl := h.connect(t, depth)
	defer h.d.closeConn(c)
	short := false
	for r := range sinkRounds {
		if err := h.round(c, cl, r, depth, size); err != nil {
			t.Fatal(err)
		}
		if q := c.qp.Queues(); q.RQPosted != depth && !short {
			// Not fatal: the next round shows what the peer gets.
			t.Errorf("round %d: the sink has %d receives posted, want %d", r, q.RQPosted, depth)
			short = true
		}
	}
	msgs, bytes := h.d.state.Sink()
	if want := uint64(sinkRounds * depth); msgs[control.SinkSend.String()] != want || bytes[control.SinkSend.String()] != want*size {
		t.Errorf("sink counted %d Sends, %d bytes; want %d, %d", msgs[control.SinkSend.String()], bytes[control.SinkSend.String()], want, want*size)
	}
	if n := c.rcq.Len(); n != 0 {
		t.Errorf("%d completions on the sink's CQ while the QP is up, want none", n)
	}
	if err := c.qp.Err(); err != nil {
		t.Fatalf("the daemon's QP: %v", err)
	}

	// The client goes: the QP ends, and every receive completes once.
	cl.qp.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var ids []uint64
	wc := make([]verbs.Completion, depth+1)
	for len(ids) < depth {
		if err := c.rcq.Wait(ctx); err != nil {
			t.Fatalf("flushes: got %v: %v", ids, err)
		}
		for _, e := range wc[:c.rcq.Poll(wc)] {
			if e.Status != verbs.StatusWRFlushErr {
				t.Errorf("receive %d: %v, want flushed", e.ID, e.Status)
			}
			ids = append(ids, e.ID)
		}
	}
	slices.Sort(ids)
	for i, id := range ids {
		if id != uint64(i) {
			t.Fatalf("flushed receives %v, want each of 0..%d once", ids, depth-1)
		}
	}
	time.Sleep(50 * time.Millisecond)
	if n := c.rcq.Poll(wc); n != 0 {
		t.Fatalf("%d more completions after the flush: %+v", n, wc[:n])
	}
}

// TestSinkConsumerBlocked: the same with the daemon's consumer goroutine
// started but held (as an unscheduled goroutine would be) until the
// rounds are done; then it runs, and it returns once the client has gone
// (the flushed receives reach it), and the counts are exact.
func TestSinkConsumerBlocked(t *testing.T) {
	const depth, size = 16, 64
	h := newSinkHarness(t, depth, 64)
	c, cl := h.connect(t, depth)
	gate, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		<-gate
		h.d.runSink(c, h.d.log)
	}()
	var failed error
	short := false
	for r := range sinkRounds {
		if failed = h.round(c, cl, r, depth, size); failed != nil {
			break
		}
		if q := c.qp.Queues(); q.RQPosted != depth && !short {
			t.Errorf("round %d: the sink has %d receives posted, want %d", r, q.RQPosted, depth)
			short = true
		}
	}
	close(gate)
	cl.qp.Close()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("runSink did not return after the client closed")
	}
	h.d.closeConn(c)
	if failed != nil {
		t.Fatal(failed)
	}
	msgs, _ := h.d.state.Sink()
	if want := uint64(sinkRounds * depth); msgs[control.SinkSend.String()] != want {
		t.Errorf("sink counted %d Sends, want %d", msgs[control.SinkSend.String()], want)
	}
}
