// Package tcp is a view and encoder for TCP segments (RFC 9293 §3.1), their
// options (MSS RFC 9293 §3.7.1, Window Scale and Timestamps RFC 7323, SACK
// RFC 2018), their checksum over the IPv4 pseudo-header, and wrap-safe
// sequence number arithmetic ([Seq], RFC 9293 §3.4).
//
// A [Header] views a whole segment: the header, its options, then the
// payload up to the end of the slice (the caller passes the IPv4 payload,
// already trimmed to Total Length by ipv4.Parse). [Parse] checks only the
// fixed header and the Data Offset; options are checked lazily, by
// [OptionIter] or [ParseOptions], which report malformed option lists as
// errors and never panic.
//
// # Checksum offload ("partial" checksums)
//
// A sender that offloads the TCP checksum (Linux CHECKSUM_PARTIAL) puts
// only the folded ones' complement sum of the pseudo-header into the
// checksum field (not complemented: Linux stores ~csum_tcpudp_magic(...,0))
// and expects the NIC to sum from the TCP header to the end and store the
// complement. Across a veth pair nothing completes it: the kernel trusts the
// skb's checksum state, but a frame redirected to AF_XDP is bare bytes and
// arrives with that half-done field, so a strict check rejects every
// segment. [Header.IsPartialChecksum] recognises such a field (it equals the
// pseudo-header sum) and [Header.CompletePartialChecksum] does what the NIC
// would have done. Accepting partial checksums trusts the sender's memory
// path instead of a checksum, so do it only on links where the peer is the
// local kernel (veth) or disable offload on the peer instead (ethtool -K
// <peer> tx off). A corrupted segment matches the pseudo-header sum by
// chance with probability about 2^-16.
package tcp

import (
	"encoding/binary"
	"errors"

	"xrnic/wire/inet"
	"xrnic/wire/ipv4"
)

// Lengths.
const (
	MinHeaderLen  = 20
	MaxHeaderLen  = 60
	MaxOptionsLen = MaxHeaderLen - MinHeaderLen
)

// Flags are the TCP control bits (RFC 9293 §3.1; CWR and ECE from RFC 3168).
type Flags uint8

// Control bits.
const (
	FlagFIN Flags = 1 << iota
	FlagSYN
	FlagRST
	FlagPSH
	FlagACK
	FlagURG
	FlagECE
	FlagCWR
)

// String lists the set flags, e.g. "SYN|ACK" (for logs and test output).
func (f Flags) String() string {
	if f == 0 {
		return "0"
	}
	names := [...]string{"FIN", "SYN", "RST", "PSH", "ACK", "URG", "ECE", "CWR"}
	s := ""
	for i, n := range names {
		if f&(1<<i) != 0 {
			if s != "" {
				s += "|"
			}
			s += n
		}
	}
	return s
}

// Errors.
var (
	ErrTruncated   = errors.New("tcp: segment shorter than its header")
	ErrDataOffset  = errors.New("tcp: data offset below 5")
	ErrShortBuffer = errors.New("tcp: buffer too small for the header")
)

// Header is a view of a TCP segment: header, options, payload.
type Header []byte

// Parse checks that b starts with a complete TCP header (Data Offset ≥ 5
// and the header, options included, inside b) and returns b as a Header.
func Parse(b []byte) (Header, error) {
	if len(b) < MinHeaderLen {
		return nil, ErrTruncated
	}
	off := int(b[12]>>4) * 4
	if off < MinHeaderLen {
		return nil, ErrDataOffset
	}
	if off > len(b) {
		return nil, ErrTruncated
	}
	return Header(b), nil
}

// SrcPort returns the source port.
func (h Header) SrcPort() uint16 { return binary.BigEndian.Uint16(h[0:]) }

// SetSrcPort sets the source port.
func (h Header) SetSrcPort(v uint16) { binary.BigEndian.PutUint16(h[0:], v) }

// DstPort returns the destination port.
func (h Header) DstPort() uint16 { return binary.BigEndian.Uint16(h[2:]) }

// SetDstPort sets the destination port.
func (h Header) SetDstPort(v uint16) { binary.BigEndian.PutUint16(h[2:], v) }

// Seq returns the sequence number.
func (h Header) Seq() Seq { return Seq(binary.BigEndian.Uint32(h[4:])) }

// SetSeq sets the sequence number.
func (h Header) SetSeq(v Seq) { binary.BigEndian.PutUint32(h[4:], uint32(v)) }

// Ack returns the acknowledgment number.
func (h Header) Ack() Seq { return Seq(binary.BigEndian.Uint32(h[8:])) }

// SetAck sets the acknowledgment number.
func (h Header) SetAck(v Seq) { binary.BigEndian.PutUint32(h[8:], uint32(v)) }

// DataOffset returns the header length in bytes (4·Data Offset).
func (h Header) DataOffset() int { return int(h[12]>>4) * 4 }

// Flags returns the control bits.
func (h Header) Flags() Flags { return Flags(h[13]) }

// SetFlags sets the control bits.
func (h Header) SetFlags(f Flags) { h[13] = uint8(f) }

// Window returns the (unscaled) window field.
func (h Header) Window() uint16 { return binary.BigEndian.Uint16(h[14:]) }

// SetWindow sets the window field.
func (h Header) SetWindow(v uint16) { binary.BigEndian.PutUint16(h[14:], v) }

// Checksum returns the checksum field.
func (h Header) Checksum() uint16 { return binary.BigEndian.Uint16(h[16:]) }

// SetChecksum sets the checksum field.
func (h Header) SetChecksum(v uint16) { binary.BigEndian.PutUint16(h[16:], v) }

// Urgent returns the urgent pointer.
func (h Header) Urgent() uint16 { return binary.BigEndian.Uint16(h[18:]) }

// SetUrgent sets the urgent pointer.
func (h Header) SetUrgent(v uint16) { binary.BigEndian.PutUint16(h[18:], v) }

// Options returns the option bytes (possibly empty).
func (h Header) Options() []byte { return h[MinHeaderLen:h.DataOffset()] }

// OptionIter returns an iterator over the options.
func (h Header) OptionIter() OptionIter { return NewOptionIter(h.Options()) }

// Payload returns the bytes after the header.
func (h Header) Payload() []byte { return h[h.DataOffset():] }

// PseudoHeaderSum returns the IPv4 pseudo-header partial sum for a TCP
// segment of segLen bytes (header plus payload) from src to dst.
func PseudoHeaderSum(src, dst [4]byte, segLen int) inet.Sum {
	return ipv4.PseudoHeaderSum(src, dst, ipv4.ProtoTCP, uint16(segLen))
}

// ComputeChecksum returns the checksum of the segment continued from the
// pseudo-header sum, with the checksum field taken as zero. The view is not
// modified.
func (h Header) ComputeChecksum(pseudo inet.Sum) uint16 {
	return pseudo.Add(h[:16]).Add(h[18:]).Checksum()
}

// UpdateChecksum computes the checksum and stores it.
func (h Header) UpdateChecksum(pseudo inet.Sum) { h.SetChecksum(h.ComputeChecksum(pseudo)) }

// ChecksumValid reports whether the checksum verifies against the
// pseudo-header sum.
func (h Header) ChecksumValid(pseudo inet.Sum) bool {
	return pseudo.Add(h).Checksum() == 0
}

// IsPartialChecksum reports whether the checksum field holds only the
// folded pseudo-header sum, as left by a sender with checksum offload (see
// the package documentation). Both ones' complement zeros compare equal.
func (h Header) IsPartialChecksum(pseudo inet.Sum) bool {
	c, p := h.Checksum(), pseudo.Fold()
	return c == p || (c == 0 || c == 0xffff) && (p == 0 || p == 0xffff)
}

// CompletePartialChecksum finishes a partial checksum the way an
// offloading NIC does: it sums the whole segment, the pseudo-header sum in
// the checksum field included, and stores the complement. Call it only
// after IsPartialChecksum; the result then verifies with ChecksumValid.
func (h Header) CompletePartialChecksum() {
	h.SetChecksum(inet.Checksum(h))
}

// Fields are the fixed-header values [Put] writes.
type Fields struct {
	SrcPort, DstPort uint16
	Seq, Ack         Seq
	Flags            Flags
	Window           uint16
	Urgent           uint16
}

// Put writes a TCP header with the given fields and options (o may be nil)
// into b and returns the header length. The checksum field is zero: copy
// the payload after the header, then call UpdateChecksum on the segment.
func Put(b []byte, f *Fields, o *Options) (int, error) {
	if len(b) < MinHeaderLen {
		return 0, ErrShortBuffer
	}
	n := MinHeaderLen
	if o != nil {
		m, err := PutOptions(b[MinHeaderLen:], o)
		if err != nil {
			return 0, err
		}
		n += m
	}
	binary.BigEndian.PutUint16(b[0:], f.SrcPort)
	binary.BigEndian.PutUint16(b[2:], f.DstPort)
	binary.BigEndian.PutUint32(b[4:], uint32(f.Seq))
	binary.BigEndian.PutUint32(b[8:], uint32(f.Ack))
	b[12] = uint8(n/4) << 4
	b[13] = uint8(f.Flags)
	binary.BigEndian.PutUint16(b[14:], f.Window)
	b[16], b[17] = 0, 0
	binary.BigEndian.PutUint16(b[18:], f.Urgent)
	return n, nil
}
