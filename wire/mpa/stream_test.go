package mpa

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"testing"

	"xrnic/wire/term"
)

func TestMULPDU(t *testing.T) {
	cases := []struct{ emss, plain, markers int }{
		{536, 530, 522},
		{1448, 1442, 1430},
		{1460, 1454, 1442},
		{8948, 8942, 8870},
		{0, 128, 128},
		{100, 128, 128},
		{1461, 1454, 1442},
		{65535, 64768, 64768},
		{1 << 20, 64768, 64768},
	}
	for _, c := range cases {
		if got := MULPDU(c.emss, false); got != c.plain {
			t.Errorf("MULPDU(%d, false) = %d, want %d", c.emss, got, c.plain)
		}
		if got := MULPDU(c.emss, true); got != c.markers {
			t.Errorf("MULPDU(%d, true) = %d, want %d", c.emss, got, c.markers)
		}
	}
	// The FPDU of a MULPDU-sized ULPDU fits the EMSS, with markers at
	// every phase.
	for emss := 200; emss <= 9000; emss++ {
		n := MULPDU(emss, false)
		if FPDULen(n) > emss {
			t.Fatalf("emss %d: FPDU %d", emss, FPDULen(n))
		}
		n = MULPDU(emss, true)
		for phase := 0; phase < MarkerInterval; phase += 4 {
			if w := newLayout(n, true, phase).wire; w > emss {
				t.Fatalf("emss %d phase %d: wire %d", emss, phase, w)
			}
		}
	}
}

// stripRef is an obviously correct marker stripper: keep octet i iff its
// sequence number is not one of the 4 marker octets.
func stripRef(src []byte, seq, seqStart uint32) []byte {
	var out []byte
	for i, c := range src {
		if (seq+uint32(i)-seqStart)%MarkerInterval >= MarkerSize {
			out = append(out, c)
		}
	}
	return out
}

func TestStripMarkers(t *testing.T) {
	r := rand.New(rand.NewPCG(99, 99))
	for i := 0; i < 500; i++ {
		src := make([]byte, r.IntN(3000))
		for j := range src {
			src[j] = byte(r.Uint32())
		}
		seqStart, seq := r.Uint32(), r.Uint32()
		dst := make([]byte, len(src))
		n, err := StripMarkers(dst, src, seq, seqStart)
		if err != nil || !bytes.Equal(dst[:n], stripRef(src, seq, seqStart)) {
			t.Fatalf("seed 99 iter %d: mismatch (%v)", i, err)
		}
		// In place.
		n2, _ := StripMarkers(src, src, seq, seqStart)
		if n2 != n || !bytes.Equal(src[:n2], dst[:n]) {
			t.Fatalf("seed 99 iter %d: in-place mismatch", i)
		}
	}
	if _, err := StripMarkers(make([]byte, 3), make([]byte, 4), 0, 0); err != ErrBufferTooSmall {
		t.Fatal(err)
	}
}

// checkMarkers verifies a framed stream independently of the layout code:
// every marker position carries a marker whose FPDUPTR points at the
// length field of the FPDU it belongs to, and nothing else is a marker.
func checkMarkers(t *testing.T, stream []byte, starts []int, seqStart uint32, seed uint64) {
	t.Helper()
	fi := 0 // index of the FPDU containing position p
	for p := 0; p+MarkerSize <= len(stream); p += MarkerInterval {
		for fi+1 < len(starts) && starts[fi+1] <= p {
			fi++
		}
		lenField := starts[fi]
		if starts[fi]%MarkerInterval == 0 {
			lenField += MarkerSize // FPDU with a leading marker
		}
		if p == starts[fi] && MarkerFPDUPTR(stream[p:]) != 0 {
			t.Fatalf("seed %#x: leading marker at %d has FPDUPTR %#x", seed, p, MarkerFPDUPTR(stream[p:]))
		}
		if stream[p] != 0 || stream[p+1] != 0 {
			t.Fatalf("seed %#x: marker at %d reserved % x", seed, p, stream[p:p+2])
		}
		ptr := MarkerFPDUPTR(stream[p:])
		if got := int(FPDUStart(seqStart+uint32(p), ptr) - seqStart); got != lenField {
			t.Fatalf("seed %#x: marker at %d (FPDUPTR %#x) points to %d, FPDU length field at %d", seed, p, ptr, got, lenField)
		}
	}
}

type streamCase struct {
	markers, crc bool
	seqStart     uint32
	ulpdus       [][]byte
	stream       []byte
	starts       []int
}

func buildStream(r *rand.Rand, markers, crc bool, count, maxLen int) streamCase {
	c := streamCase{markers: markers, crc: crc, seqStart: r.Uint32()}
	if r.IntN(4) == 0 {
		c.seqStart = -uint32(r.IntN(4096)) // wrap soon
	}
	f := NewFramer(FramerConfig{SeqStart: c.seqStart, Markers: markers, CRC: crc})
	for i := 0; i < count; i++ {
		n := r.IntN(maxLen + 1)
		if r.IntN(20) == 0 {
			n = r.IntN(8)
		}
		u := make([]byte, n)
		for j := range u {
			u[j] = byte(r.Uint32())
		}
		c.ulpdus = append(c.ulpdus, u)
		c.starts = append(c.starts, len(c.stream))
		buf := make([]byte, f.WireLen(n))
		if r.IntN(2) == 0 {
			if k, err := f.Frame(buf, u); err != nil || k != len(buf) {
				panic(err)
			}
		} else {
			copy(buf[f.HeaderLen():], u)
			if k, err := f.Seal(buf, n); err != nil || k != len(buf) {
				panic(err)
			}
		}
		c.stream = append(c.stream, buf...)
	}
	if f.Seq() != c.seqStart+uint32(len(c.stream)) {
		panic("framer seq")
	}
	return c
}

// deframeAll feeds stream in random pieces and returns the ULPDUs (copied)
// and the first error.
func deframeAll(r *rand.Rand, d *Deframer, stream []byte) ([][]byte, error) {
	var out [][]byte
	for len(stream) > 0 {
		var size int
		switch r.IntN(4) {
		case 0:
			size = 1 + r.IntN(8)
		case 1:
			size = len(stream)
		default:
			size = 1 + r.IntN(2000)
		}
		piece := stream[:min(size, len(stream))]
		stream = stream[len(piece):]
		for len(piece) > 0 {
			u, k, err := d.Next(piece)
			if err != nil {
				return out, err
			}
			if k == 0 && u == nil {
				panic("no progress")
			}
			piece = piece[k:]
			if u != nil {
				out = append(out, append([]byte{}, u...))
			}
		}
	}
	return out, nil
}

func TestRoundTrip(t *testing.T) {
	seed := uint64(0xD3F4A)
	r := rand.New(rand.NewPCG(seed, 3))
	for iter := 0; iter < 400; iter++ {
		markers, crc := r.IntN(2) == 1, r.IntN(4) != 0
		maxLen := []int{40, 600, 3000, 20000}[r.IntN(4)]
		c := buildStream(r, markers, crc, 1+r.IntN(30), maxLen)
		if markers {
			checkMarkers(t, c.stream, c.starts, c.seqStart, seed)
		} else if n, _ := StripMarkers(make([]byte, len(c.stream)), c.stream, c.seqStart, c.seqStart); n == len(c.stream) && len(c.stream) > 0 {
			t.Fatal("StripMarkers should remove octets at marker positions")
		}
		d := NewDeframer(DeframerConfig{SeqStart: c.seqStart, Markers: markers, CRC: crc})
		got, err := deframeAll(r, d, c.stream)
		if err != nil {
			t.Fatalf("seed %#x iter %d (markers %v crc %v): %v", seed, iter, markers, crc, err)
		}
		if len(got) != len(c.ulpdus) {
			t.Fatalf("seed %#x iter %d: %d ULPDUs, want %d", seed, iter, len(got), len(c.ulpdus))
		}
		for i := range got {
			if !bytes.Equal(got[i], c.ulpdus[i]) {
				t.Fatalf("seed %#x iter %d: ULPDU %d differs", seed, iter, i)
			}
		}
		if d.Pending() != 0 || d.Seq() != c.seqStart+uint32(len(c.stream)) {
			t.Fatalf("seed %#x iter %d: pending %d seq %d", seed, iter, d.Pending(), d.Seq())
		}
	}
}

// TestMarkersAroundCRC builds FPDUs whose size puts a marker exactly
// between PAD and CRC (covered by this FPDU) and exactly after the CRC
// (belongs to the next FPDU, FPDUPTR 0).
func TestMarkersAroundCRC(t *testing.T) {
	// Leading marker at 0, length field at 4. Content index of the first
	// inner marker is 508. n = 502 puts CRC content at 504..508: marker
	// after the CRC (next FPDU's). n = 498 puts CRC at 500..504... pick
	// n so the CRC starts at content 508: 2+n+pad = 508 → n = 506.
	for _, n := range []int{506, 502} {
		f := NewFramer(FramerConfig{Markers: true, CRC: true})
		u := bytes.Repeat([]byte{0xA5}, n)
		buf := make([]byte, 2048)
		k1, _ := f.Frame(buf, u)
		k2, _ := f.Frame(buf[k1:], u[:10])
		stream := buf[:k1+k2]
		switch n {
		case 506: // marker between PAD and CRC, inside FPDU 1
			if k1 != 4+508+4+4 || MarkerFPDUPTR(stream[512:]) != 508 {
				t.Fatalf("n=506: k1 %d ptr %d", k1, MarkerFPDUPTR(stream[512:]))
			}
			if crcOK(stream[:k1]) != 0 {
				t.Fatal("CRC must cover the marker before the CRC field")
			}
		case 502: // FPDU 1 ends at 512, FPDU 2 starts with a marker
			if k1 != 512 || !bytes.Equal(stream[512:516], []byte{0, 0, 0, 0}) || stream[517] != 10 {
				t.Fatalf("n=502: k1 %d % x", k1, stream[512:520])
			}
		}
		d := NewDeframer(DeframerConfig{Markers: true, CRC: true})
		got, err := deframeAll(rand.New(rand.NewPCG(1, 1)), d, stream)
		if err != nil || len(got) != 2 || !bytes.Equal(got[0], u) || !bytes.Equal(got[1], u[:10]) {
			t.Fatalf("n=%d: %v %d", n, err, len(got))
		}
	}
}

// crcOK returns 0 if the residue over w (covered octets + CRC
// field) is right, 1 otherwise.
func crcOK(w []byte) int {
	if (FPDU(w)).CheckCRC() == nil {
		return 0
	}
	return 1
}

func TestCorruptionDetected(t *testing.T) {
	seed := uint64(0xC0FFEE)
	r := rand.New(rand.NewPCG(seed, 4))
	for iter := 0; iter < 300; iter++ {
		markers := r.IntN(2) == 1
		c := buildStream(r, markers, true, 2+r.IntN(6), []int{50, 700, 2000}[r.IntN(3)])
		pos := r.IntN(len(c.stream))
		bad := append([]byte{}, c.stream...)
		bad[pos] ^= byte(1 + r.IntN(255))
		fi := 0
		for fi+1 < len(c.starts) && c.starts[fi+1] <= pos {
			fi++
		}
		d := NewDeframer(DeframerConfig{SeqStart: c.seqStart, Markers: markers, CRC: true})
		got, err := deframeAll(r, d, bad)
		// Everything before the corrupted FPDU is delivered intact, nothing
		// from it on.
		if len(got) > fi {
			t.Fatalf("seed %#x iter %d: corrupted byte %d in FPDU %d, yet %d ULPDUs delivered", seed, iter, pos, fi, len(got))
		}
		for i := range got {
			if !bytes.Equal(got[i], c.ulpdus[i]) {
				t.Fatalf("seed %#x iter %d: ULPDU %d wrong", seed, iter, i)
			}
		}
		if len(got) < fi {
			t.Fatalf("seed %#x iter %d: only %d of %d good ULPDUs", seed, iter, len(got), fi)
		}
		// Either an error or the Deframer still waits for a longer FPDU.
		if err == nil && d.Pending() == 0 {
			t.Fatalf("seed %#x iter %d: corruption at %d went unnoticed", seed, iter, pos)
		}
		if err != nil && err != term.MPACRCError && err != term.MPAMarkerError && err != ErrULPDUTooLong {
			t.Fatalf("seed %#x iter %d: unexpected error %v", seed, iter, err)
		}
		if err != nil {
			// Sticky: nothing more, same error.
			if u, k, err2 := d.Next(c.stream); u != nil || k != 0 || err2 != err {
				t.Fatalf("seed %#x iter %d: not sticky", seed, iter)
			}
		}
	}
}

// resealed frames ulpdus with markers, then rewrites one marker's FPDUPTR
// and recomputes that FPDU's CRC, so only the marker check can catch it.
func TestMarkerError(t *testing.T) {
	for _, crc := range []bool{true, false} {
		for _, which := range []string{"leading", "inner"} {
			f := NewFramer(FramerConfig{SeqStart: 77, Markers: true, CRC: crc})
			buf := make([]byte, 4096)
			n, _ := f.Frame(buf, make([]byte, 1200))
			w := buf[:n]
			at := 0
			if which == "inner" {
				at = 512
			}
			w[at+3] ^= 0x10
			if crc {
				(FPDU(w)).SetCRC(crcOf(w[:n-4]))
			}
			d := NewDeframer(DeframerConfig{SeqStart: 77, Markers: true, CRC: crc})
			if u, _, err := d.Next(w); err != term.MPAMarkerError || u != nil {
				t.Fatalf("crc %v %s: %v", crc, which, err)
			}
			// The low two bits of FPDUPTR are ignored.
			n, _ = NewFramer(FramerConfig{SeqStart: 77, Markers: true, CRC: crc}).Frame(buf, make([]byte, 1200))
			w = buf[:n]
			w[at+3] |= 3
			if crc {
				(FPDU(w)).SetCRC(crcOf(w[:n-4]))
			}
			d = NewDeframer(DeframerConfig{SeqStart: 77, Markers: true, CRC: crc})
			if _, _, err := d.Next(w); err != nil {
				t.Fatalf("crc %v %s low bits: %v", crc, which, err)
			}
		}
	}
}

func crcOf(b []byte) uint32 {
	return FPDU(append(append([]byte{}, b...), 0, 0, 0, 0)).ComputeCRC()
}

func TestDeframerLimits(t *testing.T) {
	d := NewDeframer(DeframerConfig{CRC: true, MaxULPDU: 100})
	fp := make([]byte, FPDULen(101))
	SealFPDU(fp, 101, true)
	if _, _, err := d.Next(fp[:1]); err != nil {
		t.Fatal(err)
	}
	if _, _, err := d.Next(fp[1:]); err != ErrULPDUTooLong || !errors.Is(err, term.MPALocalCatastrophic) {
		t.Fatalf("%v", err)
	}
	// Empty input, empty ULPDU.
	d = NewDeframer(DeframerConfig{CRC: true})
	if u, k, err := d.Next(nil); u != nil || k != 0 || err != nil {
		t.Fatal("Next(nil)")
	}
	e := make([]byte, FPDULen(0))
	SealFPDU(e, 0, true)
	for _, split := range []int{len(e), 3} {
		var u []byte
		var err error
		for p := e; len(p) > 0 && u == nil; {
			var k int
			u, k, err = d.Next(p[:min(split, len(p))])
			p = p[k:]
		}
		if err != nil || u == nil || len(u) != 0 {
			t.Fatalf("empty ULPDU split %d: %v %v", split, u, err)
		}
	}
	// Framer refuses ULPDUs whose FPDUPTR would overflow, accepts MaxULPDUMarkers.
	for phase := uint32(0); phase < 512; phase += 4 {
		f := NewFramer(FramerConfig{Markers: true})
		f.seq += phase
		if _, err := f.Seal(make([]byte, 70000), MaxULPDUMarkers); err != nil {
			t.Fatalf("phase %d: %v", phase, err)
		}
		f.seq = phase
		if _, err := f.Seal(make([]byte, 70000), MaxULPDU); err != ErrULPDUTooLong {
			t.Fatalf("phase %d: %v", phase, err)
		}
	}
	f := NewFramer(FramerConfig{})
	if _, err := f.Seal(make([]byte, 70000), MaxULPDU); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Frame(make([]byte, 10), make([]byte, 10)); err != ErrBufferTooSmall {
		t.Fatal(err)
	}
}

func TestAllocs(t *testing.T) {
	for _, markers := range []bool{false, true} {
		f := NewFramer(FramerConfig{Markers: markers, CRC: true})
		d := NewDeframer(DeframerConfig{Markers: markers, CRC: true})
		u := make([]byte, 1460)
		buf := make([]byte, 4096)
		fp := make([]byte, FPDULen(1460))
		copy(fp[2:], u)
		allocs := testing.AllocsPerRun(200, func() {
			n, err := f.Frame(buf, u)
			if err != nil {
				t.Fatal(err)
			}
			// Whole FPDU, then split in three.
			if _, _, err := d.Next(buf[:n]); err != nil {
				t.Fatal(err)
			}
			n, _ = f.Frame(buf, u)
			p := buf[:n]
			for _, cut := range []int{3, 700, n} {
				q := p[:min(cut, len(p))]
				for len(q) > 0 {
					_, k, err := d.Next(q)
					if err != nil {
						t.Fatal(err)
					}
					q, p = q[k:], p[k:]
				}
			}
			k, _ := SealFPDU(fp, 1460, true)
			v, _ := ParseFPDU(fp[:k])
			_ = v.CheckCRC()
		})
		if allocs != 0 {
			t.Fatalf("markers %v: allocs %v", markers, allocs)
		}
	}
}

func TestZeroCopy(t *testing.T) {
	f := NewFramer(FramerConfig{CRC: true})
	buf := make([]byte, 4096)
	n, _ := f.Frame(buf, bytes.Repeat([]byte{7}, 1000))
	d := NewDeframer(DeframerConfig{CRC: true})
	u, _, _ := d.Next(buf[:n])
	if &u[0] != &buf[2] || cap(u) != len(u) {
		t.Fatal("ULPDU in one piece should alias the input")
	}
}
