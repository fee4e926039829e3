package engine

import (
	"context"
	"testing"
	"time"

	"xrnic/mem"
)

type side struct {
	dev *Device
	pd  mem.PD
	scq *CQ
	rcq *CQ
	qp  *QP
	buf []byte
	mr  *mem.MR
}

func (s *side) sge(off, n int) SGE {
	return SGE{Addr: s.mr.BaseTO() + uint64(off), Length: uint32(n), LKey: s.mr.STag()}
}

func (s *side) to(off int) uint64 { return s.mr.BaseTO() + uint64(off) }

func newSide(t testing.TB, bufLen int, attr QPAttr) *side {
	t.Helper()
	return newSideConfig(t, bufLen, attr, Config{})
}

// newSideConfig is newSide on a device configured by cfg (ConnTimeout
// 5 s unless set).
func newSideConfig(t testing.TB, bufLen int, attr QPAttr, cfg Config) *side {
	t.Helper()
	if cfg.ConnTimeout == 0 {
		cfg.ConnTimeout = 5 * time.Second
	}
	d, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return newSideOn(t, d, bufLen, attr)
}

// newSideOn is newSide on an open device d (another QP of it).
func newSideOn(t testing.TB, d *Device, bufLen int, attr QPAttr) *side {
	t.Helper()
	var err error
	s := &side{dev: d, pd: d.AllocPD()}
	if attr.SQDepth == 0 {
		attr.SQDepth = 64
	}
	if attr.RQDepth == 0 {
		attr.RQDepth = 64
	}
	s.scq, _ = d.CreateCQ(attr.SQDepth)
	s.rcq, _ = d.CreateCQ(attr.RQDepth)
	attr.PD, attr.SendCQ, attr.RecvCQ = s.pd, s.scq, s.rcq
	if s.qp, err = d.CreateQP(attr); err != nil {
		t.Fatal(err)
	}
	s.buf = make([]byte, bufLen)
	s.mr, err = d.RegMR(s.buf, mem.MROptions{PD: s.pd, Access: mem.LocalWrite | mem.RemoteRead | mem.RemoteWrite | mem.RemoteAtomic, RemoteInvalidate: true})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// connectPair connects two fresh sides over loopback TCP.
func connectPair(t testing.TB, bufLen int, attr QPAttr, cp, sp ConnParams) (c, s *side) {
	t.Helper()
	c, s = newSide(t, bufLen, attr), newSide(t, bufLen, attr)
	connectSidesWith(t, c, s, cp, sp)
	return c, s
}

// connectSidesWith connects c to s (sides already made) over loopback
// TCP, with cp and sp.
func connectSidesWith(t testing.TB, c, s *side, cp, sp ConnParams) {
	t.Helper()
	ln, err := s.dev.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	errc := acceptAsync(ctx, ln, s.qp, sp)
	if err := c.qp.Connect(ctx, ln.Addr().String(), cp); err != nil {
		t.Fatalf("connect: %v", err)
	}
	if err := <-errc; err != nil {
		t.Fatalf("accept: %v", err)
	}
}

// poll waits for n completions on cq.
func poll(t testing.TB, cq *CQ, n int) []Completion {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	out := make([]Completion, 0, n)
	wc := make([]Completion, 16)
	for len(out) < n {
		if err := cq.Wait(ctx); err != nil {
			t.Fatalf("waiting for %d completions, got %d: %+v", n, len(out), out)
		}
		k := cq.Poll(wc[:min(len(wc), n-len(out))])
		out = append(out, wc[:k]...)
	}
	return out
}

func mustPost(t testing.TB, qp *QP, wr SendWR) {
	t.Helper()
	if err := qp.PostSend(&wr); err != nil {
		t.Fatalf("PostSend %v: %v", wr.Op, err)
	}
}

func mustRecv(t testing.TB, qp *QP, wr RecvWR) {
	t.Helper()
	if err := qp.PostRecv(&wr); err != nil {
		t.Fatalf("PostRecv: %v", err)
	}
}

func fill(b []byte, seed byte) {
	for i := range b {
		b[i] = seed + byte(i*7)
	}
}

// acceptAsync accepts one Request on ln onto qp with sp, in the
// background; the channel yields the outcome.
func acceptAsync(ctx context.Context, ln *Listener, qp *QP, sp ConnParams) <-chan error {
	errc := make(chan error, 1)
	go func() {
		req, err := ln.Accept(ctx)
		if err == nil {
			err = req.Accept(ctx, qp, sp)
		}
		errc <- err
	}()
	return errc
}
