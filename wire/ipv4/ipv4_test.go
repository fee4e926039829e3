package ipv4

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"testing"
)

// naive is an independent RFC 1071 reference checksum.
func naive(b []byte) uint16 {
	var s uint32
	for i := 0; i < len(b); i += 2 {
		w := uint32(b[i]) << 8
		if i+1 < len(b) {
			w |= uint32(b[i+1])
		}
		s += w
		s = (s & 0xffff) + (s >> 16)
	}
	return ^uint16(s)
}

// vector is a 20-byte header built by hand from the RFC 791 layout:
// version 4, IHL 5, TOS 0, total length 0x73, ID 0, DF, TTL 64, UDP,
// 192.168.0.1 -> 192.168.0.199, checksum 0xb861.
var vector = []byte{
	0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0xb8, 0x61,
	0xc0, 0xa8, 0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7,
}

func packet(hdr []byte, payload int, pad int) []byte {
	return append(append([]byte{}, hdr...), make([]byte, payload+pad)...)
}

func TestVectorChecksum(t *testing.T) {
	if naive(vector) != 0 {
		t.Fatal("hand-made vector does not verify under the reference checksum")
	}
	h := Header(vector)
	if got := h.ComputeChecksum(); got != 0xb861 {
		t.Fatalf("ComputeChecksum = %#04x, want 0xb861", got)
	}
}

func TestParseTable(t *testing.T) {
	good := packet(vector, 0x73-20, 0)
	padded := packet(vector, 0x73-20, 7)
	mod := func(f func(b []byte), fix bool) []byte {
		b := packet(vector, 0x73-20, 0)
		f(b)
		if fix {
			b[10], b[11] = 0, 0
			binary.BigEndian.PutUint16(b[10:], naive(b[:Header(b).HeaderLen()]))
		}
		return b
	}
	withOpts := func() []byte {
		// IHL 6 with one 4-byte option (NOP NOP NOP EOL), total length 24+4.
		b := []byte{0x46, 0x00, 0x00, 0x1c, 0x12, 0x34, 0x00, 0x00, 0x40, 0x06, 0, 0,
			10, 0, 0, 1, 10, 0, 0, 2, 1, 1, 1, 0, 0xde, 0xad, 0xbe, 0xef}
		binary.BigEndian.PutUint16(b[10:], naive(b[:24]))
		return b
	}()
	tests := []struct {
		name string
		b    []byte
		err  error
		tl   int
		hl   int
	}{
		{"good", good, nil, 0x73, 20},
		{"ethernet padding trimmed", padded, nil, 0x73, 20},
		{"options", withOpts, nil, 28, 24},
		{"short", good[:19], ErrTruncated, 0, 0},
		{"empty", nil, ErrTruncated, 0, 0},
		{"version 6", mod(func(b []byte) { b[0] = 0x65 }, true), ErrVersion, 0, 0},
		{"IHL 4", mod(func(b []byte) { b[0] = 0x44 }, false), ErrHeaderLen, 0, 0},
		{"IHL beyond buffer", mod(func(b []byte) { b[0] = 0x4f }, false)[:40], ErrTruncated, 0, 0},
		{"total below header", mod(func(b []byte) { b[3] = 19 }, true), ErrTotalLen, 0, 0},
		{"total beyond buffer", good[:0x72], ErrTruncated, 0, 0},
		{"bad checksum", mod(func(b []byte) { b[10] ^= 1 }, false), ErrChecksum, 0, 0},
		{"ttl changed", mod(func(b []byte) { b[8]-- }, false), ErrChecksum, 0, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h, err := Parse(tc.b)
			if err != tc.err {
				t.Fatalf("err = %v, want %v", err, tc.err)
			}
			if err != nil {
				return
			}
			if len(h) != tc.tl || h.HeaderLen() != tc.hl || len(h.Payload()) != tc.tl-tc.hl ||
				h.OptionsLen() != tc.hl-20 || len(h.Options()) != tc.hl-20 {
				t.Fatalf("len %d hl %d payload %d options %d", len(h), h.HeaderLen(), len(h.Payload()), h.OptionsLen())
			}
		})
	}
	h, _ := Parse(good)
	if h.Version() != 4 || h.IHL() != 5 || h.TOS() != 0 || h.TotalLen() != 0x73 || h.ID() != 0 ||
		!h.DF() || h.MF() || h.Flags() != FlagDF || h.FragmentOffset() != 0 || h.IsFragment() ||
		h.TTL() != 64 || h.Protocol() != ProtoUDP || h.Checksum() != 0xb861 ||
		h.Src() != [4]byte{192, 168, 0, 1} || h.Dst() != [4]byte{192, 168, 0, 199} {
		t.Fatalf("field mismatch in % x", h[:20])
	}
	if _, err := ParseNoChecksum(mod(func(b []byte) { b[10] ^= 1 }, false)); err != nil {
		t.Fatalf("ParseNoChecksum: %v", err)
	}
}

func TestSingleBitFlip(t *testing.T) {
	b := packet(vector, 0x73-20, 0)
	for bit := 0; bit < 8*MinHeaderLen; bit++ {
		b[bit/8] ^= 1 << (bit % 8)
		if _, err := Parse(b); err == nil {
			t.Fatalf("flip of header bit %d accepted", bit)
		}
		b[bit/8] ^= 1 << (bit % 8)
	}
	if _, err := Parse(b); err != nil {
		t.Fatal(err)
	}
}

func randFields(r *rand.Rand) Fields {
	f := Fields{
		TOS:            uint8(r.Uint32()),
		ID:             uint16(r.Uint32()),
		Flags:          uint8(r.IntN(8)),
		FragmentOffset: uint16(r.IntN(0x2000)),
		TTL:            uint8(r.Uint32()),
		Protocol:       uint8(r.Uint32()),
	}
	binary.BigEndian.PutUint32(f.Src[:], r.Uint32())
	binary.BigEndian.PutUint32(f.Dst[:], r.Uint32())
	if r.IntN(3) == 0 {
		f.Options = make([]byte, 4*r.IntN(11))
		for i := range f.Options {
			f.Options[i] = byte(r.Uint32())
		}
	}
	f.TotalLen = uint16(MinHeaderLen + len(f.Options) + r.IntN(200))
	return f
}

func TestRoundTrip(t *testing.T) {
	const seed = 0x791
	r := rand.New(rand.NewPCG(seed, seed))
	defer func() {
		if t.Failed() {
			t.Logf("rand seed %#x", seed)
		}
	}()
	buf := make([]byte, 400)
	for i := 0; i < 3000; i++ {
		f := randFields(r)
		n, err := Put(buf, &f)
		if err != nil {
			t.Fatal(err)
		}
		if n != MinHeaderLen+len(f.Options) {
			t.Fatalf("n = %d", n)
		}
		if naive(buf[:n]) != 0 {
			t.Fatalf("Put checksum fails the reference: % x", buf[:n])
		}
		h, err := Parse(buf[:f.TotalLen])
		if err != nil {
			t.Fatalf("Parse(Put()): %v", err)
		}
		if h.TOS() != f.TOS || h.DSCP() != f.TOS>>2 || h.ECN() != f.TOS&3 || h.ID() != f.ID ||
			h.Flags() != f.Flags || h.DF() != (f.Flags&FlagDF != 0) || h.MF() != (f.Flags&FlagMF != 0) ||
			h.FragmentOffset() != f.FragmentOffset || h.TTL() != f.TTL || h.Protocol() != f.Protocol ||
			h.Src() != f.Src || h.Dst() != f.Dst || h.TotalLen() != f.TotalLen ||
			!bytes.Equal(h.Options(), f.Options) ||
			h.IsFragment() != (f.Flags&FlagMF != 0 || f.FragmentOffset != 0) {
			t.Fatalf("round trip mismatch %+v vs % x", f, h[:n])
		}
		// Setters, then UpdateChecksum keeps it valid.
		g := randFields(r)
		h.SetTOS(0)
		h.SetDSCP(g.TOS >> 2)
		h.SetECN(g.TOS)
		h.SetID(g.ID)
		h.SetFlags(g.Flags)
		h.SetFragmentOffset(g.FragmentOffset)
		h.SetTTL(g.TTL)
		h.SetProtocol(g.Protocol)
		h.SetSrc(g.Src)
		h.SetDst(g.Dst)
		if h.TOS() != g.TOS || h.ID() != g.ID || h.Flags() != g.Flags || h.FragmentOffset() != g.FragmentOffset ||
			h.TTL() != g.TTL || h.Protocol() != g.Protocol || h.Src() != g.Src || h.Dst() != g.Dst ||
			h.TotalLen() != f.TotalLen || h.HeaderLen() != n {
			t.Fatalf("setters: %+v vs % x", g, h[:n])
		}
		h.UpdateChecksum()
		if naive(h[:n]) != 0 || !h.ChecksumValid() {
			t.Fatal("UpdateChecksum")
		}
	}
}

func TestPutErrors(t *testing.T) {
	buf := make([]byte, 60)
	tests := []struct {
		name string
		f    Fields
		n    int
		err  error
	}{
		{"options not multiple of 4", Fields{TotalLen: 100, Options: make([]byte, 3)}, 60, ErrOptions},
		{"options too long", Fields{TotalLen: 100, Options: make([]byte, 44)}, 60, ErrOptions},
		{"short buffer", Fields{TotalLen: 100}, 19, ErrShortBuffer},
		{"short buffer options", Fields{TotalLen: 100, Options: make([]byte, 4)}, 23, ErrShortBuffer},
		{"total below header", Fields{TotalLen: 23, Options: make([]byte, 4)}, 60, ErrTotalLen},
		{"flags", Fields{TotalLen: 20, Flags: 8}, 60, ErrField},
		{"fragment offset", Fields{TotalLen: 20, FragmentOffset: 0x2000}, 60, ErrField},
		{"ok max", Fields{TotalLen: 60, Options: make([]byte, 40)}, 60, nil},
	}
	for _, tc := range tests {
		if _, err := Put(buf[:tc.n], &tc.f); err != tc.err {
			t.Errorf("%s: err = %v, want %v", tc.name, err, tc.err)
		}
	}
}

func TestPseudoHeaderSum(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for i := 0; i < 1000; i++ {
		var src, dst [4]byte
		binary.BigEndian.PutUint32(src[:], r.Uint32())
		binary.BigEndian.PutUint32(dst[:], r.Uint32())
		if i == 0 {
			src, dst = [4]byte{255, 255, 255, 255}, [4]byte{255, 255, 255, 255}
		}
		proto := uint8(r.Uint32())
		length := uint16(r.Uint32())
		seg := make([]byte, r.IntN(100))
		for j := range seg {
			seg[j] = byte(r.Uint32())
		}
		ph := append(append(append([]byte{}, src[:]...), dst[:]...), 0, proto, byte(length>>8), byte(length))
		want := naive(append(ph, seg...))
		if got := PseudoHeaderSum(src, dst, proto, length).Add(seg).Checksum(); got != want {
			t.Fatalf("pseudo sum: %#04x, want %#04x", got, want)
		}
	}
	h := Header(packet(vector, 0x73-20, 0))
	want := naive([]byte{192, 168, 0, 1, 192, 168, 0, 199, 0, 17, 0, 0x73 - 20})
	if got := h.PseudoHeaderSum().Checksum(); got != want {
		t.Fatalf("Header.PseudoHeaderSum: %#04x, want %#04x", got, want)
	}
}

func TestAllocs(t *testing.T) {
	buf := make([]byte, 1500)
	f := Fields{TotalLen: 1500, TTL: 64, Protocol: ProtoTCP, Src: [4]byte{10, 0, 0, 1}, Dst: [4]byte{10, 0, 0, 2}, Flags: FlagDF}
	var sink int
	n := testing.AllocsPerRun(100, func() {
		m, _ := Put(buf, &f)
		h, err := Parse(buf)
		if err != nil {
			panic(err)
		}
		sink += m + int(h.TTL()) + int(h.Src()[0]) + len(h.Payload()) + int(h.PseudoHeaderSum().Fold())
		h.SetTTL(h.TTL() - 1)
		h.UpdateChecksum()
	})
	if n != 0 {
		t.Fatalf("allocs per run = %v, want 0", n)
	}
	_ = sink
}

func FuzzParse(f *testing.F) {
	f.Add(packet(vector, 0x73-20, 3))
	f.Add(vector)
	f.Add([]byte{0x46, 0x00, 0x00, 0x18, 0, 0, 0, 0, 0x40, 0x06, 0x00, 0x00, 10, 0, 0, 1, 10, 0, 0, 2, 1, 1, 1, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := Parse(b)
		if err != nil {
			if _, err2 := ParseNoChecksum(b); err2 == nil && err != ErrChecksum {
				t.Fatalf("Parse %v but ParseNoChecksum ok", err)
			}
			return
		}
		_ = h.Payload()
		fl := Fields{
			TOS: h.TOS(), TotalLen: h.TotalLen(), ID: h.ID(), Flags: h.Flags(),
			FragmentOffset: h.FragmentOffset(), TTL: h.TTL(), Protocol: h.Protocol(),
			Src: h.Src(), Dst: h.Dst(), Options: h.Options(),
		}
		out := make([]byte, MaxHeaderLen)
		n, err := Put(out, &fl)
		if err != nil {
			t.Fatalf("Put(Parse(x)): %v", err)
		}
		hl := h.HeaderLen()
		if n != hl {
			t.Fatalf("n = %d, want %d", n, hl)
		}
		// Compare all but the checksum, which has two valid encodings
		// (0x0000 and 0xffff) when the rest sums to 0xffff.
		if !bytes.Equal(out[:10], h[:10]) || !bytes.Equal(out[12:n], h[12:hl]) {
			t.Fatalf("re-encoded % x, want % x", out[:n], h[:hl])
		}
		if naive(out[:n]) != 0 {
			t.Fatalf("re-encoded checksum invalid")
		}
	})
}

func BenchmarkParse(b *testing.B) {
	p := packet(vector, 0x73-20, 0)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse(p); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkPut(b *testing.B) {
	buf := make([]byte, 64)
	f := Fields{TotalLen: 1500, TTL: 64, Protocol: ProtoTCP, Src: [4]byte{10, 0, 0, 1}, Dst: [4]byte{10, 0, 0, 2}, Flags: FlagDF}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Put(buf, &f); err != nil {
			b.Fatal(err)
		}
	}
}
