package engine

import (
	"sync/atomic"

	"xrnic/wire/rdmap"
	"xrnic/wire/term"
)

// termIndex numbers the predeclared iWARP errors for per-reason counters;
// unknown triples share the last slot.
var (
	termKnown = term.Known()
	termIndex = func() map[*term.Error]int {
		m := make(map[*term.Error]int, len(termKnown))
		for i, e := range termKnown {
			m[e] = i
		}
		return m
	}()
)

func termSlot(e *term.Error) int {
	if i, ok := termIndex[e]; ok {
		return i
	}
	return len(termKnown)
}

// counters are a QP's per-reason counters: plain atomics, read at scrape
// time by Stats.
type counters struct {
	txMsgs, rxMsgs   [16]atomic.Uint64
	txBytes, rxBytes [16]atomic.Uint64
	txFPDUs, rxFPDUs atomic.Uint64
	txBatches        atomic.Uint64
	txInline         atomic.Uint64 // of txBatches, written by the posting or receiving goroutine
	txPiped          atomic.Uint64 // of txBatches, written by the pipeline's writer (txpipe.go)
	termsSent        []atomic.Uint64
	termsRecv        []atomic.Uint64
	termsSiw         atomic.Uint64    // received in Linux siw's control word layout
	atomics          [2]atomic.Uint64 // FetchAdd, CmpSwap executed as responder
	cmpSwapMatched   atomic.Uint64
}

func (c *counters) init() {
	c.termsSent = make([]atomic.Uint64, len(termKnown)+1)
	c.termsRecv = make([]atomic.Uint64, len(termKnown)+1)
}

func (c *counters) tx(op rdmap.OpCode, bytes int, last bool) {
	op &= 0xF
	c.txBytes[op].Add(uint64(bytes))
	if last {
		c.txMsgs[op].Add(1)
	}
}

func (c *counters) rx(op rdmap.OpCode, bytes int, last bool) {
	op &= 0xF
	c.rxBytes[op].Add(uint64(bytes))
	if last {
		c.rxMsgs[op].Add(1)
	}
}

func (c *counters) termSent(e *term.Error) { c.termsSent[termSlot(e)].Add(1) }
func (c *counters) termRecv(e *term.Error) { c.termsRecv[termSlot(e)].Add(1) }

func (c *counters) atomic(op int, matched bool) {
	c.atomics[op].Add(1)
	if op == 1 && matched {
		c.cmpSwapMatched.Add(1)
	}
}

// Stats returns a snapshot of the QP's counters.
func (qp *QP) Stats() Stats {
	c := &qp.stats
	var s Stats
	for i := range s.TxMsgs {
		s.TxMsgs[i] = c.txMsgs[i].Load()
		s.RxMsgs[i] = c.rxMsgs[i].Load()
		s.TxBytes[i] = c.txBytes[i].Load()
		s.RxBytes[i] = c.rxBytes[i].Load()
	}
	s.TxFPDUs, s.RxFPDUs, s.TxBatches, s.TxInline, s.TxPiped = c.txFPDUs.Load(), c.rxFPDUs.Load(), c.txBatches.Load(), c.txInline.Load(), c.txPiped.Load()
	s.FetchAdds, s.CmpSwaps, s.CmpSwapMatched = c.atomics[0].Load(), c.atomics[1].Load(), c.cmpSwapMatched.Load()
	s.Stalled = qp.stalls.Load()
	collect := func(src []atomic.Uint64) []TermCount {
		var out []TermCount
		for i := range src {
			if n := src[i].Load(); n != 0 {
				var e *term.Error
				if i < len(termKnown) {
					e = termKnown[i]
				}
				out = append(out, TermCount{Err: e, Count: n})
			}
		}
		return out
	}
	s.TermsSent = collect(c.termsSent)
	s.TermsRecv = collect(c.termsRecv)
	s.TermsRecvSiw = c.termsSiw.Load()
	return s
}

func putTerminate(b []byte, e *term.Error, offending []byte) (int, error) {
	return rdmap.PutTerminate(b, e, offending)
}
