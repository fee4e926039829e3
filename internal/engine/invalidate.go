package engine

import "sync/atomic"

// Invalidation waits for placement in flight (RFC 5041 §8.3.1, RFC 5042
// §5.2): after a Local Invalidate completes, or a receive reports a
// remote invalidation, no placement into that STag may still be running on
// any QP. The access check refuses the STag at once (mem.Table marks it),
// but a placement that passed the check before may still be copying; the
// completion therefore waits for a grace period of the STag table
// (mem.Table.Synchronize: every reader section open at the time has
// ended). The wait happens outside the QP lock and outside any reader
// section, by the goroutine that drives the QP (tx for Local Invalidate,
// rx for remote invalidation), so the grace period cannot wait on itself.

// syncInvalidations completes the Local Invalidates that wait for their
// grace period (called without qp.mu, outside the tx reader section).
func (qp *QP) syncInvalidations() {
	if !qp.invPending.Load() {
		return
	}
	qp.dev.table.Synchronize()
	qp.mu.Lock()
	qp.invPending.Store(false)
	for s := qp.sqHead; s != qp.sqNext; s++ {
		if e, _ := qp.sqSlot(s); e.state == sqInvalidating {
			e.state = sqDone
		}
	}
	qp.completeSQLocked()
	qp.mu.Unlock()
}

// releaseHeld delivers the receive completions held behind a remote
// invalidation once its grace period is over (called without qp.mu,
// outside the rx reader section).
func (qp *QP) releaseHeld() {
	if !qp.holdRecv.Load() {
		return
	}
	qp.dev.table.Synchronize()
	qp.mu.Lock()
	qp.holdRecv.Store(false)
	for i := range qp.held {
		qp.rcq.push(&qp.held[i])
		qp.held[i] = Completion{}
	}
	qp.held = qp.held[:0]
	qp.mu.Unlock()
}

// placeHook, when set (tests only), runs between an RDMA Write's access
// check and its copy, to widen the window in which an invalidation must
// wait. Atomic: receive goroutines of earlier tests may still run.
var placeHook atomic.Pointer[func()]
