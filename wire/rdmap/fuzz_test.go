package rdmap

import (
	"bytes"
	"testing"

	"xrnic/wire/ddp"
	"xrnic/wire/term"
	"xrnic/wire/wiretest/vectors"
)

// FuzzClassify feeds arbitrary DDP segments to Classify. A segment it
// rejects must yield a Terminate that decodes to the same error; a segment it
// accepts must re-encode to the same bytes with the matching encoder (up to
// the fields the encoders legitimately normalise: reserved bits and the
// Invalidate STag of messages that have none).
func FuzzClassify(f *testing.F) {
	for _, v := range vectors.Kind(f, "fpdu", fpduNames...) {
		f.Add(ulpdu(f, v.Name))
	}
	f.Add([]byte{0x41, 0x4A, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := ddp.Parse(b)
		if err != nil {
			return
		}
		Classify(s, true)
		op, e := Classify(s, false)
		if op != Control(b[1]).OpCode() {
			t.Fatalf("opcode %v, byte %#x", op, b[1])
		}
		if e != nil {
			buf := make([]byte, 128)
			n, err := PutTerminate(buf, e, b)
			if err != nil {
				t.Fatalf("PutTerminate(%v): %v", e, err)
			}
			ts, _ := ddp.Parse(buf[:n])
			if top, te := Classify(ts, false); top != OpTerminate || te != nil {
				t.Fatalf("our Terminate classifies as %v, %v", top, te)
			}
			d, err := term.Decode(ts.Payload())
			if err != nil || d.Err != e || d.Parts != term.Include(e, b) {
				t.Fatalf("Terminate decode %+v %v", d, err)
			}
			return
		}
		out := make([]byte, len(b)+1)
		var n int
		switch op {
		case OpWrite, OpReadResponse:
			h := s.Tagged()
			if op == OpWrite {
				n, err = PutWrite(out, h.STag(), h.TO(), s.Last(), len(s.Payload()))
			} else {
				n, err = PutReadResponse(out, h.STag(), h.TO(), s.Last(), len(s.Payload()))
			}
			copy(out[ddp.TaggedHeaderLen:], s.Payload())
		case OpSend, OpSendInvalidate, OpSendSE, OpSendSEInvalidate:
			u := s.Untagged()
			n, err = PutSend(out, op, u.RsvdULPWord(), u.MSN(), u.MO(), s.Last(), len(s.Payload()))
			copy(out[ddp.UntaggedHeaderLen:], s.Payload())
		case OpReadRequest:
			n, err = PutReadRequest(out, s.Untagged().MSN(), ReadRequest(s.Payload()).Params())
		case OpAtomicRequest:
			h := AtomicRequest(s.Payload())
			n, err = PutAtomicRequest(out, s.Untagged().MSN(), h.Params())
			if err == nil {
				AtomicRequest(out[ddp.UntaggedHeaderLen:]).SetReserved(h.Reserved())
			}
		case OpAtomicResponse:
			h := AtomicResponse(s.Payload())
			n, err = PutAtomicResponse(out, s.Untagged().MSN(), h.RequestID(), h.Value())
		case OpImmediate, OpImmediateSE:
			n, err = PutImmediate(out, op, s.Untagged().MSN(), Immediate(s.Payload()).Data())
		case OpTerminate:
			d, derr := term.Decode(s.Payload())
			if derr != nil || d.Parts&term.PartR != 0 && d.RDMAHeader == nil || d.Parts&(term.PartM|term.PartD) == term.PartM {
				return // well-classified but not a Terminate header we would write
			}
			if s.Untagged().MSN() != TerminateMSN {
				return // the engine checks the MSN
			}
			n, err = PutTerminateParts(out, d.Err, d.Parts, d.SegLen, d.DDPHeader, d.RDMAHeader)
			if err == nil {
				term.Header(out[ddp.UntaggedHeaderLen:]).SetControl(term.Header(s.Payload()).Control())
			}
		default:
			t.Fatalf("accepted %v", op)
		}
		if err != nil || n != len(b) {
			t.Fatalf("%v: re-encode n=%d err=%v, len %d", op, n, err, len(b))
		}
		// Normalised fields: DDP Rsvd bits, RDMAP Rsv bits, Invalidate STag
		// where none is meaningful.
		if out[0]&^0x3C != b[0]&^0x3C || out[1]&^0x30 != b[1]&^0x30 {
			t.Fatalf("%v: control bytes %#x %#x vs %#x %#x", op, out[0], out[1], b[0], b[1])
		}
		out[0], out[1] = b[0], b[1]
		if !s.IsTagged() && !op.Props().Invalidate {
			if ddp.Untagged(out).RsvdULPWord() != 0 {
				t.Fatalf("%v: encoder wrote an Invalidate STag", op)
			}
			copy(out[2:6], b[2:6])
		}
		if !bytes.Equal(out[:n], b) {
			t.Fatalf("%v round trip\n got % x\nwant % x", op, out[:n], b)
		}
	})
}

func FuzzReadRequest(f *testing.F) {
	f.Add(ulpdu(f, "read-rtr")[18:])
	f.Add(make([]byte, 27))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := ParseReadRequest(b)
		if (err != nil) != (len(b) < ReadRequestLen) {
			t.Fatalf("len %d: %v", len(b), err)
		}
		if err != nil {
			return
		}
		out := make([]byte, ReadRequestLen)
		if _, err := PutReadRequestHeader(out, h.Params()); err != nil || !bytes.Equal(out, b[:ReadRequestLen]) {
			t.Fatalf("round trip % x vs % x", out, b[:ReadRequestLen])
		}
	})
}

func FuzzAtomicRequest(f *testing.F) {
	f.Add(ulpdu(f, "atomic-fetchadd")[18:])
	f.Add(make([]byte, 51))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := ParseAtomicRequest(b)
		if (err != nil) != (len(b) < AtomicRequestLen) {
			t.Fatalf("len %d: %v", len(b), err)
		}
		if err != nil {
			return
		}
		_ = h.AOpCode().String()
		out := make([]byte, AtomicRequestLen)
		if _, err := PutAtomicRequestHeader(out, h.Params()); err != nil {
			t.Fatal(err)
		}
		if AtomicRequest(out).Reserved() != 0 {
			t.Fatal("encoder wrote reserved bits")
		}
		AtomicRequest(out).SetReserved(h.Reserved())
		if !bytes.Equal(out, b[:AtomicRequestLen]) {
			t.Fatalf("round trip % x vs % x", out, b[:AtomicRequestLen])
		}
	})
}

func FuzzAtomicResponse(f *testing.F) {
	f.Add(ulpdu(f, "atomic-response")[18:])
	f.Add(make([]byte, 11))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := ParseAtomicResponse(b)
		if (err != nil) != (len(b) < AtomicResponseLen) {
			t.Fatalf("len %d: %v", len(b), err)
		}
		if err != nil {
			return
		}
		out := make([]byte, AtomicResponseLen)
		if _, err := PutAtomicResponseHeader(out, h.RequestID(), h.Value()); err != nil || !bytes.Equal(out, b[:AtomicResponseLen]) {
			t.Fatalf("round trip % x vs % x", out, b[:AtomicResponseLen])
		}
	})
}

func FuzzImmediate(f *testing.F) {
	f.Add(ulpdu(f, "immediate")[18:])
	f.Add(make([]byte, 7))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := ParseImmediate(b)
		if (err != nil) != (len(b) < ImmediateLen) {
			t.Fatalf("len %d: %v", len(b), err)
		}
		if err != nil {
			return
		}
		out := make([]byte, ImmediateLen)
		if _, err := PutImmediateHeader(out, h.Data()); err != nil || !bytes.Equal(out, b[:ImmediateLen]) {
			t.Fatalf("round trip % x vs % x", out, b[:ImmediateLen])
		}
	})
}
