package main

import (
	"context"
	"errors"
	"fmt"
)

// Data validation (--data_validation): payload patterns, Read-backs of
// written data and the final value of atomic targets.

var errValidation = errors.New("data validation failed")

// badPattern is the index of the first byte of b that is not QP q's
// pattern, -1 if there is none.
func badPattern(b []byte, q int) int {
	for j, v := range b {
		if v != pattern(q, j) {
			return j
		}
	}
	return -1
}

func (s *session) validateAfter(ctx context.Context, size int, perQP []uint64) error {
	p := s.p
	for q, qp := range s.qps {
		slot := s.recvSlot(q)
		rs := s.remote[q]
		switch p.test.verb {
		case verbWrite:
			if p.writeImm {
				continue
			}
			chk := s.check(q)
			clear(chk[:size])
			if err := qp.Read(ctx, s.dmr.SGE(s.checkOff(q), size), rs.STag, rs.RecvTO); err != nil {
				return fmt.Errorf("read back: %w", err)
			}
			if j := badPattern(chk[:size], q); j >= 0 {
				return fmt.Errorf("%w: QP %d: byte %d of the written data is 0x%02x, want 0x%02x", errValidation, q, j, chk[j], pattern(q, j))
			}
		case verbRead:
			if j := badPattern(slot[:size], q); j >= 0 {
				return fmt.Errorf("%w: QP %d: byte %d of the read data is 0x%02x, want 0x%02x", errValidation, q, j, slot[j], pattern(q, j))
			}
		case verbAtomic:
			if err := qp.Read(ctx, s.dmr.SGE(s.checkOff(q), 8), rs.STag, rs.RecvTO); err != nil {
				return fmt.Errorf("read back: %w", err)
			}
			got := load64(s.check(q), 0)
			want := expectAtomic(p, perQP[q])
			if got != want {
				return fmt.Errorf("%w: QP %d: the remote word is 0x%x after %d %s, want 0x%x", errValidation, q, got, perQP[q], p.atomicType, want)
			}
		}
	}
	return nil
}

// expectAtomic is the remote word after n atomics on a word that started
// at 0: n for FetchAdd of 1 and for the CmpSwap chain i -> i+1; with masks
// n in each 32-bit half (FetchAdd) or in the low half (CmpSwap).
func expectAtomic(p *params, n uint64) uint64 {
	switch {
	case p.atomicType == "CMP_AND_SWAP" && p.masked:
		return n & lowHalf
	case p.atomicType == "CMP_AND_SWAP":
		return n
	case p.masked:
		return (n & lowHalf) | (n&lowHalf)<<32
	}
	return n
}
