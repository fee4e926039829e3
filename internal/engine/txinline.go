package engine

import "xrnic/transport"

// Inline transmission over an LLP that can write without blocking (the
// kernel transport): the goroutine that posts a WR, or that receives a
// Read or Atomic request, frames and writes it itself when no other
// goroutine is transmitting, instead of waking runTx. On a small host the
// wake-up of another goroutine, often on the other core, costs more than
// the TCP round trip (issue 16); siw likewise transmits in post_send.
//
// Inline transmission costs a system call per post, which bounds the
// message rate of an application that posts faster than the wire takes
// them; batching them is runTx's job. So a poster transmits inline only
// while the QP ping-pongs: at most inlineStreak inline transmissions since
// the last FPDU received, the rest of a burst waits for runTx, which
// frames everything queued into one write. The receive path (answers to
// Reads and Atomics, once per batch of input) is always inline.
//
// One goroutine at a time owns txbuf (txInline.busy, under qp.mu): runTx
// or an inline transmitter. An inline transmitter does one pass (at most
// txbuf), then leaves whatever the socket did not take, and any further
// work, to runTx; so posting never blocks, and FPDUs are never cut: a
// short write hands the rest of the same buffer to runTx, which writes it
// before anything else.
type txInline struct {
	w        transport.TryWriter // nil: always wake runTx
	busy     bool                // txbuf is owned by a transmitter
	hand     bool                // busy, and txbuf[off:end] is runTx's to write
	more     bool                // work was rung for while busy
	rxWant   bool                // the receive path has something to send (ringRx)
	streak   int                 // inline transmissions by posters since the last FPDU received
	off, end int
}

// inlineStreak is how many posts in a row, with no FPDU received in
// between, may transmit inline.
const inlineStreak = 2

// kick asks for transmission from a goroutine that holds no lock: inline
// when it can, else by waking the transmitter. fromRx: the receive path,
// which is never held to the streak.
func (qp *QP) kick(fromRx bool) {
	if k := qp.txKick; k != nil {
		k()
		return
	}
	if !qp.txInlineStep(fromRx) {
		qp.ringTx()
	}
}

// ringRx is ring for the receive path (qp.mu held): with an inline LLP,
// input transmits once its FPDUs are handled (kick), instead of waking
// runTx.
func (qp *QP) ringRx() {
	if qp.txi.w != nil {
		qp.txi.rxWant = true
		return
	}
	qp.ring()
}

// txInlineStep transmits what is ready in the calling goroutine. It
// returns false when runTx should be woken instead (the QP is not in RTS,
// the end of the stream is pending, or there is no inline LLP).
func (qp *QP) txInlineStep(fromRx bool) bool {
	qp.mu.Lock()
	if qp.txi.busy {
		// The owner rings runTx when it is done.
		qp.txi.more = true
		qp.mu.Unlock()
		return true
	}
	if qp.txi.w == nil || !qp.txOpen || qp.state != QPRTS || qp.termPending || qp.txDone ||
		!fromRx && qp.txi.streak >= inlineStreak {
		qp.mu.Unlock()
		return false
	}
	if !fromRx {
		qp.txi.streak++
	}
	qp.txi.busy = true
	qp.txBufLocked()
	qp.txReader.Enter()
	n := qp.buildLocked()
	qp.txReader.Exit()
	if n == 0 {
		qp.completeSQLocked()
		more := qp.releaseTxLocked(false)
		qp.mu.Unlock()
		qp.syncInvalidations()
		if more {
			qp.ringTx()
		}
		return true
	}
	qp.mu.Unlock()
	qp.syncInvalidations()
	w, err := qp.txi.w.TryWrite(qp.txbuf[:n])
	qp.mu.Lock()
	if w < n || err != nil {
		// runTx writes the rest (a failing connection fails there).
		qp.txi.hand, qp.txi.off, qp.txi.end = true, w, n
		qp.mu.Unlock()
		qp.ringTx()
		return true
	}
	qp.stats.txBatches.Add(1)
	qp.stats.txInline.Add(1)
	qp.markWrittenLocked()
	more := qp.releaseTxLocked(!qp.space(n))
	qp.mu.Unlock()
	if more {
		qp.ringTx()
	}
	return true
}

// releaseTxLocked gives txbuf up and says whether runTx must run: work
// was rung for meanwhile, the pass filled txbuf, or the stream's state
// changed under the transmitter.
func (qp *QP) releaseTxLocked(full bool) bool {
	more := qp.txi.more || full || qp.state != QPRTS || qp.termPending
	qp.txi.busy, qp.txi.more = false, false
	qp.txDropLocked()
	return more
}

// txHandoffLocked, in runTx with qp.mu held, writes what an inline
// transmitter left (blocking, without the lock) and releases txbuf. It
// returns false if there was nothing to take over.
func (qp *QP) txHandoffLocked() bool {
	if !qp.txi.hand {
		return false
	}
	p := qp.txbuf[qp.txi.off:qp.txi.end]
	qp.mu.Unlock()
	_, err := qp.llp.Write(p)
	qp.mu.Lock()
	qp.wroteLocked(err)
	qp.txi.hand, qp.txi.busy, qp.txi.more = false, false, false
	qp.txDropLocked()
	return true
}
