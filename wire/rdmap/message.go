package rdmap

import (
	"xrnic/wire/ddp"
	"xrnic/wire/term"
)

// Segment encoders. Each writes one complete DDP segment (the MPA ULPDU)
// into b and returns its length n. For messages carrying ULP payload
// (Write, Read Response, Send family) only the headers are written: the
// caller places payloadLen bytes at b[hdr:n], where hdr is
// ddp.TaggedHeaderLen or ddp.UntaggedHeaderLen, so payload can be copied
// straight from registered memory into the frame. Buffers too small give
// ErrShortBuffer; nothing is written then.

// PutWrite writes an RDMA Write segment (tagged) to stag/to.
func PutWrite(b []byte, stag uint32, to uint64, last bool, payloadLen int) (int, error) {
	return putTagged(b, OpWrite, stag, to, last, payloadLen)
}

// PutReadResponse writes an RDMA Read Response segment (tagged) to the
// Data Sink stag/to.
func PutReadResponse(b []byte, stag uint32, to uint64, last bool, payloadLen int) (int, error) {
	return putTagged(b, OpReadResponse, stag, to, last, payloadLen)
}

func putTagged(b []byte, op OpCode, stag uint32, to uint64, last bool, payloadLen int) (int, error) {
	if payloadLen < 0 || uint64(payloadLen) > 1<<32-1 {
		return 0, ErrLength
	}
	n := ddp.TaggedHeaderLen + payloadLen
	if len(b) < n {
		return 0, ErrShortBuffer
	}
	ddp.PutTagged(b, last, uint8(MakeControl(op)), stag, to)
	return n, nil
}

// PutSend writes a Send-family segment (untagged, QN 0): op is OpSend,
// OpSendInvalidate, OpSendSE or OpSendSEInvalidate. invSTag is written for
// the two Invalidate variants and replaced by 0 for the others (RFC 5040
// §4.1). msn, mo and last are the DDP fields of this segment.
func PutSend(b []byte, op OpCode, invSTag, msn, mo uint32, last bool, payloadLen int) (int, error) {
	switch op {
	case OpSend, OpSendSE:
		invSTag = 0
	case OpSendInvalidate, OpSendSEInvalidate:
	default:
		return 0, ErrOpCode
	}
	if payloadLen < 0 || uint64(payloadLen) > 1<<32-1 {
		return 0, ErrLength
	}
	n := ddp.UntaggedHeaderLen + payloadLen
	if len(b) < n {
		return 0, ErrShortBuffer
	}
	ddp.PutUntagged(b, last, uint8(MakeControl(op)), invSTag, ddp.QNSend, msn, mo)
	return n, nil
}

// PutReadRequest writes an RDMA Read Request (QN 1, MO 0, L set) with
// sequence number msn.
func PutReadRequest(b []byte, msn uint32, p ReadParams) (int, error) {
	const n = ddp.UntaggedHeaderLen + ReadRequestLen
	if len(b) < n {
		return 0, ErrShortBuffer
	}
	ddp.PutUntagged(b, true, uint8(MakeControl(OpReadRequest)), 0, ddp.QNReadRequest, msn, 0)
	ReadRequest(b[ddp.UntaggedHeaderLen:n]).SetParams(p)
	return n, nil
}

// PutAtomicRequest writes an Atomic Request (QN 1, MO 0, L set) with
// sequence number msn (shared with Read Requests). The AOpCode is written
// as given, so tests can send reserved ones.
func PutAtomicRequest(b []byte, msn uint32, p AtomicParams) (int, error) {
	const n = ddp.UntaggedHeaderLen + AtomicRequestLen
	if len(b) < n {
		return 0, ErrShortBuffer
	}
	ddp.PutUntagged(b, true, uint8(MakeControl(OpAtomicRequest)), 0, ddp.QNReadRequest, msn, 0)
	AtomicRequest(b[ddp.UntaggedHeaderLen:n]).SetParams(p)
	return n, nil
}

// PutAtomicResponse writes an Atomic Response (QN 3, MO 0, L set) with
// sequence number msn.
func PutAtomicResponse(b []byte, msn, requestID uint32, value uint64) (int, error) {
	const n = ddp.UntaggedHeaderLen + AtomicResponseLen
	if len(b) < n {
		return 0, ErrShortBuffer
	}
	ddp.PutUntagged(b, true, uint8(MakeControl(OpAtomicResponse)), 0, ddp.QNAtomicResponse, msn, 0)
	h := AtomicResponse(b[ddp.UntaggedHeaderLen:n])
	h.SetRequestID(requestID)
	h.SetValue(value)
	return n, nil
}

// PutImmediate writes an Immediate Data message (op OpImmediate or
// OpImmediateSE; QN 0, MO 0, L set) with sequence number msn from the Send
// sequence.
func PutImmediate(b []byte, op OpCode, msn uint32, data [8]byte) (int, error) {
	if op != OpImmediate && op != OpImmediateSE {
		return 0, ErrOpCode
	}
	const n = ddp.UntaggedHeaderLen + ImmediateLen
	if len(b) < n {
		return 0, ErrShortBuffer
	}
	ddp.PutUntagged(b, true, uint8(MakeControl(op)), 0, ddp.QNSend, msn, 0)
	Immediate(b[ddp.UntaggedHeaderLen:n]).SetData(data)
	return n, nil
}

// TerminateMSN is the MSN of the one Terminate a stream ever carries.
const TerminateMSN = 1

// PutTerminate writes a Terminate message (QN 2, MSN 1, MO 0, L set)
// reporting e about the offending incoming DDP segment (nil when the error
// is not tied to one), with the optional parts chosen by term.Include.
func PutTerminate(b []byte, e *term.Error, offending []byte) (int, error) {
	p := term.Include(e, offending)
	var rdma []byte
	if p&term.PartR != 0 {
		rdma = offending[ddp.UntaggedHeaderLen:]
	}
	return PutTerminateParts(b, e, p, uint16(len(offending)), offending, rdma)
}

// PutTerminateParts writes a Terminate message with explicit parts (see
// term.PutHeader), e.g. with the updated RDMA header of a partly served
// Read Request.
func PutTerminateParts(b []byte, e *term.Error, p term.Parts, segLen uint16, ddpHdr, rdmaHdr []byte) (int, error) {
	if len(b) < ddp.UntaggedHeaderLen+term.ControlLen {
		return 0, ErrShortBuffer
	}
	m, err := term.PutHeader(b[ddp.UntaggedHeaderLen:], e, p, segLen, ddpHdr, rdmaHdr)
	if err != nil {
		if err == term.ErrShortBuffer {
			err = ErrShortBuffer
		}
		return 0, err
	}
	ddp.PutUntagged(b, true, uint8(MakeControl(OpTerminate)), 0, ddp.QNTerminate, TerminateMSN, 0)
	return ddp.UntaggedHeaderLen + m, nil
}

// Classify performs the stateless receive checks of one DDP segment and
// returns its opcode and nil, or the opcode (as far as readable) and the
// predeclared *term.Error to report. It allocates nothing. Order:
//
//  1. DDP: ddp.Validate (DDP version; QN above 3).
//  2. RDMAP version: RV must be 1, or 0 too when rdmac is set (RDMA
//     Consortium peers; rdmac also accepts DDP version 0)
//     → term.RDMAPInvalidVersion.
//  3. OpCode: reserved 0xC-0xF, or a T bit that does not match the opcode
//     (Write and Read Response tagged, all others untagged)
//     → term.RDMAPUnexpectedOpCode.
//  4. QN: an untagged opcode on another queue than its own
//     → term.DDPUntaggedInvalidQN.
//  5. Fixed-size messages (Read Request 28, Terminate 4..52, Immediate
//     Data 8, Atomic Request 52, Atomic Response 12 bytes of DDP
//     payload) must be a single segment: MO other than 0
//     → term.DDPUntaggedInvalidMO; L clear or a payload of another size
//     → term.RDMAPOperationUnspecified (docs/spec/rfc7306.md#errors, last
//     row: the engine, which knows the receive buffer, may report
//     DDPUntaggedTooLong for an oversized Immediate Data first).
//  6. Atomic Request AOpCode other than FetchAdd (0) or CmpSwap (2)
//     → term.RDMAPUnexpectedOpCode (docs/spec/rfc7306.md#errors, inferred).
//
// MSN, MO of multi-segment messages, buffers and STags are checked by the
// engine.
func Classify(s ddp.Segment, rdmac bool) (OpCode, *term.Error) {
	c := Control(s.RsvdULP())
	op := c.OpCode()
	if e := ddp.Validate(s, rdmac); e != nil {
		return op, e
	}
	if v := c.Version(); v != Version && !(rdmac && v == 0) {
		return op, term.RDMAPInvalidVersion
	}
	p := props[op]
	if !p.Valid || p.Tagged != s.IsTagged() {
		return op, term.RDMAPUnexpectedOpCode
	}
	if p.Tagged {
		return op, nil
	}
	u := s.Untagged()
	if u.QN() != p.QN {
		return op, term.DDPUntaggedInvalidQN
	}
	if p.Payload {
		return op, nil
	}
	if u.MO() != 0 {
		return op, term.DDPUntaggedInvalidMO
	}
	n := len(s) - ddp.UntaggedHeaderLen
	if !s.Last() {
		return op, term.RDMAPOperationUnspecified
	}
	if op == OpTerminate {
		if n < term.ControlLen || n > term.MaxHeaderLen {
			return op, term.RDMAPOperationUnspecified
		}
		return op, nil
	}
	if n != p.HeaderLen {
		return op, term.RDMAPOperationUnspecified
	}
	if op == OpAtomicRequest && !AtomicRequest(s[ddp.UntaggedHeaderLen:]).AOpCode().Valid() {
		return op, term.RDMAPUnexpectedOpCode
	}
	return op, nil
}
