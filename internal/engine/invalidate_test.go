package engine

import (
	"bytes"
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"xrnic/mem"
	"xrnic/wire/rdmap"
)

// invRig is a target device with one MR that several writer QPs keep
// writing into over loopback TCP, and one more connected QP (inv) on the
// target to invalidate it from.
type invRig struct {
	dev     *Device
	pd      mem.PD
	x       *mem.MR
	xbuf    []byte
	inv     *QP
	invCQ   *CQ
	peer    *side // inv's peer
	targets []*QP // the writers' QPs on the target
	stop    atomic.Bool
	writers sync.WaitGroup
}

func newInvRig(t *testing.T, writers int) *invRig {
	t.Helper()
	d, err := Open(Config{ConnTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	r := &invRig{dev: d, pd: d.AllocPD(), xbuf: make([]byte, 64<<10)}
	if r.x, err = d.RegMR(r.xbuf, mem.MROptions{PD: r.pd, Access: mem.LocalWrite | mem.RemoteWrite, RemoteInvalidate: true}); err != nil {
		t.Fatal(err)
	}
	ln, err := d.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	connect := func() (*QP, *CQ, *side) {
		cq, _ := d.CreateCQ(64)
		qp, err := d.CreateQP(QPAttr{PD: r.pd, SendCQ: cq, RecvCQ: cq, SQDepth: 16, RQDepth: 16})
		if err != nil {
			t.Fatal(err)
		}
		c := newSide(t, 4096, QPAttr{})
		errc := acceptAsync(ctx, ln, qp, ConnParams{})
		if err := c.qp.Connect(ctx, ln.Addr().String(), ConnParams{}); err != nil {
			t.Fatal(err)
		}
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
		return qp, cq, c
	}
	// inv dials out: an initiator may transmit at once (a responder's tx
	// opens with the peer's first FPDU, RFC 5044 §7.1.2).
	r.invCQ, _ = d.CreateCQ(64)
	if r.inv, err = d.CreateQP(QPAttr{PD: r.pd, SendCQ: r.invCQ, RecvCQ: r.invCQ, SQDepth: 16, RQDepth: 16}); err != nil {
		t.Fatal(err)
	}
	r.peer = newSide(t, 4096, QPAttr{})
	pln, err := r.peer.dev.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer pln.Close()
	errc := acceptAsync(ctx, pln, r.peer.qp, ConnParams{})
	if err := r.inv.Connect(ctx, pln.Addr().String(), ConnParams{}); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	// A zero-length Write (never checked) opens the peer's transmit side.
	if err := r.inv.PostSend(&SendWR{Op: OpWrite, RemoteSTag: 1}); err != nil {
		t.Fatal(err)
	}
	for i := range writers {
		tq, _, w := connect()
		r.targets = append(r.targets, tq)
		r.writers.Add(1)
		go func() {
			defer r.writers.Done()
			wc := make([]Completion, 8)
			for n := 0; !r.stop.Load(); n++ {
				fill(w.buf, byte(i*64+n))
				if w.qp.PostSend(&SendWR{Op: OpWrite, Flags: FlagSignaled, SGL: []SGE{w.sge(0, 4096)}, RemoteSTag: r.x.STag(), RemoteTO: r.x.BaseTO() + uint64(i)*4096}) != nil {
					return // the QP went to error: the STag is gone
				}
				for w.scq.Poll(wc) == 0 {
					if r.stop.Load() {
						return
					}
					time.Sleep(100 * time.Microsecond)
				}
			}
		}()
	}
	t.Cleanup(func() { r.stop.Store(true); r.writers.Wait() })
	return r
}

// waitWriting waits until every writer's Writes arrive at the target (the
// memory itself is not read while placements may run).
func (r *invRig) waitWriting(t *testing.T) {
	t.Helper()
	for _, q := range r.targets {
		for deadline := time.Now().Add(5 * time.Second); q.Stats().RxBytes[rdmap.OpWrite] == 0; {
			if time.Now().After(deadline) {
				t.Fatal("a writer's Writes do not arrive")
			}
			time.Sleep(time.Millisecond)
		}
	}
}

// stable checks that nothing is placed into the MR once the invalidation
// completed, while the writers keep trying.
func (r *invRig) stable(t *testing.T) {
	t.Helper()
	before := append([]byte(nil), r.xbuf...)
	time.Sleep(100 * time.Millisecond)
	if !bytes.Equal(before, r.xbuf) {
		t.Fatal("bytes were placed into the STag after its invalidation completed")
	}
}

// slowPlacement widens each Write's window between its access check and
// its copy, so a placement is in flight when the invalidation happens.
func slowPlacement(t *testing.T) {
	hook := func() { time.Sleep(20 * time.Millisecond) }
	placeHook.Store(&hook)
	t.Cleanup(func() { placeHook.Store(nil) })
}

// TestLocalInvalidateWaitsForPlacement: a Local Invalidate completes only
// after every placement into its STag that passed the check has ended
// (RFC 5041 §8.3.1), with Writes from three QPs in flight.
func TestLocalInvalidateWaitsForPlacement(t *testing.T) {
	slowPlacement(t)
	r := newInvRig(t, 3)
	r.waitWriting(t)
	if err := r.inv.PostSend(&SendWR{ID: 9, Op: OpLocalInv, Flags: FlagSignaled, InvalidateSTag: r.x.STag()}); err != nil {
		t.Fatal(err)
	}
	if c := poll(t, r.invCQ, 1)[0]; c.ID != 9 || c.Status != StatusSuccess {
		t.Fatalf("Local Invalidate %+v", c)
	}
	r.stable(t)
}

// TestRemoteInvalidateWaitsForPlacement: a receive that reports a remote
// invalidation (Send with Invalidate) completes only after every placement
// into the STag that passed the check has ended.
func TestRemoteInvalidateWaitsForPlacement(t *testing.T) {
	slowPlacement(t)
	r := newInvRig(t, 3)
	if err := r.inv.PostRecv(&RecvWR{ID: 5}); err != nil {
		t.Fatal(err)
	}
	r.waitWriting(t)
	mustPost(t, r.peer.qp, SendWR{Op: OpSendWithInv, InvalidateSTag: r.x.STag()})
	c := poll(t, r.invCQ, 1)[0]
	if c.ID != 5 || c.Status != StatusSuccess || c.Flags&WCWithInv == 0 || c.InvalidatedSTag != r.x.STag() {
		t.Fatalf("receive %+v, want the remote invalidation", c)
	}
	r.stable(t)
}
