package engine

import (
	"testing"
	"time"

	"xrnic/internal/engine/enginetest"
	"xrnic/wire/ddp"
	"xrnic/wire/rdmap"
	"xrnic/wire/term"
)

// TestTerminateMSNMatchesNothing: Linux siw's terminated DDP header of a
// failed Read Request carries MSN 1 whatever the request's MSN was. The
// Terminate still names the Read Request queue, so the oldest outstanding
// Read gets the remote access error rather than a flush.
func TestTerminateMSNMatchesNothing(t *testing.T) {
	s := newSide(t, 1<<16, QPAttr{})
	p := acceptRaw(t, s, enginetest.Options{})
	zw := make([]byte, ddp.TaggedHeaderLen)
	rdmap.PutWrite(zw, 1, 0, true, 0)
	if err := p.Send(zw); err != nil { // first FPDU: the responder may send
		t.Fatal(err)
	}
	// Two Reads (MSN 1 and 2); the peer answers the first, then fails the
	// second with a header saying MSN 7.
	mustPost(t, s.qp, SendWR{ID: 1, Op: OpRead, Flags: FlagSignaled, SGL: []SGE{s.sge(0, 64)}, RemoteSTag: 0x1234})
	mustPost(t, s.qp, SendWR{ID: 2, Op: OpRead, Flags: FlagSignaled, SGL: []SGE{s.sge(64, 64)}, RemoteSTag: 0xBAD0})
	var reqs [][]byte
	for len(reqs) < 2 {
		u, err := p.Next(5 * time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if u[1]&0xF == byte(rdmap.OpReadRequest) {
			reqs = append(reqs, append([]byte(nil), u...))
		}
	}
	answerRead(t, p, rdmap.ReadRequest(reqs[0][ddp.UntaggedHeaderLen:]))
	hdr := append([]byte(nil), reqs[1][:ddp.UntaggedHeaderLen]...)
	hdr[10], hdr[11], hdr[12], hdr[13] = 0, 0, 0, 7
	tu := siwTermULPDU(0, 1, 0x00, true, true, false, append([]byte{0, 0}, hdr...))
	if err := p.Send(tu); err != nil {
		t.Fatal(err)
	}
	cs := poll(t, s.scq, 2)
	if cs[0].ID != 1 || cs[0].Status != StatusSuccess {
		t.Fatalf("first Read %+v", cs[0])
	}
	if cs[1].ID != 2 || cs[1].Status != StatusRemAccessErr || cs[1].Err != term.RDMAPInvalidSTag {
		t.Fatalf("second Read %+v, want %v with %v", cs[1], StatusRemAccessErr, term.RDMAPInvalidSTag)
	}
}
