package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"xrnic/verbs"
)

// The bandwidth tests (*_bw): the client's posting loop and the server's
// sink of Sends and Writes with Immediate, which returns credits.

// runBW is perftest's run_iter_bw: every QP keeps up to -t work requests
// outstanding, one in -Q is signalled, and the timestamps feed computeBW.
// It returns the messages completed per QP.
func (s *session) runBW(ctx context.Context, size int) (BWResult, []uint64, error) {
	p := s.p
	n, qps := p.iters, p.qps
	dur := p.duration > 0
	total := n * qps
	var posted, completed []int64
	if !dur {
		posted = make([]int64, total)
		completed = make([]int64, total)
	}
	scnt := make([]int, qps)
	ccnt := make([]int, qps)
	var totscnt, totccnt int
	credit := p.consumesRecv()
	pl := s.newPoller()
	base := time.Now()
	now := func() int64 { return int64(time.Since(base)) }
	var stopPosting bool
	var winStart, winEnd int64 = -1, -1
	var cntStart, cntEnd int
	sge := make([]verbs.SGE, 1)
	wr := verbs.SendWR{SGL: sge}
	idle := time.Now()
	for {
		progress := false
		if dur && !stopPosting {
			t := now()
			if winStart < 0 && t >= int64(p.margin) {
				winStart, cntStart = t, totccnt
			}
			if t >= int64(p.duration-p.margin) && winStart >= 0 {
				winEnd, cntEnd = t, totccnt
				stopPosting = true
			}
		}
		for q, qp := range s.qps {
			for {
				idx := scnt[q]
				if dur {
					if stopPosting && idx%p.cqMod == 0 {
						break
					}
				} else if idx >= n {
					break
				}
				if idx-ccnt[q] >= p.txDepth {
					break
				}
				if credit && s.sent[q] >= s.granted[q] {
					break
				}
				sig := (idx+1)%p.cqMod == 0 || (!dur && idx == n-1)
				s.buildWR(&wr, q, idx, size, sig)
				if err := qp.PostSend(&wr); err != nil {
					if errors.Is(err, verbs.ErrQueueFull) || errors.Is(err, verbs.ErrCQFull) {
						break
					}
					return BWResult{}, nil, fmt.Errorf("post: %w", err)
				}
				if !dur {
					posted[totscnt] = now()
				}
				if credit {
					s.sent[q]++
				}
				scnt[q]++
				totscnt++
				progress = true
			}
		}
		m := s.scq.Poll(s.wc)
		for _, c := range s.wc[:m] {
			if c.Status != verbs.StatusSuccess {
				return BWResult{}, nil, fmt.Errorf("work request failed: %s (%v)", c.Status, c.Err)
			}
			q, idx := int(c.ID>>32), int(c.ID&0xffff_ffff)
			done := idx + 1 - ccnt[q]
			ccnt[q] = idx + 1
			totccnt += done
			if !dur {
				completed[min(totccnt, total)-1] = now()
			}
		}
		if m > 0 {
			progress = true
		}
		if credit {
			k := s.rcq.Poll(s.rwc)
			for _, c := range s.rwc[:k] {
				if c.Status != verbs.StatusSuccess {
					return BWResult{}, nil, fmt.Errorf("credit receive failed: %s (%v)", c.Status, c.Err)
				}
				q := int(c.ID >> 32)
				s.granted[q] = max(s.granted[q], c.Imm)
				if err := s.repost(c.ID); err != nil {
					return BWResult{}, nil, err
				}
			}
			if k > 0 {
				progress = true
			}
		}
		finished := false
		if dur {
			finished = stopPosting
			for q := range qps {
				if ccnt[q] != scnt[q] {
					finished = false
				}
			}
		} else {
			finished = totccnt >= total
		}
		if finished {
			break
		}
		if progress {
			idle = time.Now()
			continue
		}
		if err := ctx.Err(); err != nil {
			return BWResult{}, nil, err
		}
		cq := s.scq
		if totscnt == totccnt && credit {
			cq = s.rcq
		}
		pl.waitFor(ctx, cq, idle, 10*time.Millisecond)
	}
	perQP := make([]uint64, qps)
	for q := range qps {
		perQP[q] = uint64(ccnt[q])
	}
	if dur {
		return durationBW(size, cntEnd-cntStart, winEnd-winStart, false, p.unit()), perQP, nil
	}
	return computeBW(BWSamples{Size: size, Iters: n, QPs: qps, CQMod: p.cqMod, PostList: 1,
		Posted: posted, Completed: completed}, p.unit()), perQP, nil
}

// runBWChecked runs the bandwidth loop and the client-side validation
// (Read back of written data and atomic targets, check of read data).
func (s *session) runBWChecked(ctx context.Context, size int) (BWResult, uint64, error) {
	r, perQP, err := s.runBW(ctx, size)
	var total uint64
	for _, n := range perQP {
		total += n
	}
	if err != nil || !s.p.validate {
		return r, total, err
	}
	return r, total, s.validateAfter(ctx, size, perQP)
}

// sinkBW receives send_bw's Sends (or Writes with Immediate), checks
// them, reposts the buffers and returns credits as Immediate Data.
func (s *session) sinkBW(ctx context.Context, size int, expect chan uint64) serveResult {
	p := s.p
	if s.reposted == nil {
		s.reposted = make([]uint64, p.qps)
		s.lastGrant = make([]uint64, p.qps)
	}
	batch := uint64(max(1, s.rxD/4))
	res := serveResult{ok: true}
	want := ^uint64(0)
	var got uint64
	pl := s.newPoller()
	idle := time.Now()
	first, last := int64(0), int64(0)
	base := time.Now()
	for got < want {
		if want == ^uint64(0) {
			select {
			case w := <-expect:
				want = w
				continue
			default:
			}
		}
		n := s.rcq.Poll(s.rwc)
		for _, c := range s.rwc[:n] {
			if c.Status != verbs.StatusSuccess {
				return serveResult{err: fmt.Errorf("receive failed: %s (%v)", c.Status, c.Err)}
			}
			if first == 0 {
				first = int64(time.Since(base))
			}
			got++
			q := int(c.ID >> 32)
			if p.validate && c.Op == verbs.OpRecv && res.ok {
				if int(c.ByteLen) != size {
					res.ok, res.detail = false, uint64(c.ByteLen)
				} else if j := badPattern(s.recvBuf(c.ID, size), q); j >= 0 {
					res.ok, res.detail = false, uint64(j)
				}
			}
			if err := s.repost(c.ID); err != nil {
				return serveResult{err: err}
			}
			s.reposted[q]++
			if s.reposted[q]-s.lastGrant[q] >= batch {
				s.lastGrant[q] = s.reposted[q]
				if err := s.qps[q].PostImm(uint64(q), uint64(s.rxD)+s.reposted[q], verbs.FlagSignaled); err != nil {
					return serveResult{err: fmt.Errorf("credit: %w", err)}
				}
			}
		}
		m := s.scq.Poll(s.wc)
		for _, c := range s.wc[:m] {
			if c.Status != verbs.StatusSuccess {
				return serveResult{err: fmt.Errorf("credit Immediate Data failed: %s", c.Status)}
			}
		}
		if n+m > 0 {
			idle = time.Now()
			last = int64(time.Since(base))
			continue
		}
		if want != ^uint64(0) && got >= want {
			break
		}
		err := pl.waitFor(ctx, s.rcq, idle, 50*time.Millisecond)
		if ctx.Err() != nil {
			return serveResult{err: fmt.Errorf("receiving: got %d of %d messages: %w", got, want, ctx.Err())}
		}
		_ = err
	}
	r := durationBW(size, int(got), last-first, false, p.unit())
	res.bw, res.count = &r, got
	return res
}
