package crc32c

import (
	"bytes"
	"hash/crc32"
	"math/rand/v2"
	"strconv"
	"testing"
)

func seq(from, to int) []byte {
	var b []byte
	if from <= to {
		for i := from; i <= to; i++ {
			b = append(b, byte(i))
		}
	} else {
		for i := from; i >= to; i-- {
			b = append(b, byte(i))
		}
	}
	return b
}

// Vectors from the digest section 9 (RFC 3720 App. B.4 and RFC 5044 Fig. 5/6).
var vectors = []struct {
	name string
	in   []byte
	crc  uint32
	wire []byte
}{
	{"check 123456789", []byte("123456789"), 0xE3069283, []byte{0x83, 0x92, 0x06, 0xE3}},
	{"32x00", bytes.Repeat([]byte{0}, 32), 0x8A9136AA, []byte{0xAA, 0x36, 0x91, 0x8A}},
	{"32xFF", bytes.Repeat([]byte{0xFF}, 32), 0x62A8AB43, []byte{0x43, 0xAB, 0xA8, 0x62}},
	{"00..1F", seq(0, 0x1F), 0x46DD794E, []byte{0x4E, 0x79, 0xDD, 0x46}},
	{"1F..00", seq(0x1F, 0), 0x113FDB5C, []byte{0x5C, 0xDB, 0x3F, 0x11}},
	{"RFC5044 Fig5", append(append([]byte{0, 0, 0, 0, 0x00, 0x2A, 0x41, 0x43}, make([]byte, 8)...), append([]byte{0, 0, 0, 1}, make([]byte, 28)...)...), 0x83992352, []byte{0x52, 0x23, 0x99, 0x83}},
}

func TestVectors(t *testing.T) {
	for _, v := range vectors {
		t.Run(v.name, func(t *testing.T) {
			if got := Checksum(v.in); got != v.crc {
				t.Fatalf("Checksum = %#08x, want %#08x", got, v.crc)
			}
			var w [4]byte
			PutWire(w[:], v.crc)
			if !bytes.Equal(w[:], v.wire) {
				t.Fatalf("PutWire = % x, want % x", w, v.wire)
			}
			if got := Wire(v.wire); got != v.crc {
				t.Fatalf("Wire = %#08x, want %#08x", got, v.crc)
			}
			// Residue: CRC over data followed by its wire CRC.
			if got := Update(Checksum(v.in), v.wire); got != Residue {
				t.Fatalf("residue = %#08x, want %#08x", got, Residue)
			}
		})
	}
}

func TestFig5Length(t *testing.T) {
	// Guard the hand-built Fig. 5 vector: 48 covered bytes.
	if n := len(vectors[5].in); n != 48 {
		t.Fatalf("Fig. 5 vector has %d bytes, want 48", n)
	}
}

func TestResidueRandom(t *testing.T) {
	seed := uint64(0x5eed0001)
	r := rand.New(rand.NewPCG(seed, seed))
	for i := 0; i < 200; i++ {
		b := make([]byte, r.IntN(3000))
		for j := range b {
			b[j] = byte(r.Uint32())
		}
		var w [4]byte
		PutWire(w[:], Checksum(b))
		if got := Update(Checksum(b), w[:]); got != Residue {
			t.Fatalf("seed %#x len %d: residue %#08x", seed, len(b), got)
		}
		// A flipped bit breaks the residue.
		if len(b) > 0 {
			k := r.IntN(len(b))
			b[k] ^= 1 << r.IntN(8)
			if got := Update(Checksum(b), w[:]); got == Residue {
				t.Fatalf("seed %#x: residue survived a bit flip", seed)
			}
		}
	}
}

func TestPiecewise(t *testing.T) {
	seed := uint64(0x5eed0002)
	r := rand.New(rand.NewPCG(seed, seed))
	for i := 0; i < 500; i++ {
		b := make([]byte, r.IntN(5000))
		for j := range b {
			b[j] = byte(r.Uint32())
		}
		want := crc32.Checksum(b, crc32.MakeTable(crc32.Castagnoli))
		if got := Checksum(b); got != want {
			t.Fatalf("seed %#x: Checksum %#08x, stdlib %#08x", seed, got, want)
		}
		var c uint32
		for rest := b; len(rest) > 0; {
			n := 1 + r.IntN(len(rest))
			c = Update(c, rest[:n])
			rest = rest[n:]
		}
		if c != want {
			t.Fatalf("seed %#x len %d: piecewise %#08x, whole %#08x", seed, len(b), c, want)
		}
	}
	a, bb := []byte("12345"), []byte("6789")
	if got := Update(Update(0, a), bb); got != 0xE3069283 {
		t.Fatalf("Update(Update(0,a),b) = %#08x", got)
	}
	if Update(0, nil) != 0 || Checksum(nil) != 0 {
		t.Fatal("CRC of nothing must be 0")
	}
}

func TestAllocs(t *testing.T) {
	b := make([]byte, 1460)
	var w [4]byte
	if n := testing.AllocsPerRun(100, func() {
		c := Update(Checksum(b), b)
		PutWire(w[:], c)
		_ = Wire(w[:])
	}); n != 0 {
		t.Fatalf("allocs = %v", n)
	}
}

var sink uint32

func BenchmarkCRC(b *testing.B) {
	std := crc32.MakeTable(crc32.Castagnoli)
	for _, size := range []int{64, 1460, 4096, 65536} {
		buf := make([]byte, size)
		for i := range buf {
			buf[i] = byte(i * 7)
		}
		b.Run("xrnic/"+strconv.Itoa(size), func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(size))
			for b.Loop() {
				sink = Checksum(buf)
			}
		})
		b.Run("stdlib/"+strconv.Itoa(size), func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(size))
			for b.Loop() {
				sink = crc32.Checksum(buf, std)
			}
		})
	}
}
