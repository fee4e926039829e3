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

// watchState is the watchdog's memory of one QP (watchdog goroutine only).
type watchState struct {
	rx       uint64    // rxBytes at the last change
	rxSince  time.Time // since when a partial FPDU has not moved
	req      bool      // a request was outstanding at the last look
	resp     uint64    // responses and ordHead at the last change
	ordHead  uint32
	reqSince time.Time
}

// watchPeriod is how often the watchdog looks: a quarter of the shortest
// timeout, within [10 ms, 1 s].
func (c *Config) watchPeriod() time.Duration {
	p := time.Second
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
	if qp.reqTimeout <= 0 {
		return
	}
	qp.mu.Lock()
	defer qp.mu.Unlock()
	out := qp.ordHead != qp.ordTail && (qp.state == QPRTS || qp.state == QPClosing)
	switch {
	case !out:
		w.req = false
	case !w.req || qp.responses != w.resp || qp.ordHead != w.ordHead:
		w.req, w.resp, w.ordHead, w.reqSince = true, qp.responses, qp.ordHead, now
	case now.Sub(w.reqSince) >= qp.reqTimeout:
		if seq := qp.ordQ[qp.ordHead%uint32(len(qp.ordQ))]; seq != ordRTR {
			e, _ := qp.sqSlot(seq)
			e.status, e.err = StatusRetryExcErr, term.MPAConnectionLost
		}
		qp.stalls.Add(1)
		qp.fatalLocked(term.MPAConnectionLost, nil, true)
	}
}
