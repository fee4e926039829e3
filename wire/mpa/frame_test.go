package mpa

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"testing"

	"xrnic/wire/term"
)

func hdr(key string, flags, rev byte, pdlen int) []byte {
	b := append([]byte(key), flags, rev, byte(pdlen>>8), byte(pdlen))
	return append(b, make([]byte, max(pdlen, 0))...)
}

func TestParseFrameErrors(t *testing.T) {
	cases := []struct {
		name string
		b    []byte
		kind Kind
		want error
	}{
		{"short header", []byte(KeyRequest)[:10], Request, ErrTruncated},
		{"19 bytes", hdr(KeyRequest, 0x40, 1, 0)[:19], Request, ErrTruncated},
		{"bad key", hdr("MPA ID Xyz Frame", 0x40, 1, 0), Request, ErrBadKey},
		{"reply key for request", hdr(KeyReply, 0x40, 1, 0), Request, ErrUnexpectedKey},
		{"request key for reply", hdr(KeyRequest, 0x40, 1, 0), Reply, ErrUnexpectedKey},
		{"rev 3", hdr(KeyRequest, 0x40, 3, 0), Request, ErrBadRev},
		{"rev 255", hdr(KeyReply, 0x40, 255, 0), Reply, ErrBadRev},
		{"pd 513", hdr(KeyRequest, 0x40, 1, 513), Request, ErrPrivateDataTooLong},
		{"18 bytes", hdr(KeyRequest, 0, 1, 0)[:18:18], Request, ErrTruncated},
		{"pd missing", hdr(KeyRequest, 0x40, 1, 10)[:25], Request, ErrTruncated},
		{"enhanced without word", hdr(KeyRequest, 0x50, 2, 3), Request, ErrNoEnhanced},
		{"enhanced empty", hdr(KeyReply, 0x10, 2, 0), Reply, ErrNoEnhanced},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f, err := ParseFrame(c.b, c.kind)
			if err != c.want || f != nil {
				t.Fatalf("ParseFrame = %v, %v; want %v", f, err, c.want)
			}
		})
	}
	// Protocol errors map to Terminate code 0x04.
	for _, e := range []error{ErrBadKey, ErrUnexpectedKey, ErrBadRev, ErrPrivateDataTooLong, ErrNoEnhanced} {
		if !errors.Is(e, term.MPAInvalidFrame) {
			t.Errorf("%v does not unwrap to MPAInvalidFrame", e)
		}
	}
	if errors.Unwrap(ErrTruncated) != nil {
		t.Error("ErrTruncated is not a protocol error")
	}
}

func TestParseFrameAccepts(t *testing.T) {
	cases := []struct {
		name string
		b    []byte
		kind Kind
		enh  bool
		ulp  int
	}{
		{"rev 0", hdr(KeyRequest, 0xC0, 0, 0), Request, false, 0},
		{"rev 1 with S bit (reserved in rev 1)", hdr(KeyRequest, 0x10, 1, 2), Request, false, 2},
		{"rev 2 without S", hdr(KeyReply, 0x20, 2, 7), Reply, false, 7},
		{"rev 2 enhanced, 512", hdr(KeyReply, 0x10, 2, 512), Reply, true, 508},
		{"reserved bits ignored", hdr(KeyRequest, 0x0F, 1, 0), Request, false, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			in := append(append([]byte{}, c.b...), 0xAA, 0xBB) // trailing FPDU bytes
			f, err := ParseFrame(in, c.kind)
			if err != nil {
				t.Fatal(err)
			}
			if len(f) != len(c.b) || f.IsEnhanced() != c.enh || len(f.ULPPrivateData()) != c.ulp {
				t.Fatalf("len %d enh %v ulp %d", len(f), f.IsEnhanced(), len(f.ULPPrivateData()))
			}
			if n, err := FrameRemaining(c.b[:FrameHeaderLen], c.kind); err != nil || n != len(c.b)-FrameHeaderLen {
				t.Fatalf("FrameRemaining = %d, %v", n, err)
			}
		})
	}
}

func TestFrameRemainingEarlyReject(t *testing.T) {
	// Only the 20-byte header is given; PD_Length 0x8000 is refused.
	h := hdr(KeyRequest, 0x40, 1, 0)
	h[18] = 0x80
	if _, err := FrameRemaining(h, Request); err != ErrPrivateDataTooLong {
		t.Fatal(err)
	}
}

func TestFrameSetters(t *testing.T) {
	f := Frame(hdr(KeyRequest, 0, 1, 8))
	f.SetM(true)
	f.SetC(true)
	f.SetR(true)
	f.SetS(true)
	f.SetRev(2)
	if f.Flags() != 0xF0 || !f.M() || !f.C() || !f.R() || !f.S() || f.Rev() != 2 {
		t.Fatalf("flags %#x", f.Flags())
	}
	e := Enhanced{PeerToPeer: true, RTR: RTRSend | RTRRead, IRD: 0x3FFF, ORD: 5}
	f.SetEnhanced(e)
	if got, ok := f.Enhanced(); !ok || got != e {
		t.Fatalf("%+v", got)
	}
	if !bytes.Equal(f[20:24], []byte{0xFF, 0xFF, 0x40, 0x05}) {
		t.Fatalf("% x", f[20:24])
	}
	f.SetM(false)
	f.SetR(false)
	f.SetPDLength(300)
	if f.Flags() != 0x50 || f.PDLength() != 300 {
		t.Fatalf("flags %#x pd %d", f.Flags(), f.PDLength())
	}
}

func TestPutFrameErrors(t *testing.T) {
	buf := make([]byte, MaxFrameLen+10)
	cases := []struct {
		name string
		b    []byte
		kind Kind
		p    FrameParams
		pd   int
		want error
	}{
		{"R in request", buf, Request, FrameParams{R: true, Rev: 1}, 0, ErrRejectInRequest},
		{"enhanced rev 1", buf, Request, FrameParams{Rev: 1, HasEnhanced: true}, 0, ErrBadRev},
		{"rev 3", buf, Reply, FrameParams{Rev: 3}, 0, ErrBadRev},
		{"513 pd", buf, Reply, FrameParams{Rev: 1}, 513, ErrPrivateDataTooLong},
		{"509 pd + word", buf, Reply, FrameParams{Rev: 2, HasEnhanced: true}, 509, ErrPrivateDataTooLong},
		{"short buffer", buf[:23], Reply, FrameParams{Rev: 1}, 4, ErrBufferTooSmall},
	}
	for _, c := range cases {
		if _, err := PutFrame(c.b, c.kind, c.p, make([]byte, c.pd)); err != c.want {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
	if n, err := PutFrame(buf, Reply, FrameParams{Rev: 2, HasEnhanced: true}, make([]byte, 508)); err != nil || n != MaxFrameLen {
		t.Errorf("max frame: %d %v", n, err)
	}
}

func TestFrameRoundTrip(t *testing.T) {
	seed := uint64(0xF4A3E)
	r := rand.New(rand.NewPCG(seed, 1))
	buf := make([]byte, MaxFrameLen)
	for i := 0; i < 2000; i++ {
		kind := Kind(r.IntN(2))
		p := FrameParams{M: r.IntN(2) == 1, C: r.IntN(2) == 1, Rev: uint8(r.IntN(3))}
		if kind == Reply {
			p.R = r.IntN(2) == 1
		}
		if p.Rev == 2 && r.IntN(2) == 1 {
			p.HasEnhanced = true
			p.Enhanced = DecodeEnhanced(r.Uint32())
		}
		ulp := make([]byte, r.IntN(MaxPrivateData-FrameLen(p, 0)+FrameHeaderLen+1))
		for j := range ulp {
			ulp[j] = byte(r.Uint32())
		}
		n, err := PutFrame(buf, kind, p, ulp)
		if err != nil || n != FrameLen(p, len(ulp)) {
			t.Fatalf("seed %#x iter %d: PutFrame %d %v", seed, i, n, err)
		}
		f, err := ParseFrame(buf[:n], kind)
		if err != nil {
			t.Fatalf("seed %#x iter %d: %v", seed, i, err)
		}
		e, ok := f.Enhanced()
		if f.M() != p.M || f.C() != p.C || f.R() != p.R || f.Rev() != p.Rev || ok != p.HasEnhanced ||
			(ok && e != p.Enhanced) || !bytes.Equal(f.ULPPrivateData(), ulp) || f.Flags()&0x0F != 0 {
			t.Fatalf("seed %#x iter %d: round trip mismatch %+v", seed, i, p)
		}
	}
}

func TestFrameAllocs(t *testing.T) {
	buf := make([]byte, MaxFrameLen)
	ulp := make([]byte, 100)
	p := FrameParams{C: true, Rev: 2, HasEnhanced: true, Enhanced: Enhanced{IRD: 4, ORD: 4}}
	if a := testing.AllocsPerRun(100, func() {
		n, _ := PutFrame(buf, Request, p, ulp)
		f, _ := ParseFrame(buf[:n], Request)
		_, _ = f.Enhanced()
		_, _ = FrameRemaining(buf, Request)
	}); a != 0 {
		t.Fatalf("allocs %v", a)
	}
}
