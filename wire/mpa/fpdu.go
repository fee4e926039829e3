package mpa

import (
	"encoding/binary"

	"xrnic/wire/crc32c"
	"xrnic/wire/term"
)

// FPDU constants (RFC 5044 §4.1-4.3).
const (
	LengthSize     = 2 // ULPDU_Length field
	CRCSize        = 4 // CRC field
	Overhead       = LengthSize + CRCSize
	MarkerSize     = 4   // RESERVED(16) | FPDUPTR(16)
	MarkerInterval = 512 // octets of TCP sequence space between markers
	// MaxULPDU is the largest ULPDU_Length.
	MaxULPDU = 0xFFFF
	// MaxULPDUMarkers is the largest ULPDU the Framer sends with markers on:
	// the largest MULPDU of RFC 5044 §5.1, which keeps every FPDUPTR of the
	// FPDU within 16 bits.
	MaxULPDUMarkers = MaxMULPDU
)

// PadLen returns the number of PAD octets after a ULPDU of n bytes:
// (-(2+n)) mod 4.
func PadLen(n int) int { return -(LengthSize + n) & 3 }

// FPDULen returns the length of the FPDU (length field, ULPDU, PAD, CRC)
// that carries a ULPDU of n bytes, markers not counted.
func FPDULen(n int) int { return LengthSize + n + PadLen(n) + CRCSize }

// SealFPDU finishes an FPDU in place, without markers: the caller has
// written the n-byte ULPDU at b[2:2+n]; SealFPDU writes ULPDU_Length at
// b[0:2], zero PAD and the CRC field (CRC32c over b[0:2+n+pad], least
// significant byte first; zero when crc is false) and returns FPDULen(n).
func SealFPDU(b []byte, n int, crc bool) (int, error) {
	if n < 0 || n > MaxULPDU {
		return 0, ErrULPDUTooLong
	}
	total := FPDULen(n)
	if len(b) < total {
		return 0, ErrBufferTooSmall
	}
	binary.BigEndian.PutUint16(b, uint16(n))
	end := total - CRCSize
	clear(b[LengthSize+n : end])
	var c uint32
	if crc {
		c = crc32c.Checksum(b[:end])
	}
	crc32c.PutWire(b[end:], c)
	return total, nil
}

// FPDU is a view of one received FPDU without markers (a marker-free
// stream, or an FPDU the Deframer has stripped). ParseFPDU trims it to
// exactly FPDULen(ULPDULength()) bytes.
type FPDU []byte

// ParseFPDU returns a view of the FPDU at the start of b, checking only
// that b holds all of it (ErrTruncated otherwise). It does not check the
// CRC: call CheckCRC when CRC checking is on.
func ParseFPDU(b []byte) (FPDU, error) {
	if len(b) < LengthSize {
		return nil, ErrTruncated
	}
	n := FPDULen(int(binary.BigEndian.Uint16(b)))
	if len(b) < n {
		return nil, ErrTruncated
	}
	return FPDU(b[:n]), nil
}

// ULPDULength returns ULPDU_Length.
func (f FPDU) ULPDULength() int { return int(binary.BigEndian.Uint16(f)) }

// SetULPDULength sets ULPDU_Length.
func (f FPDU) SetULPDULength(n int) { binary.BigEndian.PutUint16(f, uint16(n)) }

// ULPDU returns the ULPDU (one DDP segment).
func (f FPDU) ULPDU() []byte { return f[LengthSize : LengthSize+f.ULPDULength()] }

// Pad returns the PAD octets.
func (f FPDU) Pad() []byte {
	n := f.ULPDULength()
	return f[LengthSize+n : LengthSize+n+PadLen(n)]
}

// CRC returns the CRC field as a value (decoded least significant byte
// first).
func (f FPDU) CRC() uint32 { return crc32c.Wire(f[len(f)-CRCSize:]) }

// SetCRC stores c in the CRC field.
func (f FPDU) SetCRC(c uint32) { crc32c.PutWire(f[len(f)-CRCSize:], c) }

// ComputeCRC returns the CRC32c over the covered octets (all but the CRC
// field).
func (f FPDU) ComputeCRC() uint32 { return crc32c.Checksum(f[:len(f)-CRCSize]) }

// CheckCRC returns term.MPACRCError if the CRC field does not match the
// covered octets.
func (f FPDU) CheckCRC() error {
	if crc32c.Checksum(f) != crc32c.Residue {
		return term.MPACRCError
	}
	return nil
}
