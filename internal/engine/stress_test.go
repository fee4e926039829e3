package engine

import (
	"context"
	"encoding/binary"
	"runtime"
	"sync"
	"testing"
	"time"

	"xrnic/transport"
)

// TestFlushExactlyOnce: after the peer terminates, every posted WR
// completes exactly once (signalled ones always, unsignalled ones only in
// error), receives too, and WRs posted later complete flushed.
func TestFlushExactlyOnce(t *testing.T) {
	c, s := connectPair(t, 1<<20, QPAttr{SQDepth: 128, RQDepth: 32}, ConnParams{ORD: 1}, ConnParams{IRD: 1})
	for i := 0; i < 20; i++ {
		mustRecv(t, c.qp, RecvWR{ID: uint64(1000 + i), SGL: []SGE{c.sge(i*64, 64)}})
	}
	const k = 100
	for i := 0; i < k; i++ {
		wr := SendWR{ID: uint64(i), SGL: []SGE{c.sge(0, 4096)}, RemoteSTag: s.mr.STag(), RemoteTO: s.to(0)}
		switch i % 4 {
		case 0:
			wr.Op = OpRead
		case 1:
			wr.Op = OpWrite
		case 2:
			wr.Op, wr.SGL, wr.CompareAdd = OpFetchAdd, []SGE{c.sge(8192, 8)}, 1
		case 3:
			wr.Op = OpWrite
			if i == 51 {
				wr.RemoteSTag ^= 0x77 // the server terminates here
			}
		}
		if i%3 != 0 {
			wr.Flags = FlagSignaled
		}
		mustPost(t, c.qp, wr)
	}
	seen := map[uint64]Status{}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	wc := make([]Completion, 32)
	signalled := 0
	for i := 0; i < k; i++ {
		if i%3 != 0 {
			signalled++
		}
	}
	errs := 0
	// Wait until the QP is in error and everything is in.
	for {
		for {
			n := c.scq.Poll(wc)
			if n == 0 {
				break
			}
			for _, x := range wc[:n] {
				if _, dup := seen[x.ID]; dup {
					t.Fatalf("WR %d completed twice", x.ID)
				}
				seen[x.ID] = x.Status
				if x.Status != StatusSuccess {
					errs++
				} else if x.ID%3 == 0 {
					t.Fatalf("unsignalled WR %d completed successfully", x.ID)
				}
			}
		}
		if c.qp.State() == QPError && c.scq.Len() == 0 {
			// every signalled WR must be in
			n := 0
			for id := range seen {
				if id%3 != 0 {
					n++
				}
			}
			if n == signalled {
				break
			}
		}
		if err := c.scq.Wait(ctx); err != nil && ctx.Err() != nil {
			t.Fatalf("timeout: %d completions, state %v", len(seen), c.qp.State())
		}
	}
	if errs == 0 {
		t.Fatal("no error completion")
	}
	// WR 51 (a Write) completed when the LLP took it; the peer's Terminate
	// names it, and the Reads behind it (ORD 1) cannot have succeeded.
	if pt := c.qp.PeerTerminate(); pt == nil || pt.Code != 0x00 || pt.EType != 1 {
		t.Errorf("peer terminate %v", pt)
	}
	for id := uint64(60); id < k; id += 4 {
		if st, ok := seen[id]; ok && st == StatusSuccess {
			t.Errorf("read %d after the error succeeded", id)
		}
	}
	rc := poll(t, c.rcq, 20)
	for _, x := range rc {
		if x.Status != StatusWRFlushErr {
			t.Errorf("recv %+v", x)
		}
	}
	// Posting on a QP in error completes flushed at once.
	mustPost(t, c.qp, SendWR{ID: 5000, Op: OpSend})
	if x := poll(t, c.scq, 1)[0]; x.ID != 5000 || x.Status != StatusWRFlushErr {
		t.Fatalf("post after error %+v", x)
	}
	mustRecv(t, c.qp, RecvWR{ID: 6000})
	if x := poll(t, c.rcq, 1)[0]; x.ID != 6000 || x.Status != StatusWRFlushErr {
		t.Fatalf("recv after error %+v", x)
	}
	if c.scq.Len() != 0 || c.rcq.Len() != 0 {
		t.Fatal("extra completions")
	}
}

// TestManyQPsConcurrent: several QP pairs, several posting goroutines each;
// FetchAdds from every QP on one server word check atomicity across
// streams.
func TestManyQPsConcurrent(t *testing.T) {
	const pairs, posters, perPoster = 6, 3, 150
	server := newSide(t, 1<<16, QPAttr{})
	ln, err := server.dev.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	type conn struct {
		c   *side
		sqp *QP
		scq *CQ
		rcq *CQ
	}
	conns := make([]*conn, pairs)
	for i := range conns {
		cs := newSide(t, 1<<16, QPAttr{SQDepth: 256})
		scq, _ := server.dev.CreateCQ(64)
		rcq, _ := server.dev.CreateCQ(64)
		sqp, err := server.dev.CreateQP(QPAttr{PD: server.pd, SendCQ: scq, RecvCQ: rcq, SQDepth: 32, RQDepth: 32})
		if err != nil {
			t.Fatal(err)
		}
		errc := acceptAsync(ctx, ln, sqp, ConnParams{})
		if err := cs.qp.Connect(ctx, ln.Addr().String(), ConnParams{}); err != nil {
			t.Fatal(err)
		}
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
		conns[i] = &conn{c: cs, sqp: sqp, scq: scq, rcq: rcq}
	}
	var wg sync.WaitGroup
	for ci, cn := range conns {
		total := posters * perPoster
		// poller
		wg.Add(1)
		go func() {
			defer wg.Done()
			wc := make([]Completion, 32)
			got := 0
			for got < total {
				if err := cn.c.scq.Wait(ctx); err != nil {
					t.Errorf("poller: %v after %d", err, got)
					return
				}
				n := cn.c.scq.Poll(wc)
				for _, x := range wc[:n] {
					if x.Status != StatusSuccess {
						t.Errorf("completion %+v", x)
					}
				}
				got += n
			}
		}()
		for p := 0; p < posters; p++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < perPoster; i++ {
					wr := SendWR{ID: uint64(i), Flags: FlagSignaled, RemoteSTag: server.mr.STag()}
					if i%2 == 0 {
						wr.Op, wr.SGL, wr.RemoteTO, wr.CompareAdd = OpFetchAdd, []SGE{cn.c.sge(8*p, 8)}, server.to(4096), 1
					} else {
						wr.Op, wr.SGL, wr.RemoteTO = OpWrite, []SGE{cn.c.sge(1024, 512)}, server.to(8192+(ci*posters+p)*512)
					}
					for {
						err := cn.c.qp.PostSend(&wr)
						if err == nil {
							break
						}
						if err != ErrQueueFull && err != ErrCQFull {
							t.Errorf("post: %v", err)
							return
						}
						runtime.Gosched()
					}
				}
			}()
		}
	}
	wg.Wait()
	want := uint64(pairs * posters * ((perPoster + 1) / 2))
	if got := binary.NativeEndian.Uint64(server.buf[4096:]); got != want {
		t.Fatalf("shared counter %d, want %d", got, want)
	}
}

func TestNoGoroutineLeak(t *testing.T) {
	before := runtime.NumGoroutine()
	func() {
		c, s := connectPair(t, 1<<20, QPAttr{}, ConnParams{}, ConnParams{})
		exercise(t, c, s)
		c.dev.Close()
		s.dev.Close()
	}()
	// error path too
	func() {
		c, s := connectPair(t, 1<<16, QPAttr{}, ConnParams{}, ConnParams{})
		mustPost(t, c.qp, SendWR{ID: 1, Op: OpWrite, Flags: FlagSignaled, SGL: []SGE{c.sge(0, 8)}, RemoteSTag: 1, RemoteTO: 0})
		poll(t, c.scq, 1)
		c.dev.Close()
		s.dev.Close()
	}()
	deadline := time.Now().Add(3 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		buf := make([]byte, 1<<16)
		t.Fatalf("goroutines: %d before, %d after\n%s", before, n, buf[:runtime.Stack(buf, true)])
	}
}

func TestCloseOrderly(t *testing.T) {
	c, s := connectPair(t, 1<<16, QPAttr{}, ConnParams{}, ConnParams{})
	mustRecv(t, s.qp, RecvWR{ID: 1, SGL: []SGE{s.sge(0, 64)}})
	mustRecv(t, s.qp, RecvWR{ID: 2, SGL: []SGE{s.sge(0, 64)}})
	mustPost(t, c.qp, SendWR{ID: 1, Op: OpSend, SGL: []SGE{c.sge(0, 10)}})
	mustPost(t, c.qp, SendWR{ID: 2, Op: OpRead, Flags: FlagSignaled, SGL: []SGE{c.sge(0, 100)}, RemoteSTag: s.mr.STag(), RemoteTO: s.to(0)})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.qp.Disconnect(ctx); err != nil {
		t.Fatal(err)
	}
	// The Read was answered before the close completed.
	if x := poll(t, c.scq, 1)[0]; x.ID != 2 || x.Status != StatusSuccess {
		t.Fatalf("read %+v", x)
	}
	rc := poll(t, s.rcq, 2)
	if rc[0].Status != StatusSuccess || rc[1].Status != StatusWRFlushErr {
		t.Fatalf("server receives %+v", rc)
	}
	if err := c.qp.PostSend(&SendWR{Op: OpSend}); err != ErrState && c.qp.State() != QPError {
		t.Fatalf("post after disconnect: %v", err)
	}
	c.qp.Close()
	s.qp.Close()
	if s.qp.State() != QPClosed || c.qp.State() != QPClosed {
		t.Fatal("not closed")
	}
}

// TestCQAttachBeyondDepth: queues deeper than their CQ are accepted (the
// CQ grows as posts need it), and a CQ with QPs on it cannot be closed,
// even one that only serves an RQ of depth 0.
func TestCQAttachBeyondDepth(t *testing.T) {
	d, _ := Open(Config{})
	defer d.Close()
	cq, _ := d.CreateCQ(10)
	rcq, _ := d.CreateCQ(1)
	qp, err := d.CreateQP(QPAttr{PD: d.AllocPD(), SendCQ: cq, RecvCQ: cq, SQDepth: 8, RQDepth: 4})
	if err != nil {
		t.Fatal(err)
	}
	qp2, err := d.CreateQP(QPAttr{PD: d.AllocPD(), SendCQ: cq, RecvCQ: rcq, SQDepth: 384, RQDepth: 0})
	if err != nil {
		t.Fatal(err)
	}
	if cq.Close() != ErrCQBusy || rcq.Close() != ErrCQBusy {
		t.Fatal("CQ closed under a QP")
	}
	qp.Close()
	if cq.Close() != ErrCQBusy {
		t.Fatal("CQ closed under the second QP")
	}
	qp2.Close()
	if err := cq.Close(); err != nil {
		t.Fatal(err)
	}
	if err := rcq.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := d.CreateQP(QPAttr{PD: d.AllocPD(), SendCQ: cq, RecvCQ: cq, SQDepth: 1}); err != ErrClosed {
		t.Fatalf("QP on a closed CQ: %v", err)
	}
}

func TestAllocsSteadyState(t *testing.T) {
	if testing.Short() { // -short: not about the machine
		t.Skip("short")
	}
	c, s := connectPair(t, 1<<16, QPAttr{}, ConnParams{}, ConnParams{})
	wc := make([]Completion, 4)
	ctx := context.Background()
	run := func(wr *SendWR) float64 {
		step := func() {
			if err := c.qp.PostSend(wr); err != nil {
				t.Fatal(err)
			}
			for c.scq.Poll(wc) == 0 {
				c.scq.Wait(ctx)
			}
		}
		for i := 0; i < 100; i++ {
			step()
		}
		return testing.AllocsPerRun(500, step)
	}
	write := SendWR{ID: 1, Op: OpWrite, Flags: FlagSignaled, SGL: []SGE{c.sge(0, 4096)}, RemoteSTag: s.mr.STag(), RemoteTO: s.to(0)}
	if a := run(&write); a != 0 {
		t.Errorf("write: %v allocs per post+poll", a)
	}
	fa := SendWR{ID: 2, Op: OpFetchAdd, Flags: FlagSignaled, SGL: []SGE{c.sge(8192, 8)}, RemoteSTag: s.mr.STag(), RemoteTO: s.to(8192), CompareAdd: 1}
	if a := run(&fa); a != 0 {
		t.Errorf("fetchadd: %v allocs per post+poll", a)
	}
	// Run to completion: the poller reads the sockets itself (CQ.Drive),
	// the responder's too: AllocsPerRun runs with GOMAXPROCS 1, where a
	// spinning goroutine keeps the runtime from polling the network.
	driven := func() {
		if err := c.qp.PostSend(&fa); err != nil {
			t.Fatal(err)
		}
		for c.scq.Poll(wc) == 0 {
			if c.scq.Drive() != transport.DriveWork && s.scq.Drive() != transport.DriveWork {
				runtime.Gosched()
			}
		}
	}
	for range 100 {
		driven()
	}
	if a := testing.AllocsPerRun(500, driven); a != 0 {
		t.Errorf("fetchadd, driven: %v allocs per post+poll", a)
	}
}
