// Package inet implements the Internet checksum of RFC 1071: the 16-bit
// ones' complement of the ones' complement sum of a byte stream taken as
// big-endian 16-bit words, an odd trailing byte padded with a zero byte.
// IPv4 (RFC 791), TCP (RFC 9293 §3.1) and UDP use it.
//
// # Speed
//
// The sum is computed 8 bytes at a time with a 64-bit add-with-carry chain
// (four words per loop iteration) and folded to 16 bits at the end: a ones'
// complement sum is congruent modulo 2^16-1 whichever word width is used,
// because 2^16 ≡ 1 (mod 2^16-1) (RFC 1071 §2(C), "parallel summation"). The
// words are loaded little-endian and the folded result is byte-swapped once:
// the sum is independent of byte order up to that final swap (RFC 1071
// §2(B)), and little-endian loads are plain moves on the machines we run on.
//
// # Incremental sums
//
// [Sum] is a running partial sum over a byte stream that arrives in pieces,
// so a checksum over a pseudo-header plus a segment (or over a header and a
// separate payload buffer) needs no concatenation. A Sum remembers whether
// the bytes added so far have odd length; the next piece then starts in the
// low byte of a 16-bit word, which is the same as adding the byte-swapped
// sum of that piece (RFC 1071 §2(B)). Sums are plain values: adding to one
// never allocates.
//
// # Updates
//
// [Update16] and [Update32] adjust an existing checksum when a 16-bit or
// 32-bit field changes, with equation 3 of RFC 1624: HC' = ~(~HC + ~m + m').
package inet

import (
	"encoding/binary"
	"math/bits"
)

// Sum is a running ones' complement sum over a byte stream. The zero value
// is the empty sum. Add pieces in stream order; Checksum returns the
// Internet checksum of everything added.
type Sum struct {
	s   uint32 // folded partial sum, at most 0xffff between operations
	odd bool   // the bytes added so far have odd total length
}

// Add returns the sum continued over b.
func (s Sum) Add(b []byte) Sum {
	if len(b) == 0 {
		return s
	}
	p := uint32(sum16(b))
	if s.odd {
		p = uint32(bits.ReverseBytes16(uint16(p)))
	}
	s.s = fold32(s.s + p)
	s.odd = s.odd != (len(b)&1 == 1)
	return s
}

// Add16 returns the sum continued over the two big-endian bytes of v.
func (s Sum) Add16(v uint16) Sum {
	if s.odd {
		v = bits.ReverseBytes16(v)
	}
	s.s = fold32(s.s + uint32(v))
	return s
}

// Add32 returns the sum continued over the four big-endian bytes of v.
func (s Sum) Add32(v uint32) Sum {
	return s.Add16(uint16(v >> 16)).Add16(uint16(v))
}

// Combine returns the sum over the stream of s followed by the stream of t.
func (s Sum) Combine(t Sum) Sum {
	p := t.s
	if s.odd {
		p = uint32(bits.ReverseBytes16(uint16(p)))
	}
	s.s = fold32(s.s + p)
	s.odd = s.odd != t.odd
	return s
}

// Odd reports whether the bytes added so far have odd total length.
func (s Sum) Odd() bool { return s.odd }

// Fold returns the 16-bit ones' complement sum (not complemented). An
// odd-length stream is padded with one zero byte.
func (s Sum) Fold() uint16 { return uint16(s.s) }

// Checksum returns the Internet checksum: the ones' complement of Fold.
func (s Sum) Checksum() uint16 { return ^uint16(s.s) }

// FromFold returns the Sum of an even-length stream whose folded ones'
// complement sum is v (for example a sum carried in a header field).
func FromFold(v uint16) Sum { return Sum{s: uint32(v)} }

// Checksum returns the Internet checksum of b.
func Checksum(b []byte) uint16 { return ^sum16(b) }

// Fold16 returns the folded 16-bit ones' complement sum of b (not
// complemented), b taken as starting at an even offset.
func Fold16(b []byte) uint16 { return sum16(b) }

// Update16 returns checksum updated for a 16-bit field that changed from
// old to new (RFC 1624 eqn. 3).
func Update16(checksum, old, new uint16) uint16 {
	s := uint32(^checksum) + uint32(^old) + uint32(new)
	return ^uint16(fold32(s))
}

// Update32 returns checksum updated for a 32-bit field (for example an
// IPv4 address or a TCP sequence number) that changed from old to new; the
// field must start at an even offset of the checksummed data.
func Update32(checksum uint16, old, new uint32) uint16 {
	s := uint32(^checksum) +
		uint32(^uint16(old>>16)) + uint32(^uint16(old)) +
		uint32(new>>16) + uint32(uint16(new))
	return ^uint16(fold32(s))
}

func fold32(s uint32) uint32 {
	s = (s >> 16) + (s & 0xffff)
	s = (s >> 16) + (s & 0xffff)
	return s
}

// sum16 returns the folded big-endian ones' complement sum of b.
func sum16(b []byte) uint16 {
	var s, c uint64
	le := binary.LittleEndian
	for len(b) >= 32 {
		s, c = bits.Add64(s, le.Uint64(b[0:8]), c)
		s, c = bits.Add64(s, le.Uint64(b[8:16]), c)
		s, c = bits.Add64(s, le.Uint64(b[16:24]), c)
		s, c = bits.Add64(s, le.Uint64(b[24:32]), c)
		b = b[32:]
	}
	for len(b) >= 8 {
		s, c = bits.Add64(s, le.Uint64(b[:8]), c)
		b = b[8:]
	}
	if len(b) >= 4 {
		s, c = bits.Add64(s, uint64(le.Uint32(b[:4])), c)
		b = b[4:]
	}
	if len(b) >= 2 {
		s, c = bits.Add64(s, uint64(le.Uint16(b[:2])), c)
		b = b[2:]
	}
	if len(b) == 1 {
		// Little-endian view of the padded word {b[0], 0}.
		s, c = bits.Add64(s, uint64(b[0]), c)
	}
	s, c = bits.Add64(s, 0, c)
	s += c // cannot carry: s is zero whenever c was 1
	// Fold 64 -> 32 -> 16 with end-around carry.
	t := (s >> 32) + (s & 0xffffffff)
	t = (t >> 32) + (t & 0xffffffff)
	t = (t >> 16) + (t & 0xffff)
	t = (t >> 16) + (t & 0xffff)
	return bits.ReverseBytes16(uint16(t))
}
