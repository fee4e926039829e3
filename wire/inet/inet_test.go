package inet

import (
	"encoding/binary"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
)

// naive is the RFC 1071 reference: 16-bit big-endian words summed with
// end-around carry, odd trailing byte padded with zero.
func naive(b []byte) uint16 {
	var s uint32
	for i := 0; i+1 < len(b); i += 2 {
		s += uint32(b[i])<<8 | uint32(b[i+1])
		s = (s & 0xffff) + (s >> 16)
	}
	if len(b)%2 == 1 {
		s += uint32(b[len(b)-1]) << 8
		s = (s & 0xffff) + (s >> 16)
	}
	return ^uint16(s)
}

const seed = 0x1071

func newRand(t testing.TB, s uint64) *rand.Rand {
	t.Helper()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("rand seed %#x", s)
		}
	})
	return rand.New(rand.NewPCG(s, s^0x9e3779b97f4a7c15))
}

func randBytes(r *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func TestChecksumKnown(t *testing.T) {
	// RFC 1071 §3 numerical example: words 0001 f203 f4f5 f6f7 sum to
	// ddf2 (folded), checksum ^ddf2 = 220d.
	b := []byte{0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7}
	if got := Fold16(b); got != 0xddf2 {
		t.Fatalf("Fold16 = %#04x, want 0xddf2", got)
	}
	if got := Checksum(b); got != 0x220d {
		t.Fatalf("Checksum = %#04x, want 0x220d", got)
	}
	tests := []struct {
		b    []byte
		want uint16
	}{
		{nil, 0xffff},
		{[]byte{0x12}, ^uint16(0x1200)},
		{[]byte{0xff, 0xff}, 0x0000},
		{[]byte{0xff, 0xff, 0x00, 0x01}, ^uint16(0x0001)},
		// a classic IPv4 header (checksum field zero) with checksum b861
		{[]byte{0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0x00, 0x00,
			0xc0, 0xa8, 0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7}, 0xb861},
	}
	for _, tc := range tests {
		if got := Checksum(tc.b); got != tc.want {
			t.Errorf("Checksum(% x) = %#04x, want %#04x", tc.b, got, tc.want)
		}
		if got := naive(tc.b); got != tc.want {
			t.Errorf("naive(% x) = %#04x, want %#04x", tc.b, got, tc.want)
		}
	}
}

func TestChecksumRandom(t *testing.T) {
	r := newRand(t, seed)
	for i := 0; i < 5000; i++ {
		n := r.IntN(3000)
		if i%10 == 0 {
			n = r.IntN(70)
		}
		b := randBytes(r, n)
		if i%50 == 0 { // long runs of 0xff stress the carry chain
			for j := range b {
				b[j] = 0xff
			}
		}
		want := naive(b)
		if got := Checksum(b); got != want {
			t.Fatalf("len %d: Checksum %#04x, naive %#04x", n, got, want)
		}
		// Unaligned start.
		if n > 1 {
			if got, want := Checksum(b[1:]), naive(b[1:]); got != want {
				t.Fatalf("len %d offset 1: Checksum %#04x, naive %#04x", n-1, got, want)
			}
		}
	}
}

func TestSumSplits(t *testing.T) {
	r := newRand(t, seed+1)
	for i := 0; i < 3000; i++ {
		b := randBytes(r, r.IntN(2000))
		want := naive(b)
		// Random split points, including odd lengths and empty pieces.
		k := r.IntN(6)
		cuts := make([]int, 0, k+2)
		cuts = append(cuts, 0)
		for j := 0; j < k; j++ {
			cuts = append(cuts, r.IntN(len(b)+1))
		}
		cuts = append(cuts, len(b))
		slices.Sort(cuts)
		var s, c Sum
		for j := 0; j+1 < len(cuts); j++ {
			piece := b[cuts[j]:cuts[j+1]]
			s = s.Add(piece)
			c = c.Combine(Sum{}.Add(piece))
		}
		if s.Checksum() != want {
			t.Fatalf("cuts %v: Add chain %#04x, naive %#04x", cuts, s.Checksum(), want)
		}
		if c.Checksum() != want {
			t.Fatalf("cuts %v: Combine %#04x, naive %#04x", cuts, c.Checksum(), want)
		}
		if s.Odd() != (len(b)%2 == 1) {
			t.Fatalf("Odd %v for len %d", s.Odd(), len(b))
		}
		// Add16/Add32 at a random (possibly odd) position equal Add of the bytes.
		p := r.IntN(len(b) + 1)
		v := r.Uint32()
		var w [4]byte
		binary.BigEndian.PutUint32(w[:], v)
		full := append(append(append([]byte{}, b[:p]...), w[:]...), b[p:]...)
		got := Sum{}.Add(b[:p]).Add32(v).Add(b[p:])
		if got.Checksum() != naive(full) {
			t.Fatalf("Add32 at %d: %#04x, naive %#04x", p, got.Checksum(), naive(full))
		}
		got = Sum{}.Add(b[:p]).Add16(uint16(v)).Add(b[p:])
		full = append(append(append([]byte{}, b[:p]...), w[2:]...), b[p:]...)
		if got.Checksum() != naive(full) {
			t.Fatalf("Add16 at %d: %#04x, naive %#04x", p, got.Checksum(), naive(full))
		}
	}
}

func TestFromFold(t *testing.T) {
	r := newRand(t, seed+2)
	for i := 0; i < 200; i++ {
		a := randBytes(r, 2*r.IntN(20))
		b := randBytes(r, r.IntN(100))
		want := naive(append(append([]byte{}, a...), b...))
		if got := FromFold(Fold16(a)).Add(b).Checksum(); got != want {
			t.Fatalf("FromFold: %#04x, want %#04x", got, want)
		}
	}
}

// isZero reports whether v is one of the two ones' complement zeros.
func isZero(v uint16) bool { return v == 0 || v == 0xffff }

func TestUpdate(t *testing.T) {
	r := newRand(t, seed+3)
	for i := 0; i < 5000; i++ {
		b := randBytes(r, 4+2*r.IntN(40))
		if i%100 == 0 {
			clear(b) // all-zero data: the checksum has two equivalent forms
		}
		ck := naive(b)
		off := 2 * r.IntN(len(b)/2-1)
		if i%2 == 0 {
			old := binary.BigEndian.Uint16(b[off:])
			nv := uint16(r.Uint32())
			if i%7 == 0 {
				nv = 0
			}
			binary.BigEndian.PutUint16(b[off:], nv)
			got, want := Update16(ck, old, nv), naive(b)
			if got != want && !(isZero(^got) && isZero(^want)) {
				t.Fatalf("Update16(%#04x, %#04x, %#04x) = %#04x, recomputed %#04x", ck, old, nv, got, want)
			}
		} else {
			old := binary.BigEndian.Uint32(b[off:])
			nv := r.Uint32()
			binary.BigEndian.PutUint32(b[off:], nv)
			got, want := Update32(ck, old, nv), naive(b)
			if got != want && !(isZero(^got) && isZero(^want)) {
				t.Fatalf("Update32(%#04x, %#08x, %#08x) = %#04x, recomputed %#04x", ck, old, nv, got, want)
			}
		}
	}
	// A checksum updated in place still verifies: the sum over the data
	// with the checksum field included is all ones.
	b := []byte{0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0xb8, 0x61,
		0xc0, 0xa8, 0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7}
	if Checksum(b) != 0 {
		t.Fatalf("vector does not verify")
	}
	c := Update16(0xb861, 0x4011, 0x3f11) // TTL 64 -> 63
	binary.BigEndian.PutUint16(b[8:], 0x3f11)
	binary.BigEndian.PutUint16(b[10:], c)
	if Checksum(b) != 0 {
		t.Fatalf("after TTL decrement checksum %#04x does not verify", c)
	}
}

func TestSingleBitFlip(t *testing.T) {
	r := newRand(t, seed+4)
	for i := 0; i < 100; i++ {
		b := randBytes(r, 2+r.IntN(200))
		// Insert a checksum in the first two bytes.
		b[0], b[1] = 0, 0
		binary.BigEndian.PutUint16(b, Checksum(b))
		if Checksum(b) != 0 {
			t.Fatalf("does not verify")
		}
		for bit := 0; bit < 8*len(b); bit++ {
			b[bit/8] ^= 1 << (bit % 8)
			if Checksum(b) == 0 {
				t.Fatalf("flip of bit %d not detected", bit)
			}
			b[bit/8] ^= 1 << (bit % 8)
		}
	}
}

func TestAllocs(t *testing.T) {
	b := make([]byte, 1500)
	var sink uint16
	n := testing.AllocsPerRun(100, func() {
		s := Sum{}.Add(b[:12]).Add(b[13:]).Add16(7).Add32(9)
		sink += s.Checksum() + Checksum(b) + Update16(1, 2, 3) + Update32(1, 2, 3)
	})
	if n != 0 {
		t.Fatalf("allocs per run = %v, want 0", n)
	}
	_ = sink
}

func FuzzSum(f *testing.F) {
	f.Add([]byte{}, uint16(0))
	f.Add([]byte{0xff}, uint16(1))
	f.Add([]byte("\x00\x01\xf2\x03\xf4\xf5\xf6\xf7"), uint16(3))
	f.Fuzz(func(t *testing.T, b []byte, cut uint16) {
		want := naive(b)
		if got := Checksum(b); got != want {
			t.Fatalf("Checksum %#04x, naive %#04x", got, want)
		}
		c := int(cut) % (len(b) + 1)
		if got := (Sum{}).Add(b[:c]).Add(b[c:]).Checksum(); got != want {
			t.Fatalf("split at %d: %#04x, naive %#04x", c, got, want)
		}
	})
}

var benchSink uint16

func BenchmarkChecksum(b *testing.B) {
	for _, n := range []int{64, 1500, 9000} {
		buf := randBytes(rand.New(rand.NewPCG(1, 2)), n)
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			b.SetBytes(int64(n))
			b.ReportAllocs()
			for b.Loop() {
				benchSink += Checksum(buf)
			}
		})
	}
}

func BenchmarkNaive1500(b *testing.B) {
	buf := randBytes(rand.New(rand.NewPCG(1, 2)), 1500)
	b.SetBytes(1500)
	b.ReportAllocs()
	for b.Loop() {
		benchSink += naive(buf)
	}
}
