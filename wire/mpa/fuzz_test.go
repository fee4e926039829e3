package mpa

import (
	"bytes"
	"math/rand/v2"
	"testing"
)

func FuzzParseFrame(f *testing.F) {
	f.Add([]byte("MPA ID Req Frame\x40\x01\x00\x00"), false)
	f.Add([]byte("MPA ID Req Frame\x50\x02\x00\x04\x80\x10\xc0\x10"), false)
	f.Add([]byte("MPA ID Rep Frame\x50\x02\x00\x04\x80\x10\x80\x10"), true)
	f.Add([]byte("MPA ID Rep Frame\xff\x02\x00\x06\x80\x10\x80\x10hi"), true)
	f.Add([]byte("MPA ID Rep Frame\x20\x01\x02\x01"), true)
	f.Fuzz(func(t *testing.T, b []byte, reply bool) {
		kind := Request
		if reply {
			kind = Reply
		}
		rem, rerr := FrameRemaining(b, kind)
		fr, err := ParseFrame(b, kind)
		if err != nil {
			if rerr == nil && len(b) >= FrameHeaderLen+rem && err != ErrNoEnhanced {
				t.Fatalf("FrameRemaining ok (%d) but ParseFrame: %v", rem, err)
			}
			return
		}
		if rerr != nil || len(fr) != FrameHeaderLen+rem || !bytes.Equal(fr, b[:len(fr)]) {
			t.Fatalf("view length %d, remaining %d (%v)", len(fr), rem, rerr)
		}
		if rem > MaxPrivateData || fr.Rev() > Rev2 {
			t.Fatal("accepted out-of-range frame")
		}
		// Re-encode from the parsed fields.
		e, ok := fr.Enhanced()
		p := FrameParams{M: fr.M(), C: fr.C(), R: fr.R() && kind == Reply, Rev: fr.Rev(), HasEnhanced: ok, Enhanced: e}
		out := make([]byte, MaxFrameLen)
		n, err := PutFrame(out, kind, p, fr.ULPPrivateData())
		if err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		want := append([]byte{}, fr...)
		mask := byte(FlagM | FlagC | FlagS)
		if kind == Reply {
			mask |= FlagR
		}
		if !ok {
			mask &^= FlagS
		}
		want[16] &= mask
		if !bytes.Equal(out[:n], want) {
			t.Fatalf("round trip\n% x\nwant\n% x", out[:n], want)
		}
	})
}

func FuzzFPDU(f *testing.F) {
	f.Add([]byte("\x00\x0e\xc1\x40\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\x00\xeb\xd3\x4c\x5f"))
	f.Add([]byte("\x00\x00\x00\x00\x00\x00\x00\x00"))
	f.Add([]byte("\xff\xff\x01"))
	f.Fuzz(func(t *testing.T, b []byte) {
		fp, err := ParseFPDU(b)
		if err != nil {
			return
		}
		n := fp.ULPDULength()
		if len(fp) != FPDULen(n) || len(fp)%4 != 0 || len(fp.ULPDU()) != n || len(fp.Pad()) != PadLen(n) {
			t.Fatalf("view sizes: len %d n %d", len(fp), n)
		}
		valid := fp.CheckCRC() == nil
		if valid != (fp.ComputeCRC() == fp.CRC()) {
			t.Fatal("CheckCRC disagrees with ComputeCRC")
		}
		// Reseal a copy: valid CRC, same ULPDU; equal to the input when the
		// input had a valid CRC and zero pad.
		c := append([]byte{}, fp...)
		k, err := SealFPDU(c, n, true)
		if err != nil || k != len(fp) || FPDU(c).CheckCRC() != nil || !bytes.Equal(FPDU(c).ULPDU(), fp.ULPDU()) {
			t.Fatalf("reseal: %v", err)
		}
		if valid && bytes.Equal(fp.Pad(), make([]byte, PadLen(n))) && !bytes.Equal(c, fp) {
			t.Fatal("reseal of a valid FPDU changed it")
		}
		// The Deframer agrees with the view.
		d := NewDeframer(DeframerConfig{CRC: true})
		u, consumed, err := d.Next(b)
		if valid != (err == nil) || (valid && (consumed != len(fp) || !bytes.Equal(u, fp.ULPDU()))) {
			t.Fatalf("Deframer: %v, valid %v", err, valid)
		}
	})
}

type deframed struct {
	ulpdus [][]byte
	err    error
	seq    uint32
}

func runDeframer(cfg DeframerConfig, stream []byte, r *rand.Rand) deframed {
	d := NewDeframer(cfg)
	var out deframed
	for len(stream) > 0 && out.err == nil {
		size := len(stream)
		if r != nil {
			size = 1 + r.IntN(len(stream))
		}
		piece := stream[:size]
		stream = stream[size:]
		for len(piece) > 0 {
			u, k, err := d.Next(piece)
			if err != nil {
				out.err = err
				break
			}
			if k < 0 || k > len(piece) || (k == 0 && u == nil) {
				panic("bad consumed")
			}
			piece = piece[k:]
			if u != nil {
				out.ulpdus = append(out.ulpdus, append([]byte{}, u...))
			}
		}
	}
	out.seq = d.Seq()
	return out
}

func FuzzDeframer(f *testing.F) {
	r := rand.New(rand.NewPCG(5, 5))
	for _, markers := range []bool{false, true} {
		c := buildStream(r, markers, true, 3, 700)
		f.Add(c.stream, markers, true, c.seqStart, uint64(1))
	}
	f.Add([]byte("\x00\x00\x00\x00\x00\x02ab\x00\x00\x00\x00"), true, false, uint32(0), uint64(2))
	f.Add([]byte("\xff\xff"), false, true, uint32(3), uint64(3))
	f.Fuzz(func(t *testing.T, stream []byte, markers, crc bool, seqStart uint32, split uint64) {
		cfg := DeframerConfig{SeqStart: seqStart, Markers: markers, CRC: crc, MaxULPDU: int(split % 70000)}
		whole := runDeframer(cfg, stream, nil)
		pieces := runDeframer(cfg, stream, rand.New(rand.NewPCG(split, 0)))
		// The result does not depend on how TCP cut the stream.
		if whole.err != pieces.err || len(whole.ulpdus) != len(pieces.ulpdus) {
			t.Fatalf("whole: %d ULPDUs %v; pieces: %d ULPDUs %v", len(whole.ulpdus), whole.err, len(pieces.ulpdus), pieces.err)
		}
		for i := range whole.ulpdus {
			if !bytes.Equal(whole.ulpdus[i], pieces.ulpdus[i]) {
				t.Fatalf("ULPDU %d differs", i)
			}
		}
		if whole.err == nil && whole.seq != pieces.seq {
			t.Fatal("positions differ")
		}
		// With markers off and CRC on, a stream that deframes cleanly
		// re-frames to the same ULPDUs.
		if whole.err == nil && !markers {
			fr := NewFramer(FramerConfig{SeqStart: seqStart, CRC: true})
			var re []byte
			for _, u := range whole.ulpdus {
				buf := make([]byte, fr.WireLen(len(u)))
				fr.Frame(buf, u)
				re = append(re, buf...)
			}
			again := runDeframer(DeframerConfig{SeqStart: seqStart, CRC: true}, re, nil)
			if again.err != nil || len(again.ulpdus) != len(whole.ulpdus) {
				t.Fatalf("re-framed stream: %v", again.err)
			}
		}
	})
}

func FuzzStripMarkers(f *testing.F) {
	f.Add([]byte("\x00\x00\x00\x00\x00\x2a\x41\x43"), uint32(0), uint32(0))
	f.Add(bytes.Repeat([]byte{1, 2, 3}, 400), uint32(510), uint32(7))
	f.Add([]byte{}, uint32(0xFFFFFFFF), uint32(1))
	f.Fuzz(func(t *testing.T, src []byte, seq, seqStart uint32) {
		dst := make([]byte, len(src))
		n, err := StripMarkers(dst, src, seq, seqStart)
		if err != nil {
			t.Fatal(err)
		}
		if want := stripRef(src, seq, seqStart); !bytes.Equal(dst[:n], want) {
			t.Fatalf("got % x want % x", dst[:n], want)
		}
	})
}
