package main

import "xrnic/verbs"

// The work requests each test posts (shared by the bandwidth and latency
// loops).

// Masked atomics (--masked_atomics): FetchAdd adds 1 to each 32-bit half
// (carry boundaries at bits 31 and 63); CmpSwap compares and swaps the low
// half only.
const (
	maskedAdd     = 1 | 1<<32
	maskedAddMask = 1<<31 | 1<<63
	lowHalf       = 0xffff_ffff
)

// buildWR fills wr with the idx-th work request of QP q (signalled when
// sig), for the bandwidth loop and for Read and atomic latency.
func (s *session) buildWR(wr *verbs.SendWR, q, idx, size int, sig bool) {
	p := s.p
	rs := s.remote[q]
	wr.ID = uint64(q)<<32 | uint64(idx)
	wr.Flags = 0
	if sig {
		wr.Flags = verbs.FlagSignaled
	}
	wr.RemoteSTag = rs.STag
	switch p.test.verb {
	case verbWrite:
		wr.Op = verbs.OpWrite
		if p.writeImm {
			wr.Op = verbs.OpWriteWithImm
			wr.Imm = uint64(idx)
		}
		wr.SGL[0] = s.dmr.SGE(s.srcOff(q), size)
		wr.RemoteTO = rs.RecvTO
	case verbRead:
		wr.Op = verbs.OpRead
		wr.SGL[0] = s.dmr.SGE(s.recvOff(q), size)
		wr.RemoteTO = rs.SrcTO
	case verbSend:
		wr.Op = verbs.OpSend
		wr.SGL[0] = s.dmr.SGE(s.srcOff(q), size)
	case verbAtomic:
		wr.SGL[0] = s.amr.SGE((q*p.txDepth+idx%p.txDepth)*8, 8)
		wr.RemoteTO = rs.RecvTO
		if p.atomicType == "CMP_AND_SWAP" {
			wr.Op = verbs.OpCmpSwap
			wr.CompareAdd, wr.Swap = uint64(idx), uint64(idx+1)
			wr.CompareMask, wr.SwapMask = verbs.CmpSwapAll, verbs.CmpSwapAll
			if p.masked {
				wr.CompareAdd, wr.Swap = uint64(idx)&lowHalf, uint64(idx+1)&lowHalf
				wr.CompareMask, wr.SwapMask = lowHalf, lowHalf
			}
		} else {
			wr.Op = verbs.OpFetchAdd
			wr.CompareAdd, wr.AddMask = 1, 0
			if p.masked {
				wr.CompareAdd, wr.AddMask = maskedAdd, maskedAddMask
			}
		}
	}
}

// postPing posts one ping-pong message (signalled).
func (s *session) postPing(qp *verbs.QP, q, i, size int, rs bufInfo) error {
	p := s.p
	sge := s.dmr.SGE(s.srcOff(q), size)
	switch {
	case p.test.verb == verbSend:
		return qp.PostSendBuf(uint64(i), sge, verbs.FlagSignaled)
	case p.test.verb == verbImm:
		return qp.PostImm(uint64(i), uint64(i), verbs.FlagSignaled)
	case p.writeImm:
		return qp.PostWriteImm(uint64(i), sge, rs.STag, rs.RecvTO, uint64(i), verbs.FlagSignaled)
	default:
		return qp.PostWrite(uint64(i), sge, rs.STag, rs.RecvTO, verbs.FlagSignaled)
	}
}
