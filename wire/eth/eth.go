// Package eth is a view and encoder for Ethernet II frame headers (IEEE
// 802.3 with an EtherType, RFC 894) with an optional single IEEE 802.1Q VLAN
// tag.
//
// An untagged header is 14 bytes: destination MAC, source MAC, EtherType.
// A tagged header is 18 bytes: the 0x8100 TPID where the EtherType would be,
// a 16-bit Tag Control Information word (3-bit priority, 1-bit drop
// eligible indicator, 12-bit VLAN ID), then the inner EtherType. [Frame]
// accessors hide the difference: EtherType returns the inner type,
// HeaderLen returns 14 or 18, Payload starts after the tag.
//
// Only one tag is understood. A stacked (Q-in-Q, 802.1ad TPID 0x88a8) frame
// is reported with EtherType 0x88a8 and no VLAN, so the caller drops it.
// The frame check sequence is not part of what the NIC or AF_XDP hands us
// and is not handled. ARP is out of scope beyond its EtherType.
package eth

import (
	"encoding/binary"
	"errors"
)

// Header lengths.
const (
	HeaderLen     = 14 // untagged Ethernet II header
	VLANHeaderLen = 18 // header with one 802.1Q tag
	AddrLen       = 6
)

// EtherType is the 16-bit protocol type of an Ethernet II frame.
type EtherType uint16

// EtherTypes.
const (
	TypeIPv4 EtherType = 0x0800
	TypeARP  EtherType = 0x0806
	TypeVLAN EtherType = 0x8100 // IEEE 802.1Q tag protocol identifier
	TypeIPv6 EtherType = 0x86dd
	TypeQinQ EtherType = 0x88a8 // IEEE 802.1ad service tag (not parsed)
)

// MAC is a 48-bit IEEE 802 MAC address.
type MAC [AddrLen]byte

// String formats m as six colon-separated lowercase hex bytes.
func (m MAC) String() string {
	const hex = "0123456789abcdef"
	var b [3*AddrLen - 1]byte
	for i, v := range m {
		if i > 0 {
			b[3*i-1] = ':'
		}
		b[3*i], b[3*i+1] = hex[v>>4], hex[v&0xf]
	}
	return string(b[:])
}

// Broadcast is the all-ones MAC address.
var Broadcast = MAC{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}

// Errors.
var (
	ErrTruncated   = errors.New("eth: frame shorter than its header")
	ErrShortBuffer = errors.New("eth: buffer too small for the header")
	ErrVLANID      = errors.New("eth: VLAN ID or priority out of range")
)

// Frame is a view of an Ethernet frame starting at its header. Accessors
// assume the length was checked by [Parse] (or that the caller built the
// header with [Put] or [PutVLAN]).
type Frame []byte

// Parse checks that b holds a complete Ethernet header (14 bytes, or 18 if
// it carries an 802.1Q tag) and returns it as a Frame.
func Parse(b []byte) (Frame, error) {
	if len(b) < HeaderLen {
		return nil, ErrTruncated
	}
	if EtherType(binary.BigEndian.Uint16(b[12:])) == TypeVLAN && len(b) < VLANHeaderLen {
		return nil, ErrTruncated
	}
	return Frame(b), nil
}

// Dst returns the destination MAC address.
func (f Frame) Dst() MAC { return MAC(f[0:6]) }

// SetDst sets the destination MAC address.
func (f Frame) SetDst(m MAC) { copy(f[0:6], m[:]) }

// Src returns the source MAC address.
func (f Frame) Src() MAC { return MAC(f[6:12]) }

// SetSrc sets the source MAC address.
func (f Frame) SetSrc(m MAC) { copy(f[6:12], m[:]) }

// OuterType returns the EtherType field at offset 12 (TypeVLAN for a tagged
// frame).
func (f Frame) OuterType() EtherType { return EtherType(binary.BigEndian.Uint16(f[12:])) }

// HasVLAN reports whether the frame carries an 802.1Q tag.
func (f Frame) HasVLAN() bool { return f.OuterType() == TypeVLAN }

// HeaderLen returns the header length: 14, or 18 with a VLAN tag.
func (f Frame) HeaderLen() int {
	if f.HasVLAN() {
		return VLANHeaderLen
	}
	return HeaderLen
}

// EtherType returns the type of the payload: the inner EtherType of a
// tagged frame, else the EtherType field.
func (f Frame) EtherType() EtherType {
	if f.HasVLAN() {
		return EtherType(binary.BigEndian.Uint16(f[16:]))
	}
	return f.OuterType()
}

// SetEtherType sets the payload type (the inner one of a tagged frame).
func (f Frame) SetEtherType(t EtherType) {
	if f.HasVLAN() {
		binary.BigEndian.PutUint16(f[16:], uint16(t))
		return
	}
	binary.BigEndian.PutUint16(f[12:], uint16(t))
}

// TCI returns the 802.1Q Tag Control Information, 0 if untagged.
func (f Frame) TCI() uint16 {
	if !f.HasVLAN() {
		return 0
	}
	return binary.BigEndian.Uint16(f[14:])
}

// SetTCI sets the Tag Control Information of a tagged frame; it does
// nothing on an untagged frame.
func (f Frame) SetTCI(tci uint16) {
	if f.HasVLAN() {
		binary.BigEndian.PutUint16(f[14:], tci)
	}
}

// VLANID returns the 12-bit VLAN identifier, 0 if untagged (0 also means
// "priority tag only" in a tagged frame).
func (f Frame) VLANID() uint16 { return f.TCI() & 0x0fff }

// Priority returns the 3-bit 802.1p priority code point, 0 if untagged.
func (f Frame) Priority() uint8 { return uint8(f.TCI() >> 13) }

// DEI returns the drop eligible indicator, false if untagged.
func (f Frame) DEI() bool { return f.TCI()&0x1000 != 0 }

// Payload returns the bytes after the header.
func (f Frame) Payload() []byte { return f[f.HeaderLen():] }

// Put writes an untagged 14-byte header into b and returns its length.
func Put(b []byte, dst, src MAC, t EtherType) (int, error) {
	if len(b) < HeaderLen {
		return 0, ErrShortBuffer
	}
	copy(b[0:6], dst[:])
	copy(b[6:12], src[:])
	binary.BigEndian.PutUint16(b[12:], uint16(t))
	return HeaderLen, nil
}

// PutVLAN writes an 18-byte header with an 802.1Q tag (priority pcp, VLAN
// id vid, DEI clear) and inner type t into b and returns its length.
func PutVLAN(b []byte, dst, src MAC, pcp uint8, vid uint16, t EtherType) (int, error) {
	if len(b) < VLANHeaderLen {
		return 0, ErrShortBuffer
	}
	if vid > 0x0fff || pcp > 7 {
		return 0, ErrVLANID
	}
	copy(b[0:6], dst[:])
	copy(b[6:12], src[:])
	binary.BigEndian.PutUint16(b[12:], uint16(TypeVLAN))
	binary.BigEndian.PutUint16(b[14:], uint16(pcp)<<13|vid)
	binary.BigEndian.PutUint16(b[16:], uint16(t))
	return VLANHeaderLen, nil
}
