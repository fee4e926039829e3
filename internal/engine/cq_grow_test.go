package engine

import (
	"bytes"
	"context"
	"testing"
	"time"

	"xrnic/mem"
)

// newSharedCQSide is a side whose QP (sq + rq deep) completes on one CQ
// of cqDepth entries, on a device configured by cfg.
func newSharedCQSide(t *testing.T, cfg Config, cqDepth, sq, rq, bufLen int) *side {
	t.Helper()
	cfg.ConnTimeout = 5 * time.Second
	d, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	s := &side{dev: d, pd: d.AllocPD()}
	if s.scq, err = d.CreateCQ(cqDepth); err != nil {
		t.Fatal(err)
	}
	s.rcq = s.scq
	if s.qp, err = d.CreateQP(QPAttr{PD: s.pd, SendCQ: s.scq, RecvCQ: s.rcq, SQDepth: sq, RQDepth: rq}); err != nil {
		t.Fatalf("CreateQP %d+%d on a CQ of %d: %v", sq, rq, cqDepth, err)
	}
	s.buf = make([]byte, bufLen)
	s.mr, err = d.RegMR(s.buf, mem.MROptions{PD: s.pd, Access: mem.LocalWrite | mem.RemoteRead | mem.RemoteWrite})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// waitLen waits until cq holds n completions (polling nothing).
func waitLen(t *testing.T, cq *CQ, n int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for cq.Len() < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d completions queued", cq.Len(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestCQSmallerThanQueues is what libfabric's verbs provider, qperf and
// MPI do: a QP of 384 + 384 on a 1-entry CQ. Every side posts all its
// queue holds before polling; the CQ grows, and every completion
// arrives exactly once, in order.
func TestCQSmallerThanQueues(t *testing.T) {
	const n, msg = 384, 8
	c := newSharedCQSide(t, Config{}, 1, n, n, 2*n*msg)
	s := newSharedCQSide(t, Config{}, 1, n, n, 2*n*msg)
	connectSidesWith(t, c, s, ConnParams{}, ConnParams{})
	fill(c.buf[:n*msg], 1)
	fill(s.buf[n*msg:], 2)
	for i := range n {
		mustRecv(t, c.qp, RecvWR{ID: uint64(1000 + i), SGL: []SGE{c.sge(n*msg+i*msg, msg)}})
		mustRecv(t, s.qp, RecvWR{ID: uint64(1000 + i), SGL: []SGE{s.sge(i*msg, msg)}})
	}
	for i := range n {
		mustPost(t, c.qp, SendWR{ID: uint64(i), Op: OpSend, Flags: FlagSignaled, SGL: []SGE{c.sge(i*msg, msg)}})
	}
	waitLen(t, s.rcq, n)
	for i := range n {
		mustPost(t, s.qp, SendWR{ID: uint64(i), Op: OpSend, Flags: FlagSignaled, SGL: []SGE{s.sge(n*msg+i*msg, msg)}})
	}
	// Nothing polled yet: every WR's completion is held.
	waitLen(t, c.scq, 2*n)
	waitLen(t, s.scq, 2*n)
	if got := c.scq.Cap(); got < 2*n {
		t.Fatalf("client CQ capacity %d holds %d completions", got, c.scq.Len())
	}
	// Resizing keeps them, in order; below what is queued is refused.
	if _, err := c.scq.Resize(2*n - 1); err != ErrBadAttr {
		t.Fatalf("shrink below the queued completions: %v", err)
	}
	if got, err := c.scq.Resize(4 * n); err != nil || got != 4*n || c.scq.Cap() != 4*n {
		t.Fatalf("grow: %d, %v (capacity %d)", got, err, c.scq.Cap())
	}
	if got, err := s.scq.Resize(2 * n); err != nil || got != 2*n {
		t.Fatalf("shrink to what is queued: %d, %v", got, err)
	}
	for _, sd := range []*side{c, s} {
		cs := poll(t, sd.scq, 2*n)
		var sends, recvs int
		for _, x := range cs {
			if x.Status != StatusSuccess {
				t.Fatalf("completion %+v", x)
			}
			switch x.Op {
			case OpSend:
				if x.ID != uint64(sends) {
					t.Fatalf("send completion %d is WR %d", sends, x.ID)
				}
				sends++
			case OpRecv:
				if x.ID != uint64(1000+recvs) || x.ByteLen != msg {
					t.Fatalf("receive completion %d: %+v", recvs, x)
				}
				recvs++
			default:
				t.Fatalf("completion %+v", x)
			}
		}
		if sends != n || recvs != n || sd.scq.Len() != 0 {
			t.Fatalf("%d sends, %d receives, %d left", sends, recvs, sd.scq.Len())
		}
	}
	if !bytes.Equal(s.buf[:n*msg], c.buf[:n*msg]) || !bytes.Equal(c.buf[n*msg:], s.buf[n*msg:]) {
		t.Fatal("data differs")
	}
	// Nothing more arrives.
	wc := make([]Completion, 1)
	if c.scq.Poll(wc)+s.scq.Poll(wc) != 0 {
		t.Fatalf("extra completion %+v", wc[0])
	}
}

// TestCQFullAtMaxCQE: a CQ grows up to the device's MaxCQE; there the
// next post is refused (ErrCQFull) and nothing queued is lost.
func TestCQFullAtMaxCQE(t *testing.T) {
	const maxCQE = 8
	c := newSharedCQSide(t, Config{MaxCQE: maxCQE}, 1, 2*maxCQE, 1, 4096)
	s := newSharedCQSide(t, Config{}, 1, 1, 1, 4096)
	connectSidesWith(t, c, s, ConnParams{}, ConnParams{})
	post := func(i int) error {
		return c.qp.PostSend(&SendWR{ID: uint64(i), Op: OpWrite, Flags: FlagSignaled, SGL: []SGE{c.sge(i*8, 8)},
			RemoteSTag: s.mr.STag(), RemoteTO: s.to(i * 8)})
	}
	for i := range maxCQE {
		if err := post(i); err != nil {
			t.Fatalf("post %d: %v", i, err)
		}
	}
	if err := post(maxCQE); err != ErrCQFull {
		t.Fatalf("post beyond MaxCQE: %v", err)
	}
	if got := c.scq.Cap(); got != maxCQE {
		t.Fatalf("capacity %d", got)
	}
	if _, err := c.scq.Resize(maxCQE + 1); err != ErrBadAttr {
		t.Fatalf("resize beyond MaxCQE: %v", err)
	}
	cs := poll(t, c.scq, maxCQE)
	for i, x := range cs {
		if x.ID != uint64(i) || x.Status != StatusSuccess || x.Op != OpWrite {
			t.Fatalf("completion %d: %+v", i, x)
		}
	}
	// The refused WR was not posted; the CQ has room again.
	if err := post(maxCQE); err != nil {
		t.Fatalf("post after polling: %v", err)
	}
	if x := poll(t, c.scq, 1)[0]; x.ID != maxCQE || x.Status != StatusSuccess {
		t.Fatalf("completion %+v", x)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if c.scq.Wait(ctx) == nil {
		t.Fatalf("extra completion (%d queued)", c.scq.Len())
	}
}

// TestCQResize: Resize grows and shrinks a ring that wraps, keeping the
// queued completions in order; it never goes below what is queued
// (ErrBadAttr) nor below what posted WRs reserved (the size made is
// larger then), nor outside 1..MaxCQE.
func TestCQResize(t *testing.T) {
	d, err := Open(Config{MaxCQE: 64})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	cq, err := d.CreateCQ(4)
	if err != nil {
		t.Fatal(err)
	}
	next := uint64(0)
	push := func(k int) {
		for range k {
			if !cq.reserve() {
				t.Fatal("reserve")
			}
			cq.push(&Completion{ID: next})
			next++
		}
	}
	want := uint64(0)
	pollN := func(k int) {
		t.Helper()
		wc := make([]Completion, k)
		if got := cq.Poll(wc); got != k {
			t.Fatalf("polled %d of %d", got, k)
		}
		for _, x := range wc {
			if x.ID != want {
				t.Fatalf("completion %d, want %d", x.ID, want)
			}
			want++
		}
	}
	resize := func(n, want int, wantErr error) {
		t.Helper()
		got, err := cq.Resize(n)
		if err != wantErr || (err == nil && (got != want || cq.Cap() != want)) {
			t.Fatalf("Resize(%d) = %d, %v (capacity %d); want %d, %v", n, got, err, cq.Cap(), want, wantErr)
		}
	}
	push(3)
	pollN(1)
	push(2) // wraps: head 1, 4 queued
	resize(3, 0, ErrBadAttr)
	resize(0, 0, ErrBadAttr)
	resize(65, 0, ErrBadAttr)
	resize(16, 16, nil)
	push(5)
	pollN(2)
	resize(7, 7, nil) // 7 queued: exactly full
	pollN(7)
	if cq.Len() != 0 {
		t.Fatalf("%d left", cq.Len())
	}
	// Entries reserved by outstanding WRs stay reserved.
	for range 6 {
		if !cq.reserve() {
			t.Fatal("reserve")
		}
	}
	resize(2, 6, nil)
	cq.release()
	resize(2, 5, nil)
	// A full ring grows on the next reservation, up to MaxCQE.
	for cq.Cap() < 64 {
		if !cq.reserve() {
			t.Fatalf("reserve refused at capacity %d", cq.Cap())
		}
	}
	for cq.reserve() {
	}
	if cq.Cap() != 64 {
		t.Fatalf("capacity %d", cq.Cap())
	}
	if err := cq.Close(); err != nil {
		t.Fatal(err)
	}
	resize(8, 0, ErrClosed)
}

// TestCQRingFollowsUse: a CQ asked for many entries starts with a short
// ring and grows it as posts reserve entries; its capacity is what was
// asked all along.
func TestCQRingFollowsUse(t *testing.T) {
	d, err := Open(Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	const asked = 1 << 18 // ofi_rxm's CQ
	cq, err := d.CreateCQ(asked)
	if err != nil {
		t.Fatal(err)
	}
	if cq.Cap() != asked || len(cq.ring) != cqInitialRing {
		t.Fatalf("capacity %d, ring %d", cq.Cap(), len(cq.ring))
	}
	for i := range cqInitialRing + 1 {
		if !cq.reserve() {
			t.Fatal("reserve")
		}
		cq.push(&Completion{ID: uint64(i)})
	}
	if cq.Cap() != asked || len(cq.ring) != 2*cqInitialRing {
		t.Fatalf("capacity %d, ring %d", cq.Cap(), len(cq.ring))
	}
	wc := make([]Completion, 2*cqInitialRing)
	if n := cq.Poll(wc); n != cqInitialRing+1 || wc[n-1].ID != cqInitialRing {
		t.Fatalf("polled %d, last %d", n, wc[n-1].ID)
	}
	// A resize to the same size gives the memory back.
	if n, err := cq.Resize(asked); err != nil || n != asked || len(cq.ring) != cqInitialRing {
		t.Fatalf("Resize: %d, %v, ring %d", n, err, len(cq.ring))
	}
}
