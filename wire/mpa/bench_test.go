package mpa

import (
	"strconv"
	"testing"
)

var benchSizes = []int{64, 1460, 4096} // FPDU sizes on the wire (no markers)

func BenchmarkSeal(b *testing.B) {
	for _, size := range benchSizes {
		n := size - Overhead
		buf := make([]byte, size)
		b.Run(strconv.Itoa(size), func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(size))
			for b.Loop() {
				if _, err := SealFPDU(buf, n, true); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	for _, size := range benchSizes {
		n := size - Overhead
		buf := make([]byte, 2*size)
		b.Run("framer-markers/"+strconv.Itoa(size), func(b *testing.B) {
			f := NewFramer(FramerConfig{Markers: true, CRC: true})
			b.ReportAllocs()
			b.SetBytes(int64(size))
			for b.Loop() {
				if _, err := f.Seal(buf, n); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// benchStream frames copies of an n-byte ULPDU until the stream is at least
// 256 KiB and ends on a marker boundary, so it can be replayed to one
// Deframer forever.
func benchStream(b *testing.B, n int, markers bool) []byte {
	f := NewFramer(FramerConfig{Markers: markers, CRC: true})
	u := make([]byte, n)
	for i := range u {
		u[i] = byte(i)
	}
	var s []byte
	buf := make([]byte, 2*n+64)
	for len(s) < 256<<10 || (markers && len(s)%MarkerInterval != 0) {
		k, err := f.Frame(buf, u)
		if err != nil {
			b.Fatal(err)
		}
		s = append(s, buf[:k]...)
		if len(s) > 64<<20 {
			b.Fatal("stream never realigned")
		}
	}
	return s
}

func benchDeframe(b *testing.B, size int, markers bool, cut int) {
	n := size - Overhead
	s := benchStream(b, n, markers)
	d := NewDeframer(DeframerConfig{Markers: markers, CRC: true})
	p := s
	b.ReportAllocs()
	b.SetBytes(int64(size))
	for b.Loop() {
		for {
			if len(p) == 0 {
				p = s
			}
			q := p
			if cut > 0 {
				q = p[:min(cut, len(p))]
			}
			u, k, err := d.Next(q)
			if err != nil {
				b.Fatal(err)
			}
			p = p[k:]
			if u != nil {
				break
			}
		}
	}
}

func BenchmarkDeframe(b *testing.B) {
	for _, size := range benchSizes {
		b.Run(strconv.Itoa(size), func(b *testing.B) { benchDeframe(b, size, false, 0) })
	}
	for _, size := range benchSizes {
		// Every FPDU arrives in pieces of 1000 octets: reassembly path.
		b.Run("pieces/"+strconv.Itoa(size), func(b *testing.B) { benchDeframe(b, size, false, 1000) })
	}
	for _, size := range benchSizes {
		b.Run("markers/"+strconv.Itoa(size), func(b *testing.B) { benchDeframe(b, size, true, 0) })
	}
}
