package ddp

import (
	"bytes"
	"encoding/hex"
	"math/rand/v2"
	"testing"

	"xrnic/wire/term"
	"xrnic/wire/wiretest/vectors"
)

// fpduNames are the CRC-on, marker-free FPDU vectors of
// wire/testdata/vectors.txt (docs/spec/vectors.md#fpdus).
var fpduNames = []string{"send-hello", "send-se-inv", "write-hello", "write-rtr", "read-rtr",
	"atomic-fetchadd", "atomic-response", "immediate", "terminate"}

// ulpdu returns the ULPDU of an FPDU vector (bytes 2 .. 2+ULPDU_Length).
func ulpdu(t testing.TB, name string) []byte {
	t.Helper()
	return vectors.ULPDU(t, name)
}

type untaggedWant struct {
	ctrl, ulp     uint8
	word          uint32
	qn, msn, mo   uint32
	payload       string
	headerLen     int
	validateError *term.Error
}

func TestVectorsUntagged(t *testing.T) {
	hello := hex.EncodeToString([]byte("hello"))
	tests := map[string]untaggedWant{
		"send-hello":      {0x41, 0x43, 0, 0, 1, 0, hello, 18, nil},
		"send-se-inv":     {0x41, 0x46, 0xCAFE0001, 0, 2, 0, hello, 18, nil},
		"read-rtr":        {0x41, 0x41, 0, 1, 1, 0, "00000000" + "0000000000000000" + "00000000" + "00000001" + "0000000000000000", 18, nil},
		"atomic-fetchadd": {0x41, 0x4A, 0, 1, 1, 0, "00000000" + "11223344" + "abcd0100" + "0000000000001000" + "0000000000000001" + "0000000000000000" + "0000000000000000" + "ffffffffffffffff", 18, nil},
		"atomic-response": {0x41, 0x4B, 0, 3, 1, 0, "11223344000000000000002a", 18, nil},
		"immediate":       {0x41, 0x48, 0, 0, 1, 0, "0102030405060708", 18, nil},
		"terminate":       {0x41, 0x47, 0, 2, 1, 0, "0207c000004641" + "4a000000000000000100000001" + "00000000", 18, nil},
	}
	for name, w := range tests {
		t.Run(name, func(t *testing.T) {
			b := ulpdu(t, name)
			s, err := Parse(b)
			if err != nil {
				t.Fatal(err)
			}
			if s.IsTagged() || !s.Last() || s.HeaderLen() != w.headerLen || s.Control() != Control(w.ctrl) {
				t.Fatalf("control %#x tagged=%v last=%v hl=%d", s.Control(), s.IsTagged(), s.Last(), s.HeaderLen())
			}
			u := s.Untagged()
			if u.RsvdULP() != w.ulp || u.RsvdULPWord() != w.word || u.QN() != w.qn || u.MSN() != w.msn || u.MO() != w.mo {
				t.Fatalf("got ulp %#x word %#x qn %d msn %d mo %d", u.RsvdULP(), u.RsvdULPWord(), u.QN(), u.MSN(), u.MO())
			}
			if got := hex.EncodeToString(s.Payload()); got != w.payload {
				t.Fatalf("payload %s, want %s", got, w.payload)
			}
			if e := Validate(s, false); e != w.validateError {
				t.Fatalf("Validate = %v", e)
			}
			// Encoder reproduces the header bytes.
			var h [UntaggedHeaderLen]byte
			n, err := PutUntagged(h[:], true, w.ulp, w.word, w.qn, w.msn, w.mo)
			if err != nil || n != UntaggedHeaderLen || !bytes.Equal(h[:], b[:UntaggedHeaderLen]) {
				t.Fatalf("PutUntagged = % x, %v; want % x", h, err, b[:UntaggedHeaderLen])
			}
		})
	}
}

func TestVectorsTagged(t *testing.T) {
	tests := []struct {
		name    string
		stag    uint32
		to      uint64
		payload string
	}{
		{"write-hello", 0x1234, 0x1000, "hello"},
		{"write-rtr", 1, 0, ""},
	}
	for _, tt := range tests {
		b := ulpdu(t, tt.name)
		s, err := Parse(b)
		if err != nil {
			t.Fatal(err)
		}
		h := s.Tagged()
		if !s.IsTagged() || !s.Last() || s.HeaderLen() != 14 || h.RsvdULP() != 0x40 || h.STag() != tt.stag || h.TO() != tt.to || string(s.Payload()) != tt.payload {
			t.Fatalf("%s: tagged=%v stag=%#x to=%#x payload=%q", tt.name, s.IsTagged(), h.STag(), h.TO(), s.Payload())
		}
		if e := Validate(s, false); e != nil {
			t.Fatalf("%s: Validate = %v", tt.name, e)
		}
		var out [TaggedHeaderLen]byte
		if n, err := PutTagged(out[:], true, 0x40, tt.stag, tt.to); err != nil || n != 14 || !bytes.Equal(out[:], b[:14]) {
			t.Fatalf("%s: PutTagged = % x, %v", tt.name, out, err)
		}
	}
}

func TestControl(t *testing.T) {
	for _, tt := range []struct {
		tagged, last bool
		want         Control
	}{{false, true, 0x41}, {false, false, 0x01}, {true, true, 0xC1}, {true, false, 0x81}} {
		if c := MakeControl(tt.tagged, tt.last); c != tt.want || c.Tagged() != tt.tagged || c.Last() != tt.last || c.Version() != 1 || c.Rsvd() != 0 {
			t.Errorf("MakeControl(%v,%v) = %#x", tt.tagged, tt.last, c)
		}
	}
	if CtrlUntaggedLast != 0x41 || CtrlTaggedLast != 0xC1 || CtrlUntagged != 0x01 || CtrlTagged != 0x81 {
		t.Error("control constants")
	}
	c := Control(0xFF)
	if !c.Tagged() || !c.Last() || c.Rsvd() != 0xF || c.Version() != 3 {
		t.Errorf("0xFF decodes as T=%v L=%v rsvd=%#x dv=%d", c.Tagged(), c.Last(), c.Rsvd(), c.Version())
	}
	if QNSend != 0 || QNReadRequest != 1 || QNTerminate != 2 || QNAtomicResponse != 3 {
		t.Error("QN constants")
	}
}

func TestParseTruncated(t *testing.T) {
	buf := make([]byte, 32)
	if _, err := Parse(nil); err != ErrTruncated {
		t.Errorf("Parse(nil) = %v", err)
	}
	for _, ctrl := range []byte{0x41, 0xC1, 0x01, 0x81, 0x00, 0x80} {
		want := 18
		if ctrl&0x80 != 0 {
			want = 14
		}
		buf[0] = ctrl
		for n := 1; n <= len(buf); n++ {
			s, err := Parse(buf[:n])
			if (n < want) != (err == ErrTruncated) || (err == nil && (s.HeaderLen() != want || len(s.Payload()) != n-want)) {
				t.Errorf("ctrl %#x len %d: err %v", ctrl, n, err)
			}
		}
	}
	if _, err := ParseTagged(buf[:13]); err != ErrTruncated {
		t.Error("ParseTagged 13")
	}
	if _, err := ParseUntagged(buf[:17]); err != ErrTruncated {
		t.Error("ParseUntagged 17")
	}
	if h, err := ParseTagged(buf); err != nil || len(h) != 14 {
		t.Error("ParseTagged 32")
	}
	if h, err := ParseUntagged(buf); err != nil || len(h) != 18 {
		t.Error("ParseUntagged 32")
	}
	if _, err := PutTagged(buf[:13], true, 0, 0, 0); err != ErrShortBuffer {
		t.Error("PutTagged short")
	}
	if _, err := PutUntagged(buf[:17], true, 0, 0, 0, 0, 0); err != ErrShortBuffer {
		t.Error("PutUntagged short")
	}
}

func TestValidate(t *testing.T) {
	b := make([]byte, 18)
	for _, tagged := range []bool{false, true} {
		for dv := uint8(0); dv < 4; dv++ {
			for qn := uint32(0); qn < 6; qn++ {
				for _, rdmac := range []bool{false, true} {
					clear(b)
					if tagged {
						b[0] = 0x80
					}
					b[0] |= 0x40 | dv
					Untagged(b).SetQN(qn) // for tagged, these are TO bytes: must not matter
					var want *term.Error
					switch {
					case dv != 1 && !(rdmac && dv == 0) && tagged:
						want = term.DDPTaggedInvalidVersion
					case dv != 1 && !(rdmac && dv == 0):
						want = term.DDPUntaggedInvalidVersion
					case !tagged && qn > 3:
						want = term.DDPUntaggedInvalidQN
					}
					s, err := Parse(b)
					if err != nil {
						t.Fatal(err)
					}
					if got := Validate(s, rdmac); got != want {
						t.Errorf("tagged=%v dv=%d qn=%d rdmac=%v: got %v want %v", tagged, dv, qn, rdmac, got, want)
					}
				}
			}
		}
	}
}

func TestRoundTrip(t *testing.T) {
	seed := uint64(20240601)
	r := rand.New(rand.NewPCG(seed, 1))
	buf := make([]byte, 64)
	for i := 0; i < 10000; i++ {
		last := r.IntN(2) == 1
		ulp := uint8(r.Uint32())
		plen := r.IntN(30)
		if r.IntN(2) == 0 {
			stag, to := r.Uint32(), r.Uint64()
			n, err := PutTagged(buf, last, ulp, stag, to)
			if err != nil || n != 14 {
				t.Fatalf("seed %d: PutTagged %v", seed, err)
			}
			s, err := Parse(buf[:n+plen])
			h := s.Tagged()
			if err != nil || !s.IsTagged() || s.Last() != last || s.Control().Version() != 1 || h.RsvdULP() != ulp || h.STag() != stag || h.TO() != to || len(s.Payload()) != plen {
				t.Fatalf("seed %d iter %d: tagged round trip mismatch", seed, i)
			}
		} else {
			w, qn, msn, mo := r.Uint32(), r.Uint32N(4), r.Uint32(), r.Uint32()
			n, err := PutUntagged(buf, last, ulp, w, qn, msn, mo)
			if err != nil || n != 18 {
				t.Fatalf("seed %d: PutUntagged %v", seed, err)
			}
			s, err := Parse(buf[:n+plen])
			u := s.Untagged()
			if err != nil || s.IsTagged() || s.Last() != last || u.RsvdULP() != ulp || u.RsvdULPWord() != w || u.QN() != qn || u.MSN() != msn || u.MO() != mo || len(s.Payload()) != plen || Validate(s, false) != nil {
				t.Fatalf("seed %d iter %d: untagged round trip mismatch", seed, i)
			}
		}
	}
}

func TestAllocs(t *testing.T) {
	b := ulpdu(t, "send-hello")
	buf := make([]byte, 32)
	var sink uint32
	if n := testing.AllocsPerRun(100, func() {
		s, _ := Parse(b)
		if Validate(s, false) == nil {
			sink += s.Untagged().MSN()
		}
		PutUntagged(buf, true, 0x43, 0, 0, 1, 0)
		PutTagged(buf, true, 0x40, 1, 2)
	}); n != 0 {
		t.Errorf("allocs = %v", n)
	}
	_ = sink
}

func FuzzParse(f *testing.F) {
	for _, v := range vectors.Kind(f, "fpdu", fpduNames...) {
		f.Add(ulpdu(f, v.Name))
	}
	f.Add([]byte{})
	f.Add([]byte{0x80})
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := Parse(b)
		if err != nil {
			if len(b) > 0 && len(b) >= Control(b[0]).HeaderLen() {
				t.Fatalf("rejected a complete header: %v", err)
			}
			return
		}
		_ = Validate(s, false)
		_ = Validate(s, true)
		out := make([]byte, s.HeaderLen())
		if s.IsTagged() {
			h := s.Tagged()
			if _, err := PutTagged(out, s.Last(), h.RsvdULP(), h.STag(), h.TO()); err != nil {
				t.Fatal(err)
			}
		} else {
			u := s.Untagged()
			if _, err := PutUntagged(out, s.Last(), u.RsvdULP(), u.RsvdULPWord(), u.QN(), u.MSN(), u.MO()); err != nil {
				t.Fatal(err)
			}
		}
		out[0] = byte(s.Control()) // keep Rsvd and DV as received
		if !bytes.Equal(out, s.Header()) || len(s.Header())+len(s.Payload()) != len(b) {
			t.Fatalf("round trip: % x != % x", out, s.Header())
		}
	})
}

func BenchmarkParseValidate(b *testing.B) {
	seg := ulpdu(b, "send-hello")
	b.ReportAllocs()
	var sink uint32
	for b.Loop() {
		s, err := Parse(seg)
		if err == nil && Validate(s, false) == nil {
			sink += s.Untagged().MSN()
		}
	}
	_ = sink
}

func BenchmarkPutUntagged(b *testing.B) {
	buf := make([]byte, 64)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		PutUntagged(buf, true, 0x43, 0, 0, uint32(i), 0)
	}
}
