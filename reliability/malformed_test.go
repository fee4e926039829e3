//go:build linux

package reliability

import (
	"context"
	"testing"
	"time"

	"xrnic/internal/engine"
	"xrnic/internal/engine/enginetest"
	"xrnic/internal/netnstest"
	"xrnic/mem"
	"xrnic/transport/afxdp"
	"xrnic/wire/rdmap"
	"xrnic/wire/term"
)

// TestIntegrationMalformedAFXDP (issue 9, item 2): a raw iWARP peer
// (enginetest.Peer) over kernel TCP in namespace B replays malformed
// FPDUs against an afxdp listener in namespace A (XDP steering, AF_XDP,
// our TCP). Each must draw the right Terminate, and a healthy QP between
// the same two hosts keeps completing FetchAdds throughout.
func TestIntegrationMalformedAFXDP(t *testing.T) {
	e := newWireEnv(t, false)
	srv := openEngine(t, e.nsA, engine.Config{ConnTimeout: 5 * time.Second, FPDUTimeout: 500 * time.Millisecond}, &afxdp.Config{Iface: e.devA})
	cli := openEngine(t, e.nsB, engine.Config{ConnTimeout: 5 * time.Second}, nil)
	ln := listenEngine(t, e.nsA, srv, engine.ListenConfig{})
	addr := ln.Addr().String()
	spd := srv.AllocPD()
	sbuf := make([]byte, 4096)
	smr, err := srv.RegMR(sbuf, mem.MROptions{PD: spd, Access: mem.LocalWrite | mem.RemoteWrite | mem.RemoteAtomic})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// accept serves one connection request with a fresh QP.
	type served struct {
		qp *engine.QP
		cq *engine.CQ
	}
	accept := func() chan served {
		ch := make(chan served, 1)
		go func() {
			req, err := ln.Accept(ctx)
			if err != nil {
				t.Errorf("accept: %v", err)
				ch <- served{}
				return
			}
			cq, _ := srv.CreateCQ(32)
			qp, err := srv.CreateQP(engine.QPAttr{PD: spd, SendCQ: cq, RecvCQ: cq, SQDepth: 8, RQDepth: 8})
			// Two receives in the last KiB (the Sends below need them).
			for i := range 2 {
				if err == nil {
					err = qp.PostRecv(&engine.RecvWR{ID: uint64(i), SGL: []engine.SGE{{Addr: smr.BaseTO() + 3072 + uint64(i)*512, Length: 512, LKey: smr.STag()}}})
				}
			}
			if err == nil {
				err = req.Accept(ctx, qp, engine.ConnParams{})
			}
			if err != nil {
				t.Errorf("accept: %v", err)
				qp = nil
			}
			ch <- served{qp, cq}
		}()
		return ch
	}

	// The healthy QP: kernel transport in B to the afxdp server.
	acc := accept()
	p := newRestartPeer(t, e, cli, addr)
	defer p.qp.Close()
	healthy := (<-acc).qp
	if healthy == nil {
		t.FailNow()
	}
	defer healthy.Close()
	fa := 0
	fetchAdd := func(when string) {
		t.Helper()
		for range 10 {
			if err := p.qp.PostSend(&engine.SendWR{ID: uint64(fa), Op: engine.OpFetchAdd, Flags: engine.FlagSignaled,
				SGL: []engine.SGE{{Addr: p.mr.BaseTO(), Length: 8, LKey: p.mr.STag()}}, RemoteSTag: smr.STag(), RemoteTO: smr.BaseTO(), CompareAdd: 1}); err != nil {
				t.Fatalf("%s: %v", when, err)
			}
			wc := make([]engine.Completion, 1)
			wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
			for p.cq.Poll(wc) == 0 {
				if err := p.cq.Wait(wctx); err != nil {
					wcancel()
					t.Fatalf("%s: FetchAdd %d: no completion", when, fa)
				}
			}
			wcancel()
			if wc[0].Status != engine.StatusSuccess || wc[0].AtomicOrig != uint64(fa) {
				t.Fatalf("%s: FetchAdd %d: %v, original %d", when, fa, wc[0].Status, wc[0].AtomicOrig)
			}
			fa++
		}
	}
	fetchAdd("before")

	write := func(stag uint32) []byte {
		b := make([]byte, 14+32)
		rdmap.PutWrite(b, stag, smr.BaseTO()+64, true, 32)
		copy(b[14:], "MALFORMED FPDU FROM A RAW PEER!!")
		return b
	}
	cases := []struct {
		name  string
		frame func(p *enginetest.Peer) []byte
		want  *term.Error
	}{
		{"bad CRC", func(p *enginetest.Peer) []byte {
			f := p.FPDU(write(smr.STag()))
			f[len(f)/2] ^= 0x40
			return f
		}, term.MPACRCError},
		{"invalid STag", func(p *enginetest.Peer) []byte { return p.FPDU(write(smr.STag() ^ 0xffffff00)) }, term.DDPTaggedInvalidSTag},
		{"invalid QN", func(p *enginetest.Peer) []byte {
			b := make([]byte, 18+8)
			rdmap.PutSend(b, rdmap.OpSend, 0, 1, 0, true, 8)
			b[9] = 5 // QN 5 (big-endian word at 6..9)
			return p.FPDU(b)
		}, term.DDPUntaggedInvalidQN},
		// Untagged segments in order (issue: MO must be the bytes so far).
		{"Send first segment MO 4", func(p *enginetest.Peer) []byte {
			b := make([]byte, 18+4)
			rdmap.PutSend(b, rdmap.OpSend, 0, 1, 4, true, 4)
			return p.FPDU(b)
		}, term.DDPUntaggedInvalidMO},
		// A stalled peer pins nothing: a partial FPDU followed by silence
		// ends the QP after FPDUTimeout; a ULPDU_Length over the MULPDU of
		// the MSS we advertised (1460 at MTU 1500) is refused at once.
		{"partial FPDU, then silence", func(p *enginetest.Peer) []byte {
			return append([]byte{0x03, 0xF6}, make([]byte, 22)...) // 1,014 announced, 24 sent
		}, term.MPAConnectionLost},
		{"ULPDU longer than the MULPDU", func(p *enginetest.Peer) []byte {
			return append([]byte{0x07, 0xD0}, make([]byte, 22)...) // 2,000
		}, term.MPALocalCatastrophic},
		{"Send with a gap", func(p *enginetest.Peer) []byte {
			b := make([]byte, 18+4)
			rdmap.PutSend(b, rdmap.OpSend, 0, 1, 0, false, 4)
			first := append([]byte(nil), p.FPDU(b)...)
			rdmap.PutSend(b, rdmap.OpSend, 0, 1, 40, true, 4)
			return append(first, p.FPDU(b)...)
		}, term.DDPUntaggedInvalidMO},
	}
	for _, c := range cases {
		acc := accept()
		var rp *enginetest.Peer
		if err := netnstest.In(t, e.nsB, func() (err error) {
			rp, err = enginetest.Dial(ctx, addr, enginetest.Options{})
			return err
		}); err != nil {
			t.Fatalf("%s: raw peer: %v", c.name, err)
		}
		sv := <-acc
		qp := sv.qp
		if err := rp.WriteRaw(c.frame(rp)); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		tm, _, err := rp.ExpectTerminate(10 * time.Second)
		if err != nil || tm.Err != c.want {
			t.Errorf("%s: Terminate %v (%v), want %v", c.name, tm.Err, err, c.want)
		}
		if qp != nil {
			if qe := qp.Err(); qe != c.want {
				t.Errorf("%s: server QP error %v, want %v", c.name, qe, c.want)
			}
			// Both receives are flushed: none completes with bytes that
			// never arrived.
			wc := make([]engine.Completion, 4)
			if n := sv.cq.Poll(wc); n != 2 || wc[0].Status != engine.StatusWRFlushErr || wc[1].Status != engine.StatusWRFlushErr {
				t.Errorf("%s: receive completions %+v, want both flushed", c.name, wc[:n])
			}
			qp.Close()
		}
		rp.Close()
		fetchAdd("after " + c.name)
	}
	if string(sbuf[64:73]) == "MALFORMED" {
		t.Errorf("a malformed Write was placed")
	}
}
