package mpa

import (
	"encoding/binary"
)

// MPA Request/Reply frame constants (RFC 5044 §7.1.1, RFC 6581 §6).
const (
	// KeyRequest and KeyReply are the 16-byte frame keys.
	KeyRequest = "MPA ID Req Frame"
	KeyReply   = "MPA ID Rep Frame"
	// KeyLen is the length of the key.
	KeyLen = 16
	// FrameHeaderLen is key + flags + Rev + PD_Length.
	FrameHeaderLen = 20
	// MaxPrivateData is the most private data a frame may carry, the
	// RFC 6581 enhanced word included.
	MaxPrivateData = 512
	// MaxFrameLen is the longest valid frame.
	MaxFrameLen = FrameHeaderLen + MaxPrivateData

	// Flag bits of byte 16.
	FlagM = 0x80 // markers wanted by the sender of this frame (as receiver)
	FlagC = 0x40 // CRC wanted
	FlagR = 0x20 // Reply only: connection rejected
	FlagS = 0x10 // RFC 6581: private data starts with the enhanced word

	// Revisions.
	Rev0 = 0 // RDMA Consortium MPA
	Rev1 = 1 // RFC 5044
	Rev2 = 2 // RFC 6581 enhanced connection setup
)

// Kind says which frame a caller expects.
type Kind uint8

const (
	Request Kind = iota // "MPA ID Req Frame", sent by the initiator
	Reply               // "MPA ID Rep Frame", sent by the responder
)

func (k Kind) String() string {
	if k == Request {
		return "request"
	}
	return "reply"
}

func (k Kind) key() string {
	if k == Request {
		return KeyRequest
	}
	return KeyReply
}

func (k Kind) other() string {
	if k == Request {
		return KeyReply
	}
	return KeyRequest
}

// Frame is a view of a validated MPA Request or Reply frame, exactly
// FrameHeaderLen+PDLength() bytes long when it comes from ParseFrame.
type Frame []byte

// Key returns the 16 key bytes.
func (f Frame) Key() []byte { return f[:KeyLen] }

// IsRequest reports whether the key is the Request key.
func (f Frame) IsRequest() bool { return string(f[:KeyLen]) == KeyRequest }

// IsReply reports whether the key is the Reply key.
func (f Frame) IsReply() bool { return string(f[:KeyLen]) == KeyReply }

// Flags returns the flag byte (M, C, R, S and 4 reserved bits).
func (f Frame) Flags() uint8 { return f[16] }

func (f Frame) setFlag(bit uint8, v bool) {
	if v {
		f[16] |= bit
	} else {
		f[16] &^= bit
	}
}

// M reports the Marker flag: the sender of this frame wants to receive
// markers.
func (f Frame) M() bool { return f[16]&FlagM != 0 }

// SetM sets the Marker flag.
func (f Frame) SetM(v bool) { f.setFlag(FlagM, v) }

// C reports the CRC flag.
func (f Frame) C() bool { return f[16]&FlagC != 0 }

// SetC sets the CRC flag.
func (f Frame) SetC(v bool) { f.setFlag(FlagC, v) }

// R reports the Reject flag (meaningful in a Reply only).
func (f Frame) R() bool { return f[16]&FlagR != 0 }

// SetR sets the Reject flag.
func (f Frame) SetR(v bool) { f.setFlag(FlagR, v) }

// S reports the RFC 6581 enhanced flag. It is only meaningful with Rev 2;
// for Rev 0/1 it is a reserved bit (see Enhanced).
func (f Frame) S() bool { return f[16]&FlagS != 0 }

// SetS sets the S flag.
func (f Frame) SetS(v bool) { f.setFlag(FlagS, v) }

// Rev returns the revision byte.
func (f Frame) Rev() uint8 { return f[17] }

// SetRev sets the revision byte.
func (f Frame) SetRev(v uint8) { f[17] = v }

// PDLength returns PD_Length.
func (f Frame) PDLength() int { return int(binary.BigEndian.Uint16(f[18:])) }

// SetPDLength sets PD_Length.
func (f Frame) SetPDLength(n int) { binary.BigEndian.PutUint16(f[18:], uint16(n)) }

// PrivateData returns all private data, the enhanced word included.
func (f Frame) PrivateData() []byte { return f[FrameHeaderLen : FrameHeaderLen+f.PDLength()] }

// IsEnhanced reports whether the frame carries the RFC 6581 enhanced word:
// S=1 and Rev=2. (With Rev 0 or 1 the S bit is a reserved bit that RFC 5044
// says must not be checked.)
func (f Frame) IsEnhanced() bool { return f.S() && f.Rev() == Rev2 }

// Enhanced returns the RFC 6581 enhanced word; ok is false when the frame
// is not enhanced (see IsEnhanced).
func (f Frame) Enhanced() (e Enhanced, ok bool) {
	if !f.IsEnhanced() || f.PDLength() < EnhancedLen {
		return Enhanced{}, false
	}
	return DecodeEnhanced(binary.BigEndian.Uint32(f[FrameHeaderLen:])), true
}

// SetEnhanced overwrites the enhanced word (the first 4 bytes of private
// data); the frame must already be laid out as enhanced.
func (f Frame) SetEnhanced(e Enhanced) { binary.BigEndian.PutUint32(f[FrameHeaderLen:], e.Uint32()) }

// ULPPrivateData returns the private data that belongs to the ULP: after
// the enhanced word when there is one, all of it otherwise.
func (f Frame) ULPPrivateData() []byte {
	pd := f.PrivateData()
	if f.IsEnhanced() {
		return pd[EnhancedLen:]
	}
	return pd
}

// FrameRemaining takes the first FrameHeaderLen bytes read from TCP and
// returns how many more bytes the frame has (PD_Length), so a reader knows
// how much to read. It checks the key against kind, Rev (0, 1 or 2) and
// rejects PD_Length > 512 before anything else is read.
func FrameRemaining(hdr []byte, kind Kind) (int, error) {
	if len(hdr) < FrameHeaderLen {
		return 0, ErrTruncated
	}
	switch string(hdr[:KeyLen]) {
	case kind.key():
	case kind.other():
		return 0, ErrUnexpectedKey
	default:
		return 0, ErrBadKey
	}
	f := Frame(hdr)
	if f.Rev() > Rev2 {
		return 0, ErrBadRev
	}
	n := f.PDLength()
	if n > MaxPrivateData {
		return 0, ErrPrivateDataTooLong
	}
	return n, nil
}

// ParseFrame validates an MPA frame of the given kind at the start of b and
// returns a view of exactly its bytes (bytes after it, such as a first FPDU
// read in the same TCP read, are not part of the view; len(frame) is what
// was consumed). It checks the key, Rev in {0, 1, 2} (whether a revision is
// acceptable is the caller's decision), PD_Length <= 512 and that many bytes
// present, and the enhanced word's presence when S=1 and Rev=2.
func ParseFrame(b []byte, kind Kind) (Frame, error) {
	n, err := FrameRemaining(b, kind)
	if err != nil {
		return nil, err
	}
	if len(b) < FrameHeaderLen+n {
		return nil, ErrTruncated
	}
	f := Frame(b[:FrameHeaderLen+n])
	if f.IsEnhanced() && n < EnhancedLen {
		return nil, ErrNoEnhanced
	}
	return f, nil
}

// FrameParams describes a frame to encode.
type FrameParams struct {
	M, C bool
	// R is the Reject flag; it must be false for a Request.
	R bool
	// Rev is the revision to send: 1, or 2 for RFC 6581 (required when
	// HasEnhanced is set). 0 is allowed for RDMA Consortium interop.
	Rev uint8
	// HasEnhanced sets S=1 and writes Enhanced as the first 4 bytes of
	// private data.
	HasEnhanced bool
	Enhanced    Enhanced
}

// FrameLen returns the encoded length of a frame with the given parameters
// and ULP private data.
func FrameLen(p FrameParams, ulpPrivateData int) int {
	n := FrameHeaderLen + ulpPrivateData
	if p.HasEnhanced {
		n += EnhancedLen
	}
	return n
}

// PutFrame encodes a frame of the given kind into b: header, the enhanced
// word if p.HasEnhanced, then ulpPrivateData. It returns the number of
// bytes written. Reserved flag bits are written as zero.
func PutFrame(b []byte, kind Kind, p FrameParams, ulpPrivateData []byte) (int, error) {
	pd := len(ulpPrivateData)
	if p.HasEnhanced {
		pd += EnhancedLen
		if p.Rev < Rev2 {
			return 0, ErrBadRev
		}
	}
	if p.Rev > Rev2 {
		return 0, ErrBadRev
	}
	if pd > MaxPrivateData {
		return 0, ErrPrivateDataTooLong
	}
	if kind == Request && p.R {
		return 0, ErrRejectInRequest
	}
	n := FrameHeaderLen + pd
	if len(b) < n {
		return 0, ErrBufferTooSmall
	}
	copy(b, kind.key())
	f := Frame(b[:n])
	f[16] = 0
	f.SetM(p.M)
	f.SetC(p.C)
	f.SetR(p.R)
	f.SetS(p.HasEnhanced)
	f.SetRev(p.Rev)
	f.SetPDLength(pd)
	off := FrameHeaderLen
	if p.HasEnhanced {
		f.SetEnhanced(p.Enhanced)
		off += EnhancedLen
	}
	copy(f[off:], ulpPrivateData)
	return n, nil
}
