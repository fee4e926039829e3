package siw

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"xrnic/verbs"
	"xrnic/wire/term"
)

// each runs f for both transports and both directions, with the peer
// started with peerArgs; when f returns true the case ends with an
// orderly close from our side (the peer sees DISCONNECTED, no RST).
func each(t *testing.T, peerArgs []string, f func(ctx context.Context, t *testing.T, c *conn) bool) {
	needGuest(t)
	for _, tr := range transports {
		for _, dir := range directions {
			t.Run(fmt.Sprintf("%s/%s", tr, dir), func(t *testing.T) {
				g := needGuest(t)
				ctx := ctxT(t, 3*time.Minute)
				h := newHost(t, g, tr)
				capt := startCapture(t, g)
				c, pp := connectPeer(ctx, t, h, dir, verbs.ConnParam{}, peerArgs...)
				if !f(ctx, t, c) || t.Failed() {
					return
				}
				if err := c.qp.Disconnect(ctx); err != nil {
					t.Errorf("disconnect: %v", err)
				}
				if r := pp.end(ctx); !r.OK() || !strings.Contains(r.Stdout, "DISCONNECTED 0") {
					t.Fatalf("peer: %s", r)
				}
				capt.check(ctx, true, false)
			})
		}
	}
}

// TestLargeMessages: Writes and Reads of 1 byte to 16 MiB both ways.
func TestLargeMessages(t *testing.T) {
	each(t, nil, func(ctx context.Context, t *testing.T, c *conn) bool {
		exercise(ctx, t, c, []int{16 << 20, 4<<20 + 3})
		return true
	})
}

// TestSendWithInvalidate: we invalidate siw's read-only region with a
// Send (siw reports it; our Read of it then fails with the remote access
// error its Terminate carries), and siw's Send with Invalidate of our STag
// reaches us. Debian's siw (6.1 kernel, rdma-core 44) puts Invalidate
// STag 0 in that Send's header (seen on the wire): we then answer as RFC
// 5040 §7.2 prescribes for an STag that does not exist, RDMAP Remote
// Operation 0x09, and flush the receive; with the real STag the receive
// reports the invalidation and the region refuses access.
func TestSendWithInvalidate(t *testing.T) {
	each(t, nil, func(ctx context.Context, t *testing.T, c *conn) bool {
		if err := c.qp.PostSendInv(c.id(), c.mr.SGE(0, 10), c.peer.roKey, 0); err != nil {
			t.Fatal(err)
		}
		got := c.must(ctx, "LAST")
		if !strings.HasPrefix(got, fmt.Sprintf("10 %s ", sum(c.mr.Bytes()[:10]))) {
			t.Fatalf("Send with Invalidate to siw: LAST %q", got)
		}
		// siw invalidates the region but its completion says so only
		// with IBV_WC_WITH_INV and the rkey, which Debian's siw leaves out
		// (wc_flags 0): the Read of the region must fail either way.
		err := c.qp.Read(ctx, c.mr.SGE(0, 8), c.peer.roKey, c.peer.roAddr)
		var we *verbs.WCError
		if !errors.As(err, &we) || we.Status != verbs.StatusRemAccessErr {
			t.Fatalf("Read of the invalidated region: %v, want a remote access error", err)
		}
		t.Logf("siw: LAST %q; the Read of the region it invalidated: %v", got, err)
		return false // the QP is in error: no orderly close
	})
	each(t, nil, func(ctx context.Context, t *testing.T, c *conn) bool {
		inv, err := c.h.pd.RegMR(make([]byte, 4096), verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteInvalidate)
		if err != nil {
			t.Fatal(err)
		}
		c.must(ctx, "FILL 0 100 5")
		rid := c.id()
		if err := c.qp.PostRecvBuf(rid, c.mr.SGE(0, 4096)); err != nil {
			t.Fatal(err)
		}
		if err := c.send(ctx, fmt.Sprintf("SEND 0 100 INV %d", inv.STag())); err != nil {
			t.Fatal(err)
		}
		wc, err := wait(ctx, c.rcq, rid)
		if err != nil {
			t.Fatal(err)
		}
		if wc.Status == verbs.StatusSuccess {
			if wc.Flags&verbs.WCWithInv == 0 || wc.InvalidatedSTag != inv.STag() || wc.ByteLen != 100 || inv.Valid() {
				t.Fatalf("Send with Invalidate from siw: %+v, region valid %v", wc, inv.Valid())
			}
			return true
		}
		var te *term.Error
		if wc.Status != verbs.StatusWRFlushErr || !errors.As(c.qp.Err(), &te) || !te.Is(term.RDMAPOperationNoInvalidate) || !inv.Valid() {
			t.Fatalf("Send with Invalidate from siw: %+v (%s), region valid %v", wc, c.why(), inv.Valid())
		}
		t.Logf("siw's Send with Invalidate named no STag of ours: we terminated with %v", te)
		return false
	})
}

// TestSolicited: a Send with Solicited Event from siw wakes our CQ armed
// for solicited completions only, a plain one does not; siw receives our
// Sends with Solicited Event. (siw's own solicited-only notification in
// the guest is not checked: no CQ event was seen there for our SE Sends.)
func TestSolicited(t *testing.T) {
	each(t, nil, func(ctx context.Context, t *testing.T, c *conn) bool {
		pattern(9, c.mr.Bytes()[:64])
		if err := c.qp.PostSendBuf(c.id(), c.mr.SGE(0, 64), verbs.FlagSolicited); err != nil {
			t.Fatal(err)
		}
		if got := c.must(ctx, "LAST"); !strings.HasPrefix(got, "64 "+sum(c.mr.Bytes()[:64])) {
			t.Fatalf("LAST %q", got)
		}
		c.must(ctx, "FILL 0 32 1")
		r1, r2 := c.id(), c.id()
		for _, id := range []uint64{r1, r2} {
			if err := c.qp.PostRecvBuf(id, c.mr.SGE(1<<20, 4096)); err != nil {
				t.Fatal(err)
			}
		}
		c.rcq.Notify(true)
		drain(c.rcq.Events())
		if err := c.send(ctx, "SEND 0 32"); err != nil {
			t.Fatal(err)
		}
		for c.rcq.Len() == 0 && ctx.Err() == nil {
			time.Sleep(time.Millisecond)
		}
		select {
		case <-c.rcq.Events():
			t.Fatal("an unsolicited Send woke a CQ armed for solicited completions")
		case <-time.After(200 * time.Millisecond):
		}
		if err := c.send(ctx, "SEND 0 32 SE"); err != nil {
			t.Fatal(err)
		}
		select {
		case <-c.rcq.Events():
		case <-time.After(10 * time.Second):
			t.Fatal("a solicited Send did not wake the CQ")
		}
		for _, id := range []uint64{r1, r2} {
			if wc, err := wait(ctx, c.rcq, id); err != nil || wc.Status != verbs.StatusSuccess || wc.ByteLen != 32 {
				t.Fatalf("receive: %+v %v", wc, err)
			}
		}
		return true
	})
}

func drain(ch <-chan struct{}) {
	for {
		select {
		case <-ch:
		default:
			return
		}
	}
}

// TestConcurrent: Reads and Writes in both directions at once on one QP,
// many outstanding on each side.
func TestConcurrent(t *testing.T) {
	each(t, nil, func(ctx context.Context, t *testing.T, c *conn) bool {
		const n, size = 200, 32 << 10
		buf := c.mr.Bytes()
		pattern(3, buf[:8<<20])
		// The peer Writes into our upper half and Reads our lower half
		// while we Write into its upper half and Read its read-only region.
		reply := c.id()
		if err := c.qp.PostRecvBuf(reply, c.ctl.SGE(ctlSize, ctlSize)); err != nil {
			t.Fatal(err)
		}
		if err := c.send(ctx, fmt.Sprintf("BURST W %d %d %d %d", n, size, c.mr.TO(8<<20), c.mr.STag())); err != nil {
			t.Fatal(err)
		}
		ids := map[uint64]bool{}
		post := func(i int) {
			id := c.id()
			ids[id] = true
			var err error
			if i%2 == 0 {
				err = c.qp.PostWrite(id, c.mr.SGE((i*size)%(4<<20), size), c.peer.rwKey, c.peer.rwAddr+8<<20+uint64((i*size)%(4<<20)), verbs.FlagSignaled)
			} else {
				err = c.qp.PostRead(id, c.mr.SGE(4<<20+(i*size)%(4<<20), size), c.peer.roKey, c.peer.roAddr+uint64((i*size)%(4<<20)), verbs.FlagSignaled)
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		// 32 outstanding at a time, 400 in all, half Reads.
		posted, done := 0, 0
		var wc [16]verbs.Completion
		for done < 2*n {
			for posted < 2*n && posted-done < 32 {
				post(posted)
				posted++
			}
			k := c.scq.Poll(wc[:])
			for _, w := range wc[:k] {
				if !ids[w.ID] || w.Status != verbs.StatusSuccess {
					t.Fatalf("completion %+v (%s)", w, c.why())
				}
				delete(ids, w.ID)
				done++
			}
			if k == 0 {
				if err := c.scq.Wait(ctx); err != nil {
					t.Fatalf("%d of %d done: %v", done, 2*n, err)
				}
			}
		}
		if wc, err := wait(ctx, c.rcq, reply); err != nil || wc.Status != verbs.StatusSuccess ||
			!strings.HasPrefix(string(c.ctl.Bytes()[ctlSize:ctlSize+int(wc.ByteLen)]), "OK burst") {
			t.Fatalf("the peer's burst: %+v %v (%s)", wc, err, c.why())
		}
		// What we read is siw's read-only pattern (seed 7) at each offset.
		ro := make([]byte, 4<<20+size)
		pattern(7, ro)
		for i := 1; i < 2*n; i += 2 {
			off := (i * size) % (4 << 20)
			if !bytes.Equal(buf[4<<20+off:4<<20+off+size], ro[off:off+size]) {
				t.Fatalf("Read %d: data differs", i)
			}
		}
		// siw Reads our region while we Write megabyte messages: a Read
		// Response cutting one of our Writes makes siw abort the
		// connection ("packet intersection"); build with -tags
		// xrnic_interleave to see this case fail.
		const rn, rsize, wn, wsize = 16, 256 << 10, 16, 1 << 20
		reply = c.id()
		if err := c.qp.PostRecvBuf(reply, c.ctl.SGE(ctlSize, ctlSize)); err != nil {
			t.Fatal(err)
		}
		if err := c.send(ctx, fmt.Sprintf("BURST R %d %d %d %d", rn, rsize, c.mr.TO(0), c.mr.STag())); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < wn; i++ {
			if err := c.qp.PostWrite(c.id(), c.mr.SGE((i%4)*wsize, wsize), c.peer.rwKey, c.peer.rwAddr+8<<20+uint64((i%4)*wsize), verbs.FlagSignaled); err != nil {
				t.Fatal(err)
			}
		}
		for got := 0; got < wn; {
			k := c.scq.Poll(wc[:])
			for _, w := range wc[:k] {
				if w.Status != verbs.StatusSuccess {
					t.Fatalf("Write while siw Reads: %+v (%s)", w, c.why())
				}
			}
			got += k
			if k == 0 {
				if err := c.scq.Wait(ctx); err != nil {
					t.Fatalf("%d of %d Writes: %v (%s)", got, wn, err, c.why())
				}
			}
		}
		if wc, err := wait(ctx, c.rcq, reply); err != nil || wc.Status != verbs.StatusSuccess ||
			!strings.HasPrefix(string(c.ctl.Bytes()[ctlSize:ctlSize+int(wc.ByteLen)]), "OK burst") {
			t.Fatalf("siw's Reads: %+v %v (%s)", wc, err, c.why())
		}
		if got := c.must(ctx, "SUM %d %d", rsize, rsize); got != sum(buf[:rsize]) {
			t.Fatalf("what siw read: %s, have %s", got, sum(buf[:rsize]))
		}
		return true
	})
}

// TestManyQPs: 64 QPs to one siw peer at once, each doing a Write, a Read
// and a Send, then closing in order.
func TestManyQPs(t *testing.T) {
	needGuest(t)
	const nqp = 64
	for _, tr := range transports {
		t.Run(string(tr), func(t *testing.T) {
			g := needGuest(t)
			ctx := ctxT(t, 3*time.Minute)
			h := newHost(t, g, tr)
			capt := startCapture(t, g)
			pp := startPeer(ctx, t, g, "-s", "-p", fmt.Sprint(peerPort), "-n", fmt.Sprint(nqp), "-b", "65536", "-r", "4096")
			waitListening(ctx, t, g)
			conns := make([]*conn, nqp)
			for i := range conns {
				conns[i] = h.newConnSize(8, 1<<16)
				if err := conns[i].dial(ctx, verbs.ConnParam{}); err != nil {
					t.Fatalf("QP %d: %v (peer: %s)", i, err, pp.kill())
				}
			}
			var wg sync.WaitGroup
			errs := make(chan error, nqp)
			for i, c := range conns {
				wg.Add(1)
				go func() {
					defer wg.Done()
					b := c.mr.Bytes()
					pattern(uint32(i), b[:4096])
					if err := c.qp.Write(ctx, c.mr.SGE(0, 4096), c.peer.rwKey, c.peer.rwAddr); err != nil {
						errs <- fmt.Errorf("QP %d write: %w", i, err)
						return
					}
					r, err := c.do(ctx, "SUM 0 4096")
					if err != nil || r != "OK "+sum(b[:4096]) {
						errs <- fmt.Errorf("QP %d: SUM %q %v", i, r, err)
						return
					}
					if err := c.qp.Read(ctx, c.mr.SGE(8192, 4096), c.peer.rwKey, c.peer.rwAddr); err != nil || !bytes.Equal(b[8192:12288], b[:4096]) {
						errs <- fmt.Errorf("QP %d read: %v", i, err)
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
			for _, c := range conns {
				if err := c.qp.Disconnect(ctx); err != nil {
					t.Errorf("disconnect: %v", err)
				}
			}
			r := pp.end(ctx)
			if !r.OK() || strings.Count(r.Stdout, "DISCONNECTED") != nqp {
				t.Fatalf("peer: %s", r)
			}
			capt.check(ctx, true, false)
		})
	}
}

// TestPeerCloses: siw disconnects; our QP reports the orderly close (not
// an error), flushes the receive that can no longer complete, and no RST
// is sent.
func TestPeerCloses(t *testing.T) {
	each(t, nil, func(ctx context.Context, t *testing.T, c *conn) bool {
		exercise(ctx, t, c, []int{100})
		rid := c.id()
		if err := c.qp.PostRecvBuf(rid, c.mr.SGE(0, 4096)); err != nil {
			t.Fatal(err)
		}
		if err := c.send(ctx, "DISCONNECT"); err != nil {
			t.Fatal(err)
		}
		wc, err := wait(ctx, c.rcq, rid)
		if err != nil || wc.Status != verbs.StatusWRFlushErr {
			t.Fatalf("receive after the peer's close: %+v %v", wc, err)
		}
		deadline := time.Now().Add(10 * time.Second)
		for c.qp.Disconnected() == nil && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if !errors.Is(c.qp.Disconnected(), verbs.ErrPeerClosed) || c.qp.Err() != nil {
			t.Fatalf("after the peer's close: Disconnected %v, Err %v", c.qp.Disconnected(), c.qp.Err())
		}
		return true // Disconnect completes our half
	})
}

// TestTerminates: errors in both directions, each surfacing as the RFCs
// prescribe: our Write or Read to a bad STag, out of bounds or without the
// right completes with the remote access error siw's Terminate carries
// (decoded in siw's layout); siw's to ours gets our Terminate and siw
// reports a remote access error.
func TestTerminates(t *testing.T) {
	needGuest(t)
	type tc struct {
		name string
		ours bool // the bad access is ours (else siw's)
		op   string
		stag func(c *conn) uint32
		to   func(c *conn) uint64
		n    int
		want *term.Error // the Terminate the target sends
	}
	cases := []tc{
		{"write-bad-stag", true, "write", func(c *conn) uint32 { return c.peer.rwKey ^ 0x00ff0000 }, func(c *conn) uint64 { return c.peer.rwAddr }, 64, term.DDPTaggedInvalidSTag},
		{"write-out-of-bounds", true, "write", func(c *conn) uint32 { return c.peer.rwKey }, func(c *conn) uint64 { return c.peer.rwAddr + uint64(c.peer.rwLen) - 8 }, 64, term.DDPTaggedBaseBounds},
		{"write-read-only", true, "write", func(c *conn) uint32 { return c.peer.roKey }, func(c *conn) uint64 { return c.peer.roAddr }, 64, nil},
		{"read-bad-stag", true, "read", func(c *conn) uint32 { return c.peer.rwKey ^ 0x00ff0000 }, func(c *conn) uint64 { return c.peer.rwAddr }, 64, term.RDMAPInvalidSTag},
		{"siw-write-bad-stag", false, "WRITE", func(c *conn) uint32 { return c.mr.STag() ^ 0x00ff0000 }, func(c *conn) uint64 { return c.mr.TO(0) }, 64, term.DDPTaggedInvalidSTag},
		{"siw-write-read-only", false, "WRITE", func(c *conn) uint32 { return c.ro.STag() }, func(c *conn) uint64 { return c.ro.TO(0) }, 64, nil},
		{"siw-read-out-of-bounds", false, "READ", func(c *conn) uint32 { return c.ro.STag() }, func(c *conn) uint64 { return c.ro.TO(c.ro.Len() - 8) }, 64, term.RDMAPBaseBounds},
	}
	for _, tr := range transports {
		for _, k := range cases {
			t.Run(fmt.Sprintf("%s/%s", tr, k.name), func(t *testing.T) {
				g := needGuest(t)
				ctx := ctxT(t, time.Minute)
				h := newHost(t, g, tr)
				capt := startCapture(t, g)
				c, pp := connectPeer(ctx, t, h, "dial", verbs.ConnParam{})
				exercise(ctx, t, c, []int{10})
				if k.ours {
					var err error
					if k.op == "write" {
						// A Write completes when TCP has it (RFC 5040 §5.1);
						// the Terminate fails the next request (a Read of the
						// good region, which the peer serves in order).
						if err = c.qp.Write(ctx, c.mr.SGE(0, k.n), k.stag(c), k.to(c)); err != nil {
							t.Fatalf("write: %v", err)
						}
						err = c.qp.Read(ctx, c.mr.SGE(0, 8), c.peer.rwKey, c.peer.rwAddr)
						var we *verbs.WCError
						if !errors.As(err, &we) || (we.Status != verbs.StatusRemAccessErr && we.Status != verbs.StatusWRFlushErr) {
							t.Fatalf("the Read after the bad Write: %v (%s)", err, c.why())
						}
					} else {
						err = c.qp.Read(ctx, c.mr.SGE(0, k.n), k.stag(c), k.to(c))
						var we *verbs.WCError
						if !errors.As(err, &we) || we.Status != verbs.StatusRemAccessErr {
							t.Fatalf("%s: %v, want a remote access error (%s)", k.op, err, c.why())
						}
					}
					pt := c.qp.PeerTerminate()
					if pt == nil || (k.want != nil && !pt.Is(k.want)) {
						t.Fatalf("siw's Terminate %v, want %v", pt, k.want)
					}
					t.Logf("%s: %v; siw's Terminate: %v; siw-layout Terminates: %d", k.op, err, pt, c.qp.Stats().TermsRecvSiw)
					if c.qp.Stats().TermsRecvSiw == 0 {
						t.Error("siw's Terminate was not recognised as siw's layout")
					}
				} else {
					if err := c.send(ctx, fmt.Sprintf("%s 0 %d %d %d", k.op, k.n, k.to(c), k.stag(c))); err != nil {
						t.Fatal(err)
					}
					deadline := time.Now().Add(10 * time.Second)
					for c.qp.Err() == nil && time.Now().Before(deadline) {
						time.Sleep(10 * time.Millisecond)
					}
					qerr := c.qp.Err()
					var te *term.Error
					if !errors.As(qerr, &te) || (k.want != nil && !te.Is(k.want)) {
						t.Fatalf("our QP: %v, want our Terminate %v", qerr, k.want)
					}
					t.Logf("we terminated with %v", te)
				}
				r := pp.kill()
				t.Logf("peer: %s", r.Stdout)
				// siw's application sees its QP end: the failed Read is
				// flushed with everything else (siw reports no remote
				// access error for a Terminate), then DISCONNECTED.
				if !k.ours && (!strings.Contains(r.Stdout, "DISCONNECTED 0") ||
					(k.op == "READ" && !strings.Contains(r.Stdout, "WC_ERR 0 read") && !strings.Contains(r.Stdout, "FLUSHED 0 17"))) {
					t.Errorf("siw's application did not see its QP end:\n%s", r.Stdout)
				}
				capt.check(ctx, true, true)
			})
		}
	}
}

// TestProbe: siw has no RFC 7306; the capability probe must say "not
// supported" (siw's Terminate: RDMAP Remote Operation, Unexpected OpCode,
// in its own layout).
func TestProbe(t *testing.T) {
	needGuest(t)
	for _, tr := range transports {
		t.Run(string(tr), func(t *testing.T) {
			g := needGuest(t)
			ctx := ctxT(t, time.Minute)
			h := newHost(t, g, tr)
			capt := startCapture(t, g)
			c, pp := connectPeer(ctx, t, h, "dial", verbs.ConnParam{})
			defer pp.kill()
			defer capt.check(ctx, true, true)
			res, err := c.qp.ProbeAtomics(ctx, c.peer.rwKey, c.peer.rwAddr)
			if res != verbs.ProbeNotSupported || !errors.Is(err, verbs.ErrNoAtomics) {
				t.Fatalf("probe: %v %v (%s)", res, err, c.why())
			}
			t.Logf("probe: %v (%v); siw's Terminate %v", res, err, c.qp.PeerTerminate())
		})
	}
}
