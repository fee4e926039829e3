package rdmap

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"xrnic/wire/ddp"
	"xrnic/wire/term"
	"xrnic/wire/wiretest/vectors"
)

// fpduNames are the CRC-on, marker-free FPDU vectors.
var fpduNames = []string{"send-hello", "send-se-inv", "write-hello", "write-rtr", "read-rtr",
	"atomic-fetchadd", "atomic-response", "immediate", "terminate"}

// ulpdu returns the ULPDU of an FPDU vector of wire/testdata/vectors.txt
// (docs/spec/vectors.md#fpdus).
func ulpdu(t testing.TB, name string) []byte {
	t.Helper()
	return vectors.ULPDU(t, name)
}

// TestVectorsEncode: each encoder reproduces the vectors' ULPDU bytes.
func TestVectorsEncode(t *testing.T) {
	hello := func(b []byte, n int, err error) (int, error) {
		if err == nil {
			copy(b[n-5:n], "hello")
		}
		return n, err
	}
	tests := []struct {
		name string
		put  func(b []byte) (int, error)
	}{
		{"send-hello", func(b []byte) (int, error) {
			n, err := PutSend(b, OpSend, 0, 1, 0, true, 5)
			return hello(b, n, err)
		}},
		{"send-se-inv", func(b []byte) (int, error) {
			n, err := PutSend(b, OpSendSEInvalidate, 0xCAFE0001, 2, 0, true, 5)
			return hello(b, n, err)
		}},
		{"write-hello", func(b []byte) (int, error) {
			n, err := PutWrite(b, 0x1234, 0x1000, true, 5)
			return hello(b, n, err)
		}},
		{"write-rtr", func(b []byte) (int, error) { return PutWrite(b, 1, 0, true, 0) }},
		{"read-rtr", func(b []byte) (int, error) { return PutReadRequest(b, 1, ReadParams{SrcSTag: 1}) }},
		{"atomic-fetchadd", func(b []byte) (int, error) {
			return PutAtomicRequest(b, 1, AtomicParams{AOpCode: AOpFetchAdd, RequestID: 0x11223344, STag: 0xABCD0100, TO: 0x1000,
				AddSwap: 1, AddSwapMask: 0, Compare: 0, CompareMask: FetchAddCompareMask})
		}},
		{"atomic-response", func(b []byte) (int, error) { return PutAtomicResponse(b, 1, 0x11223344, 0x2A) }},
		{"immediate", func(b []byte) (int, error) { return PutImmediate(b, OpImmediate, 1, [8]byte{1, 2, 3, 4, 5, 6, 7, 8}) }},
		{"terminate", func(b []byte) (int, error) {
			return PutTerminate(b, term.RDMAPCatastrophicStream, ulpdu(t, "atomic-fetchadd"))
		}},
	}
	for _, tt := range tests {
		want := ulpdu(t, tt.name)
		b := make([]byte, 128)
		for i := range b {
			b[i] = 0xEE // encoders must write every byte they claim
		}
		n, err := tt.put(b)
		if err != nil || !bytes.Equal(b[:n], want) {
			t.Errorf("%s:\n got % x (%v)\nwant % x", tt.name, b[:n], err, want)
		}
		// Too small by one byte: ErrShortBuffer.
		if _, err := tt.put(make([]byte, len(want)-1)); err != ErrShortBuffer {
			t.Errorf("%s: short buffer gives %v", tt.name, err)
		}
	}
	var names []string
	for _, tt := range tests {
		names = append(names, tt.name)
	}
	vectors.Kind(t, "fpdu", names...) // every FPDU vector has an encoder test
}

// TestVectorsParse: parsing the vectors' ULPDUs yields the documented fields.
func TestVectorsParse(t *testing.T) {
	parse := func(name string, want OpCode) ddp.Segment {
		t.Helper()
		s, err := ddp.Parse(ulpdu(t, name))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		op, e := Classify(s, false)
		if op != want || e != nil {
			t.Fatalf("%s: Classify = %v, %v; want %v", name, op, e, want)
		}
		if Control(s.RsvdULP()).Version() != 1 {
			t.Fatalf("%s: RV %d", name, Control(s.RsvdULP()).Version())
		}
		return s
	}
	s := parse("send-hello", OpSend)
	if u := s.Untagged(); u.QN() != 0 || u.MSN() != 1 || u.MO() != 0 || u.RsvdULPWord() != 0 || string(s.Payload()) != "hello" {
		t.Error("send-hello fields")
	}
	s = parse("send-se-inv", OpSendSEInvalidate)
	if u := s.Untagged(); u.QN() != 0 || u.MSN() != 2 || u.RsvdULPWord() != 0xCAFE0001 || string(s.Payload()) != "hello" {
		t.Error("send-se-inv fields")
	}
	s = parse("write-hello", OpWrite)
	if h := s.Tagged(); h.STag() != 0x1234 || h.TO() != 0x1000 || string(s.Payload()) != "hello" {
		t.Error("write-hello fields")
	}
	s = parse("write-rtr", OpWrite)
	if h := s.Tagged(); h.STag() != 1 || h.TO() != 0 || len(s.Payload()) != 0 {
		t.Error("write-rtr fields")
	}
	s = parse("read-rtr", OpReadRequest)
	rr, err := ParseReadRequest(s.Payload())
	if err != nil || s.Untagged().QN() != 1 || s.Untagged().MSN() != 1 ||
		rr.Params() != (ReadParams{SinkSTag: 0, SinkTO: 0, Size: 0, SrcSTag: 1, SrcTO: 0}) {
		t.Errorf("read-rtr fields %+v", rr.Params())
	}
	s = parse("atomic-fetchadd", OpAtomicRequest)
	ar, err := ParseAtomicRequest(s.Payload())
	if err != nil || s.Untagged().QN() != 1 || s.Untagged().MSN() != 1 || ar.Reserved() != 0 || ar.Params() != (AtomicParams{
		AOpCode: AOpFetchAdd, RequestID: 0x11223344, STag: 0xABCD0100, TO: 0x1000,
		AddSwap: 1, AddSwapMask: 0, Compare: 0, CompareMask: 0xFFFFFFFFFFFFFFFF}) {
		t.Errorf("atomic fields %+v", ar.Params())
	}
	s = parse("atomic-response", OpAtomicResponse)
	resp, err := ParseAtomicResponse(s.Payload())
	if err != nil || s.Untagged().QN() != 3 || s.Untagged().MSN() != 1 || resp.RequestID() != 0x11223344 || resp.Value() != 0x2A {
		t.Error("atomic-response fields")
	}
	s = parse("immediate", OpImmediate)
	im, err := ParseImmediate(s.Payload())
	if err != nil || s.Untagged().QN() != 0 || s.Untagged().MSN() != 1 || im.Data() != [8]byte{1, 2, 3, 4, 5, 6, 7, 8} {
		t.Error("immediate fields")
	}
	s = parse("terminate", OpTerminate)
	d, err := term.Decode(s.Payload())
	if err != nil || s.Untagged().QN() != 2 || s.Untagged().MSN() != 1 || d.Err != term.RDMAPCatastrophicStream ||
		d.Parts != term.PartM|term.PartD || d.SegLen != 70 || !bytes.Equal(d.DDPHeader, ulpdu(t, "atomic-fetchadd")[:18]) || d.RDMAHeader != nil {
		t.Errorf("terminate fields %+v %v", d, err)
	}
}

func TestOpCodes(t *testing.T) {
	names := []string{"Write", "Read Request", "Read Response", "Send", "Send with Invalidate", "Send with SE",
		"Send with SE and Invalidate", "Terminate", "Immediate Data", "Immediate Data with SE", "Atomic Request",
		"Atomic Response", "reserved", "reserved", "reserved", "reserved"}
	for op := OpCode(0); op < 16; op++ {
		if op.String() != names[op] {
			t.Errorf("%d: %q", op, op.String())
		}
		if c := MakeControl(op); c.OpCode() != op || c.Version() != 1 || c.Rsv() != 0 || uint8(c) != 0x40|uint8(op) {
			t.Errorf("MakeControl(%v) = %#x", op, c)
		}
	}
	// RFC 5040 Fig. 4/5, RFC 7306 §4.1: tagged, QN, header, payload, invalidate.
	want := map[OpCode]Props{
		0x0: {true, true, 0, 0, true, false},
		0x1: {true, false, 1, 28, false, false},
		0x2: {true, true, 0, 0, true, false},
		0x3: {true, false, 0, 0, true, false},
		0x4: {true, false, 0, 0, true, true},
		0x5: {true, false, 0, 0, true, false},
		0x6: {true, false, 0, 0, true, true},
		0x7: {true, false, 2, 4, false, false},
		0x8: {true, false, 0, 8, false, false},
		0x9: {true, false, 0, 8, false, false},
		0xA: {true, false, 1, 52, false, false},
		0xB: {true, false, 3, 12, false, false},
	}
	for op := OpCode(0); op < 16; op++ {
		if got := op.Props(); got != want[op] {
			t.Errorf("%v: %+v, want %+v", op, got, want[op])
		}
	}
	for a := AOpCode(0); a < 16; a++ {
		if a.Valid() != (a == 0 || a == 2) {
			t.Errorf("AOpCode %d valid=%v", a, a.Valid())
		}
	}
	if AOpFetchAdd.String() != "FetchAdd" || AOpCmpSwap.String() != "CmpSwap" || AOpCode(1).String() != "reserved" || AOpCode(7).String() != "unassigned" {
		t.Error("AOpCode strings")
	}
}

// seg builds a segment by hand (not with the encoders): DDP control,
// RDMAP control, QN (untagged) and payload.
func seg(tagged, last bool, dv, rv uint8, op OpCode, qn, mo uint32, payload []byte) ddp.Segment {
	var b []byte
	c := dv
	if tagged {
		c |= 0x80
	}
	if last {
		c |= 0x40
	}
	r := rv<<6 | uint8(op)
	if tagged {
		b = append(b, c, r, 0, 0, 0, 9, 0, 0, 0, 0, 0, 0, 0x10, 0)
	} else {
		b = append(b, c, r, 0, 0, 0, 0, byte(qn>>24), byte(qn>>16), byte(qn>>8), byte(qn), 0, 0, 0, 1,
			byte(mo>>24), byte(mo>>16), byte(mo>>8), byte(mo))
	}
	b = append(b, payload...)
	s, err := ddp.Parse(b)
	if err != nil {
		panic(err)
	}
	return s
}

// goodPayload is a well-formed DDP payload for each opcode.
func goodPayload(op OpCode) []byte {
	switch op {
	case OpReadRequest:
		return make([]byte, 28)
	case OpTerminate:
		return []byte{0x20, 0x02, 0, 0} // MPA CRC error, no parts
	case OpImmediate, OpImmediateSE:
		return []byte{1, 2, 3, 4, 5, 6, 7, 8}
	case OpAtomicRequest:
		p := make([]byte, 52)
		p[3] = 2 // CmpSwap
		return p
	case OpAtomicResponse:
		return make([]byte, 12)
	}
	return []byte("hello")
}

// TestClassifyMatrix: opcode 0x0-0xF × tagged/untagged × QN 0-4 × RV 0-3,
// with and without RDMAC (version 0) acceptance. Expectations restate RFC
// 5040 Fig. 4 and RFC 7306 §4.1 directly.
func TestClassifyMatrix(t *testing.T) {
	taggedOps := map[OpCode]bool{0x0: true, 0x2: true}
	untaggedQN := map[OpCode]uint32{0x1: 1, 0x3: 0, 0x4: 0, 0x5: 0, 0x6: 0, 0x7: 2, 0x8: 0, 0x9: 0, 0xA: 1, 0xB: 3}
	count := 0
	for op := OpCode(0); op < 16; op++ {
		for _, tagged := range []bool{false, true} {
			for qn := uint32(0); qn <= 4; qn++ {
				for rv := uint8(0); rv < 4; rv++ {
					for _, rdmac := range []bool{false, true} {
						var want *term.Error
						wantQN, isUntagged := untaggedQN[op]
						switch {
						case !tagged && qn > 3:
							want = term.DDPUntaggedInvalidQN
						case rv != 1 && !(rdmac && rv == 0):
							want = term.RDMAPInvalidVersion
						case tagged && !taggedOps[op], !tagged && !isUntagged:
							want = term.RDMAPUnexpectedOpCode
						case !tagged && qn != wantQN:
							want = term.DDPUntaggedInvalidQN
						}
						s := seg(tagged, true, 1, rv, op, qn, 0, goodPayload(op))
						gotOp, got := Classify(s, rdmac)
						if got != want || gotOp != op {
							t.Errorf("op %#x tagged=%v qn=%d rv=%d rdmac=%v: got %v, %v; want %v", uint8(op), tagged, qn, rv, rdmac, gotOp, got, want)
						}
						count++
					}
				}
			}
		}
	}
	if count != 16*2*5*4*2 {
		t.Fatal(count)
	}
}

func TestClassifyDDPVersion(t *testing.T) {
	for dv := uint8(0); dv < 4; dv++ {
		for _, rdmac := range []bool{false, true} {
			ok := dv == 1 || (rdmac && dv == 0)
			_, e := Classify(seg(true, true, dv, 1, OpWrite, 0, 0, nil), rdmac)
			if (e == nil) != ok || (!ok && e != term.DDPTaggedInvalidVersion) {
				t.Errorf("tagged dv=%d rdmac=%v: %v", dv, rdmac, e)
			}
			// DDP version is checked before RDMAP version.
			_, e = Classify(seg(false, true, dv, 3, OpSend, 0, 0, nil), rdmac)
			if ok && e != term.RDMAPInvalidVersion || !ok && e != term.DDPUntaggedInvalidVersion {
				t.Errorf("untagged dv=%d rdmac=%v: %v", dv, rdmac, e)
			}
		}
	}
}

func TestClassifyLengths(t *testing.T) {
	un := term.RDMAPOperationUnspecified
	tests := []struct {
		name string
		op   OpCode
		n    int
		want *term.Error
	}{
		{"imm 0", OpImmediate, 0, un}, {"imm 7", OpImmediate, 7, un}, {"imm 8", OpImmediate, 8, nil}, {"imm 9", OpImmediate, 9, un},
		{"immSE 0", OpImmediateSE, 0, un}, {"immSE 7", OpImmediateSE, 7, un}, {"immSE 8", OpImmediateSE, 8, nil}, {"immSE 9", OpImmediateSE, 9, un},
		{"read 0", OpReadRequest, 0, un}, {"read 27", OpReadRequest, 27, un}, {"read 28", OpReadRequest, 28, nil}, {"read 29", OpReadRequest, 29, un},
		{"atomic 51", OpAtomicRequest, 51, un}, {"atomic 52", OpAtomicRequest, 52, nil}, {"atomic 53", OpAtomicRequest, 53, un},
		{"resp 11", OpAtomicResponse, 11, un}, {"resp 12", OpAtomicResponse, 12, nil}, {"resp 13", OpAtomicResponse, 13, un},
		{"term 3", OpTerminate, 3, un}, {"term 4", OpTerminate, 4, nil}, {"term 52", OpTerminate, 52, nil}, {"term 53", OpTerminate, 53, un},
		{"send 0", OpSend, 0, nil}, {"send 1000", OpSend, 1000, nil}, {"sendInv 0", OpSendInvalidate, 0, nil},
	}
	for _, tt := range tests {
		_, got := Classify(seg(false, true, 1, 1, tt.op, tt.op.Props().QN, 0, make([]byte, tt.n)), false)
		if got != tt.want {
			t.Errorf("%s: %v, want %v", tt.name, got, tt.want)
		}
	}
	// Fixed-size messages are single segments: L clear / MO non-zero.
	for _, op := range []OpCode{OpReadRequest, OpTerminate, OpImmediate, OpImmediateSE, OpAtomicRequest, OpAtomicResponse} {
		if _, got := Classify(seg(false, false, 1, 1, op, op.Props().QN, 0, goodPayload(op)), false); got != un {
			t.Errorf("%v not last: %v", op, got)
		}
		if _, got := Classify(seg(false, true, 1, 1, op, op.Props().QN, 8, goodPayload(op)), false); got != term.DDPUntaggedInvalidMO {
			t.Errorf("%v MO 8: %v", op, got)
		}
	}
	// Multi-segment messages: any L, any MO.
	for _, op := range []OpCode{OpSend, OpSendSE, OpSendInvalidate, OpSendSEInvalidate} {
		if _, got := Classify(seg(false, false, 1, 1, op, 0, 4096, nil), false); got != nil {
			t.Errorf("%v middle segment: %v", op, got)
		}
	}
	if _, got := Classify(seg(true, false, 1, 1, OpReadResponse, 0, 0, nil), false); got != nil {
		t.Errorf("read response middle segment: %v", got)
	}
}

func TestClassifyAOpCode(t *testing.T) {
	for a := 0; a < 16; a++ {
		p := make([]byte, 52)
		p[3] = byte(a)
		var want *term.Error
		if a != 0 && a != 2 {
			want = term.RDMAPUnexpectedOpCode
		}
		if _, got := Classify(seg(false, true, 1, 1, OpAtomicRequest, 1, 0, p), false); got != want {
			t.Errorf("AOpCode %d: %v, want %v", a, got, want)
		}
		p[0], p[1], p[2], p[3] = 0xFF, 0xFF, 0xFF, 0xF0|byte(a) // reserved bits ignored
		if _, got := Classify(seg(false, true, 1, 1, OpAtomicRequest, 1, 0, p), false); got != want {
			t.Errorf("AOpCode %d with reserved bits: %v, want %v", a, got, want)
		}
	}
}

func TestEncoderErrors(t *testing.T) {
	b := make([]byte, 128)
	for op := OpCode(0); op < 16; op++ {
		_, err := PutSend(b, op, 0, 1, 0, true, 0)
		isSend := op >= OpSend && op <= OpSendSEInvalidate
		if isSend != (err == nil) || (!isSend && err != ErrOpCode) {
			t.Errorf("PutSend(%v): %v", op, err)
		}
		_, err = PutImmediate(b, op, 1, [8]byte{})
		isImm := op == OpImmediate || op == OpImmediateSE
		if isImm != (err == nil) || (!isImm && err != ErrOpCode) {
			t.Errorf("PutImmediate(%v): %v", op, err)
		}
	}
	if _, err := PutSend(b, OpSend, 0, 1, 0, true, -1); err != ErrLength {
		t.Error("negative length")
	}
	if _, err := PutWrite(b, 0, 0, true, -1); err != ErrLength {
		t.Error("negative length")
	}
	if _, err := PutWrite(b, 0, 0, true, 115); err != ErrShortBuffer {
		t.Error("write short")
	}
	if n, err := PutWrite(b, 0, 0, true, 114); err != nil || n != 128 {
		t.Error("write exact")
	}
	// Send/Send with SE never carry an Invalidate STag.
	PutSend(b, OpSend, 0xDEADBEEF, 1, 0, true, 0)
	if ddp.Untagged(b).RsvdULPWord() != 0 {
		t.Error("Send wrote an Invalidate STag")
	}
	PutSend(b, OpSendInvalidate, 0xDEADBEEF, 1, 0, true, 0)
	if ddp.Untagged(b).RsvdULPWord() != 0xDEADBEEF {
		t.Error("Send with Invalidate lost the STag")
	}
	if _, err := PutTerminate(b[:20], term.MPACRCError, nil); err != ErrShortBuffer {
		t.Errorf("terminate short: %v", err)
	}
	if _, err := PutTerminate(b[:40], term.DDPUntaggedInvalidQN, ulpdu(t, "send-hello")); err != ErrShortBuffer {
		t.Errorf("terminate short: %v", err)
	}
	if _, err := PutTerminate(b, nil, nil); err != term.ErrNilError {
		t.Errorf("terminate nil: %v", err)
	}
	for _, f := range []func([]byte) (int, error){
		func(b []byte) (int, error) { return PutReadRequestHeader(b, ReadParams{}) },
		func(b []byte) (int, error) { return PutAtomicRequestHeader(b, AtomicParams{}) },
		func(b []byte) (int, error) { return PutAtomicResponseHeader(b, 0, 0) },
		func(b []byte) (int, error) { return PutImmediateHeader(b, [8]byte{}) },
	} {
		n, _ := f(b)
		if _, err := f(b[:n-1]); err != ErrShortBuffer {
			t.Errorf("header encoder with %d bytes: %v", n-1, err)
		}
	}
	for _, f := range []func([]byte) error{
		func(b []byte) error { _, err := ParseReadRequest(b); return err },
		func(b []byte) error { _, err := ParseAtomicRequest(b); return err },
		func(b []byte) error { _, err := ParseAtomicResponse(b); return err },
		func(b []byte) error { _, err := ParseImmediate(b); return err },
	} {
		n := 0
		for f(b[:n]) == ErrTruncated {
			n++
		}
		if n != 28 && n != 52 && n != 12 && n != 8 {
			t.Errorf("parse accepted %d bytes", n)
		}
	}
}

// TestRoundTripRandom encodes every message with random fields and checks
// the parse and classification.
func TestRoundTripRandom(t *testing.T) {
	seed := uint64(5040)
	r := rand.New(rand.NewPCG(seed, 7306))
	b := make([]byte, 256)
	offending := ulpdu(t, "read-rtr")
	for i := 0; i < 20000; i++ {
		fail := func(what string) { t.Fatalf("seed %d iter %d: %s", seed, i, what) }
		msn := r.Uint32()
		switch k := r.IntN(8); k {
		case 0, 1: // Write, Read Response
			op := OpWrite
			if k == 1 {
				op = OpReadResponse
			}
			stag, to, last, plen := r.Uint32(), r.Uint64(), r.IntN(2) == 1, r.IntN(200)
			var n int
			var err error
			if op == OpWrite {
				n, err = PutWrite(b, stag, to, last, plen)
			} else {
				n, err = PutReadResponse(b, stag, to, last, plen)
			}
			s, perr := ddp.Parse(b[:n])
			gop, e := Classify(s, false)
			if err != nil || perr != nil || e != nil || gop != op || s.Tagged().STag() != stag || s.Tagged().TO() != to || s.Last() != last || len(s.Payload()) != plen {
				fail(op.String())
			}
		case 2: // Send family
			op := OpSend + OpCode(r.IntN(4))
			inv, mo, last, plen := r.Uint32(), r.Uint32(), r.IntN(2) == 1, r.IntN(200)
			n, err := PutSend(b, op, inv, msn, mo, last, plen)
			s, perr := ddp.Parse(b[:n])
			gop, e := Classify(s, false)
			u := s.Untagged()
			wantInv := inv
			if !op.Props().Invalidate {
				wantInv = 0
			}
			if err != nil || perr != nil || e != nil || gop != op || u.QN() != 0 || u.MSN() != msn || u.MO() != mo || u.RsvdULPWord() != wantInv || s.Last() != last || len(s.Payload()) != plen {
				fail(op.String())
			}
		case 3:
			p := ReadParams{r.Uint32(), r.Uint64(), r.Uint32(), r.Uint32(), r.Uint64()}
			n, err := PutReadRequest(b, msn, p)
			s, perr := ddp.Parse(b[:n])
			gop, e := Classify(s, false)
			h, herr := ParseReadRequest(s.Payload())
			if err != nil || perr != nil || e != nil || herr != nil || gop != OpReadRequest || s.Untagged().MSN() != msn || h.Params() != p {
				fail("read request")
			}
		case 4:
			p := AtomicParams{AOpCode(r.IntN(2) * 2), r.Uint32(), r.Uint32(), r.Uint64(), r.Uint64(), r.Uint64(), r.Uint64(), r.Uint64()}
			n, err := PutAtomicRequest(b, msn, p)
			s, perr := ddp.Parse(b[:n])
			gop, e := Classify(s, false)
			h, herr := ParseAtomicRequest(s.Payload())
			if err != nil || perr != nil || e != nil || herr != nil || gop != OpAtomicRequest || s.Untagged().QN() != 1 || s.Untagged().MSN() != msn || h.Params() != p || h.Reserved() != 0 {
				fail("atomic request")
			}
		case 5:
			id, v := r.Uint32(), r.Uint64()
			n, err := PutAtomicResponse(b, msn, id, v)
			s, perr := ddp.Parse(b[:n])
			gop, e := Classify(s, false)
			h, herr := ParseAtomicResponse(s.Payload())
			if err != nil || perr != nil || e != nil || herr != nil || gop != OpAtomicResponse || s.Untagged().QN() != 3 || s.Untagged().MSN() != msn || h.RequestID() != id || h.Value() != v {
				fail("atomic response")
			}
		case 6:
			op := OpImmediate + OpCode(r.IntN(2))
			var d [8]byte
			for j := range d {
				d[j] = byte(r.Uint32())
			}
			n, err := PutImmediate(b, op, msn, d)
			s, perr := ddp.Parse(b[:n])
			gop, e := Classify(s, false)
			h, herr := ParseImmediate(s.Payload())
			if err != nil || perr != nil || e != nil || herr != nil || gop != op || s.Untagged().MSN() != msn || h.Data() != d {
				fail("immediate")
			}
		case 7:
			known := term.Known()
			te := known[r.IntN(len(known))]
			n, err := PutTerminate(b, te, offending)
			s, perr := ddp.Parse(b[:n])
			gop, e := Classify(s, false)
			d, derr := term.Decode(s.Payload())
			if err != nil || perr != nil || e != nil || derr != nil || gop != OpTerminate || s.Untagged().MSN() != 1 || d.Err != te || d.Parts != term.Include(te, offending) {
				fail("terminate " + te.String())
			}
		}
	}
}

func TestHeaderSetters(t *testing.T) {
	a := AtomicRequest(make([]byte, 52))
	a.SetAOpCode(AOpCmpSwap)
	a.SetReserved(0xABCDEF1)
	if a.AOpCode() != AOpCmpSwap || a.Reserved() != 0xABCDEF1 || a[0] != 0xAB || a[3] != 0x12 {
		t.Errorf("atomic reserved/aopcode: % x", a[:4])
	}
	a.SetAOpCode(0xF)
	if a.Reserved() != 0xABCDEF1 || a.AOpCode() != 0xF {
		t.Error("SetAOpCode touched reserved bits")
	}
	a.SetParams(AtomicParams{AOpCode: AOpFetchAdd})
	if a.Reserved() != 0 {
		t.Error("SetParams keeps reserved bits")
	}
}

func TestAllocs(t *testing.T) {
	seg := ulpdu(t, "atomic-fetchadd")
	b := make([]byte, 128)
	var sink int
	if n := testing.AllocsPerRun(100, func() {
		s, _ := ddp.Parse(seg)
		op, e := Classify(s, false)
		if e == nil && op == OpAtomicRequest {
			h, _ := ParseAtomicRequest(s.Payload())
			sink += int(h.RequestID())
		}
		n, _ := PutSend(b, OpSend, 0, 1, 0, true, 5)
		sink += n
		n, _ = PutAtomicRequest(b, 1, AtomicParams{RequestID: 1})
		sink += n
		n, _ = PutAtomicResponse(b, 1, 1, 2)
		sink += n
		n, _ = PutReadRequest(b, 1, ReadParams{})
		sink += n
		n, _ = PutImmediate(b, OpImmediate, 1, [8]byte{})
		sink += n
		n, _ = PutWrite(b, 1, 2, true, 5)
		sink += n
		n, _ = PutTerminate(b, term.RDMAPCatastrophicStream, seg)
		sink += n
	}); n != 0 {
		t.Errorf("allocs = %v", n)
	}
	_ = sink
}

func BenchmarkClassify(b *testing.B) {
	for _, name := range []string{"send-hello", "write-hello", "atomic-fetchadd"} {
		b.Run(name, func(b *testing.B) {
			seg := ulpdu(b, name)
			b.ReportAllocs()
			var sink OpCode
			for b.Loop() {
				s, err := ddp.Parse(seg)
				if err == nil {
					op, e := Classify(s, false)
					if e == nil {
						sink += op
					}
				}
			}
			_ = sink
		})
	}
}

func BenchmarkPutSend(b *testing.B) {
	buf := make([]byte, 64)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		PutSend(buf, OpSend, 0, uint32(i), 0, true, 5)
	}
}

func BenchmarkPutWrite(b *testing.B) {
	buf := make([]byte, 64)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		PutWrite(buf, 1, uint64(i), true, 5)
	}
}

func BenchmarkPutAtomicRequest(b *testing.B) {
	buf := make([]byte, 128)
	p := AtomicParams{AOpCode: AOpCmpSwap, RequestID: 1, STag: 2, TO: 8, AddSwap: 3, AddSwapMask: ^uint64(0), Compare: 4, CompareMask: ^uint64(0)}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		PutAtomicRequest(buf, uint32(i), p)
	}
}

func BenchmarkParseAtomicRequest(b *testing.B) {
	seg := ulpdu(b, "atomic-fetchadd")[18:]
	b.ReportAllocs()
	var sink AtomicParams
	for b.Loop() {
		h, err := ParseAtomicRequest(seg)
		if err == nil {
			sink = h.Params()
		}
	}
	_ = sink
}
