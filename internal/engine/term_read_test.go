package engine

import (
	"bytes"
	"encoding/binary"
	"testing"
	"time"

	"xrnic/internal/engine/enginetest"
	"xrnic/wire/ddp"
	"xrnic/wire/rdmap"
	"xrnic/wire/term"
)

// TestTerminateReadRequestHeader: an error on an incoming Read Request
// (RFC 5040 §7.1) gets a Terminate with the DDP header and the Read
// Request's RDMA header, copied as received (R set).
func TestTerminateReadRequestHeader(t *testing.T) {
	s, p := rawPair(t, enginetest.Options{})
	seg := make([]byte, ddp.UntaggedHeaderLen+rdmap.ReadRequestLen)
	rp := rdmap.ReadParams{SinkSTag: 0x1234_5678, SinkTO: 0x0102_0304_0506_0708, Size: 64, SrcSTag: s.mr.STag() ^ 0x5A, SrcTO: 0x1111_2222_3333_4444}
	if _, err := rdmap.PutReadRequest(seg, 1, rp); err != nil {
		t.Fatal(err)
	}
	if err := p.Send(seg); err != nil {
		t.Fatal(err)
	}
	tm, _, err := p.ExpectTerminate(5 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if tm.Err != term.RDMAPInvalidSTag || tm.Layout != term.LayoutRFC || tm.Parts != term.PartM|term.PartD|term.PartR ||
		tm.SegLen != uint16(len(seg)) || !bytes.Equal(tm.DDPHeader, seg[:18]) || !bytes.Equal(tm.RDMAHeader, seg[18:]) {
		t.Fatalf("Terminate %v\nDDP % x\nRDMA % x", tm, tm.DDPHeader, tm.RDMAHeader)
	}
}

// TestTerminateReadSourceFailsMidway: when a Read source goes away after
// part of the response was sent, the Terminate carries the Read Request
// header updated to where the Read stopped (RFC 5040 §4.8): both TOs
// advanced by the bytes sent, the size what is left.
func TestTerminateReadSourceFailsMidway(t *testing.T) {
	n := bigReadLen() // more than TCP buffers: the response stays in progress
	s := newSide(t, n, QPAttr{})
	p := acceptRaw(t, s, enginetest.Options{RcvBuf: 256 << 10})
	const sinkSTag, sinkTO = 0x77, 0x1000
	rp := rdmap.ReadParams{SinkSTag: sinkSTag, SinkTO: sinkTO, Size: uint32(n), SrcSTag: s.mr.STag(), SrcTO: s.to(0)}
	rr := make([]byte, ddp.UntaggedHeaderLen+rdmap.ReadRequestLen)
	rdmap.PutReadRequest(rr, 1, rp)
	if err := p.Send(rr); err != nil {
		t.Fatal(err)
	}
	var got uint64
	u, err := p.Next(5 * time.Second)
	if err != nil || u[1]&0xF != byte(rdmap.OpReadResponse) {
		t.Fatalf("first Read Response segment: %x %v", u[:min(len(u), 14)], err)
	}
	got += uint64(len(u) - ddp.TaggedHeaderLen)
	// The source is invalidated while the response is in progress.
	if err := s.dev.Table().Invalidate(s.mr.STag(), s.pd); err != nil {
		t.Fatal(err)
	}
	var tm term.Terminate
	for {
		u, err := p.Next(10 * time.Second)
		if err != nil {
			t.Fatalf("after %d bytes: %v", got, err)
		}
		if u[0]&ddp.FlagTagged != 0 {
			if binary.BigEndian.Uint32(u[2:6]) != sinkSTag || binary.BigEndian.Uint64(u[6:14]) != sinkTO+got {
				t.Fatalf("Read Response at %d: % x", got, u[:14])
			}
			got += uint64(len(u) - ddp.TaggedHeaderLen)
			continue
		}
		if rdmap.Control(u[1]).OpCode() != rdmap.OpTerminate {
			t.Fatalf("unexpected segment % x", u[:min(len(u), 18)])
		}
		if tm, err = term.Decode(u[ddp.UntaggedHeaderLen:]); err != nil {
			t.Fatal(err)
		}
		break
	}
	if got == 0 || got >= uint64(n) {
		t.Fatalf("the Read stopped after %d of %d bytes: not midway", got, n)
	}
	t.Logf("the Read stopped after %d of %d bytes", got, n)
	if tm.Err != term.RDMAPInvalidSTag || tm.Parts != term.PartM|term.PartD|term.PartR || tm.SegLen != uint16(len(rr)) {
		t.Fatalf("Terminate %v", tm)
	}
	// The DDP header is the Read Request's: untagged L, RDMAP Read
	// Request, QN 1, MSN 1, MO 0.
	if !bytes.Equal(tm.DDPHeader, rr[:ddp.UntaggedHeaderLen]) {
		t.Errorf("DDP header % x, want % x", tm.DDPHeader, rr[:ddp.UntaggedHeaderLen])
	}
	h := rdmap.ReadRequest(tm.RDMAHeader)
	if len(tm.RDMAHeader) != rdmap.ReadRequestLen || h.SinkSTag() != sinkSTag || h.SinkTO() != sinkTO+got ||
		uint64(h.Size()) != uint64(n)-got || h.SrcSTag() != s.mr.STag() || h.SrcTO() != s.to(0)+got {
		t.Errorf("RDMA header after %d bytes: sink %#x/%#x size %d src %#x/%#x", got, h.SinkSTag(), h.SinkTO(), h.Size(), h.SrcSTag(), h.SrcTO())
	}
}
