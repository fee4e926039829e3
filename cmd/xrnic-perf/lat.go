package main

import (
	"context"
	"fmt"
	"runtime"
	"time"

	"golang.org/x/sys/unix"

	"xrnic/transport"
	"xrnic/verbs"
)

// The latency tests (*_lat): one message at a time; the client stamps
// every post, the server answers ping-pongs.

// marker is the last byte of write_lat's i-th message (never 0, and
// consecutive markers differ).
func marker(i int) byte { return byte(i%251 + 1) }

// runLat is the client's latency loop (perftest's run_iter_lat*): one
// message at a time, a timestamp at every post.
func (s *session) runLat(ctx context.Context, size int) (LatResult, uint64, error) {
	p := s.p
	qp := s.qps[0]
	rs := s.remote[0]
	dur := p.duration > 0
	n := p.iters
	var stamps []int64
	if !dur {
		stamps = make([]int64, n)
	}
	pl := s.newPoller()
	base := time.Now()
	now := func() int64 { return int64(time.Since(base)) }
	outstanding := 0
	slot := s.recvSlot(0)
	rawWrite := p.test.verb == verbWrite && !p.writeImm
	if rawWrite {
		clear(slot)
		src := s.src(0)
		for j := range src {
			src[j] = pattern(0, j)
		}
	}
	sge := make([]verbs.SGE, 1)
	wr := verbs.SendWR{SGL: sge}
	var winStart, winEnd int64 = -1, -1
	var cntStart, cntEnd int
	var verr error
	i := 0
	for ; ; i++ {
		t := now()
		if dur {
			if winStart < 0 && t >= int64(p.margin) {
				winStart, cntStart = t, i
			}
			if t >= int64(p.duration-p.margin) && winStart >= 0 {
				winEnd, cntEnd = t, i
				break
			}
		} else {
			if i == n {
				break
			}
			stamps[i] = t
		}
		switch {
		case p.test.verb == verbRead || p.test.verb == verbAtomic:
			s.buildWR(&wr, 0, i, size, true)
			if err := qp.PostSend(&wr); err != nil {
				return LatResult{}, 0, fmt.Errorf("post: %w", err)
			}
			c, err := s.waitOne(ctx, s.scq, s.wc, pl)
			if err != nil {
				return LatResult{}, 0, err
			}
			if c.Status != verbs.StatusSuccess {
				return LatResult{}, 0, fmt.Errorf("work request failed: %s (%v)", c.Status, c.Err)
			}
			if p.validate && verr == nil {
				if p.test.verb == verbRead {
					if j := badPattern(slot[:size], 0); j >= 0 {
						verr = fmt.Errorf("%w: byte %d of read %d is 0x%02x", errValidation, j, i, slot[j])
					}
					clear(slot[:size])
				} else if p.atomicType == "CMP_AND_SWAP" && c.AtomicOrig&lowHalf != uint64(i)&lowHalf {
					verr = fmt.Errorf("%w: CmpSwap %d found 0x%x", errValidation, i, c.AtomicOrig)
				} else if p.atomicType == "FETCH_AND_ADD" && c.AtomicOrig != expectAtomic(p, uint64(i)) {
					verr = fmt.Errorf("%w: FetchAdd %d found 0x%x, want 0x%x", errValidation, i, c.AtomicOrig, expectAtomic(p, uint64(i)))
				}
			}
		case rawWrite:
			// perftest's run_iter_lat_write: stamp, the marker into
			// the last byte, post, poll the send CQ until the Write
			// completes, then poll the last byte of our buffer until
			// the peer's Write carrying the same marker lands. Both
			// polls spin and never sleep.
			s.src(0)[size-1] = marker(i)
			if err := s.postPing(qp, 0, i, size, rs); err != nil {
				return LatResult{}, 0, fmt.Errorf("post: %w", err)
			}
			if c, err := s.spinOne(ctx, s.scq, s.wc); err != nil {
				return LatResult{}, 0, err
			} else if c.Status != verbs.StatusSuccess {
				return LatResult{}, 0, fmt.Errorf("write failed: %s (%v)", c.Status, c.Err)
			}
			if err := s.spinByte(ctx, slot, size-1, marker(i)); err != nil {
				return LatResult{}, 0, err
			}
			if p.validate && verr == nil {
				if j := badPattern(slot[:size-1], 0); j >= 0 {
					verr = fmt.Errorf("%w: byte %d of write %d is 0x%02x", errValidation, j, i, slot[j])
				}
			}
		default:
			for outstanding >= 2 {
				c, err := s.waitOne(ctx, s.scq, s.wc, pl)
				if err != nil {
					return LatResult{}, 0, err
				}
				if c.Status != verbs.StatusSuccess {
					return LatResult{}, 0, fmt.Errorf("work request failed: %s (%v)", c.Status, c.Err)
				}
				outstanding--
			}
			if err := s.postPing(qp, 0, i, size, rs); err != nil {
				return LatResult{}, 0, fmt.Errorf("post: %w", err)
			}
			outstanding++
			c, err := s.waitOne(ctx, s.rcq, s.rwc, pl)
			if err != nil {
				return LatResult{}, 0, err
			}
			if c.Status != verbs.StatusSuccess {
				return LatResult{}, 0, fmt.Errorf("receive failed: %s (%v)", c.Status, c.Err)
			}
			if p.validate && verr == nil {
				if p.test.verb == verbSend {
					if j := badPattern(s.recvBuf(c.ID, int(c.ByteLen)), 0); j >= 0 || int(c.ByteLen) != size {
						verr = fmt.Errorf("%w: reply %d: byte %d (length %d)", errValidation, i, j, c.ByteLen)
					}
				} else if c.Imm != uint64(i) {
					verr = fmt.Errorf("%w: reply %d carried Immediate Data %d", errValidation, i, c.Imm)
				}
			}
			if err := s.repost(c.ID); err != nil {
				return LatResult{}, 0, err
			}
		}
	}
	for outstanding > 0 {
		c, err := s.waitOne(ctx, s.scq, s.wc, pl)
		if err != nil {
			return LatResult{}, 0, err
		}
		if c.Status != verbs.StatusSuccess {
			return LatResult{}, 0, fmt.Errorf("work request failed: %s (%v)", c.Status, c.Err)
		}
		outstanding--
	}
	if verr == nil && p.validate && p.test.verb == verbAtomic {
		verr = s.validateAfter(ctx, size, []uint64{uint64(i)})
	}
	if dur {
		return durationLat(size, cntEnd-cntStart, winEnd-winStart, p.test.rttFactor()), uint64(i), verr
	}
	return computeLat(size, stamps, p.test.rttFactor()), uint64(i), verr
}

// waitOne polls one completion from cq.
func (s *session) waitOne(ctx context.Context, cq *verbs.CQ, wc []verbs.Completion, pl poller) (verbs.Completion, error) {
	idle := time.Now()
	for {
		if cq.Poll(wc[:1]) == 1 {
			return wc[0], nil
		}
		if err := pl.wait(ctx, cq, idle); err != nil {
			return verbs.Completion{}, err
		}
	}
}

// pong answers the ping-pong tests: a message in, the same message out.
func (s *session) pong(ctx context.Context, size int) serveResult {
	p := s.p
	res := serveResult{ok: true}
	pl := s.newPoller()
	qp := s.qps[0]
	// Replies still unpolled from the previous size count here too: each
	// holds an SQ and a CQ entry until polled.
	outstanding := &s.pongOut
	drain := func(block bool) error {
		for *outstanding > 0 {
			n := s.scq.Poll(s.wc)
			for _, c := range s.wc[:n] {
				if c.Status != verbs.StatusSuccess {
					return fmt.Errorf("reply failed: %s (%v)", c.Status, c.Err)
				}
			}
			*outstanding -= n
			if n == 0 {
				if !block {
					return nil
				}
				if err := s.scq.Wait(ctx); err != nil {
					return err
				}
			}
		}
		return nil
	}
	rs := s.remote[0]
	rawWrite := p.test.verb == verbWrite && !p.writeImm
	for i := 0; ; i++ {
		if rawWrite {
			// perftest's run_iter_lat_write, the server's half: poll
			// the last byte of our buffer until the client's Write
			// lands, write back with the same marker, poll the send
			// CQ until that Write completes; no sleep anywhere.
			slot := s.recvSlot(0)
			m := marker(i)
			if s.spinByte(ctx, slot, size-1, m) != nil {
				return res
			}
			if p.validate && res.ok {
				if j := badPattern(slot[:size-1], 0); j >= 0 {
					res.ok, res.detail = false, uint64(j)
				}
			}
			s.src(0)[size-1] = m
			if err := s.postPing(qp, 0, i, size, rs); err != nil {
				return serveResult{err: err}
			}
			c, err := s.spinOne(ctx, s.scq, s.wc)
			if err != nil {
				return res
			}
			if c.Status != verbs.StatusSuccess {
				return serveResult{err: fmt.Errorf("reply failed: %s (%v)", c.Status, c.Err)}
			}
			continue
		}
		idle := time.Now()
		var c verbs.Completion
		for {
			if n := s.rcq.Poll(s.rwc[:1]); n == 1 {
				c = s.rwc[0]
				break
			}
			if err := pl.wait(ctx, s.rcq, idle); err != nil {
				return res
			}
		}
		if c.Status != verbs.StatusSuccess {
			if ctx.Err() != nil {
				return res
			}
			return serveResult{err: fmt.Errorf("receive failed: %s (%v)", c.Status, c.Err)}
		}
		if p.validate && res.ok && p.test.verb == verbSend {
			if j := badPattern(s.recvBuf(c.ID, int(c.ByteLen)), 0); j >= 0 || int(c.ByteLen) != size {
				res.ok, res.detail = false, uint64(j)
			}
		}
		if p.validate && res.ok && c.Imm != uint64(i) && (p.test.verb == verbImm || p.writeImm) {
			res.ok, res.detail = false, c.Imm
		}
		if err := s.repost(c.ID); err != nil {
			return serveResult{err: err}
		}
		if err := drain(*outstanding >= 2); err != nil {
			return serveResult{err: err}
		}
		if err := s.postPing(qp, 0, i, size, rs); err != nil {
			return serveResult{err: err}
		}
		*outstanding++
	}
}

// spinOne busy-polls cq for one completion (perftest's do { ibv_poll_cq }
// while (ne == 0)): it never sleeps; it yields the processor between
// polls, so the engine's goroutines run on a small host.
func (s *session) spinOne(ctx context.Context, cq *verbs.CQ, wc []verbs.Completion) (verbs.Completion, error) {
	for n := 1; ; n++ {
		if cq.Poll(wc[:1]) == 1 {
			return wc[0], nil
		}
		s.spinPause()
		if n%spinCheck == 0 {
			if err := ctx.Err(); err != nil {
				return verbs.Completion{}, err
			}
		}
	}
}

// spinByte busy-polls b[i] until it holds m (perftest's poll of the last
// byte of the buffer), yielding between polls, never sleeping.
func (s *session) spinByte(ctx context.Context, b []byte, i int, m byte) error {
	for n := 1; loadByte(b, i) != m; n++ {
		s.spinPause()
		if n%spinCheck == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
	}
	return nil
}

// spinCheck: the spins look at ctx every spinCheck polls.
const spinCheck = 256

// spinYield is one pause of a spin: it lets the other goroutines of this
// process run (runtime.Gosched) and the other threads of this CPU
// (sched_yield). On a host where the engine's goroutines, the kernel's
// network processing and the peer share a few cores, a spinner that does
// not give the CPU to the OS keeps the thread that would deliver what it
// waits for off the CPU for a scheduler slice (milliseconds).
func spinYield() {
	runtime.Gosched()
	unix.Syscall(unix.SYS_SCHED_YIELD, 0, 0, 0)
}

// spinPause is one pause of a spin: with --drive a poll step of the
// transport (once its loop has handed over), else spinYield.
func (s *session) spinPause() {
	if s.drv != nil && s.drv.Drive() != transport.DriveNone {
		return
	}
	spinYield()
}
