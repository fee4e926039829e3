// Package term encodes and decodes RDMAP Terminate messages (RFC 5040 §4.8)
// and names every iWARP error code of RFC 5040, RFC 5041, RFC 5044, RFC 6581
// and RFC 7306.
//
// An iWARP protocol error is a predeclared *Error value carrying the layer,
// error type and error code that go into a Terminate control word. The
// receive path returns one of these values (never a formatted error), the QP
// turns it into a Terminate, moves to error and flushes. Because the values
// are predeclared pointers, returning and comparing them allocates nothing.
package term

import "strconv"

// Layer is the 4-bit Terminate "Layer" field: which layer detected the error.
type Layer uint8

// Layers (RFC 5040 §4.8).
const (
	LayerRDMAP Layer = 0x0 // RDMA (RFC 5040, RFC 7306)
	LayerDDP   Layer = 0x1 // DDP (RFC 5041)
	LayerLLP   Layer = 0x2 // lower-layer protocol: MPA (RFC 5044, RFC 6581)
)

func (l Layer) String() string {
	switch l {
	case LayerRDMAP:
		return "RDMAP"
	case LayerDDP:
		return "DDP"
	case LayerLLP:
		return "MPA"
	}
	return "Layer(" + strconv.Itoa(int(l)) + ")"
}

// Error types (EType, 4 bits), per layer.
const (
	// RDMAP (RFC 5040 §7.2).
	ETypeRDMAPLocalCatastrophic uint8 = 0x0
	ETypeRDMAPRemoteProtection  uint8 = 0x1
	ETypeRDMAPRemoteOperation   uint8 = 0x2
	// DDP (RFC 5041 §7.2).
	ETypeDDPLocalCatastrophic uint8 = 0x0
	ETypeDDPTagged            uint8 = 0x1
	ETypeDDPUntagged          uint8 = 0x2
	// MPA (RFC 5044 §8): the LLP has a single error type.
	ETypeLLP uint8 = 0x0
)

// Error is one iWARP error condition: the (Layer, EType, Code) triple of a
// Terminate message. Use the predeclared values; compare them by pointer or
// with Is.
type Error struct {
	Layer Layer
	EType uint8
	Code  uint8
	name  string
}

func (e *Error) Error() string {
	if e == nil {
		return "<nil>"
	}
	return "iwarp: " + e.String()
}

// String renders the error as "LAYER/etype/code name", e.g.
// "RDMAP/0x2/0x07 catastrophic error, localized to RDMAP stream".
func (e *Error) String() string {
	s := e.Layer.String() + "/0x" + strconv.FormatUint(uint64(e.EType), 16) + "/0x" + hex2(e.Code)
	if e.name != "" {
		s += " " + e.name
	}
	return s
}

// Is reports whether target is an *Error with the same layer, type and code,
// so errors.Is works for values decoded off the wire.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && e != nil && t != nil && e.Layer == t.Layer && e.EType == t.EType && e.Code == t.Code
}

func hex2(b uint8) string {
	const digits = "0123456789abcdef"
	return string([]byte{digits[b>>4], digits[b&0xF]})
}

func def(l Layer, etype, code uint8, name string) *Error {
	e := &Error{Layer: l, EType: etype, Code: code, name: name}
	known = append(known, e)
	return e
}

var known []*Error

// RDMAP errors (Layer 0, RFC 5040 §7.2; RFC 7306 §8).
var (
	// RDMAPLocalCatastrophic is EType 0x0; RFC 5040 defines no codes for it
	// (any code is accepted on receipt; we send 0x00).
	RDMAPLocalCatastrophic = def(LayerRDMAP, 0x0, 0x00, "local catastrophic error")

	RDMAPInvalidSTag            = def(LayerRDMAP, 0x1, 0x00, "invalid STag")
	RDMAPBaseBounds             = def(LayerRDMAP, 0x1, 0x01, "base or bounds violation")
	RDMAPAccessRights           = def(LayerRDMAP, 0x1, 0x02, "access rights violation")
	RDMAPSTagNotAssociated      = def(LayerRDMAP, 0x1, 0x03, "STag not associated with RDMAP stream")
	RDMAPTOWrap                 = def(LayerRDMAP, 0x1, 0x04, "TO wrap")
	RDMAPProtectionNoInvalidate = def(LayerRDMAP, 0x1, 0x09, "STag cannot be invalidated")
	RDMAPProtectionUnspecified  = def(LayerRDMAP, 0x1, 0xFF, "unspecified protection error")
	RDMAPInvalidVersion         = def(LayerRDMAP, 0x2, 0x05, "invalid RDMAP version")
	RDMAPUnexpectedOpCode       = def(LayerRDMAP, 0x2, 0x06, "unexpected OpCode")
	RDMAPCatastrophicStream     = def(LayerRDMAP, 0x2, 0x07, "catastrophic error, localized to RDMAP stream")
	RDMAPCatastrophicGlobal     = def(LayerRDMAP, 0x2, 0x08, "catastrophic error, global")
	RDMAPOperationNoInvalidate  = def(LayerRDMAP, 0x2, 0x09, "STag cannot be invalidated")
	RDMAPOperationUnspecified   = def(LayerRDMAP, 0x2, 0xFF, "unspecified operation error")
)

// DDP errors (Layer 1, RFC 5041 §7.2).
var (
	DDPLocalCatastrophic = def(LayerDDP, 0x0, 0x00, "local catastrophic error")

	DDPTaggedInvalidSTag       = def(LayerDDP, 0x1, 0x00, "tagged: invalid STag")
	DDPTaggedBaseBounds        = def(LayerDDP, 0x1, 0x01, "tagged: base or bounds violation")
	DDPTaggedSTagNotAssociated = def(LayerDDP, 0x1, 0x02, "tagged: STag not associated with DDP stream")
	DDPTaggedTOWrap            = def(LayerDDP, 0x1, 0x03, "tagged: TO wrap")
	DDPTaggedInvalidVersion    = def(LayerDDP, 0x1, 0x04, "tagged: invalid DDP version")

	DDPUntaggedInvalidQN      = def(LayerDDP, 0x2, 0x01, "untagged: invalid QN")
	DDPUntaggedNoBuffer       = def(LayerDDP, 0x2, 0x02, "untagged: invalid MSN, no buffer available")
	DDPUntaggedMSNRange       = def(LayerDDP, 0x2, 0x03, "untagged: invalid MSN, MSN range not valid")
	DDPUntaggedInvalidMO      = def(LayerDDP, 0x2, 0x04, "untagged: invalid MO")
	DDPUntaggedTooLong        = def(LayerDDP, 0x2, 0x05, "untagged: DDP message too long for available buffer")
	DDPUntaggedInvalidVersion = def(LayerDDP, 0x2, 0x06, "untagged: invalid DDP version")
)

// MPA errors (Layer 2, EType 0; RFC 5044 §8, RFC 6581 §8).
var (
	MPAConnectionLost    = def(LayerLLP, 0x0, 0x01, "TCP connection closed, terminated or lost")
	MPACRCError          = def(LayerLLP, 0x0, 0x02, "MPA CRC error")
	MPAMarkerError       = def(LayerLLP, 0x0, 0x03, "MPA marker and ULPDU length disagree")
	MPAInvalidFrame      = def(LayerLLP, 0x0, 0x04, "invalid MPA request or reply frame")
	MPALocalCatastrophic = def(LayerLLP, 0x0, 0x05, "local catastrophic error")
	MPAInsufficientIRD   = def(LayerLLP, 0x0, 0x06, "insufficient IRD resources")
	MPANoMatchingRTR     = def(LayerLLP, 0x0, 0x07, "no matching RTR option")
)

// Known returns every predeclared error, in declaration order.
func Known() []*Error { return append([]*Error(nil), known...) }

// Lookup returns the predeclared error for a triple read off the wire. An
// unknown triple (a peer may use codes we do not name, and any code is valid
// for RDMAP local catastrophic errors) yields a fresh, unnamed *Error; the
// second result reports whether the triple was known.
func Lookup(l Layer, etype, code uint8) (*Error, bool) {
	if e := find(l, etype, code); e != nil {
		return e, true
	}
	return &Error{Layer: l, EType: etype, Code: code}, false
}

// find returns the predeclared error for a triple, or nil (no allocation).
func find(l Layer, etype, code uint8) *Error {
	for _, e := range known {
		if e.Layer == l && e.EType == etype && e.Code == code {
			return e
		}
	}
	return nil
}
