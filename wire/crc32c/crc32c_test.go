package crc32c

import (
	"bytes"
	"hash/crc32"
	"math/rand/v2"
	"strconv"
	"testing"

	"xrnic/wire/wiretest/vectors"
)

// crcVector is one CRC32c vector: input, value, wire bytes.
type crcVector struct {
	name string
	in   []byte
	crc  uint32
	wire []byte
}

// loadVectors reads the CRC32c vectors of wire/testdata/vectors.txt
// (docs/spec/vectors.md#crc32c): RFC 3720 App. B.4, the check value, and
// the CRC-covered bytes of RFC 5044 Fig. 5 and 6 (marker included).
func loadVectors(t *testing.T) []crcVector {
	t.Helper()
	var out []crcVector
	for _, v := range vectors.Kind(t, "crc32c", "crc32c-check", "crc32c-zeros", "crc32c-ones", "crc32c-incrementing", "crc32c-decrementing") {
		out = append(out, crcVector{v.Name, v.Bytes(t, "in"), v.Uint32(t, "crc"), v.Bytes(t, "wire")})
	}
	for _, v := range vectors.Kind(t, "fpdu-markers", "rfc5044-fig5", "rfc5044-fig6") {
		b := v.Bytes(t, "bytes")
		if len(b) != 52 {
			t.Fatalf("%s: %d bytes, want 52", v.Name, len(b))
		}
		out = append(out, crcVector{v.Name, b[:48], v.Uint32(t, "crc"), b[48:]})
	}
	return out
}

func TestVectors(t *testing.T) {
	for _, v := range loadVectors(t) {
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

func TestResidueVector(t *testing.T) {
	if want := vectors.Get(t, "crc32c-residue").Uint32(t, "crc"); Residue != want {
		t.Fatalf("Residue = %#08x, vector %#08x", Residue, want)
	}
}

func TestFig5Length(t *testing.T) {
	// Guard the Fig. 5 vector: 48 covered bytes, starting with the marker.
	in := vectors.Get(t, "rfc5044-fig5").Bytes(t, "bytes")[:48]
	if !bytes.Equal(in[:8], []byte{0, 0, 0, 0, 0x00, 0x2A, 0x41, 0x43}) {
		t.Fatalf("Fig. 5 vector starts % x", in[:8])
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
