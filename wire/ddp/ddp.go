// Package ddp reads and writes Direct Data Placement segment headers
// (RFC 5041 §4).
//
// A DDP segment is the ULPDU of one MPA FPDU: a 14-byte tagged header
// (RFC 5041 §4.2) or an 18-byte untagged header (§4.3) followed by the
// payload. DDP has no length field; the lower layer (MPA ULPDU_Length) gives
// the segment length, so a Segment is simply the whole ULPDU.
//
// The package offers typed []byte views (Tagged, Untagged, Segment) with
// accessor/setter pairs, length-checking constructors (ParseTagged,
// ParseUntagged, Parse) that return the predeclared sentinel ErrTruncated,
// and encoders (PutTagged, PutUntagged) that write into caller buffers.
// Nothing here allocates.
//
// Validate reports the DDP-level header faults a receiver can see from one
// segment alone (DDP version, RFC 5041 §4.1; queue number out of range,
// §7.2) as the predeclared *term.Error values. Checks that need stream state
// (MSN window, posted buffers, STag validity and bounds, MO against the
// buffer) belong to the engine, not to this package.
//
// The RsvdULP bytes are opaque to DDP. RDMAP (package rdmap) uses byte 0 as
// its control field and, on untagged segments, bytes 1..4 as the Invalidate
// STag; this package names them RsvdULP and RsvdULPWord.
package ddp

import (
	"encoding/binary"
	"errors"

	"xrnic/wire/term"
)

// Header lengths (RFC 5041 §4.2, §4.3).
const (
	TaggedHeaderLen   = 14
	UntaggedHeaderLen = 18
)

// Version is the DDP version of RFC 5041 (the DV field). Version 0 is the
// RDMA Consortium's DDP.
const Version = 1

// Control byte bits (RFC 5041 §4.2): T, L, 4 reserved bits, 2-bit DV.
const (
	FlagTagged  = 0x80 // T: tagged buffer model
	FlagLast    = 0x40 // L: last segment of the message
	maskRsvd    = 0x3C
	maskVersion = 0x03
)

// Common control byte values (DV = 1, Rsvd = 0).
const (
	CtrlUntagged     Control = Version            // 0x01
	CtrlUntaggedLast Control = FlagLast | Version // 0x41
	CtrlTagged       Control = FlagTagged | Version
	CtrlTaggedLast   Control = FlagTagged | FlagLast | Version // 0xC1
)

// Untagged queue numbers used by RDMAP (RFC 5040 §4.1 Fig. 4; RFC 7306
// §10.2). Each QN has its own MSN sequence per direction, starting at 1.
const (
	QNSend           uint32 = 0 // Send family and Immediate Data
	QNReadRequest    uint32 = 1 // RDMA Read Request and Atomic Request (one MSN sequence)
	QNTerminate      uint32 = 2 // Terminate (only ever MSN 1)
	QNAtomicResponse uint32 = 3 // Atomic Response (RFC 7306)
	// MaxQN is the highest queue number defined; larger values are
	// term.DDPUntaggedInvalidQN.
	MaxQN uint32 = QNAtomicResponse
)

// Sentinel errors of this package.
var (
	// ErrTruncated: the bytes are shorter than the header they must hold.
	ErrTruncated = errors.New("ddp: truncated header")
	// ErrShortBuffer: the caller's buffer cannot hold what was to be written.
	ErrShortBuffer = errors.New("ddp: buffer too short")
)

// Control is the DDP control byte (offset 0 of every segment).
type Control uint8

// MakeControl returns a version-1 control byte with reserved bits zero.
func MakeControl(tagged, last bool) Control {
	c := Control(Version)
	if tagged {
		c |= FlagTagged
	}
	if last {
		c |= FlagLast
	}
	return c
}

// Tagged reports the T bit.
func (c Control) Tagged() bool { return c&FlagTagged != 0 }

// Last reports the L bit.
func (c Control) Last() bool { return c&FlagLast != 0 }

// Rsvd returns the 4 reserved bits (sent as 0, not checked on receive).
func (c Control) Rsvd() uint8 { return uint8(c&maskRsvd) >> 2 }

// Version returns the 2-bit DV field.
func (c Control) Version() uint8 { return uint8(c & maskVersion) }

// HeaderLen returns the header length implied by the T bit.
func (c Control) HeaderLen() int {
	if c.Tagged() {
		return TaggedHeaderLen
	}
	return UntaggedHeaderLen
}

// Tagged is a view of a 14-byte tagged DDP header:
// control(1) RsvdULP(1) STag(4) TO(8).
type Tagged []byte

// ParseTagged checks that b holds a tagged header and returns a view of its
// first 14 bytes. It does not check the T bit.
func ParseTagged(b []byte) (Tagged, error) {
	if len(b) < TaggedHeaderLen {
		return nil, ErrTruncated
	}
	return Tagged(b[:TaggedHeaderLen]), nil
}

func (h Tagged) Control() Control     { return Control(h[0]) }
func (h Tagged) SetControl(c Control) { h[0] = byte(c) }
func (h Tagged) RsvdULP() uint8       { return h[1] }
func (h Tagged) SetRsvdULP(v uint8)   { h[1] = v }
func (h Tagged) STag() uint32         { return binary.BigEndian.Uint32(h[2:6]) }
func (h Tagged) SetSTag(v uint32)     { binary.BigEndian.PutUint32(h[2:6], v) }
func (h Tagged) TO() uint64           { return binary.BigEndian.Uint64(h[6:14]) }
func (h Tagged) SetTO(v uint64)       { binary.BigEndian.PutUint64(h[6:14], v) }

// PutTagged writes a version-1 tagged header (Rsvd = 0) into b and returns
// TaggedHeaderLen.
func PutTagged(b []byte, last bool, rsvdULP uint8, stag uint32, to uint64) (int, error) {
	if len(b) < TaggedHeaderLen {
		return 0, ErrShortBuffer
	}
	h := Tagged(b[:TaggedHeaderLen])
	h.SetControl(MakeControl(true, last))
	h.SetRsvdULP(rsvdULP)
	h.SetSTag(stag)
	h.SetTO(to)
	return TaggedHeaderLen, nil
}

// Untagged is a view of an 18-byte untagged DDP header:
// control(1) RsvdULP(5) QN(4) MSN(4) MO(4). RsvdULP is split into its first
// byte (RsvdULP, the RDMAP control byte) and the following 32-bit word
// (RsvdULPWord, RDMAP's Invalidate STag).
type Untagged []byte

// ParseUntagged checks that b holds an untagged header and returns a view of
// its first 18 bytes. It does not check the T bit.
func ParseUntagged(b []byte) (Untagged, error) {
	if len(b) < UntaggedHeaderLen {
		return nil, ErrTruncated
	}
	return Untagged(b[:UntaggedHeaderLen]), nil
}

func (h Untagged) Control() Control        { return Control(h[0]) }
func (h Untagged) SetControl(c Control)    { h[0] = byte(c) }
func (h Untagged) RsvdULP() uint8          { return h[1] }
func (h Untagged) SetRsvdULP(v uint8)      { h[1] = v }
func (h Untagged) RsvdULPWord() uint32     { return binary.BigEndian.Uint32(h[2:6]) }
func (h Untagged) SetRsvdULPWord(v uint32) { binary.BigEndian.PutUint32(h[2:6], v) }
func (h Untagged) QN() uint32              { return binary.BigEndian.Uint32(h[6:10]) }
func (h Untagged) SetQN(v uint32)          { binary.BigEndian.PutUint32(h[6:10], v) }
func (h Untagged) MSN() uint32             { return binary.BigEndian.Uint32(h[10:14]) }
func (h Untagged) SetMSN(v uint32)         { binary.BigEndian.PutUint32(h[10:14], v) }
func (h Untagged) MO() uint32              { return binary.BigEndian.Uint32(h[14:18]) }
func (h Untagged) SetMO(v uint32)          { binary.BigEndian.PutUint32(h[14:18], v) }

// PutUntagged writes a version-1 untagged header (Rsvd = 0) into b and
// returns UntaggedHeaderLen.
func PutUntagged(b []byte, last bool, rsvdULP uint8, word, qn, msn, mo uint32) (int, error) {
	if len(b) < UntaggedHeaderLen {
		return 0, ErrShortBuffer
	}
	h := Untagged(b[:UntaggedHeaderLen])
	h.SetControl(MakeControl(false, last))
	h.SetRsvdULP(rsvdULP)
	h.SetRsvdULPWord(word)
	h.SetQN(qn)
	h.SetMSN(msn)
	h.SetMO(mo)
	return UntaggedHeaderLen, nil
}

// Segment is a view of a whole DDP segment (an MPA ULPDU): header and
// payload. Obtain one with Parse, which guarantees the header is complete.
type Segment []byte

// Parse checks that b (a whole ULPDU) starts with a complete DDP header (14
// bytes if T is set, 18 otherwise) and returns it as a Segment. It checks
// structure only; see Validate for the protocol checks.
func Parse(b []byte) (Segment, error) {
	if len(b) == 0 {
		return nil, ErrTruncated
	}
	if len(b) < Control(b[0]).HeaderLen() {
		return nil, ErrTruncated
	}
	return Segment(b), nil
}

// Control returns the DDP control byte.
func (s Segment) Control() Control { return Control(s[0]) }

// IsTagged reports the T bit.
func (s Segment) IsTagged() bool { return s[0]&FlagTagged != 0 }

// Last reports the L bit.
func (s Segment) Last() bool { return s[0]&FlagLast != 0 }

// RsvdULP returns the first RsvdULP byte (the RDMAP control byte).
func (s Segment) RsvdULP() uint8 { return s[1] }

// HeaderLen returns 14 for a tagged segment, 18 for an untagged one.
func (s Segment) HeaderLen() int { return s.Control().HeaderLen() }

// Header returns the DDP header bytes.
func (s Segment) Header() []byte { return s[:s.HeaderLen()] }

// Payload returns the bytes after the DDP header (the DDP payload, which
// for some RDMAP messages starts with an RDMAP header).
func (s Segment) Payload() []byte { return s[s.HeaderLen():] }

// Tagged returns the tagged header view. The segment must be tagged.
func (s Segment) Tagged() Tagged { return Tagged(s[:TaggedHeaderLen]) }

// Untagged returns the untagged header view. The segment must be untagged.
func (s Segment) Untagged() Untagged { return Untagged(s[:UntaggedHeaderLen]) }

// Validate reports the DDP header faults visible in one segment, in RFC 5041
// §7 order of relevance: a DV other than 1 (or 0 too when rdmac is set,
// accepting the RDMA Consortium version) gives term.DDPTaggedInvalidVersion
// or term.DDPUntaggedInvalidVersion by the T bit; an untagged QN above MaxQN
// gives term.DDPUntaggedInvalidQN. It returns nil otherwise and allocates
// nothing. Whether the QN suits the message is RDMAP's business (see
// rdmap.Classify); MSN, MO, buffers and STags are the engine's.
func Validate(s Segment, rdmac bool) *term.Error {
	v := s.Control().Version()
	if v != Version && !(rdmac && v == 0) {
		if s.IsTagged() {
			return term.DDPTaggedInvalidVersion
		}
		return term.DDPUntaggedInvalidVersion
	}
	if !s.IsTagged() && s.Untagged().QN() > MaxQN {
		return term.DDPUntaggedInvalidQN
	}
	return nil
}
