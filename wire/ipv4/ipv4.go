// Package ipv4 is a view, validator and encoder for IPv4 headers (RFC 791,
// with the DSCP/ECN split of the TOS octet from RFC 2474 and RFC 3168), and
// computes the pseudo-header partial sum that TCP (RFC 9293 §3.1) and UDP
// (RFC 768) include in their checksums.
//
// Addresses are [4]byte: comparable, allocation-free, and directly usable
// as map keys for a connection 4-tuple; netip.AddrFrom4 converts one for
// free when a netip.Addr is wanted.
//
// [Parse] validates everything the receive path needs before trusting a
// header: version 4, IHL ≥ 5, the header and the total length inside the
// buffer, total length ≥ header length, and the header checksum. It trims
// the returned view to Total Length, dropping Ethernet padding. Fragments
// are not rejected here; callers test [Header.IsFragment]. Options are
// length-checked only (IHL), not interpreted.
package ipv4

import (
	"encoding/binary"
	"errors"

	"xrnic/wire/inet"
)

// Lengths and the version number.
const (
	MinHeaderLen = 20
	MaxHeaderLen = 60
	MaxOptionLen = MaxHeaderLen - MinHeaderLen
	AddrLen      = 4
	Version      = 4
)

// IP protocol numbers (IANA "Assigned Internet Protocol Numbers").
const (
	ProtoICMP uint8 = 1
	ProtoTCP  uint8 = 6
	ProtoUDP  uint8 = 17
)

// Flag bits of the 3-bit Flags field, as returned by [Header.Flags].
const (
	FlagMF uint8 = 1 << 0 // more fragments
	FlagDF uint8 = 1 << 1 // don't fragment
)

// Errors.
var (
	ErrTruncated   = errors.New("ipv4: packet shorter than its header or total length")
	ErrVersion     = errors.New("ipv4: version is not 4")
	ErrHeaderLen   = errors.New("ipv4: IHL below 5")
	ErrTotalLen    = errors.New("ipv4: total length below header length")
	ErrChecksum    = errors.New("ipv4: bad header checksum")
	ErrOptions     = errors.New("ipv4: options longer than 40 bytes or not a multiple of 4")
	ErrShortBuffer = errors.New("ipv4: buffer too small for the header")
	ErrField       = errors.New("ipv4: field out of range")
)

// Header is a view of an IPv4 packet starting at its header. Accessors
// assume the lengths were checked by [Parse] or the header was written by
// [Put].
type Header []byte

// Parse validates the IPv4 header at the start of b (see the package
// documentation) and returns the packet trimmed to its Total Length.
func Parse(b []byte) (Header, error) {
	h, err := ParseNoChecksum(b)
	if err != nil {
		return nil, err
	}
	if !h.ChecksumValid() {
		return nil, ErrChecksum
	}
	return h, nil
}

// ParseNoChecksum is [Parse] without the header checksum check.
func ParseNoChecksum(b []byte) (Header, error) {
	if len(b) < MinHeaderLen {
		return nil, ErrTruncated
	}
	if b[0]>>4 != Version {
		return nil, ErrVersion
	}
	hl := int(b[0]&0x0f) * 4
	if hl < MinHeaderLen {
		return nil, ErrHeaderLen
	}
	if hl > len(b) {
		return nil, ErrTruncated
	}
	tl := int(binary.BigEndian.Uint16(b[2:]))
	if tl < hl {
		return nil, ErrTotalLen
	}
	if tl > len(b) {
		return nil, ErrTruncated
	}
	return Header(b[:tl]), nil
}

// Version returns the version field.
func (h Header) Version() uint8 { return h[0] >> 4 }

// IHL returns the Internet Header Length field in 32-bit words.
func (h Header) IHL() uint8 { return h[0] & 0x0f }

// HeaderLen returns the header length in bytes (4·IHL).
func (h Header) HeaderLen() int { return int(h[0]&0x0f) * 4 }

// OptionsLen returns the length of the options in bytes.
func (h Header) OptionsLen() int { return h.HeaderLen() - MinHeaderLen }

// Options returns the option bytes (possibly empty).
func (h Header) Options() []byte { return h[MinHeaderLen:h.HeaderLen()] }

// TOS returns the whole second octet (DSCP<<2 | ECN).
func (h Header) TOS() uint8 { return h[1] }

// SetTOS sets the second octet.
func (h Header) SetTOS(v uint8) { h[1] = v }

// DSCP returns the 6-bit Differentiated Services code point.
func (h Header) DSCP() uint8 { return h[1] >> 2 }

// SetDSCP sets the DSCP (low 6 bits of v).
func (h Header) SetDSCP(v uint8) { h[1] = v<<2 | h[1]&0x03 }

// ECN returns the 2-bit ECN field.
func (h Header) ECN() uint8 { return h[1] & 0x03 }

// SetECN sets the ECN field (low 2 bits of v).
func (h Header) SetECN(v uint8) { h[1] = h[1]&0xfc | v&0x03 }

// TotalLen returns the Total Length field (header plus payload).
func (h Header) TotalLen() uint16 { return binary.BigEndian.Uint16(h[2:]) }

// SetTotalLen sets the Total Length field.
func (h Header) SetTotalLen(v uint16) { binary.BigEndian.PutUint16(h[2:], v) }

// ID returns the Identification field.
func (h Header) ID() uint16 { return binary.BigEndian.Uint16(h[4:]) }

// SetID sets the Identification field.
func (h Header) SetID(v uint16) { binary.BigEndian.PutUint16(h[4:], v) }

// Flags returns the 3-bit Flags field ([FlagDF], [FlagMF]; bit 2 is
// reserved).
func (h Header) Flags() uint8 { return h[6] >> 5 }

// SetFlags sets the Flags field (low 3 bits of v).
func (h Header) SetFlags(v uint8) { h[6] = v<<5 | h[6]&0x1f }

// DF reports the Don't Fragment flag.
func (h Header) DF() bool { return h[6]&0x40 != 0 }

// MF reports the More Fragments flag.
func (h Header) MF() bool { return h[6]&0x20 != 0 }

// FragmentOffset returns the fragment offset in 8-byte units.
func (h Header) FragmentOffset() uint16 { return binary.BigEndian.Uint16(h[6:]) & 0x1fff }

// SetFragmentOffset sets the fragment offset (8-byte units, low 13 bits).
func (h Header) SetFragmentOffset(v uint16) {
	binary.BigEndian.PutUint16(h[6:], binary.BigEndian.Uint16(h[6:])&0xe000|v&0x1fff)
}

// IsFragment reports whether the packet is a fragment (MF set or a nonzero
// fragment offset).
func (h Header) IsFragment() bool { return binary.BigEndian.Uint16(h[6:])&0x3fff != 0 }

// TTL returns the Time to Live.
func (h Header) TTL() uint8 { return h[8] }

// SetTTL sets the Time to Live.
func (h Header) SetTTL(v uint8) { h[8] = v }

// Protocol returns the payload protocol number.
func (h Header) Protocol() uint8 { return h[9] }

// SetProtocol sets the payload protocol number.
func (h Header) SetProtocol(v uint8) { h[9] = v }

// Checksum returns the header checksum field.
func (h Header) Checksum() uint16 { return binary.BigEndian.Uint16(h[10:]) }

// SetChecksum sets the header checksum field.
func (h Header) SetChecksum(v uint16) { binary.BigEndian.PutUint16(h[10:], v) }

// Src returns the source address.
func (h Header) Src() [4]byte { return [4]byte(h[12:16]) }

// SetSrc sets the source address.
func (h Header) SetSrc(a [4]byte) { copy(h[12:16], a[:]) }

// Dst returns the destination address.
func (h Header) Dst() [4]byte { return [4]byte(h[16:20]) }

// SetDst sets the destination address.
func (h Header) SetDst(a [4]byte) { copy(h[16:20], a[:]) }

// Payload returns the bytes after the header up to Total Length (the view
// returned by Parse is already trimmed to Total Length).
func (h Header) Payload() []byte { return h[h.HeaderLen():h.TotalLen()] }

// ComputeChecksum returns the header checksum computed with the checksum
// field taken as zero; the view is not modified.
func (h Header) ComputeChecksum() uint16 {
	hl := h.HeaderLen()
	return inet.Sum{}.Add(h[:10]).Add(h[12:hl]).Checksum()
}

// UpdateChecksum recomputes the header checksum and stores it.
func (h Header) UpdateChecksum() { h.SetChecksum(h.ComputeChecksum()) }

// ChecksumValid reports whether the header checksum verifies.
func (h Header) ChecksumValid() bool { return inet.Checksum(h[:h.HeaderLen()]) == 0 }

// PseudoHeaderSum returns the partial sum of the pseudo-header of the
// payload carried by h: source, destination, zero, protocol and the payload
// length (Total Length minus header length).
func (h Header) PseudoHeaderSum() inet.Sum {
	return PseudoHeaderSum(h.Src(), h.Dst(), h.Protocol(), uint16(int(h.TotalLen())-h.HeaderLen()))
}

// PseudoHeaderSum returns the ones' complement partial sum of the 12-byte
// IPv4 pseudo-header (RFC 9293 §3.1, RFC 768): src, dst, a zero byte, the
// protocol and the transport length (transport header plus data). Continue
// it with the transport segment's bytes.
func PseudoHeaderSum(src, dst [4]byte, proto uint8, length uint16) inet.Sum {
	s := uint32(src[0])<<8 | uint32(src[1])
	s += uint32(src[2])<<8 | uint32(src[3])
	s += uint32(dst[0])<<8 | uint32(dst[1])
	s += uint32(dst[2])<<8 | uint32(dst[3])
	s += uint32(proto)
	s += uint32(length)
	// At most six 16-bit terms: two folds suffice.
	s = (s >> 16) + (s & 0xffff)
	s = (s >> 16) + (s & 0xffff)
	return inet.FromFold(uint16(s))
}

// Fields are the values [Put] writes. Flags uses [FlagDF]/[FlagMF];
// FragmentOffset is in 8-byte units; TotalLen covers header and payload.
type Fields struct {
	TOS            uint8
	TotalLen       uint16
	ID             uint16
	Flags          uint8
	FragmentOffset uint16
	TTL            uint8
	Protocol       uint8
	Src, Dst       [4]byte
	Options        []byte // copied verbatim; length a multiple of 4, ≤ 40
}

// Put writes an IPv4 header with the given fields into b, computes its
// checksum, and returns the header length. It does not write the payload.
func Put(b []byte, f *Fields) (int, error) {
	ol := len(f.Options)
	if ol > MaxOptionLen || ol%4 != 0 {
		return 0, ErrOptions
	}
	hl := MinHeaderLen + ol
	if len(b) < hl {
		return 0, ErrShortBuffer
	}
	if int(f.TotalLen) < hl {
		return 0, ErrTotalLen
	}
	if f.Flags > 7 || f.FragmentOffset > 0x1fff {
		return 0, ErrField
	}
	h := Header(b)
	h[0] = Version<<4 | uint8(hl/4)
	h[1] = f.TOS
	binary.BigEndian.PutUint16(h[2:], f.TotalLen)
	binary.BigEndian.PutUint16(h[4:], f.ID)
	binary.BigEndian.PutUint16(h[6:], uint16(f.Flags)<<13|f.FragmentOffset)
	h[8] = f.TTL
	h[9] = f.Protocol
	h[10], h[11] = 0, 0
	copy(h[12:16], f.Src[:])
	copy(h[16:20], f.Dst[:])
	copy(h[20:hl], f.Options)
	h.SetChecksum(inet.Checksum(h[:hl]))
	return hl, nil
}
