package verbs

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"
)

func TestPrivateDataAndParams(t *testing.T) {
	c := newSide(t, nil, 4096, QPAttr{MaxORD: 8, MaxIRD: 8})
	s := newSide(t, nil, 4096, QPAttr{MaxORD: 8, MaxIRD: 8})
	ln, err := s.dev.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	defer ln.Close()
	ctx := ctxT(t)
	reqc := make(chan ConnRequestInfo, 1)
	errc := make(chan error, 1)
	go func() {
		req, err := ln.Accept(ctx)
		if err != nil {
			errc <- err
			return
		}
		reqc <- req.ConnRequestInfo
		errc <- req.Accept(ctx, s.qp, ConnParam{PrivateData: []byte("welcome"), IRD: 4, ORD: 2})
	}()
	must(t, c.qp.Dial(ctx, ln.Addr().String(), ConnParam{PrivateData: []byte("hello"), IRD: 3, ORD: 5}))
	must(t, <-errc)
	ri := <-reqc
	if string(ri.PrivateData) != "hello" || ri.MPARev != 2 || !ri.HasPeerIRDORD || ri.PeerIRD != 3 || ri.PeerORD != 5 || !ri.PeerCRC {
		t.Errorf("request info %+v", ri)
	}
	ci, si := c.qp.ConnInfo(), s.qp.ConnInfo()
	if string(ci.PeerPrivateData) != "welcome" || string(si.PeerPrivateData) != "hello" || !ci.Initiator || si.Initiator {
		t.Errorf("private data %q %q", ci.PeerPrivateData, si.PeerPrivateData)
	}
	// initiator ORD <= responder IRD, responder ORD <= initiator IRD
	if ci.ORD != 4 || si.IRD != 4 || si.ORD != 2 || ci.IRD != 3 || !ci.CRC || ci.MPARev != 2 || ci.MULPDU <= 0 {
		t.Errorf("negotiated c=%+v s=%+v", ci, si)
	}
	if c.qp.State() != QPRTS || s.qp.State() != QPRTS {
		t.Errorf("states %v %v", c.qp.State(), s.qp.State())
	}
	// Revision 1, no CRC on both sides.
	c2 := newSide(t, c.dev, 4096, QPAttr{})
	s2 := newSide(t, s.dev, 4096, QPAttr{})
	connect(t, c2, s2, ConnParam{MPARev: 1, NoCRC: true}, ConnParam{NoCRC: true})
	if ci := c2.qp.ConnInfo(); ci.MPARev != 1 || ci.CRC || ci.HasPeerIRDORD {
		t.Errorf("rev1 %+v", ci)
	}
	// Peer-to-peer with markers.
	c3 := newSide(t, c.dev, 4096, QPAttr{})
	s3 := newSide(t, s.dev, 4096, QPAttr{})
	connect(t, c3, s3, ConnParam{PeerToPeer: true, Markers: true}, ConnParam{Markers: true})
	if ci := c3.qp.ConnInfo(); !ci.PeerToPeer || !ci.MarkersRx || !ci.MarkersTx {
		t.Errorf("p2p %+v", ci)
	}
	copy(c3.mr.Bytes(), "marker")
	must(t, c3.qp.Write(ctx, c3.mr.SGE(0, 6), s3.mr.STag(), s3.mr.TO(10)))
	must(t, c3.qp.Read(ctx, c3.mr.SGE(100, 6), s3.mr.STag(), s3.mr.TO(10)))
	if string(s3.mr.Bytes()[10:16]) != "marker" || string(c3.mr.Bytes()[100:106]) != "marker" {
		t.Error("p2p data")
	}
}

func TestReject(t *testing.T) {
	c := newSide(t, nil, 64, QPAttr{})
	s := newSide(t, nil, 64, QPAttr{})
	ln, err := s.dev.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	defer ln.Close()
	ctx := ctxT(t)
	go func() {
		req, err := ln.Accept(ctx)
		if err != nil {
			return
		}
		req.Reject(append([]byte("no room for "), req.PrivateData...))
	}()
	err = c.qp.Dial(ctx, ln.Addr().String(), ConnParam{PrivateData: []byte("alice")})
	var rej *RejectedError
	if !errors.Is(err, ErrRejected) || !errors.As(err, &rej) || string(rej.PrivateData) != "no room for alice" {
		t.Fatalf("dial: %v (%+v)", err, rej)
	}
	// The responder's QP was never used; the initiator's is not connected.
	if c.qp.State() == QPRTS {
		t.Fatal("rejected QP is RTS")
	}
	// Dial to nothing fails within the context.
	ctx2, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	c2 := newSide(t, c.dev, 64, QPAttr{})
	if err := c2.qp.Dial(ctx2, "127.0.0.1:1", ConnParam{}); err == nil {
		t.Fatal("dial to a closed port succeeded")
	}
}

func TestProbe(t *testing.T) {
	c, s := pair(t, 64, QPAttr{})
	binary.NativeEndian.PutUint64(s.mr.Bytes()[16:], 1234)
	r, err := c.qp.ProbeAtomics(ctxT(t), s.mr.STag(), s.mr.TO(16))
	if r != ProbeSupported || err != nil {
		t.Fatalf("probe: %v %v", r, err)
	}
	if binary.NativeEndian.Uint64(s.mr.Bytes()[16:]) != 1234 {
		t.Fatal("probe changed memory")
	}
	if n := c.scq.Len(); n != 0 {
		t.Fatalf("probe left %d completions", n)
	}
	// A probe of a word the peer did not open for atomics does not tell.
	ro, err := s.pd.RegMR(make([]byte, 64), AccessRemoteRead)
	must(t, err)
	if r, err := c.qp.ProbeAtomics(ctxT(t), ro.STag(), ro.TO(0)); r != ProbeFailed || err == nil {
		t.Fatalf("probe of a read-only MR: %v %v", r, err)
	}
	// Not connected.
	q := newSide(t, c.dev, 64, QPAttr{})
	if r, err := q.qp.ProbeAtomics(ctxT(t), 1, 0); r != ProbeFailed || !errors.Is(err, ErrNotConnected) {
		t.Fatalf("probe unconnected: %v %v", r, err)
	}
}

func TestCQNotifyAndWait(t *testing.T) {
	c, s := pair(t, 4096, QPAttr{})
	// Wait times out and is cancelled on an empty CQ.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	if err := s.rcq.Wait(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("wait timeout: %v", err)
	}
	cancel()
	ctx, cancel = context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- s.rcq.Wait(ctx) }()
	time.Sleep(10 * time.Millisecond)
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("wait cancel: %v", err)
	}
	// Wait returns once a completion arrives.
	go func() { done <- s.rcq.Wait(ctxT(t)) }()
	must(t, s.qp.PostRecvBuf(1, s.mr.SGE(0, 64)))
	must(t, c.qp.PostSendBuf(1, c.mr.SGE(0, 4), 0))
	must(t, <-done)
	poll(t, s.rcq, 1)

	// Solicited-only notification: a plain Send does not fire, a Send
	// with SE does.
	s.rcq.Notify(true)
	for i := range 2 {
		must(t, s.qp.PostRecvBuf(uint64(10+i), s.mr.SGE(0, 64)))
	}
	must(t, c.qp.PostSendBuf(2, c.mr.SGE(0, 4), 0))
	poll(t, s.rcq, 1)
	select {
	case <-s.rcq.Events():
		t.Fatal("notified for an unsolicited Send")
	default:
	}
	must(t, c.qp.PostSendBuf(3, c.mr.SGE(0, 4), FlagSolicited))
	select {
	case <-s.rcq.Events():
	case <-time.After(5 * time.Second):
		t.Fatal("no notification for a Send with SE")
	}
	if wc := poll(t, s.rcq, 1)[0]; wc.Flags&WCSolicited == 0 {
		t.Fatalf("%+v", wc)
	}
	// Any-completion notification on the send CQ, one shot.
	c.scq.Notify(false)
	must(t, c.qp.PostWrite(4, c.mr.SGE(0, 8), s.mr.STag(), s.mr.TO(0), FlagSignaled))
	select {
	case <-c.scq.Events():
	case <-time.After(5 * time.Second):
		t.Fatal("no notification")
	}
	poll(t, c.scq, 1)
	must(t, c.qp.PostWrite(5, c.mr.SGE(0, 8), s.mr.STag(), s.mr.TO(0), FlagSignaled))
	poll(t, c.scq, 1)
	select {
	case <-c.scq.Events():
		t.Fatal("notified without re-arming")
	default:
	}
}

// TestManyQPs runs many QP pairs between two devices, each side of each
// pair driven by its own goroutine, all hitting one shared counter with
// FetchAdd and sending ordered messages; run with -race.
func TestManyQPs(t *testing.T) {
	const nQP, perQP = 16, 100
	dc, ds := openDev(t), openDev(t)
	spd, err := ds.AllocPD()
	must(t, err)
	counter, err := spd.RegMR(make([]byte, 64), allAccess)
	must(t, err)
	cs := make([]*side, nQP)
	ss := make([]*side, nQP)
	for i := range nQP {
		cs[i] = newSide(t, dc, 4096, QPAttr{})
		ss[i] = newSidePD(t, ds, spd, 4096, QPAttr{RQDepth: perQP})
		connect(t, cs[i], ss[i], ConnParam{}, ConnParam{})
	}
	ctx := ctxT(t)
	var wg sync.WaitGroup
	errs := make(chan error, 2*nQP)
	origs := make(chan uint64, nQP*perQP)
	for i := range nQP {
		c, s := cs[i], ss[i]
		for j := range perQP {
			must(t, s.qp.PostRecvBuf(uint64(j), s.mr.SGE(2*j, 2)))
		}
		wg.Add(2)
		go func() { // initiator: a FetchAdd and a Send per round
			defer wg.Done()
			wc := make([]Completion, 8)
			for j := range perQP {
				if err := c.qp.PostFetchAdd(uint64(j), c.mr.SGE(0, 8), counter.STag(), counter.TO(8), 1, 0, FlagSignaled); err != nil {
					errs <- err
					return
				}
				c.mr.Bytes()[1000+2*j], c.mr.Bytes()[1001+2*j] = byte(i), byte(j)
				if err := c.qp.PostSendBuf(uint64(j), c.mr.SGE(1000+2*j, 2), 0); err != nil {
					errs <- err
					return
				}
				for got := false; !got; {
					n := c.scq.Poll(wc)
					for _, x := range wc[:n] {
						if x.Status != StatusSuccess || x.Op != OpFetchAdd || x.ID != uint64(j) {
							errs <- fmt.Errorf("QP %d: completion %+v", i, x)
							return
						}
						origs <- x.AtomicOrig
						got = true
					}
					if n == 0 {
						if err := c.scq.Wait(ctx); err != nil {
							errs <- err
							return
						}
					}
				}
			}
		}()
		go func() { // responder: the messages arrive in order
			defer wg.Done()
			wc := make([]Completion, 4)
			for j := 0; j < perQP; {
				n := s.rcq.Poll(wc)
				for _, x := range wc[:n] {
					b := s.mr.Bytes()[2*j:]
					if x.Status != StatusSuccess || x.ID != uint64(j) || x.ByteLen != 2 || b[0] != byte(i) || b[1] != byte(j) {
						errs <- fmt.Errorf("QP %d: receive %d: %+v %v", i, j, x, b[:2])
						return
					}
					j++
				}
				if n == 0 {
					if err := s.rcq.Wait(ctx); err != nil {
						errs <- err
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	close(origs)
	seen := make([]bool, nQP*perQP)
	for o := range origs {
		if o >= uint64(len(seen)) || seen[o] {
			t.Fatalf("FetchAdd returned %d twice or out of range", o)
		}
		seen[o] = true
	}
	if got := binary.NativeEndian.Uint64(counter.Bytes()[8:]); got != nQP*perQP {
		t.Fatalf("counter %d, want %d", got, nQP*perQP)
	}
}

// TestNoGoroutineLeak: closing the devices stops every goroutine the
// connections started.
func TestNoGoroutineLeak(t *testing.T) {
	before := runtime.NumGoroutine()
	func() {
		dc, err := Open(DeviceConfig{ConnTimeout: 2 * time.Second})
		must(t, err)
		ds, err := Open(DeviceConfig{ConnTimeout: 2 * time.Second})
		must(t, err)
		for range 4 {
			c, s := newSide(t, dc, 4096, QPAttr{}), newSide(t, ds, 4096, QPAttr{})
			connect(t, c, s, ConnParam{}, ConnParam{})
			must(t, s.qp.PostRecvBuf(1, s.mr.SGE(0, 64)))
			must(t, c.qp.PostSendBuf(1, c.mr.SGE(0, 64), FlagSignaled))
			if _, err := c.qp.FetchAdd(ctxT(t), c.mr.SGE(0, 8), s.mr.STag(), s.mr.TO(8), 1, 0); err != nil {
				t.Fatal(err)
			}
			// Leave a receive outstanding on the initiator: Close flushes it.
			must(t, c.qp.PostRecvBuf(2, c.mr.SGE(64, 64)))
		}
		must(t, dc.Close())
		must(t, ds.Close())
	}()
	deadline := time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		buf := make([]byte, 1<<16)
		t.Fatalf("%d goroutines before, %d after Close:\n%s", before, n, buf[:runtime.Stack(buf, true)])
	}
}
