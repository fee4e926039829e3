package mem

import "math"

// CheckLocal checks a local access of the owner's RNIC to registered bytes
// named by a scatter/gather element: the STag (used as local key) of a QP in
// pd, the rights need (LocalWrite for bytes the RNIC writes, such as receive
// buffers, Read sinks and atomic result buffers; 0 for bytes it only reads,
// such as a Send or Write source), and the range [to, to+length). It checks,
// in order, that the STag is live and not invalidated, the PD, the rights and
// the bounds (overflow-safe), and returns the window or ok false. Stream
// binding restricts remote access only and is not checked. Failures are not
// counted in Counts (they are the local QP's errors, not remote ones).
// CheckLocal is lock-free and allocation-free; like Check, the window must be
// used inside a Reader section.
func (t *Table) CheckLocal(stag uint32, pd PD, need Access, to, length uint64) ([]byte, bool) {
	m := t.slots[(stag>>8)&t.mask].Load()
	if m == nil || m.stag != stag || m.invalid.Load() || m.pd != pd || m.access&need != need {
		return nil, false
	}
	if length != 0 && length-1 > math.MaxUint64-to {
		return nil, false
	}
	if to < m.baseTO {
		return nil, false
	}
	off := to - m.baseTO
	if off > m.size || length > m.size-off {
		return nil, false
	}
	end := off + length
	return m.buf[off:end:end], true
}
