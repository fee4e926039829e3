package verbs

import (
	"context"
	"testing"
	"time"
)

const allAccess = AccessLocalWrite | AccessRemoteRead | AccessRemoteWrite | AccessRemoteAtomic

type side struct {
	dev      *Device
	pd       *PD
	scq, rcq *CQ
	qp       *QP
	mr       *MR
}

func openDev(t testing.TB) *Device {
	t.Helper()
	d, err := Open(DeviceConfig{ConnTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

func newSide(t testing.TB, d *Device, bufLen int, attr QPAttr) *side {
	return newSidePD(t, d, nil, bufLen, attr)
}

// newSidePD makes a QP with its CQs and an MR on d (a new device if nil) in
// pd (a new PD if nil).
func newSidePD(t testing.TB, d *Device, pd *PD, bufLen int, attr QPAttr) *side {
	t.Helper()
	if d == nil {
		d = openDev(t)
	}
	s := &side{dev: d, pd: pd}
	var err error
	if s.pd == nil {
		if s.pd, err = d.AllocPD(); err != nil {
			t.Fatal(err)
		}
	}
	if attr.SQDepth == 0 {
		attr.SQDepth = 64
	}
	if attr.RQDepth == 0 {
		attr.RQDepth = 64
	}
	if s.scq, err = d.CreateCQ(attr.SQDepth); err != nil {
		t.Fatal(err)
	}
	if s.rcq, err = d.CreateCQ(attr.RQDepth); err != nil {
		t.Fatal(err)
	}
	attr.SendCQ, attr.RecvCQ = s.scq, s.rcq
	if s.qp, err = s.pd.CreateQP(attr); err != nil {
		t.Fatal(err)
	}
	if s.mr, err = s.pd.RegMR(make([]byte, bufLen), allAccess); err != nil {
		t.Fatal(err)
	}
	return s
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// connect connects c.qp to s.qp through a listener on s.dev.
func connect(t testing.TB, c, s *side, cp, sp ConnParam) {
	t.Helper()
	ln, err := s.dev.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ctx := ctxT(t)
	errc := acceptAsync(ctx, ln, s.qp, sp)
	if err := c.qp.Dial(ctx, ln.Addr().String(), cp); err != nil {
		t.Fatalf("dial: %v", err)
	}
	if err := <-errc; err != nil {
		t.Fatalf("accept: %v", err)
	}
}

func pair(t testing.TB, bufLen int, attr QPAttr) (c, s *side) {
	t.Helper()
	c, s = newSide(t, nil, bufLen, attr), newSide(t, nil, bufLen, attr)
	connect(t, c, s, ConnParam{}, ConnParam{})
	return c, s
}

// poll collects n completions from cq.
func poll(t testing.TB, cq *CQ, n int) []Completion {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out := make([]Completion, 0, n)
	wc := make([]Completion, 8)
	for len(out) < n {
		k := cq.Poll(wc[:min(len(wc), n-len(out))])
		out = append(out, wc[:k]...)
		if k == 0 {
			if err := cq.Wait(ctx); err != nil {
				t.Fatalf("waiting for %d completions, got %d: %+v", n, len(out), out)
			}
		}
	}
	return out
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func fill(b []byte, seed byte) {
	for i := range b {
		b[i] = seed + byte(i*7)
	}
}

// acceptAsync accepts one request on ln onto qp with p, in the
// background; the channel yields the outcome.
func acceptAsync(ctx context.Context, ln *Listener, qp *QP, p ConnParam) <-chan error {
	errc := make(chan error, 1)
	go func() {
		req, err := ln.Accept(ctx)
		if err == nil {
			err = req.Accept(ctx, qp, p)
		}
		errc <- err
	}()
	return errc
}
