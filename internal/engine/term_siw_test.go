package engine

import (
	"context"
	"encoding/binary"
	"testing"
	"time"

	"xrnic/internal/engine/enginetest"
	"xrnic/wire/ddp"
	"xrnic/wire/rdmap"
	"xrnic/wire/term"
)

// Linux siw's Terminates, built byte by byte from its definitions
// (drivers/infiniband/sw/siw/iwarp.h struct iwarp_terminate, siw_qp.c
// siw_send_terminate; docs/spec/interop.md#siw-terminate), not by package
// term.

// siwTermULPDU is the ULPDU siw_send_terminate sends: the untagged DDP
// header of iwarp_pktinfo[RDMAP_TERMINATE] (DDP_FLAG_LAST, DDP and RDMAP
// version 1, opcode 7: 0x4147), QN 2, MSN 1, MO 0; then the control word
// (little-endian bitfields layer:4 etype:4 ecode:8 flag_m flag_d flag_r)
// and what it attaches.
func siwTermULPDU(layer, etype, ecode uint32, m, d, r bool, attach []byte) []byte {
	b := []byte{0x41, 0x47, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 1, 0, 0, 0, 0}
	v := layer&0xF | (etype&0xF)<<4 | (ecode&0xFF)<<8
	for i, f := range []bool{m, d, r} {
		if f {
			v |= 1 << (16 + i)
		}
	}
	b = binary.LittleEndian.AppendUint32(b, v)
	return append(b, attach...)
}

// siwAttachTagged is siw's attachment for a DDP error on a tagged segment:
// struct iwarp_ctrl_tagged from the offending FPDU, its MPA length field
// replaced by the payload length (ULPDU length - 14).
func siwAttachTagged(ulpdu []byte) []byte {
	b := binary.BigEndian.AppendUint16(nil, uint16(len(ulpdu)-ddp.TaggedHeaderLen))
	return append(b, ulpdu[:ddp.TaggedHeaderLen]...)
}

// TestSiwTerminateProbe: siw answers the RFC 7306 probe's FetchAdd with
// RDMAP / Remote Operation / Unexpected OpCode in its layout, 20 06 00 00,
// which the RFC layout reads as MPA Insufficient IRD. The probe must say
// "not supported".
func TestSiwTerminateProbe(t *testing.T) {
	s, p := rawResponder(t, ConnParams{}, Config{})
	type result struct {
		r   ProbeResult
		err error
	}
	resc := make(chan result, 1)
	go func() {
		r, err := s.qp.ProbeAtomics(context.Background(), 0x1234, 0)
		resc <- result{r, err}
	}()
	for {
		u, err := p.Next(5 * time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if rdmap.Control(u[1]).OpCode() == rdmap.OpAtomicRequest {
			break
		}
	}
	tu := siwTermULPDU(0, 2, 0x06, false, false, false, nil)
	if got := tu[18:]; got[0] != 0x20 || got[1] != 0x06 || got[2] != 0 || got[3] != 0 {
		t.Fatalf("siw word % x", got)
	}
	if err := p.Send(tu); err != nil {
		t.Fatal(err)
	}
	var got result
	select {
	case got = <-resc:
	case <-time.After(5 * time.Second):
		t.Fatal("probe did not return")
	}
	if got.r != ProbeNotSupported || got.err != ErrNoAtomics {
		t.Fatalf("probe %v %v, want %v %v", got.r, got.err, ProbeNotSupported, ErrNoAtomics)
	}
	if pt := s.qp.PeerTerminate(); pt != term.RDMAPUnexpectedOpCode {
		t.Errorf("peer Terminate %v", pt)
	}
	st := s.qp.Stats()
	if st.TermsRecvSiw != 1 || len(st.TermsRecv) != 1 || st.TermsRecv[0].Err != term.RDMAPUnexpectedOpCode {
		t.Errorf("stats: siw %d, received %+v", st.TermsRecvSiw, st.TermsRecv)
	}
}

// TestSiwTerminateSetupError: before we sent anything, the same kind of
// bare word is a connection setup error. siw's MPA Insufficient IRD is
// 02 06 00 00, Unexpected OpCode in the RFC layout; a responder that has
// sent nothing cannot have sent an unexpected opcode.
func TestSiwTerminateSetupError(t *testing.T) {
	s, p := rawPair(t, enginetest.Options{})
	if err := p.Send(siwTermULPDU(2, 0, 0x06, false, false, false, nil)); err != nil {
		t.Fatal(err)
	}
	if err := p.ExpectEOF(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	if pt := s.qp.PeerTerminate(); pt != term.MPAInsufficientIRD {
		t.Errorf("peer Terminate %v, want %v", pt, term.MPAInsufficientIRD)
	}
	if n := s.qp.Stats().TermsRecvSiw; n != 1 {
		t.Errorf("siw-layout Terminates %d", n)
	}
}

// TestSiwTerminateWriteInvalidSTag: siw refuses a Write to an STag it does
// not know with DDP / tagged / Invalid STag, M and D set in its layout
// (11 00 03 00), the segment length and the 14-byte DDP header. The Write
// in progress completes with the remote access status, not as a local
// catastrophic error.
func TestSiwTerminateWriteInvalidSTag(t *testing.T) {
	n := bigReadLen() // more than TCP buffers: the Write stays in progress
	s := newSide(t, n, QPAttr{})
	p := acceptRaw(t, s, enginetest.Options{RcvBuf: 256 << 10})
	zw := make([]byte, ddp.TaggedHeaderLen)
	rdmap.PutWrite(zw, 1, 0, true, 0)
	if err := p.Send(zw); err != nil { // first FPDU: the responder may send
		t.Fatal(err)
	}
	const bad = 0xBAD0_0001
	mustPost(t, s.qp, SendWR{ID: 5, Op: OpWrite, Flags: FlagSignaled, SGL: []SGE{s.sge(0, n)}, RemoteSTag: bad, RemoteTO: 0x1000})
	u, err := p.Next(5 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if u[0]&ddp.FlagTagged == 0 || binary.BigEndian.Uint32(u[2:6]) != bad {
		t.Fatalf("first segment % x", u[:ddp.TaggedHeaderLen])
	}
	tu := siwTermULPDU(1, 1, 0x00, true, true, false, siwAttachTagged(u))
	if got := tu[18:22]; got[0] != 0x11 || got[1] != 0 || got[2] != 0x03 || got[3] != 0 {
		t.Fatalf("siw word % x", got)
	}
	if err := p.Send(tu); err != nil {
		t.Fatal(err)
	}
	c := poll(t, s.scq, 1)[0]
	if c.ID != 5 || c.Status != StatusRemAccessErr || c.Err != term.DDPTaggedInvalidSTag {
		t.Fatalf("Write completed %+v (%v), want %v with %v", c, c.Status, StatusRemAccessErr, term.DDPTaggedInvalidSTag)
	}
	if pt, qe := s.qp.PeerTerminate(), s.qp.Err(); pt != term.DDPTaggedInvalidSTag || qe != term.DDPTaggedInvalidSTag {
		t.Errorf("peer Terminate %v, QP error %v", pt, qe)
	}
	if st := s.qp.Stats(); st.TermsRecvSiw != 1 {
		t.Errorf("siw-layout Terminates %d", st.TermsRecvSiw)
	}
}

// TestSiwTerminateSetupPhase: a bare word that reads as RDMAP Remote
// Operation one way and as an RFC 6581 setup error the other is the setup
// error while the stream is in setup (the first FPDU received, at most one
// sent), and keeps its RFC reading after that.
func TestSiwTerminateSetupPhase(t *testing.T) {
	for _, tc := range []struct {
		name   string
		writes int
		want   *term.Error
		siw    uint64
	}{
		{"answer to the first FPDU", 1, term.MPANoMatchingRTR, 1},
		{"after two FPDUs", 2, term.RDMAPCatastrophicStream, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, p := rawResponder(t, ConnParams{}, Config{})
			for i := 0; i < tc.writes; i++ {
				mustPost(t, s.qp, SendWR{ID: uint64(i), Op: OpWrite, SGL: []SGE{s.sge(0, 8)}, RemoteSTag: 0x1234, RemoteTO: 0})
				if _, err := p.Next(5 * time.Second); err != nil {
					t.Fatal(err)
				}
			}
			// siw's MPA No Matching RTR (2/0/0x07): 02 07 00 00, which
			// the RFC layout reads as RDMAP Catastrophic, stream.
			if err := p.Send(siwTermULPDU(2, 0, 0x07, false, false, false, nil)); err != nil {
				t.Fatal(err)
			}
			if err := p.ExpectEOF(5 * time.Second); err != nil {
				t.Fatal(err)
			}
			if pt := s.qp.PeerTerminate(); pt != tc.want {
				t.Errorf("peer Terminate %v, want %v", pt, tc.want)
			}
			if n := s.qp.Stats().TermsRecvSiw; n != tc.siw {
				t.Errorf("siw-layout Terminates %d, want %d", n, tc.siw)
			}
		})
	}
}
