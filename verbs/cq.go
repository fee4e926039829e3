package verbs

import (
	"context"
	"sync"
	"sync/atomic"

	"xrnic/internal/engine"
	"xrnic/transport"
)

// CQ is a completion queue (ibv_cq). Every posted work request reserves
// one entry until its completion is polled, so completions are never lost;
// the queues attached may be deeper than the CQ, which grows as needed up
// to the device's MaxCQE. Only a CQ at MaxCQE refuses posts (ErrCQFull).
type CQ struct {
	dev *Device
	c   cqImpl

	pollMu sync.Mutex // serializes pollers (the provider's scratch space)
	// kept holds completions a synchronous helper (QP.Exec) polled on
	// behalf of other work requests; Poll returns them first.
	kept  []Completion
	nkept atomic.Int32
	// execMu serializes the synchronous helpers of all QPs on this CQ.
	execMu sync.Mutex
}

// CreateCQ creates a CQ with room for depth completions (ibv_create_cq).
func (d *Device) CreateCQ(depth int) (*CQ, error) {
	c, err := d.p.createCQ(depth)
	if err != nil {
		return nil, err
	}
	return &CQ{dev: d, c: c}, nil
}

// Poll moves up to len(wc) completions into wc and returns how many
// (ibv_poll_cq). It never blocks and never allocates; several goroutines
// may poll one CQ.
func (cq *CQ) Poll(wc []Completion) int {
	cq.pollMu.Lock()
	n := 0
	if cq.nkept.Load() > 0 {
		n = copy(wc, cq.kept)
		cq.kept = cq.kept[:copy(cq.kept, cq.kept[n:])]
		cq.nkept.Store(int32(len(cq.kept)))
	}
	for n < len(wc) {
		k := cq.c.poll(wc[n:])
		if k == 0 {
			break
		}
		// Drop the completions of synchronous helpers whose context
		// ended before they completed.
		j := n
		for i := n; i < n+k; i++ {
			if wc[i].ID != ExecWRID {
				wc[j] = wc[i]
				j++
			}
		}
		n = j
	}
	cq.pollMu.Unlock()
	return n
}

// PushCounter is the memory CountPushes counts into: Pushed, and Waiters,
// the pollers futex-waiting on Pushed's low 32 bits, whom every
// completion wakes.
type PushCounter = engine.PushCounter

// CountPushes makes every completion the engine queues from now on add 1
// to p.Pushed (nil stops it), so a poller that counts what Poll returned
// can tell an empty CQ without calling Poll, and can sleep until the next
// completion (PushCounter): the C ABI's ibv_poll_cq spins on it. p may be
// C memory. Completions of synchronous helpers that Poll drops (ExecWRID)
// are counted too.
func (cq *CQ) CountPushes(p *PushCounter) { cq.c.countPushes(p) }

// Wait blocks until at least one completion can be polled or ctx ends (the
// blocking half of the ibv_get_cq_event loop, without arming). Meant for
// one waiting goroutine per CQ; it does not allocate.
func (cq *CQ) Wait(ctx context.Context) error {
	if cq.nkept.Load() > 0 {
		return nil
	}
	return cq.c.wait(ctx)
}

// Notify arms the notification channel for the next completion, or with
// solicitedOnly for the next receive completion carrying the Solicited
// Event flag or any error (ibv_req_notify_cq). One value is then sent on
// Events; re-arm after each.
func (cq *CQ) Notify(solicitedOnly bool) { cq.c.arm(solicitedOnly) }

// Events returns the notification channel armed by Notify (the completion
// channel of ibv_get_cq_event). It has capacity 1 and is never closed.
func (cq *CQ) Events() <-chan struct{} { return cq.c.events() }

// Drive reads, on the calling goroutine, what has arrived for the QPs
// that complete on this CQ over kernel TCP, and handles it: a poller that
// spins on an empty CQ calls it on each empty poll, and completions are
// queued without a wake-up of the engine's readers (run to completion,
// busy polling the sockets). DriveWork: something was handled; DriveIdle:
// nothing had arrived; DriveNone: no such QP, or a reader was at work.
// The readers stay awake, so a poller may stop driving at any time; on
// afxdp the transport itself is the Driver (Device.Transport). Undrive
// does nothing: CQ implements transport.Driver for pollers that take
// either. A goroutine spinning on Drive keeps its scheduler P: with
// GOMAXPROCS 1 the runtime then polls the network only every 10 ms or
// so, and goroutines waiting on other sockets (other QPs' readers) wait
// that long; spin where GOMAXPROCS > 1, or drive every CQ that matters.
func (cq *CQ) Drive() transport.DriveResult { return cq.c.drive() }

// Undrive implements transport.Driver (nothing to hand back).
func (cq *CQ) Undrive() {}

var _ transport.Driver = (*CQ)(nil)

// Len returns the number of completions waiting to be polled.
func (cq *CQ) Len() int { return cq.c.len() + int(cq.nkept.Load()) }

// Depth returns the CQ's capacity: as made or resized, or more once posts
// made it grow.
func (cq *CQ) Depth() int { return cq.c.cap() }

// Resize changes the CQ's capacity to n (ibv_resize_cq), keeping the
// completions queued, and returns the capacity made: at least n, more
// while more entries are reserved by posted work requests. n below the
// completions queued (Len, less those a synchronous helper kept), or
// outside 1..MaxCQE, is ErrBadAttr.
func (cq *CQ) Resize(n int) (int, error) { return cq.c.resize(n) }

// Close destroys the CQ (ibv_destroy_cq); QPs using it must be closed
// first.
func (cq *CQ) Close() error { return cq.c.close() }
