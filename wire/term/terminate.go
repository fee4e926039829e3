package term

import (
	"encoding/binary"
	"errors"
	"strconv"
	"strings"
)

// Terminate header layout (RFC 5040 §4.8 Fig. 7 and 8). The header is the
// DDP payload of a Terminate message (untagged, QN 2, MSN 1, MO 0, L 1):
//
//	off 0  Terminate Control: Layer(4) EType(4) Code(8) M D R, 13 reserved bits
//	off 4  DDP Segment Length (16 bits), present iff D
//	off 6  Terminated DDP Header: 14 bytes if its own T bit is set, else 18; iff D
//	...    Terminated RDMA Header: 28 bytes (a Read Request header), iff R
//
// Omitted parts take no space: M/D/R clear and the bytes left out, the
// reading of siw and Wireshark (docs/spec/rdmap.md#terminate). With R but
// not D the RDMA header follows the control word directly. This is the RFC
// layout, the only one we send; Decode also reads the control word Linux
// siw transmits (little-endian bitfields, LayoutSiw:
// docs/spec/interop.md#siw-terminate).
const (
	// ControlLen is the length of the Terminate Control word (with the
	// 13 reserved bits): the smallest Terminate header.
	ControlLen = 4
	// SegLenLen is the length of the DDP Segment Length field.
	SegLenLen = 2
	// RDMAHeaderLen is the length of a terminated RDMA (Read Request)
	// header.
	RDMAHeaderLen = 28
	// MaxHeaderLen is the largest Terminate header: 4 + 2 + 18 + 28.
	MaxHeaderLen = ControlLen + SegLenLen + ddpUntaggedLen + RDMAHeaderLen

	ddpTaggedLen   = 14
	ddpUntaggedLen = 18
	ddpFlagTagged  = 0x80
	opReadRequest  = 0x1
)

// Header control bits (HdrCt) in the 32-bit control word.
const (
	bitM = 1 << 15
	bitD = 1 << 14
	bitR = 1 << 13
)

// Parts says which optional parts a Terminate header carries; the bits are
// those of the HdrCt field.
type Parts uint8

const (
	// PartM (M bit): the DDP Segment Length field is valid. Needs PartD.
	PartM Parts = 1 << iota
	// PartD (D bit): DDP Segment Length and terminated DDP header present.
	PartD
	// PartR (R bit): terminated RDMA header (28 bytes) present.
	PartR
)

func (p Parts) String() string {
	if p == 0 {
		return "-"
	}
	var b [3]byte
	n := 0
	for _, x := range []struct {
		p Parts
		c byte
	}{{PartM, 'M'}, {PartD, 'D'}, {PartR, 'R'}} {
		if p&x.p != 0 {
			b[n] = x.c
			n++
		}
	}
	return string(b[:n])
}

// Sentinel errors of the Terminate header codec.
var (
	ErrTruncated   = errors.New("term: truncated Terminate header")
	ErrTrailing    = errors.New("term: bytes after the Terminate header")
	ErrShortBuffer = errors.New("term: buffer too short")
	// ErrParts: M without D, or a DDP/RDMA header of the wrong size for
	// the parts requested.
	ErrParts = errors.New("term: inconsistent Terminate parts")
	// ErrNilError: PutHeader was given a nil *Error.
	ErrNilError = errors.New("term: nil error")
)

// Include decides which optional parts a Terminate reporting e carries
// (RFC 5040 §4.8 Fig. 10 and §7.1; RFC 7306 §8;
// docs/spec/rdmap.md#terminate-parts, docs/spec/rfc7306.md#errors).
//
// offending is the whole incoming DDP segment the error is tied to, or nil
// when the error is not tied to an incoming message (for example it arose
// while building an outbound message): then nothing is included. Otherwise:
//
//   - Local Catastrophic errors (EType 0 of RDMAP or DDP) and LLP (MPA)
//     errors: nothing.
//   - RDMAP Remote Protection: the DDP header and segment length if the
//     offending segment holds a complete DDP header; the RDMA header as
//     well when the offending segment is an untagged RDMA Read Request
//     with its complete 28-byte header.
//   - RDMAP Remote Operation and DDP Tagged/Untagged errors: the DDP header
//     and length if possible, never the RDMA header. RFC 7306 messages
//     (Immediate Data, Atomic Request/Response) thus get M = D = 1, R = 0.
//
// M (length valid) accompanies D unless the segment is longer than the
// 16-bit field can say.
func Include(e *Error, offending []byte) Parts {
	if e == nil || len(offending) == 0 || e.EType == 0 {
		return 0 // local catastrophic (RDMAP, DDP; MPA's only EType is 0 too)
	}
	switch e.Layer {
	case LayerRDMAP, LayerDDP:
	default:
		return 0
	}
	tagged := offending[0]&ddpFlagTagged != 0
	hl := ddpUntaggedLen
	if tagged {
		hl = ddpTaggedLen
	}
	if len(offending) < hl {
		return 0
	}
	p := PartD
	if len(offending) <= 0xFFFF {
		p |= PartM
	}
	if e.Layer == LayerRDMAP && e.EType == ETypeRDMAPRemoteProtection &&
		!tagged && offending[1]&0x0F == opReadRequest && len(offending) >= hl+RDMAHeaderLen {
		p |= PartR
	}
	return p
}

// HeaderLen returns the Terminate header length for parts p, where tagged
// is the T bit of the terminated DDP header (ignored without PartD).
func HeaderLen(p Parts, tagged bool) int {
	n := ControlLen
	if p&PartD != 0 {
		n += SegLenLen + ddpUntaggedLen
		if tagged {
			n -= ddpUntaggedLen - ddpTaggedLen
		}
	}
	if p&PartR != 0 {
		n += RDMAHeaderLen
	}
	return n
}

// PutHeader writes a Terminate header for e into b and returns its length.
// With PartD, ddpHdr must be a complete DDP header (its first byte's T bit
// decides 14 or 18 bytes; extra bytes are ignored) and segLen is written
// (meaningful with PartM). With PartR, rdmaHdr must be at least 28 bytes
// (the possibly updated Read Request header; extra bytes ignored).
func PutHeader(b []byte, e *Error, p Parts, segLen uint16, ddpHdr, rdmaHdr []byte) (int, error) {
	if e == nil {
		return 0, ErrNilError
	}
	if p&^(PartM|PartD|PartR) != 0 || (p&PartM != 0 && p&PartD == 0) {
		return 0, ErrParts
	}
	tagged := false
	if p&PartD != 0 {
		if len(ddpHdr) == 0 {
			return 0, ErrParts
		}
		tagged = ddpHdr[0]&ddpFlagTagged != 0
		hl := ddpUntaggedLen
		if tagged {
			hl = ddpTaggedLen
		}
		if len(ddpHdr) < hl {
			return 0, ErrParts
		}
		ddpHdr = ddpHdr[:hl]
	}
	if p&PartR != 0 {
		if len(rdmaHdr) < RDMAHeaderLen {
			return 0, ErrParts
		}
		rdmaHdr = rdmaHdr[:RDMAHeaderLen]
	}
	n := HeaderLen(p, tagged)
	if len(b) < n {
		return 0, ErrShortBuffer
	}
	h := Header(b[:n])
	h.SetControl(uint32(e.Layer&0xF)<<28 | uint32(e.EType&0xF)<<24 | uint32(e.Code)<<16 | hdrCt(p))
	off := ControlLen
	if p&PartD != 0 {
		binary.BigEndian.PutUint16(b[off:], segLen)
		off += SegLenLen
		off += copy(b[off:], ddpHdr)
	}
	if p&PartR != 0 {
		copy(b[off:], rdmaHdr)
	}
	return n, nil
}

func hdrCt(p Parts) uint32 {
	var c uint32
	if p&PartM != 0 {
		c |= bitM
	}
	if p&PartD != 0 {
		c |= bitD
	}
	if p&PartR != 0 {
		c |= bitR
	}
	return c
}

// PutFor writes the Terminate header reporting e about the offending DDP
// segment (nil if none) with the parts chosen by Include: the DDP Segment
// Length is len(offending), the whole segment as DDP handed it up (RFC 5040
// §4.8; docs/spec/vectors.md#fpdus; siw reports the payload length
// instead, docs/spec/interop.md#siw-terminate), the DDP header and RDMA
// header are copied from the segment. For a partly served Read Request, whose RDMA header must be
// updated (RFC 5040 §4.8), use PutHeader.
func PutFor(b []byte, e *Error, offending []byte) (int, error) {
	p := Include(e, offending)
	var rdma []byte
	if p&PartR != 0 {
		rdma = offending[ddpUntaggedLen:]
	}
	return PutHeader(b, e, p, uint16(len(offending)), offending, rdma)
}

// Header is a view of a Terminate header. Accessors other than the control
// word ones need a Header from ParseHeader (or one built by PutHeader).
type Header []byte

// ParseHeader checks that b is exactly one well-formed Terminate header
// in the RFC layout (Decode also reads siw's) and returns it. The parts present follow the D and R bits and, for the
// DDP header, that header's own T bit.
//
// One tolerance: siw sets R on protection errors for Sends with Invalidate
// but attaches no RDMA header (docs/spec/interop.md#siw-terminate); a
// header that ends right where the RDMA header should start is accepted and
// RDMAHeader returns nil.
func ParseHeader(b []byte) (Header, error) {
	if len(b) < ControlLen {
		return nil, ErrTruncated
	}
	h := Header(b)
	if err := checkParts(b, h.Parts(), LayoutRFC); err != nil {
		return nil, err
	}
	return h, nil
}

// checkParts checks that b is exactly a control word followed by the parts
// p say are present. The siw tolerance (R set, no RDMA header) needs D in
// LayoutSiw: siw only does it with the DDP header attached.
func checkParts(b []byte, p Parts, l Layout) error {
	off := ControlLen
	if p&PartD != 0 {
		if len(b) < off+SegLenLen+1 {
			return ErrTruncated
		}
		off += SegLenLen
		if b[off]&ddpFlagTagged != 0 {
			off += ddpTaggedLen
		} else {
			off += ddpUntaggedLen
		}
		if len(b) < off {
			return ErrTruncated
		}
	}
	if p&PartR != 0 && (len(b) != off || l == LayoutSiw && p&PartD == 0) {
		off += RDMAHeaderLen
		if len(b) < off {
			return ErrTruncated
		}
	}
	if len(b) != off {
		return ErrTrailing
	}
	return nil
}

// Control returns the 32-bit Terminate Control word (with reserved bits).
func (h Header) Control() uint32 { return binary.BigEndian.Uint32(h[0:4]) }

// SetControl sets the 32-bit Terminate Control word.
func (h Header) SetControl(v uint32) { binary.BigEndian.PutUint32(h[0:4], v) }

// Layer returns the 4-bit Layer field.
func (h Header) Layer() Layer { return Layer(h[0] >> 4) }

// SetLayer sets the Layer field.
func (h Header) SetLayer(l Layer) { h[0] = h[0]&0x0F | uint8(l&0xF)<<4 }

// EType returns the 4-bit error type.
func (h Header) EType() uint8 { return h[0] & 0x0F }

// SetEType sets the error type.
func (h Header) SetEType(v uint8) { h[0] = h[0]&0xF0 | v&0x0F }

// Code returns the 8-bit error code.
func (h Header) Code() uint8 { return h[1] }

// SetCode sets the error code.
func (h Header) SetCode(v uint8) { h[1] = v }

// M reports the M bit (DDP Segment Length valid).
func (h Header) M() bool { return h[2]&(bitM>>8) != 0 }

// SetM sets or clears the M bit.
func (h Header) SetM(v bool) { h.setBit(bitM>>8, v) }

// D reports the D bit (DDP header and segment length present).
func (h Header) D() bool { return h[2]&(bitD>>8) != 0 }

// SetD sets or clears the D bit.
func (h Header) SetD(v bool) { h.setBit(bitD>>8, v) }

// R reports the R bit (RDMA header present).
func (h Header) R() bool { return h[2]&(bitR>>8) != 0 }

// SetR sets or clears the R bit.
func (h Header) SetR(v bool) { h.setBit(bitR>>8, v) }

func (h Header) setBit(m byte, v bool) {
	if v {
		h[2] |= m
	} else {
		h[2] &^= m
	}
}

// Reserved returns the 13 reserved bits of the control word.
func (h Header) Reserved() uint16 { return uint16(h.Control() & 0x1FFF) }

// Parts returns the M, D and R bits as Parts.
func (h Header) Parts() Parts {
	var p Parts
	if h.M() {
		p |= PartM
	}
	if h.D() {
		p |= PartD
	}
	if h.R() {
		p |= PartR
	}
	return p
}

// Err returns the error the Terminate reports: the predeclared value when
// the triple is known (no allocation), else a fresh unnamed *Error.
func (h Header) Err() *Error {
	e, _ := Lookup(h.Layer(), h.EType(), h.Code())
	return e
}

// SegLen returns the DDP Segment Length (0 when D is clear).
func (h Header) SegLen() uint16 {
	if !h.D() {
		return 0
	}
	return binary.BigEndian.Uint16(h[ControlLen:])
}

// DDPHeader returns the terminated DDP header (nil when D is clear).
func (h Header) DDPHeader() []byte {
	if !h.D() {
		return nil
	}
	off := ControlLen + SegLenLen
	if h[off]&ddpFlagTagged != 0 {
		return h[off : off+ddpTaggedLen]
	}
	return h[off : off+ddpUntaggedLen]
}

// RDMAHeader returns the terminated RDMA header (nil when R is clear or,
// see ParseHeader, when the peer set R without sending it).
func (h Header) RDMAHeader() []byte {
	if !h.R() {
		return nil
	}
	off := ControlLen
	if h.D() {
		off += SegLenLen + len(h.DDPHeader())
	}
	if len(h) < off+RDMAHeaderLen {
		return nil
	}
	return h[off : off+RDMAHeaderLen]
}

// Layout is the bit layout of a received Terminate control word.
type Layout uint8

const (
	// LayoutRFC is RFC 5040 §4.8: byte 0 is Layer<<4 | EType, M/D/R are
	// bits 7..5 of byte 2.
	LayoutRFC Layout = iota
	// LayoutSiw is what Linux siw transmits (its little-endian bitfields):
	// byte 0 is EType<<4 | Layer, M/D/R are bits 0..2 of byte 2, reserved
	// bits in the RFC layout (docs/spec/interop.md#siw-terminate).
	LayoutSiw
)

func (l Layout) String() string {
	if l == LayoutSiw {
		return "siw"
	}
	return "rfc"
}

// Terminate is a decoded Terminate header.
type Terminate struct {
	Err        *Error // the reported error (predeclared when known)
	Known      bool   // the Layer/EType/Code triple is a predeclared one
	Parts      Parts  // M, D, R bits as received
	SegLen     uint16 // DDP Segment Length (valid with PartM)
	DDPHeader  []byte // terminated DDP header (14 or 18 bytes) or nil; aliases the input
	RDMAHeader []byte // terminated RDMA header (28 bytes) or nil; aliases the input
	// Layout is the control word layout the header was read in.
	Layout Layout
	// Ambiguous: the word reads as a different predeclared error in the
	// other layout as well, Alt, and nothing in the header tells which
	// one the peer meant (see Decode). Err is the RFC reading.
	Ambiguous bool
	Alt       *Error
}

// control is one reading of a control word.
type control struct {
	layer       Layer
	etype, code uint8
	parts       Parts
	rsvd        bool // reserved bits of byte 2 set in this reading
}

func readControl(b []byte, l Layout) control {
	if l == LayoutSiw {
		// Bit 0 M, bit 1 D, bit 2 R: the order of Parts.
		return control{layer: Layer(b[0] & 0x0F), etype: b[0] >> 4, code: b[1], parts: Parts(b[2] & 0x07), rsvd: b[2]&0xF8 != 0}
	}
	h := Header(b)
	return control{layer: h.Layer(), etype: h.EType(), code: h.Code(), parts: h.Parts(), rsvd: b[2]&0x1F != 0}
}

func (c control) sameError(o control) bool {
	return c.layer == o.layer && c.etype == o.etype && c.code == o.code
}

func (c control) known() bool { return find(c.layer, c.etype, c.code) != nil }

// Decode parses a received Terminate header (the DDP payload of a Terminate
// message) in either control word layout. It allocates nothing when the
// error triple is known.
//
// Which layout (docs/spec/interop.md#siw-terminate): a reading must fit
// the frame (the parts it says are present, and nothing after them).
// When both fit, a reading whose own reserved bits of byte 2 are clear
// beats one whose are set (siw's flags sit in RFC-reserved bits and the
// RFC's flags in siw-reserved ones); then a predeclared triple beats an
// unknown one; then the RFC reading is returned, with Ambiguous set and
// the siw reading in Alt when both are predeclared errors. For the frames
// conforming peers and siw send, that is left only for a bare word whose
// two nibbles name defined errors both ways: 0x02/0x20 with code 0x05,
// 0x06 or 0x07 (RDMAP Remote Operation against an RFC 6581 MPA error) and
// 0x01/0x10 with code 0x00 (RDMAP Invalid STag against DDP Local
// Catastrophic). The caller, which knows what it sent, may pick the other
// reading with DecodeLayout.
func Decode(b []byte) (Terminate, error) {
	if len(b) < ControlLen {
		return Terminate{}, ErrTruncated
	}
	r, s := readControl(b, LayoutRFC), readControl(b, LayoutSiw)
	errR, errS := checkParts(b, r.parts, LayoutRFC), checkParts(b, s.parts, LayoutSiw)
	switch {
	case errR != nil && errS != nil:
		if r.parts == 0 && s.parts != 0 {
			return Terminate{}, errS // siw's flags: its reason is the one to tell
		}
		return Terminate{}, errR
	case errR != nil:
		return decoded(b, s, LayoutSiw), nil
	case errS != nil, r.sameError(s) && r.parts == s.parts:
		return decoded(b, r, LayoutRFC), nil
	case r.rsvd != s.rsvd:
		if r.rsvd {
			return decoded(b, s, LayoutSiw), nil
		}
		return decoded(b, r, LayoutRFC), nil
	}
	kr, ks := r.known(), s.known()
	if ks && !kr {
		return decoded(b, s, LayoutSiw), nil
	}
	t := decoded(b, r, LayoutRFC)
	if kr && ks && !r.sameError(s) {
		t.Ambiguous = true
		t.Alt = find(s.layer, s.etype, s.code)
	}
	return t, nil
}

// DecodeLayout parses a received Terminate header reading the control word
// in layout l only.
func DecodeLayout(b []byte, l Layout) (Terminate, error) {
	if len(b) < ControlLen {
		return Terminate{}, ErrTruncated
	}
	c := readControl(b, l)
	if err := checkParts(b, c.parts, l); err != nil {
		return Terminate{}, err
	}
	return decoded(b, c, l), nil
}

// decoded builds the Terminate of b read as c; checkParts(b, c.parts) holds.
func decoded(b []byte, c control, l Layout) Terminate {
	e, known := Lookup(c.layer, c.etype, c.code)
	t := Terminate{Err: e, Known: known, Parts: c.parts, Layout: l}
	off := ControlLen
	if c.parts&PartD != 0 {
		t.SegLen = binary.BigEndian.Uint16(b[off:])
		off += SegLenLen
		n := ddpUntaggedLen
		if b[off]&ddpFlagTagged != 0 {
			n = ddpTaggedLen
		}
		t.DDPHeader = b[off : off+n]
		off += n
	}
	if c.parts&PartR != 0 && len(b) >= off+RDMAHeaderLen {
		t.RDMAHeader = b[off : off+RDMAHeaderLen]
	}
	return t
}

// String renders the Terminate for logs and tools, e.g.
// "RDMAP/0x2/0x07 catastrophic error, localized to RDMAP stream [MD]
// len=70 ddp{untagged L op=0xa QN=1 MSN=1 MO=0}".
func (t Terminate) String() string {
	var sb strings.Builder
	if t.Err == nil {
		sb.WriteString("<nil>")
	} else {
		sb.WriteString(t.Err.String())
	}
	sb.WriteString(" [")
	sb.WriteString(t.Parts.String())
	sb.WriteString("]")
	if t.Parts&PartD != 0 {
		sb.WriteString(" len=")
		sb.WriteString(strconv.Itoa(int(t.SegLen)))
		if t.Parts&PartM == 0 {
			sb.WriteString("(invalid)")
		}
	}
	if h := t.DDPHeader; len(h) >= ddpTaggedLen {
		sb.WriteString(" ddp{")
		if h[0]&ddpFlagTagged != 0 {
			sb.WriteString("tagged")
		} else {
			sb.WriteString("untagged")
		}
		if h[0]&0x40 != 0 {
			sb.WriteString(" L")
		}
		sb.WriteString(" op=0x")
		sb.WriteString(strconv.FormatUint(uint64(h[1]&0x0F), 16))
		if h[0]&ddpFlagTagged != 0 {
			sb.WriteString(" STag=0x" + strconv.FormatUint(uint64(binary.BigEndian.Uint32(h[2:])), 16))
			sb.WriteString(" TO=0x" + strconv.FormatUint(binary.BigEndian.Uint64(h[6:]), 16))
		} else if len(h) >= ddpUntaggedLen {
			if w := binary.BigEndian.Uint32(h[2:]); w != 0 {
				sb.WriteString(" InvSTag=0x" + strconv.FormatUint(uint64(w), 16))
			}
			sb.WriteString(" QN=" + strconv.FormatUint(uint64(binary.BigEndian.Uint32(h[6:])), 10))
			sb.WriteString(" MSN=" + strconv.FormatUint(uint64(binary.BigEndian.Uint32(h[10:])), 10))
			sb.WriteString(" MO=" + strconv.FormatUint(uint64(binary.BigEndian.Uint32(h[14:])), 10))
		}
		sb.WriteString("}")
	}
	if r := t.RDMAHeader; len(r) >= RDMAHeaderLen {
		sb.WriteString(" rdma{sinkSTag=0x" + strconv.FormatUint(uint64(binary.BigEndian.Uint32(r[0:])), 16))
		sb.WriteString(" sinkTO=0x" + strconv.FormatUint(binary.BigEndian.Uint64(r[4:]), 16))
		sb.WriteString(" size=" + strconv.FormatUint(uint64(binary.BigEndian.Uint32(r[12:])), 10))
		sb.WriteString(" srcSTag=0x" + strconv.FormatUint(uint64(binary.BigEndian.Uint32(r[16:])), 16))
		sb.WriteString(" srcTO=0x" + strconv.FormatUint(binary.BigEndian.Uint64(r[20:]), 16))
		sb.WriteString("}")
	} else if t.Parts&PartR != 0 {
		sb.WriteString(" rdma{missing}")
	}
	if t.Layout == LayoutSiw {
		sb.WriteString(" layout=siw")
	}
	if t.Ambiguous && t.Alt != nil {
		sb.WriteString(" (or, in siw's layout, " + t.Alt.String() + ")")
	}
	return sb.String()
}
