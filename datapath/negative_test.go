package datapath

import (
	"bytes"
	"context"
	"encoding/binary"
	"testing"
	"time"

	"xrnic/datapath/datapathtest"
	"xrnic/wire/ddp"
	"xrnic/wire/rdmap"
	"xrnic/wire/term"
)

// rawPair connects a raw peer (initiator) to an engine QP (responder) with
// two receives posted.
func rawPair(t *testing.T, o datapathtest.Options) (*side, *datapathtest.Peer) {
	t.Helper()
	s := newSide(t, 1<<16, QPAttr{})
	mustRecv(t, s.qp, RecvWR{ID: 1, SGL: []SGE{s.sge(0, 64)}})
	mustRecv(t, s.qp, RecvWR{ID: 2, SGL: []SGE{s.sge(64, 64)}})
	ln, err := s.dev.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	errc := make(chan error, 1)
	go func() {
		req, err := ln.Accept(ctx)
		if err == nil {
			err = req.Accept(ctx, s.qp, ConnParams{})
		}
		errc <- err
	}()
	p, err := datapathtest.Dial(ctx, ln.Addr().String(), o)
	if err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return s, p
}

// wantTerminate builds the expected Terminate ULPDU independently: the
// untagged QN 2 MSN 1 header, the control word, and, when ddpHdr is given,
// the segment length and the offending DDP header.
func wantTerminate(layer, etype, code byte, seg []byte, hdrLen int) []byte {
	b := []byte{0x41, 0x47, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 1, 0, 0, 0, 0, layer<<4 | etype, code, 0, 0}
	if seg != nil {
		b[20] = 0xC0 // M, D
		b = binary.BigEndian.AppendUint16(b, uint16(len(seg)))
		b = append(b, seg[:hdrLen]...)
	}
	return b
}

func checkFlushed(t *testing.T, s *side) {
	t.Helper()
	rc := poll(t, s.rcq, 2)
	for _, c := range rc {
		if c.Status == StatusSuccess {
			t.Errorf("receive completed successfully after an error: %+v", c)
		}
	}
	if s.qp.State() != QPError {
		t.Errorf("state %v", s.qp.State())
	}
}

func TestNegativeRawPeer(t *testing.T) {
	cases := []struct {
		name string
		// build returns the segment to send and whether to corrupt the CRC
		build   func(s *side) ([]byte, bool)
		err     *term.Error
		hdrLen  int // 0: no DDP header expected
		counted bool
	}{
		{"bad CRC", func(s *side) ([]byte, bool) {
			b := make([]byte, 23)
			rdmap.PutSend(b, rdmap.OpSend, 0, 1, 0, true, 5)
			copy(b[18:], "hello")
			return b, true
		}, term.MPACRCError, 0, true},
		{"unknown opcode 0xC", func(s *side) ([]byte, bool) {
			b := make([]byte, 20)
			ddp.PutUntagged(b, true, 0x40|0xC, 0, 0, 1, 0)
			return b, false
		}, term.RDMAPUnexpectedOpCode, 18, true},
		{"misaligned atomic", func(s *side) ([]byte, bool) {
			b := make([]byte, 70)
			rdmap.PutAtomicRequest(b, 1, rdmap.AtomicParams{AOpCode: rdmap.AOpFetchAdd, RequestID: 0x11223344, STag: s.mr.STag(), TO: s.to(4100), AddSwap: 1, CompareMask: ^uint64(0)})
			return b, false
		}, term.RDMAPCatastrophicStream, 18, true},
		{"invalid STag write", func(s *side) ([]byte, bool) {
			b := make([]byte, 14+5)
			rdmap.PutWrite(b, s.mr.STag()^0x5A, s.to(0), true, 5)
			return b, false
		}, term.DDPTaggedInvalidSTag, 14, true},
		{"write out of bounds", func(s *side) ([]byte, bool) {
			b := make([]byte, 14+16)
			rdmap.PutWrite(b, s.mr.STag(), s.to(1<<16-8), true, 16)
			return b, false
		}, term.DDPTaggedBaseBounds, 14, true},
		{"send too long", func(s *side) ([]byte, bool) {
			b := make([]byte, 18+65)
			rdmap.PutSend(b, rdmap.OpSend, 0, 1, 0, true, 65)
			return b, false
		}, term.DDPUntaggedTooLong, 18, true},
		{"wrong MSN", func(s *side) ([]byte, bool) {
			b := make([]byte, 18+1)
			rdmap.PutSend(b, rdmap.OpSend, 0, 5, 0, true, 1)
			return b, false
		}, term.DDPUntaggedMSNRange, 18, true},
		{"immediate of 7 bytes", func(s *side) ([]byte, bool) {
			b := make([]byte, 18+7)
			ddp.PutUntagged(b, true, 0x48, 0, 0, 1, 0)
			return b, false
		}, term.RDMAPOperationUnspecified, 18, true},
		{"read of unregistered source", func(s *side) ([]byte, bool) {
			b := make([]byte, 46)
			rdmap.PutReadRequest(b, 1, rdmap.ReadParams{SinkSTag: 1, Size: 8, SrcSTag: s.mr.STag() ^ 1})
			return b, false
		}, term.RDMAPInvalidSTag, 18, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s, p := rawPair(t, datapathtest.Options{})
			seg, badCRC := tc.build(s)
			fpdu := p.FPDU(seg)
			if badCRC {
				fpdu[len(fpdu)-1] ^= 0xFF
			}
			if err := p.WriteRaw(fpdu); err != nil {
				t.Fatal(err)
			}
			tm, ulpdu, err := p.ExpectTerminate(5 * time.Second)
			if err != nil {
				t.Fatalf("no Terminate: %v", err)
			}
			if tm.Err != tc.err {
				t.Fatalf("Terminate %v, want %v", tm, tc.err)
			}
			var want []byte
			if tc.hdrLen > 0 {
				want = wantTerminate(byte(tc.err.Layer), tc.err.EType, tc.err.Code, seg, tc.hdrLen)
				if tc.err == term.RDMAPInvalidSTag { // Read Request: RDMA header too
					want[20] |= 0x20
					want = append(want, seg[18:46]...)
				}
			} else {
				want = wantTerminate(byte(tc.err.Layer), tc.err.EType, tc.err.Code, nil, 0)
			}
			if !bytes.Equal(ulpdu, want) {
				t.Fatalf("Terminate bytes\n got %x\nwant %x", ulpdu, want)
			}
			if err := p.ExpectEOF(5 * time.Second); err != nil {
				t.Fatalf("stream not closed after the Terminate: %v", err)
			}
			checkFlushed(t, s)
			st := s.qp.Stats()
			if len(st.TermsSent) != 1 || st.TermsSent[0].Err != tc.err || st.TermsSent[0].Count != 1 {
				t.Errorf("TermsSent %+v", st.TermsSent)
			}
			if tc.err == term.RDMAPCatastrophicStream && binary.NativeEndian.Uint64(s.buf[4096:]) != 0 {
				t.Error("misaligned atomic touched memory")
			}
		})
	}
}

// TestPeerWithoutAtomics: a peer that answers atomics with Terminate
// RDMAP/0x2/0x06 (like siw) makes the probe report "not supported".
func TestProbeAtomics(t *testing.T) {
	c, s := connectPair(t, 4096, QPAttr{}, ConnParams{}, ConnParams{})
	res, err := c.qp.ProbeAtomics(context.Background(), s.mr.STag(), s.to(64))
	if res != ProbeSupported || err != nil {
		t.Fatalf("probe %v %v", res, err)
	}
	if c.scq.Len() != 0 {
		t.Fatal("probe produced a completion")
	}

	// A peer that knows no extensions (like siw): our QP is the responder
	// of a raw initiator that answers the Atomic Request with Terminate
	// RDMAP/0x2/0x06.
	s2, p := rawPair(t, datapathtest.Options{})
	zw := make([]byte, 14)
	rdmap.PutWrite(zw, 1, 0, true, 0)
	if err := p.Send(zw); err != nil { // first FPDU: lets the responder send
		t.Fatal(err)
	}
	type result struct {
		r   ProbeResult
		err error
	}
	resc := make(chan result, 1)
	go func() {
		r, err := s2.qp.ProbeAtomics(context.Background(), 0x1234, 0)
		resc <- result{r, err}
	}()
	u, err := p.Next(5 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if rdmap.Control(u[1]).OpCode() != rdmap.OpAtomicRequest {
		t.Fatalf("probe sent %x", u)
	}
	h := rdmap.AtomicRequest(u[18:])
	if h.AOpCode() != rdmap.AOpFetchAdd || h.AddSwap() != 0 || h.CompareMask() != ^uint64(0) {
		t.Fatalf("probe request %x", u)
	}
	tb := make([]byte, 128)
	n, err := rdmap.PutTerminate(tb, term.RDMAPUnexpectedOpCode, u)
	if err != nil {
		t.Fatal(err)
	}
	p.Send(tb[:n])
	got := <-resc
	if got.r != ProbeNotSupported || got.err != ErrNoAtomics {
		t.Fatalf("probe %v %v", got.r, got.err)
	}
}
