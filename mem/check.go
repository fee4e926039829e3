package mem

import (
	"math"
	"strconv"

	"xrnic/wire/term"
)

// Op is the kind of remote access being checked; it selects the Terminate
// codes of a failure (DDP tagged buffer errors for placement, RDMAP remote
// protection errors for a Read source or an Atomic target).
type Op uint8

const (
	// OpWrite places an RDMA Write segment (DDP tagged, RFC 5041 §7.1).
	OpWrite Op = iota
	// OpReadResponse places an RDMA Read Response segment at the sink (DDP tagged).
	OpReadResponse
	// OpReadSource validates the source of an RDMA Read Request (RFC 5040 §5.2).
	OpReadSource
	// OpAtomic validates the target of an Atomic Request (RFC 7306 §5.2);
	// it adds the 8-byte alignment check of the resolved address.
	OpAtomic
	numCheckOps
	opInvalidate = numCheckOps // counters of RemoteInvalidate refusals
	numOps       = numCheckOps + 1
)

func (o Op) String() string {
	switch o {
	case OpWrite:
		return "write"
	case OpReadResponse:
		return "read-response"
	case OpReadSource:
		return "read-source"
	case OpAtomic:
		return "atomic"
	case opInvalidate:
		return "remote-invalidate"
	}
	return "Op(" + strconv.Itoa(int(o)) + ")"
}

// Reason is why a check failed, in check order.
type Reason uint8

const (
	ReasonInvalidSTag   Reason = iota // no such STag, stale key, invalidated
	ReasonNotAssociated               // other PD, or other stream for a stream-bound STag
	ReasonAccess                      // missing access right
	ReasonTOWrap                      // TO + length - 1 overflows 64 bits
	ReasonBounds                      // outside [base TO, base TO + size)
	ReasonMisaligned                  // atomic target address not 8-byte aligned
	NumReasons
)

func (r Reason) String() string {
	switch r {
	case ReasonInvalidSTag:
		return "invalid-stag"
	case ReasonNotAssociated:
		return "not-associated"
	case ReasonAccess:
		return "access"
	case ReasonTOWrap:
		return "to-wrap"
	case ReasonBounds:
		return "bounds"
	case ReasonMisaligned:
		return "misaligned"
	}
	return "Reason(" + strconv.Itoa(int(r)) + ")"
}

var ddpErrs = [NumReasons]*term.Error{
	ReasonInvalidSTag:   term.DDPTaggedInvalidSTag,
	ReasonNotAssociated: term.DDPTaggedSTagNotAssociated,
	ReasonAccess:        term.DDPTaggedInvalidSTag, // DDP has no access-rights code (siw does the same)
	ReasonTOWrap:        term.DDPTaggedTOWrap,
	ReasonBounds:        term.DDPTaggedBaseBounds,
	ReasonMisaligned:    term.RDMAPCatastrophicStream, // unreachable for DDP ops
}

var rdmapErrs = [NumReasons]*term.Error{
	ReasonInvalidSTag:   term.RDMAPInvalidSTag,
	ReasonNotAssociated: term.RDMAPSTagNotAssociated,
	ReasonAccess:        term.RDMAPAccessRights,
	ReasonTOWrap:        term.RDMAPTOWrap,
	ReasonBounds:        term.RDMAPBaseBounds,
	ReasonMisaligned:    term.RDMAPCatastrophicStream, // RFC 7306 §8.2
}

// ErrorFor returns the Terminate error Check reports for reason r under op.
func ErrorFor(op Op, r Reason) *term.Error {
	if r >= NumReasons {
		return nil
	}
	if op == OpWrite || op == OpReadResponse {
		return ddpErrs[r]
	}
	return rdmapErrs[r]
}

func (t *Table) fail(op Op, r Reason) ([]byte, *term.Error) {
	if op >= numCheckOps {
		op = OpReadSource // unknown op: report as RDMAP, the stricter layer
	}
	t.fails[op][r].Add(1)
	return nil, ErrorFor(op, r)
}

// Check is the one lookup-and-check function of every remote access: the
// STag stag is used by a QP of pd on stream, needing rights need, for the
// bytes [to, to+length). It returns the exact target window (a reslice of
// the registered bytes, capacity clipped) or the Terminate error, checking
// in this order: STag valid, association (PD, stream), access rights, TO
// wrap, bounds, and for OpAtomic the alignment of the resolved address.
// Nothing is touched before all checks pass. Check is lock-free and
// allocation-free. Zero-length tagged accesses must not be checked (RFC
// 5041 §5.2); see the package doc for what happens if they are.
func (t *Table) Check(stag uint32, pd PD, stream uint32, need Access, to, length uint64, op Op) ([]byte, *term.Error) {
	m := t.slots[(stag>>8)&t.mask].Load()
	if m == nil || m.stag != stag || m.invalid.Load() {
		return t.fail(op, ReasonInvalidSTag)
	}
	if m.pd != pd || (m.stream != 0 && m.stream != stream) {
		return t.fail(op, ReasonNotAssociated)
	}
	if m.access&need != need {
		return t.fail(op, ReasonAccess)
	}
	// The last byte to+length-1 must not pass 2^64-1.
	if length != 0 && length-1 > math.MaxUint64-to {
		return t.fail(op, ReasonTOWrap)
	}
	// to >= base and to-base+length <= size, without overflow: off < 2^64
	// because to >= base; size-off is computed only when off <= size.
	if to < m.baseTO {
		return t.fail(op, ReasonBounds)
	}
	off := to - m.baseTO
	if off > m.size || length > m.size-off {
		return t.fail(op, ReasonBounds)
	}
	if op == OpAtomic && (m.addr+off)&7 != 0 {
		return t.fail(op, ReasonMisaligned)
	}
	end := off + length
	return m.buf[off:end:end], nil
}

// CheckCounts are the failures counted by a table, by op and reason.
type CheckCounts struct {
	// Fails[op][reason]; op OpWrite..OpAtomic, and the last row counts
	// refused remote invalidations (ReasonInvalidSTag: no such STag,
	// ReasonNotAssociated, ReasonAccess: not permitted).
	Fails [numOps][NumReasons]uint64
}

// Total returns the number of failures for a reason over all ops.
func (c *CheckCounts) Total(r Reason) uint64 {
	var n uint64
	for op := range c.Fails {
		n += c.Fails[op][r]
	}
	return n
}

// RemoteInvalidateFails returns the refused remote invalidations by reason.
func (c *CheckCounts) RemoteInvalidateFails(r Reason) uint64 { return c.Fails[opInvalidate][r] }

// Counts returns a snapshot of the failure counters.
func (t *Table) Counts() CheckCounts {
	var c CheckCounts
	for op := range t.fails {
		for r := range t.fails[op] {
			c.Fails[op][r] = t.fails[op][r].Load()
		}
	}
	return c
}
