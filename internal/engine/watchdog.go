package engine

import (
	"time"

	"xrnic/wire/term"
)

// The watchdog: one goroutine per device that ends QPs a peer has
// stalled, so no peer can pin a QP (and its slot) forever. It reads only
// counters the data path keeps anyway (an atomic add and store per
// received piece), so the hot path pays no timer and no lock for it.
//
//   - A partial FPDU that makes no progress for Config.FPDUTimeout: the
//     peer announced an FPDU (ULPDU_Length) and stopped sending. The QP
//     ends with Terminate LLP 2/0/0x01 (the connection is lost to us) and
//     every WR is flushed.
//   - An outstanding RDMA Read or Atomic that gets no response for the
//     QP's RequestTimeout: it completes with StatusRetryExcErr (an RC
//     QP's transport timeout in libibverbs), the QP goes to error with
//     the same Terminate, and the rest is flushed.
//   - Before that, a Read or Atomic without a response for the QP's
//     WakeAfter while we send nothing else gets a zero-length RDMA Write
//     (STag 1, TO 0: never checked, RFC 5041 §5.2; siw returns before
//     any lookup), at most maxWakes per request. A responder that
//     attaches its QP to the socket only after sending its MPA Reply
//     (siw) misses data that arrived in between until the next segment
//     comes; the Write is that segment. It is the RTR Write again
//     (rtrPending), framed at the start of a build round and only when no
//     message is in progress, so it never cuts one.
//   - The same wake, for an initiator that has sent FPDUs but not yet
//     received any: the request a siw responder missed may be a Send
//     (or the RTR) the application waits on, which RDMAP cannot see.
//     It stops at the peer's first FPDU, at most maxWakes in all.
//   - After the peer's orderly FIN: Reads and Atomics posted since are
//     flushed (no response can come), and once the QP has had nothing to
//     send for closeLinger it closes its half too, as Disconnect would.

const (
	defaultWakeAfter = 100 * time.Millisecond // QPAttr.WakeAfter
	maxWakes         = 3                      // per outstanding request
	closeLinger      = 200 * time.Millisecond // idle after the peer's FIN, then our FIN
)

// watchState is the watchdog's memory of one QP (watchdog goroutine only).
type watchState struct {
	rx        uint64    // rxBytes at the last change
	rxSince   time.Time // since when a partial FPDU has not moved
	req       bool      // a request was outstanding at the last look
	resp      uint64    // responses and ordHead at the last change
	ordHead   uint32
	reqSince  time.Time
	tx        uint64    // txFPDUs at the last change
	txSince   time.Time // since when we sent nothing (for the wake)
	wakes     int       // wakes sent for the current request
	first     int       // first-contact wakes sent (initiator, nothing received yet)
	idleSince time.Time // after the peer's FIN: since when idle (zero: busy)
}

// watchPeriod is how often the watchdog looks: a quarter of the shortest
// timeout and half the default wake delay, within [10 ms, 50 ms]. A
// shorter QPAttr.WakeAfter is only as fine as this.
func (c *Config) watchPeriod() time.Duration {
	p := defaultWakeAfter / 2
	for _, d := range []time.Duration{c.FPDUTimeout, c.RequestTimeout} {
		if d > 0 && d/4 < p {
			p = d / 4
		}
	}
	return max(p, 10*time.Millisecond)
}

func (d *Device) runWatchdog() {
	defer close(d.wdDone)
	t := time.NewTicker(d.cfg.watchPeriod())
	defer t.Stop()
	var qps []*QP
	for {
		select {
		case <-d.wdStop:
			return
		case now := <-t.C:
			d.mu.Lock()
			qps = qps[:0]
			for _, q := range d.qps {
				qps = append(qps, q)
			}
			d.mu.Unlock()
			for _, q := range qps {
				q.watch(now, d.cfg.FPDUTimeout)
			}
			clear(qps)
		}
	}
}

// watch checks one QP for a stalled peer.
func (qp *QP) watch(now time.Time, fpduTimeout time.Duration) {
	w := &qp.wd
	if fpduTimeout > 0 {
		rx := qp.rxBytes.Load()
		if !qp.rxPartial.Load() || rx != w.rx {
			w.rx, w.rxSince = rx, now
		} else if now.Sub(w.rxSince) >= fpduTimeout {
			qp.mu.Lock()
			if qp.state == QPRTS || qp.state == QPClosing {
				qp.stalls.Add(1)
				qp.fatalLocked(term.MPAConnectionLost, nil, true)
			}
			qp.mu.Unlock()
			return
		}
	}
	qp.mu.Lock()
	defer qp.mu.Unlock()
	if qp.peerFIN {
		qp.watchClosedLocked(now)
		return
	}
	out := qp.ordHead != qp.ordTail && (qp.state == QPRTS || qp.state == QPClosing)
	if !out && qp.conn.Initiator && qp.state == QPRTS {
		qp.watchFirstLocked(now)
	}
	switch {
	case !out:
		w.req = false
	case !w.req || qp.responses != w.resp || qp.ordHead != w.ordHead:
		w.req, w.resp, w.ordHead, w.reqSince = true, qp.responses, qp.ordHead, now
		w.tx, w.txSince, w.wakes = qp.stats.txFPDUs.Load(), now, 0
	case qp.reqTimeout > 0 && now.Sub(w.reqSince) >= qp.reqTimeout:
		if seq := qp.ordQ[qp.ordHead%uint32(len(qp.ordQ))]; seq != ordRTR {
			e, _ := qp.sqSlot(seq)
			e.status, e.err = StatusRetryExcErr, term.MPAConnectionLost
		}
		qp.stalls.Add(1)
		qp.fatalLocked(term.MPAConnectionLost, nil, true)
	case qp.wakeAfter > 0 && w.wakes < maxWakes:
		if tx := qp.stats.txFPDUs.Load(); tx != w.tx {
			w.tx, w.txSince = tx, now // we sent something: the peer has its segment
		} else if now.Sub(w.txSince) >= qp.wakeAfter && qp.canWakeLocked() {
			w.wakes++
			qp.wakeLocked(now)
		}
	}
}

// watchFirstLocked wakes a peer that has received our first FPDUs but
// sent nothing back; the request watch covers Reads and Atomics.
func (qp *QP) watchFirstLocked(now time.Time) {
	w := &qp.wd
	tx := qp.stats.txFPDUs.Load()
	if qp.wakeAfter <= 0 || w.first >= maxWakes || tx == 0 || qp.stats.rxFPDUs.Load() != 0 {
		return
	}
	if tx != w.tx {
		w.tx, w.txSince = tx, now
	} else if now.Sub(w.txSince) >= qp.wakeAfter && qp.canWakeLocked() {
		w.first++
		qp.wakeLocked(now)
	}
}

// wakeLocked sends the zero-length Write: the RTR Write again, framed at
// the start of the next build round.
func (qp *QP) wakeLocked(now time.Time) {
	qp.rtrPending = rtrWrite
	qp.wakes.Add(1)
	qp.wd.txSince = now
	qp.ring()
}

// canWakeLocked: the wake may go out now, between messages.
func (qp *QP) canWakeLocked() bool {
	return qp.txOpen && qp.rtrPending == 0 && !qp.termPending && !qp.txDone && !qp.sqMid() && !qp.respMid()
}

// watchClosedLocked looks after a QP whose peer has closed its half.
func (qp *QP) watchClosedLocked(now time.Time) {
	w := &qp.wd
	w.req = false
	if qp.ordHead != qp.ordTail {
		qp.flushORDLocked()
	}
	if qp.state != QPRTS || qp.sqHead != qp.sqTail || qp.irdHead != qp.irdTail {
		w.idleSince = time.Time{}
		return
	}
	if w.idleSince.IsZero() {
		w.idleSince = now
	} else if now.Sub(w.idleSince) >= closeLinger {
		qp.state = QPClosing // tx sends our FIN (runTx), as Disconnect
		qp.ring()
	}
}

// Wakes returns how many zero-length Writes the QP sent to wake its peer.
func (qp *QP) Wakes() uint64 { return qp.wakes.Load() }
