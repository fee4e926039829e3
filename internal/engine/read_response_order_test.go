package engine

import (
	"testing"
	"time"

	"xrnic/wire/ddp"
	"xrnic/wire/rdmap"
	"xrnic/wire/term"
)

// TestReadResponseInOrderOnly: Read Responses whose lengths add up to the
// sink but that overlap or arrive out of order do not complete the Read:
// each must continue at the sink offset reached so far (the sink checks of
// RFC 5040 §5.2, as rxReadResponse applies them), else DDP tagged
// base/bounds (1/1/0x01) and a bad-response completion. The cases of
// TestReadResponseMustCoverSink all come up short, which the length check
// at the last segment catches on its own; these only the offset check
// can: "overlapping" would complete a 64-byte Read whose last 16 bytes
// never arrived.
func TestReadResponseInOrderOnly(t *testing.T) {
	type part struct {
		off, n int
		last   bool
	}
	for _, tc := range []struct {
		name  string
		parts []part
	}{
		{"overlapping", []part{{0, 32, false}, {16, 32, true}}},
		{"out of order", []part{{32, 32, false}, {0, 32, true}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, p := rawResponder(t, ConnParams{}, Config{})
			fill(s.buf, 0x5A)
			mustPost(t, s.qp, SendWR{ID: 7, Op: OpRead, Flags: FlagSignaled, SGL: []SGE{s.sge(0, 64)}, RemoteSTag: 0x1234, RemoteTO: 0})
			u, err := p.Next(5 * time.Second)
			if err != nil || u[1]&0xF != byte(rdmap.OpReadRequest) {
				t.Fatalf("Read Request: %x %v", u[:min(len(u), 14)], err)
			}
			rr := rdmap.ReadRequest(u[ddp.UntaggedHeaderLen:])
			for _, pt := range tc.parts {
				b := make([]byte, ddp.TaggedHeaderLen+pt.n)
				if _, err := rdmap.PutReadResponse(b, rr.SinkSTag(), rr.SinkTO()+uint64(pt.off), pt.last, pt.n); err != nil {
					t.Fatal(err)
				}
				if err := p.Send(b); err != nil {
					t.Fatal(err)
				}
			}
			cs := poll(t, s.scq, 1)
			if cs[0].ID != 7 || cs[0].Status == StatusSuccess {
				t.Fatalf("Read completed %+v from responses %v, want an error status", cs[0], tc.parts)
			}
			if cs[0].Status != StatusBadRespErr {
				t.Errorf("Read status %v, want %v", cs[0].Status, StatusBadRespErr)
			}
			tm, _, err := p.ExpectTerminate(5 * time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if e := tm.Err; e == nil || e.Layer != term.LayerDDP || e.EType != 1 || e.Code != 0x01 {
				t.Errorf("Terminate %v, want DDP tagged base/bounds 1/1/0x01", tm)
			}
		})
	}
}
