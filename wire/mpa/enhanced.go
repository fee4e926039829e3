package mpa

import (
	"encoding/binary"

	"xrnic/wire/term"
)

// EnhancedLen is the size of the RFC 6581 enhanced connection data.
const EnhancedLen = 4

// NoNegotiation is the 14-bit all-ones IRD/ORD value 0x3FFF: "no automatic
// negotiation, the ULP handles it" (RFC 6581 §9.1).
const NoNegotiation uint16 = 0x3FFF

// MaxIRDORD is the largest IRD/ORD value that negotiates automatically.
const MaxIRDORD uint16 = NoNegotiation - 1

// RTR is a set of Ready-To-Receive indication types (RFC 6581 §9.2).
type RTR uint8

// RTR types. The bit values are internal; on the wire they are the B, C and
// D flags of the enhanced word.
const (
	RTRSend  RTR = 1 << iota // B: zero-length FULPDU Send
	RTRWrite                 // C: zero-length RDMA Write
	RTRRead                  // D: zero-length RDMA Read Request

	RTRNone RTR = 0
	RTRAll      = RTRSend | RTRWrite | RTRRead
)

// Has reports whether every type in t is in r.
func (r RTR) Has(t RTR) bool { return r&t == t }

// preference is the order in which an initiator picks its RTR among the
// mutually supported types. Zero-length Write first: it needs no receive
// buffer and no IRD at the responder (siw makes the same choice). Read
// second: it consumes one responder IRD slot. Send last: it consumes a
// posted receive at the responder and generates a completion there.
var preference = [...]RTR{RTRWrite, RTRRead, RTRSend}

// Pick returns the preferred single RTR type in r (Write, then Read, then
// Send), or RTRNone if r is empty.
func (r RTR) Pick() RTR {
	for _, t := range preference {
		if r&t != 0 {
			return t
		}
	}
	return RTRNone
}

func (r RTR) String() string {
	if r&RTRAll == 0 {
		return "none"
	}
	s := ""
	for _, x := range []struct {
		t RTR
		n string
	}{{RTRSend, "send"}, {RTRWrite, "write"}, {RTRRead, "read"}} {
		if r&x.t != 0 {
			if s != "" {
				s += "|"
			}
			s += x.n
		}
	}
	return s
}

// Enhanced is the RFC 6581 §9 enhanced RDMA connection establishment word:
//
//	|A|B| IRD (14) |C|D| ORD (14) |
type Enhanced struct {
	PeerToPeer bool   // A: peer-to-peer model, RTR negotiated
	RTR        RTR    // B (Send), C (Write), D (Read)
	IRD        uint16 // 14 bits; NoNegotiation = 0x3FFF
	ORD        uint16 // 14 bits; NoNegotiation = 0x3FFF
}

const (
	bitA    = 1 << 31
	bitB    = 1 << 30
	bitC    = 1 << 15
	bitD    = 1 << 14
	mask14  = 0x3FFF
	shiftIR = 16
)

// DecodeEnhanced decodes the enhanced word (host order value of the 4
// network-order bytes). All 32 bits are meaningful, so it cannot fail.
func DecodeEnhanced(v uint32) Enhanced {
	e := Enhanced{
		PeerToPeer: v&bitA != 0,
		IRD:        uint16(v>>shiftIR) & mask14,
		ORD:        uint16(v) & mask14,
	}
	if v&bitB != 0 {
		e.RTR |= RTRSend
	}
	if v&bitC != 0 {
		e.RTR |= RTRWrite
	}
	if v&bitD != 0 {
		e.RTR |= RTRRead
	}
	return e
}

// ParseEnhanced decodes the enhanced word from the first 4 bytes of b.
func ParseEnhanced(b []byte) (Enhanced, error) {
	if len(b) < EnhancedLen {
		return Enhanced{}, ErrTruncated
	}
	return DecodeEnhanced(binary.BigEndian.Uint32(b)), nil
}

// Uint32 encodes e. IRD and ORD are truncated to 14 bits.
func (e Enhanced) Uint32() uint32 {
	v := uint32(e.IRD&mask14)<<shiftIR | uint32(e.ORD&mask14)
	if e.PeerToPeer {
		v |= bitA
	}
	if e.RTR&RTRSend != 0 {
		v |= bitB
	}
	if e.RTR&RTRWrite != 0 {
		v |= bitC
	}
	if e.RTR&RTRRead != 0 {
		v |= bitD
	}
	return v
}

// Put writes e into b[0:4] in network order.
func (e Enhanced) Put(b []byte) { binary.BigEndian.PutUint32(b, e.Uint32()) }

// clampWire limits a local value to what negotiates on the wire.
func clampWire(v uint16) uint16 { return min(v, MaxIRDORD) }

// InitiatorParams is the initiator's local endpoint for RFC 6581
// negotiation.
type InitiatorParams struct {
	// IRD is the initiator's current inbound read queue depth (sent as the
	// initiator IRD); MaxIRD is how far it can raise it if the responder
	// wants a larger ORD (MaxIRD < IRD is treated as MaxIRD = IRD).
	IRD, MaxIRD uint16
	// ORD is the number of outbound reads the initiator wants (sent as the
	// initiator ORD).
	ORD uint16
	// PeerToPeer asks for RTR negotiation; RTR lists the types the initiator
	// can send (ignored and sent as zero when PeerToPeer is false).
	PeerToPeer bool
	RTR        RTR
}

// RequestWord returns the enhanced word an initiator sends. IRD/ORD values
// of 0x3FFF pass through (no automatic negotiation); larger values are
// clamped to 0x3FFE.
func RequestWord(p InitiatorParams) Enhanced {
	e := Enhanced{IRD: wireVal(p.IRD), ORD: wireVal(p.ORD)}
	if p.PeerToPeer {
		e.PeerToPeer = true
		e.RTR = p.RTR & RTRAll
	}
	return e
}

func wireVal(v uint16) uint16 {
	if v == NoNegotiation {
		return v
	}
	return clampWire(v)
}

// ResponderParams is the responder's local endpoint for RFC 6581
// negotiation.
type ResponderParams struct {
	// MaxIRD is the inbound read queue depth the responder can provide; it
	// is also the local IRD left unchanged when the initiator ORD is 0x3FFF.
	MaxIRD uint16
	// ORD is the number of outbound reads the responder ULP wants; it is the
	// local ORD left unchanged when the initiator IRD is 0x3FFF.
	ORD uint16
	// RequiredORD is the smallest ORD the responder ULP can live with; if
	// the initiator IRD is below it, Respond returns term.MPAInsufficientIRD
	// and a reply word whose ORD states RequiredORD (for a reject Reply).
	RequiredORD uint16
	// RTR lists the RTR types the responder accepts. It must not be empty.
	RTR RTR
}

// Negotiated is a side's local outcome of RFC 6581 negotiation. The peer's
// raw values, which RFC 6581 §9.1 says must also reach the ULP, are in the
// peer's enhanced word.
type Negotiated struct {
	// IRD and ORD are the values to configure on the local endpoint.
	IRD, ORD uint16
	// RTR is, for the responder, the set of RTR types it will accept as
	// the first FPDU (what its Reply advertises), and for the initiator the
	// single type it must send first. RTRNone in the client/server model.
	RTR RTR
}

// Respond computes the responder's reply word and local IRD/ORD from the
// initiator's request word (RFC 6581 §9.1-9.3). Choices:
//
//   - IRD: initiator ORD 0x3FFF → reply IRD 0x3FFF, local IRD = MaxIRD
//     (unchanged). Otherwise local IRD = min(initiator ORD, MaxIRD), raised
//     to 1 when the reply offers a Read RTR and MaxIRD allows, so the
//     zero-length Read can be absorbed (§9.1 example). A responder IRD
//     below the initiator ORD is not an error here: the initiator lowers
//     its ORD to it.
//   - ORD: initiator IRD 0x3FFF → reply ORD 0x3FFF, local ORD = p.ORD
//     (unchanged). Otherwise ORD = min(p.ORD, initiator IRD). If the
//     initiator IRD is below p.RequiredORD the result carries
//     term.MPAInsufficientIRD and the reply word's ORD is RequiredORD, to be
//     sent in a reject Reply (R=1).
//   - A is echoed. With A=0 the request's B/C/D are ignored and the reply
//     sends none. With A=1 the reply sets every offered type the responder
//     supports, so the initiator chooses at its discretion (§1.1); if none
//     of the offered types is supported it sets all the types it supports
//     (§9.2: at least one), and the initiator will fail with
//     MPANoMatchingRTR unless it can send one of them. A Read RTR is only
//     offered when MaxIRD >= 1.
//
// err is ErrNoRTRSupport when p.RTR (after dropping Read for MaxIRD 0) is
// empty and the request is peer-to-peer.
func Respond(req Enhanced, p ResponderParams) (reply Enhanced, local Negotiated, err error) {
	supported := p.RTR & RTRAll
	if p.MaxIRD == 0 {
		supported &^= RTRRead
	}
	reply.PeerToPeer = req.PeerToPeer
	if req.PeerToPeer {
		if supported == 0 {
			return Enhanced{}, Negotiated{}, ErrNoRTRSupport
		}
		if common := req.RTR & supported; common != 0 {
			reply.RTR = common
		} else {
			reply.RTR = supported
		}
		local.RTR = reply.RTR
	}

	// Responder IRD (what we absorb) against the initiator ORD.
	maxIRD := clampWire(p.MaxIRD)
	if req.ORD == NoNegotiation {
		reply.IRD = NoNegotiation
		local.IRD = p.MaxIRD
	} else {
		local.IRD = min(req.ORD, maxIRD)
		if reply.RTR&RTRRead != 0 && local.IRD == 0 {
			local.IRD = 1 // MaxIRD >= 1 is guaranteed by the filter above
		}
		reply.IRD = local.IRD
	}

	// Responder ORD (what we issue) against the initiator IRD.
	if req.IRD == NoNegotiation {
		reply.ORD = NoNegotiation
		local.ORD = p.ORD
	} else {
		local.ORD = min(clampWire(p.ORD), req.IRD)
		reply.ORD = local.ORD
		if req.IRD < p.RequiredORD {
			reply.ORD = clampWire(p.RequiredORD)
			return reply, local, term.MPAInsufficientIRD
		}
	}
	return reply, local, nil
}

// Complete computes the initiator's final IRD/ORD and its RTR from its own
// request word and the responder's reply word (RFC 6581 §9.1-9.3):
//
//   - ORD: reply IRD 0x3FFF → p.ORD unchanged; otherwise min(p.ORD, reply IRD).
//   - IRD: reply ORD 0x3FFF → p.IRD unchanged; otherwise max(p.IRD, reply
//     ORD), and term.MPAInsufficientIRD if that exceeds p.MaxIRD.
//   - RTR (peer-to-peer only): the reply must echo A (a mismatch is a failed
//     connection-model negotiation, term.MPANoMatchingRTR); then the pick
//     (Write, Read, Send) among the reply's types that the initiator
//     offered (p.RTR). Read is usable only if the reply IRD is not 0.
//     No usable type → term.MPANoMatchingRTR.
//
// On error the returned Negotiated still holds the computed IRD/ORD, for
// the ULP.
func Complete(req, reply Enhanced, p InitiatorParams) (Negotiated, error) {
	var n Negotiated
	if reply.IRD == NoNegotiation {
		n.ORD = p.ORD
	} else {
		n.ORD = min(p.ORD, reply.IRD)
	}
	n.IRD = p.IRD
	if reply.ORD != NoNegotiation && reply.ORD > n.IRD {
		n.IRD = reply.ORD
	}
	if n.IRD > max(p.MaxIRD, p.IRD) {
		return n, term.MPAInsufficientIRD
	}
	if req.PeerToPeer != reply.PeerToPeer {
		return n, term.MPANoMatchingRTR
	}
	if !req.PeerToPeer {
		return n, nil
	}
	usable := reply.RTR & p.RTR & RTRAll
	if reply.IRD == 0 {
		usable &^= RTRRead
	}
	n.RTR = usable.Pick()
	if n.RTR == RTRNone {
		return n, term.MPANoMatchingRTR
	}
	return n, nil
}
