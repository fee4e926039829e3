package mpa

import (
	"bytes"
	"errors"
	"testing"

	"xrnic/wire/crc32c"
	"xrnic/wire/term"
	"xrnic/wire/wiretest/vectors"
)

// fpduNames are the CRC-on, marker-free FPDU vectors of
// wire/testdata/vectors.txt (docs/spec/vectors.md#fpdus).
var fpduNames = []string{"send-hello", "send-se-inv", "write-hello", "write-rtr", "read-rtr",
	"atomic-fetchadd", "atomic-response", "immediate", "terminate"}

func TestSealVectors(t *testing.T) {
	for _, v := range vectors.Kind(t, "fpdu", fpduNames...) {
		t.Run(v.Name, func(t *testing.T) {
			want := vectors.FPDU(t, v.Name)
			n := int(want[0])<<8 | int(want[1])
			if FPDULen(n) != len(want) {
				t.Fatalf("FPDULen(%d) = %d, vector has %d bytes", n, FPDULen(n), len(want))
			}
			// Opaque ULPDU bytes in, garbage everywhere else.
			b := bytes.Repeat([]byte{0xEE}, len(want)+8)
			copy(b[2:], want[2:2+n])
			got, err := SealFPDU(b, n, true)
			if err != nil || got != len(want) {
				t.Fatalf("SealFPDU = %d, %v", got, err)
			}
			if !bytes.Equal(b[:got], want) {
				t.Fatalf("sealed\n% x\nwant\n% x", b[:got], want)
			}
			// Same through a Framer without markers.
			f := NewFramer(FramerConfig{SeqStart: 12345, CRC: true})
			dst := make([]byte, len(want))
			if k, err := f.Frame(dst, want[2:2+n]); err != nil || !bytes.Equal(dst[:k], want) {
				t.Fatalf("Framer: %v\n% x", err, dst[:k])
			}
			// View of the received FPDU.
			fp, err := ParseFPDU(append(append([]byte{}, want...), 1, 2, 3))
			if err != nil {
				t.Fatal(err)
			}
			if len(fp) != len(want) || fp.ULPDULength() != n || !bytes.Equal(fp.ULPDU(), want[2:2+n]) {
				t.Fatalf("view: len %d ulpdu len %d", len(fp), fp.ULPDULength())
			}
			if len(fp.Pad()) != PadLen(n) || !bytes.Equal(fp.Pad(), make([]byte, PadLen(n))) {
				t.Fatalf("pad % x", fp.Pad())
			}
			if fp.CRC() != crc32c.Wire(want[len(want)-4:]) || fp.ComputeCRC() != fp.CRC() {
				t.Fatalf("CRC field %#x computed %#x", fp.CRC(), fp.ComputeCRC())
			}
			if err := fp.CheckCRC(); err != nil {
				t.Fatal(err)
			}
			fp[2] ^= 0x01
			if err := fp.CheckCRC(); err != term.MPACRCError {
				t.Fatalf("corrupted CheckCRC = %v", err)
			}
			// Deframer gives the ULPDU back.
			d := NewDeframer(DeframerConfig{CRC: true})
			u, k, err := d.Next(want)
			if err != nil || k != len(want) || !bytes.Equal(u, want[2:2+n]) {
				t.Fatalf("Deframer: %v %d % x", err, k, u)
			}
		})
	}
}

func TestSealCRCDisabled(t *testing.T) {
	want := vectors.FPDU(t, "send-hello-nocrc")
	if !bytes.Equal(want[:len(want)-4], vectors.FPDU(t, "send-hello")[:len(want)-4]) || !bytes.Equal(want[len(want)-4:], []byte{0, 0, 0, 0}) {
		t.Fatal("send-hello-nocrc is not send-hello with a zero CRC field")
	}
	b := make([]byte, len(want))
	copy(b[2:], want[2:25])
	b[len(b)-1] = 0x77
	if n, err := SealFPDU(b, 23, false); err != nil || !bytes.Equal(b[:n], want) {
		t.Fatalf("% x, %v", b, err)
	}
	// A receiver with CRC off accepts any CRC field.
	want[len(want)-2] = 0x5A
	d := NewDeframer(DeframerConfig{})
	if u, _, err := d.Next(want); err != nil || !bytes.Equal(u, want[2:25]) {
		t.Fatalf("CRC-off Deframer: %v", err)
	}
}

func TestSealErrors(t *testing.T) {
	if _, err := SealFPDU(make([]byte, 10), 5, true); err != ErrBufferTooSmall {
		t.Fatalf("small buffer: %v", err)
	}
	if _, err := SealFPDU(make([]byte, 70000), 65536, true); err != ErrULPDUTooLong {
		t.Fatalf("long: %v", err)
	}
	if _, err := ParseFPDU([]byte{0}); err != ErrTruncated {
		t.Fatal(err)
	}
	if _, err := ParseFPDU([]byte{0, 4, 1, 2, 3, 4, 0, 0, 0}); err != ErrTruncated {
		t.Fatal(err)
	}
	if !errors.Is(ErrULPDUTooLong, term.MPALocalCatastrophic) {
		t.Fatal("ErrULPDUTooLong should unwrap to MPALocalCatastrophic")
	}
}

func TestPadLen(t *testing.T) {
	for n, want := range map[int]int{0: 2, 1: 1, 2: 0, 3: 3, 18: 0, 19: 3, 23: 3, 40: 2, 42: 0, 70: 0} {
		if got := PadLen(n); got != want {
			t.Errorf("PadLen(%d) = %d, want %d", n, got, want)
		}
		if FPDULen(n)%4 != 0 || FPDULen(n) != 2+n+want+4 {
			t.Errorf("FPDULen(%d) = %d", n, FPDULen(n))
		}
	}
}

// markerVector returns an fpdu-markers vector's bytes after checking its
// CRC field against its crc value.
func markerVector(t *testing.T, name string) []byte {
	t.Helper()
	v := vectors.Get(t, name)
	b, crc := v.Bytes(t, "bytes"), v.Uint32(t, "crc")
	if v.Kind != "fpdu-markers" || len(b) != 52 || crc32c.Wire(b[48:]) != crc {
		t.Fatalf("%s: kind %s, %d bytes, CRC field % x vs %#08x", name, v.Kind, len(b), b[len(b)-4:], crc)
	}
	return b
}

// fig5ULPDU is the 42-byte ULPDU of RFC 5044 Fig. 5 (Send, QN 0, MSN msn, 24 zero bytes).
func fig5ULPDU(msn byte) []byte {
	u := make([]byte, 42)
	u[0], u[1] = 0x41, 0x43
	u[13] = msn
	return u
}

func TestRFC5044Fig5(t *testing.T) {
	want := markerVector(t, "rfc5044-fig5")
	for _, start := range []uint32{0, 11, 0xFFFFFFFE} {
		f := NewFramer(FramerConfig{SeqStart: start, Markers: true, CRC: true})
		if f.HeaderLen() != 6 || f.WireLen(42) != 52 {
			t.Fatalf("HeaderLen %d WireLen %d", f.HeaderLen(), f.WireLen(42))
		}
		dst := make([]byte, 64)
		n, err := f.Frame(dst, fig5ULPDU(1))
		if err != nil || !bytes.Equal(dst[:n], want) {
			t.Fatalf("start %d: %v\n% x\nwant\n% x", start, err, dst[:n], want)
		}
		if f.Seq() != start+52 {
			t.Fatalf("Seq %d", f.Seq())
		}
		d := NewDeframer(DeframerConfig{SeqStart: start, Markers: true, CRC: true})
		u, k, err := d.Next(want)
		if err != nil || k != 52 || !bytes.Equal(u, fig5ULPDU(1)) {
			t.Fatalf("deframe: %v %d", err, k)
		}
	}
}

func TestRFC5044Fig6(t *testing.T) {
	// First FPDU: 492 octets on the wire including the leading marker, so
	// its ULPDU is 492-4-2-4 = 482 octets (no pad).
	first := make([]byte, 482)
	first[0], first[1] = 0x41, 0x43
	first[13] = 1
	want := markerVector(t, "rfc5044-fig6")
	var start uint32 = 0xFFFFFF00 // wraps inside the second FPDU
	f := NewFramer(FramerConfig{SeqStart: start, Markers: true, CRC: true})
	stream := make([]byte, 1024)
	n1, err := f.Frame(stream, first)
	if err != nil || n1 != 0x1EC {
		t.Fatalf("first FPDU: %d %v", n1, err)
	}
	if f.HeaderLen() != 2 || f.WireLen(42) != len(want) {
		t.Fatalf("HeaderLen %d WireLen %d", f.HeaderLen(), f.WireLen(42))
	}
	n2, err := f.Frame(stream[n1:], fig5ULPDU(2))
	if err != nil || !bytes.Equal(stream[n1:n1+n2], want) {
		t.Fatalf("second FPDU: %v\n% x\nwant\n% x", err, stream[n1:n1+n2], want)
	}
	// The marker at 0x200 points back to 0x1EC.
	if IsMarkerSeq(start+0x1FC, start) || !IsMarkerSeq(start+0x200, start) {
		t.Fatal("IsMarkerSeq")
	}
	if got := FPDUStart(start+0x200, MarkerFPDUPTR(stream[0x200:])); got != start+0x1EC {
		t.Fatalf("FPDUStart = %#x", got)
	}
	if got := FPDUStart(start, MarkerFPDUPTR(stream)); got != start+4 {
		t.Fatalf("FPDUStart of first marker = %#x", got)
	}
	stream = stream[:n1+n2]
	// Deframe byte by byte and whole.
	for _, step := range []int{1, 7, len(stream)} {
		d := NewDeframer(DeframerConfig{SeqStart: start, Markers: true, CRC: true})
		var got [][]byte
		for p := stream; len(p) > 0; {
			piece := p[:min(step, len(p))]
			for len(piece) > 0 {
				u, k, err := d.Next(piece)
				if err != nil {
					t.Fatalf("step %d: %v", step, err)
				}
				piece, p = piece[k:], p[k:]
				if u != nil {
					got = append(got, append([]byte{}, u...))
				}
			}
		}
		if len(got) != 2 || !bytes.Equal(got[0], first) || !bytes.Equal(got[1], fig5ULPDU(2)) {
			t.Fatalf("step %d: got %d ULPDUs", step, len(got))
		}
	}
	// Stream-level stripping removes both markers.
	plain := make([]byte, len(stream))
	k, err := StripMarkers(plain, stream, start, start)
	if err != nil || k != len(stream)-8 {
		t.Fatalf("StripMarkers = %d, %v", k, err)
	}
	if !bytes.Equal(plain[0x1E8:0x1E8+20], want[:20]) || !bytes.Equal(plain[0x1E8+20:k-4], want[24:48]) {
		t.Fatal("stripped stream content")
	}
}

// TestFrameVectors: the MPA frame vectors (docs/spec/vectors.md#mpa-frames).
func TestFrameVectors(t *testing.T) {
	v := vectors.Kind(t, "mpa-frame", "mpa-request-rev1", "mpa-request-rev2", "mpa-reply-rev2")
	rev1, req2, rep2 := v[0].Bytes(t, "bytes"), v[1].Bytes(t, "bytes"), v[2].Bytes(t, "bytes")

	f, err := ParseFrame(rev1, Request)
	if err != nil || !f.IsRequest() || f.M() || !f.C() || f.R() || f.S() || f.Rev() != 1 || f.PDLength() != 0 || f.IsEnhanced() {
		t.Fatalf("rev1: %v %x", err, []byte(f))
	}
	if _, ok := f.Enhanced(); ok {
		t.Fatal("rev1 has no enhanced word")
	}
	buf := make([]byte, MaxFrameLen)
	n, err := PutFrame(buf, Request, FrameParams{C: true, Rev: 1}, nil)
	if err != nil || !bytes.Equal(buf[:n], rev1) {
		t.Fatalf("encode rev1: %v % x", err, buf[:n])
	}

	initiator := InitiatorParams{IRD: 16, MaxIRD: 16, ORD: 16, PeerToPeer: true, RTR: RTRWrite | RTRRead}
	reqWord := RequestWord(initiator)
	n, err = PutFrame(buf, Request, FrameParams{C: true, Rev: 2, HasEnhanced: true, Enhanced: reqWord}, nil)
	if err != nil || !bytes.Equal(buf[:n], req2) {
		t.Fatalf("encode req2: %v % x", err, buf[:n])
	}
	f, err = ParseFrame(req2, Request)
	if err != nil || !f.S() || !f.IsEnhanced() || len(f.ULPPrivateData()) != 0 {
		t.Fatalf("req2: %v", err)
	}
	e, ok := f.Enhanced()
	if !ok || e != (Enhanced{PeerToPeer: true, RTR: RTRWrite | RTRRead, IRD: 16, ORD: 16}) {
		t.Fatalf("req2 word %+v", e)
	}

	// A responder that takes Write only answers with the vector's Reply.
	reply, local, err := Respond(e, ResponderParams{MaxIRD: 16, ORD: 16, RTR: RTRWrite})
	if err != nil || local != (Negotiated{IRD: 16, ORD: 16, RTR: RTRWrite}) {
		t.Fatalf("Respond: %v %+v", err, local)
	}
	n, err = PutFrame(buf, Reply, FrameParams{C: true, Rev: 2, HasEnhanced: true, Enhanced: reply}, nil)
	if err != nil || !bytes.Equal(buf[:n], rep2) {
		t.Fatalf("encode rep2: %v % x", err, buf[:n])
	}
	f, err = ParseFrame(rep2, Reply)
	if err != nil || !f.IsReply() {
		t.Fatal(err)
	}
	e, _ = f.Enhanced()
	fin, err := Complete(reqWord, e, initiator)
	if err != nil || fin != (Negotiated{IRD: 16, ORD: 16, RTR: RTRWrite}) {
		t.Fatalf("Complete: %v %+v", err, fin)
	}
	// The RTR is then the zero-length Write vector.
	if _, err := ParseFrame(rep2, Request); err != ErrUnexpectedKey {
		t.Fatalf("reply parsed as request: %v", err)
	}
}
