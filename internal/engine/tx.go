package engine

import (
	"time"

	"xrnic/mem"
	"xrnic/wire/ddp"
	"xrnic/wire/rdmap"
	"xrnic/wire/term"
)

const (
	txBufLen = 256 << 10 // bytes framed per LLP write at most (plus one FPDU)
	// txBufsKept is how many free transmit buffers a device keeps for
	// the next transmitter.
	txBufsKept = 16
	txChunk    = 64 << 10 // payload per message per turn, so SQ and responses interleave
	ordRTR     = ^uint32(0)
)

// runTx owns the write side of the LLP: it frames responses to inbound
// Reads/Atomics and the SQ's messages into txbuf and writes them; it sends
// the Terminate last and then shuts the stream down.
func (qp *QP) runTx() {
	defer qp.wg.Done()
	defer qp.endTx()
	defer func() {
		if r := recover(); r != nil {
			panic(r) // (a panic may hold qp.mu: crash, do not hang)
		}
		qp.mu.Lock()
		qp.txDropLocked()
		qp.mu.Unlock()
	}()
	defer qp.pipeStop()
	for {
		qp.pipeStop() // (a burst's writer ends with it)
		select {
		case <-qp.doorbell:
		case <-qp.stop:
			return
		}
		for {
			qp.mu.Lock()
			if qp.pipe.on && (qp.termPending || qp.state != QPRTS) {
				// Everything framed goes out before the stream's end.
				qp.mu.Unlock()
				qp.pipeWait()
				continue
			}
			if qp.txHandoffLocked() {
				qp.mu.Unlock()
				continue
			}
			if qp.txi.busy && !qp.pipe.on {
				// An inline transmitter has txbuf; it rings when done.
				qp.txi.more = true
				qp.mu.Unlock()
				break
			}
			if qp.termPending {
				qp.txBufLocked()
				qp.txi.busy = true // until the write below is done
				h := qp.framer.HeaderLen()
				copy(qp.txbuf[h:], qp.termULPDU[:qp.termLen])
				wl, err := qp.framer.Seal(qp.txbuf, qp.termLen)
				qp.termPending = false
				qp.txDone = true
				qp.mu.Unlock()
				if err == nil {
					qp.llp.SetWriteDeadline(time.Now().Add(qp.dev.cfg.ConnTimeout))
					qp.llp.Write(qp.txbuf[:wl])
				}
				qp.mu.Lock()
				qp.txi.busy = false
				qp.mu.Unlock()
				qp.shutdownLLP()
				return
			}
			if qp.state == QPError || qp.txDone {
				qp.txDone = true
				qp.mu.Unlock()
				qp.shutdownLLP()
				return
			}
			if qp.state == QPClosing && qp.sqHead == qp.sqTail && qp.irdHead == qp.irdTail && qp.rtrPending == 0 {
				// Orderly close: everything sent and answered.
				qp.txDone = true
				qp.mu.Unlock()
				qp.llp.CloseWrite()
				qp.endTx()
				return
			}
			if !qp.txOpen || qp.txKick != nil {
				// (With an inline LLP its owner frames and writes.)
				qp.mu.Unlock()
				break
			}
			qp.txBufLocked()
			qp.txReader.Enter()
			n := qp.buildLocked()
			qp.txReader.Exit()
			if n == 0 {
				// WRs that put nothing on the wire (Local Invalidate)
				// are done once built: complete them now.
				qp.completeSQLocked()
			}
			piped := qp.pipe.on
			if n == 0 && piped {
				// Nothing framed: the buffer goes back now; txbuf is
				// owned (txi.busy) until the write in flight is done.
				qp.dev.txBufs.put(qp.txbuf)
				qp.txbuf = nil
			}
			qp.txi.busy = n > 0 || piped
			qp.txDropLocked()
			full, end := !qp.space(n), qp.sqNext
			qp.mu.Unlock()
			qp.syncInvalidations()
			if piped {
				qp.pipeWait()
			}
			if n == 0 {
				if piped {
					continue // the write may have completed WRs: look again
				}
				break
			}
			if piped || full {
				// Written whatever the state now, as the write below: a
				// build that met an error (a Read source gone midway)
				// framed what precedes it, and the Terminate reports
				// the Read as stopped after those bytes.
				qp.pipeStart(n, end)
				continue
			}
			_, err := qp.llp.Write(qp.txbuf[:n])
			qp.mu.Lock()
			qp.wroteLocked(err)
			qp.txi.busy, qp.txi.more = false, false
			qp.txDropLocked()
			qp.mu.Unlock()
		}
	}
}

// shutdownLLP ends a stream that went to error: half-close so the peer sees
// our Terminate and FIN, wait (bounded) for the peer's FIN, then close.
func (qp *QP) shutdownLLP() {
	qp.llp.CloseWrite()
	qp.endTx()
	t := time.NewTimer(qp.dev.cfg.ConnTimeout)
	select {
	case <-qp.rxExit:
	case <-qp.stop:
	case <-t.C:
	}
	t.Stop()
	qp.llp.Close()
}

// endTx tells Close that the end of the stream (Terminate, half-close) has
// been handed to the LLP (tx goroutine only).
func (qp *QP) endTx() {
	if !qp.txEndSet {
		qp.txEndSet = true
		close(qp.txEnded)
	}
}

// wroteLocked records how a write of framed FPDUs ended: what it carried
// is written, or the connection is lost.
func (qp *QP) wroteLocked(err error) { qp.wroteToLocked(err, qp.sqNext) }

// wroteToLocked is wroteLocked for a write that carried the WRs framed
// before end (the pipeline's: the next buffer may be framed already).
func (qp *QP) wroteToLocked(err error, end uint32) {
	if err != nil {
		qp.fatalLocked(term.MPAConnectionLost, nil, false)
		return
	}
	qp.stats.txBatches.Add(1)
	qp.markWrittenToLocked(end)
}

func (qp *QP) markWrittenLocked() { qp.markWrittenToLocked(qp.sqNext) }

// markWrittenToLocked records the WRs framed before end as written. An
// end behind sqWritten (the QP flushed meanwhile) marks nothing.
func (qp *QP) markWrittenToLocked(end uint32) {
	if int32(end-qp.sqWritten) <= 0 {
		qp.completeSQLocked()
		return
	}
	for s := qp.sqWritten; s != end; s++ {
		e, _ := qp.sqSlot(s)
		if e.state == sqFramed {
			e.state = sqDone
		}
	}
	qp.sqWritten = end
	qp.completeSQLocked()
}

// txBufLocked borrows the transmit buffer from the device unless the QP
// holds it (qp.mu held, by whoever is about to frame into it).
func (qp *QP) txBufLocked() {
	if qp.txbuf == nil {
		qp.txbuf = qp.dev.txBufs.get(qp.txLen)
	}
}

// txDropLocked gives the transmit buffer back once no transmitter owns it
// and nothing framed in it waits to be written (qp.mu held).
func (qp *QP) txDropLocked() {
	if qp.txbuf != nil && !qp.txi.busy && !qp.txi.hand {
		qp.dev.txBufs.put(qp.txbuf)
		qp.txbuf = nil
	}
}

func (qp *QP) space(n int) bool { return len(qp.txbuf)-n >= qp.maxWire() }

func (qp *QP) maxWire() int { return qp.framer.WireLen(qp.mulpdu) }

// buildLocked frames as much work as fits into txbuf and returns its length.
func (qp *QP) buildLocked() int {
	n := 0
	if qp.rtrPending != 0 {
		n = qp.buildRTRLocked(n)
	}
	for qp.state == QPRTS || qp.state == QPClosing {
		var p1, p2 bool
		n, p1 = qp.buildRespLocked(n)
		if qp.state != QPRTS && qp.state != QPClosing {
			break
		}
		n, p2 = qp.buildSQLocked(n)
		if !p1 && !p2 || !qp.space(n) {
			break
		}
	}
	return n
}

func (qp *QP) seal(n, ulen int) int {
	wl, err := qp.framer.Seal(qp.txbuf[n:], ulen)
	if err != nil {
		// Cannot happen: sizes are bounded by MULPDU and space is checked.
		panic("engine: seal: " + err.Error())
	}
	qp.stats.txFPDUs.Add(1)
	if qp.fpduEnds != nil {
		qp.fpduEnds = append(qp.fpduEnds, n+wl)
	}
	return n + wl
}

func (qp *QP) buildRTRLocked(n int) int {
	h := qp.framer.HeaderLen()
	u := qp.txbuf[n+h:]
	var k int
	switch qp.rtrPending {
	case rtrWrite:
		k, _ = rdmap.PutWrite(u, 1, 0, true, 0) // non-zero STag (RFC 6581 §9.2)
		qp.stats.tx(rdmap.OpWrite, 0, true)
	case rtrRead:
		k, _ = rdmap.PutReadRequest(u, qp.reqMSN, rdmap.ReadParams{SrcSTag: 1})
		qp.reqMSN++
		qp.ordQ[qp.ordTail%uint32(len(qp.ordQ))] = ordRTR
		qp.ordTail++
		qp.stats.tx(rdmap.OpReadRequest, 0, true)
	default:
		k, _ = rdmap.PutSend(u, rdmap.OpSend, 0, qp.sendMSN, 0, true, 0)
		qp.sendMSN++
		qp.stats.tx(rdmap.OpSend, 0, true)
	}
	qp.rtrPending = 0
	return qp.seal(n, k)
}

// Messages in progress: the transmitter switches between the responses
// and the SQ only at message boundaries, so no message is cut by a
// tagged one (RFC 5041 segments of different messages are never mixed by
// us; siw and hardware RNICs do not expect it).

// sqMid reports whether the SQ's next message has begun but not ended.
func (qp *QP) sqMid() bool {
	if qp.sqNext == qp.sqTail {
		return false
	}
	e, _ := qp.sqSlot(qp.sqNext)
	return e.state == sqStarted
}

// respMid reports whether the head Read Response has begun but not ended.
func (qp *QP) respMid() bool {
	if qp.irdHead == qp.irdTail {
		return false
	}
	r := &qp.irdQ[qp.irdHead%uint32(len(qp.irdQ))]
	return !r.atomic && r.off > 0
}

// buildRespLocked frames responses to inbound Reads and Atomics in request
// order.
func (qp *QP) buildRespLocked(n int) (int, bool) {
	budget := txChunk
	progress := false
	for qp.irdHead != qp.irdTail {
		if !qp.space(n) {
			return n, progress
		}
		r := &qp.irdQ[qp.irdHead%uint32(len(qp.irdQ))]
		if !r.atomic && qp.sqMid() && !interleaveForTest {
			// A tagged message is never cut by another: the Read
			// Response waits for the SQ message in progress to end (siw
			// aborts on such an intersection). Atomic Responses, one
			// untagged FPDU each, still go out between its segments.
			return n, progress
		}
		if r.atomic {
			h := qp.framer.HeaderLen()
			k, _ := rdmap.PutAtomicResponse(qp.txbuf[n+h:], qp.atomRespMSN, r.reqID, r.orig)
			qp.atomRespMSN++
			n = qp.seal(n, k)
			qp.stats.tx(rdmap.OpAtomicResponse, k-ddp.UntaggedHeaderLen, true)
			qp.irdHead++
			progress = true
			continue
		}
		for {
			if !qp.space(n) {
				return n, true
			}
			rem := r.size - r.off
			seg := uint64(qp.mulpdu - ddp.TaggedHeaderLen)
			last := rem <= seg
			if !last {
				rem = seg
			}
			h := qp.framer.HeaderLen()
			u := qp.txbuf[n+h:]
			k, _ := rdmap.PutReadResponse(u, r.sinkSTg, r.sinkTO+r.off, last, int(rem))
			if rem > 0 {
				w, e := qp.dev.table.Check(r.srcSTag, qp.pd, qp.num, mem.RemoteRead, r.srcTO+r.off, rem, mem.OpReadSource)
				if e != nil {
					// The source went away after the request was accepted:
					// the Terminate names the Read as far as it got.
					qp.readSourceFailedLocked(r, e)
					return n, true
				}
				copy(u[ddp.TaggedHeaderLen:], w)
			}
			n = qp.seal(n, k)
			qp.stats.tx(rdmap.OpReadResponse, int(rem), last)
			r.off += rem
			budget -= int(rem) + 64
			progress = true
			if last {
				qp.irdHead++
				break
			}
			if budget <= 0 {
				return n, true
			}
		}
	}
	return n, progress
}

func (qp *QP) ordOut() int { return int(qp.ordTail - qp.ordHead) }

// localFail fails entry e with a local status and takes the QP to error
// with a Terminate not tied to an incoming message (RFC 5040 §7.1).
func (qp *QP) localFail(e *sqEntry, st Status) {
	e.status = st
	e.err = term.RDMAPLocalCatastrophic
	qp.fatalLocked(term.RDMAPLocalCatastrophic, nil, true)
}

// checkSGL validates the SGL of an entry before it starts.
func (qp *QP) checkSGL(sgl []SGE, need mem.Access) bool {
	for i := range sgl {
		if _, ok := qp.dev.table.CheckLocal(sgl[i].LKey, qp.pd, need, sgl[i].Addr, uint64(sgl[i].Length)); !ok {
			return false
		}
	}
	return true
}

// gather copies len(dst) message bytes from offset off of the SGL.
func (qp *QP) gather(dst []byte, sgl []SGE, off uint64) bool {
	for i := 0; i < len(sgl) && len(dst) > 0; i++ {
		l := uint64(sgl[i].Length)
		if off >= l {
			off -= l
			continue
		}
		k := min(l-off, uint64(len(dst)))
		w, ok := qp.dev.table.CheckLocal(sgl[i].LKey, qp.pd, 0, sgl[i].Addr+off, k)
		if !ok {
			return false
		}
		copy(dst, w)
		dst = dst[k:]
		off = 0
	}
	return len(dst) == 0
}

// sendOpcode is the RDMAP opcode of a Send variant (RFC 5040 §4.3).
func sendOpcode(wr *SendWR) rdmap.OpCode {
	se := wr.Flags&FlagSolicited != 0
	switch {
	case wr.Op == OpSendWithInv && se:
		return rdmap.OpSendSEInvalidate
	case wr.Op == OpSendWithInv:
		return rdmap.OpSendInvalidate
	case se:
		return rdmap.OpSendSE
	}
	return rdmap.OpSend
}

// buildSQLocked frames the SQ's work requests in order, holding Reads and
// Atomics at the ORD limit and fenced WRs until earlier ones complete.
func (qp *QP) buildSQLocked(n int) (int, bool) {
	budget := txChunk
	progress := false
	for qp.sqNext != qp.sqTail && qp.state != QPError {
		if !qp.space(n) || (qp.respMid() && !interleaveForTest) {
			return n, progress // (a Read Response in progress ends first)
		}
		e, sgl := qp.sqSlot(qp.sqNext)
		sgl = sgl[:e.nsge]
		op := e.wr.Op
		if e.wr.Flags&FlagFence != 0 && e.state == sqPosted && qp.ordOut() > 0 {
			return n, progress
		}
		if e.state == sqPosted {
			need := mem.Access(0)
			switch op {
			case OpRead, OpFetchAdd, OpCmpSwap:
				if qp.ord == 0 {
					qp.localFail(e, StatusLocQPOpErr)
					return n, true
				}
				if qp.ordOut() >= qp.ord {
					return n, progress
				}
				need = mem.LocalWrite
			}
			if e.intern == internalNone && !qp.checkSGL(sgl, need) {
				qp.localFail(e, StatusLocProtErr)
				return n, true
			}
		}
		done := false
		switch op {
		case OpSend, OpSendWithInv:
			if e.state == sqPosted {
				e.msn = qp.sendMSN
				qp.sendMSN++
				e.state = sqStarted
			}
			n, done = qp.emitData(e, sgl, n, &budget, false)
		case OpWrite, OpWriteWithImm:
			e.state = sqStarted
			if e.stage == 0 {
				n, done = qp.emitData(e, sgl, n, &budget, true)
				if done && op == OpWriteWithImm {
					e.stage = 1
					done = false
					if !qp.space(n) {
						break
					}
				}
			}
			if e.stage == 1 {
				e.msn = qp.sendMSN
				qp.sendMSN++
				n = qp.emitImm(n, rdmap.OpImmediate, e.msn, e.wr.Imm)
				done = true
			}
		case OpImm:
			e.msn = qp.sendMSN
			qp.sendMSN++
			rop := rdmap.OpImmediate
			if e.wr.Flags&FlagSolicited != 0 {
				rop = rdmap.OpImmediateSE
			}
			n = qp.emitImm(n, rop, e.msn, e.wr.Imm)
			done = true
		case OpRead:
			var p rdmap.ReadParams
			if len(sgl) == 1 {
				p.SinkSTag, p.SinkTO = sgl[0].LKey, sgl[0].Addr
			}
			p.Size = uint32(e.length)
			p.SrcSTag, p.SrcTO = e.wr.RemoteSTag, e.wr.RemoteTO
			e.msn = qp.reqMSN
			qp.reqMSN++
			h := qp.framer.HeaderLen()
			k, _ := rdmap.PutReadRequest(qp.txbuf[n+h:], e.msn, p)
			n = qp.seal(n, k)
			qp.stats.tx(rdmap.OpReadRequest, 0, true)
			qp.pushORD(qp.sqNext)
			e.state = sqWaiting
		case OpFetchAdd, OpCmpSwap:
			p := rdmap.AtomicParams{STag: e.wr.RemoteSTag, TO: e.wr.RemoteTO}
			if op == OpFetchAdd {
				p.AOpCode = rdmap.AOpFetchAdd
				p.AddSwap, p.AddSwapMask = e.wr.CompareAdd, e.wr.AddMask
				p.CompareMask = rdmap.FetchAddCompareMask
			} else {
				p.AOpCode = rdmap.AOpCmpSwap
				p.AddSwap, p.AddSwapMask = e.wr.Swap, e.wr.SwapMask
				p.Compare, p.CompareMask = e.wr.CompareAdd, e.wr.CompareMask
			}
			e.msn = qp.reqMSN
			p.RequestID = e.msn
			qp.reqMSN++
			h := qp.framer.HeaderLen()
			k, _ := rdmap.PutAtomicRequest(qp.txbuf[n+h:], e.msn, p)
			n = qp.seal(n, k)
			qp.stats.tx(rdmap.OpAtomicRequest, 0, true)
			qp.pushORD(qp.sqNext)
			e.state = sqWaiting
		case OpLocalInv:
			if err := qp.dev.table.Invalidate(e.wr.InvalidateSTag, qp.pd); err != nil {
				qp.localFail(e, StatusLocProtErr)
				return n, true
			}
			// Completes once no placement that passed its check before the
			// invalidation is still copying (syncInvalidations).
			e.state = sqInvalidating
			qp.invPending.Store(true)
		}
		if qp.state == QPError {
			return n, true
		}
		if !done && (op != OpRead && op != OpFetchAdd && op != OpCmpSwap && op != OpLocalInv) {
			return n, true // budget or space exhausted mid-message
		}
		if e.state == sqPosted || e.state == sqStarted {
			e.state = sqFramed
		}
		qp.sqNext++
		progress = true
		if budget <= 0 {
			return n, true
		}
	}
	return n, progress
}

func (qp *QP) pushORD(seq uint32) {
	qp.ordQ[qp.ordTail%uint32(len(qp.ordQ))] = seq
	qp.ordTail++
}

func (qp *QP) emitImm(n int, op rdmap.OpCode, msn uint32, imm uint64) int {
	var d [8]byte
	for i := 0; i < 8; i++ {
		d[i] = byte(imm >> (56 - 8*i))
	}
	h := qp.framer.HeaderLen()
	k, _ := rdmap.PutImmediate(qp.txbuf[n+h:], op, msn, d)
	qp.stats.tx(op, 8, true)
	return qp.seal(n, k)
}

// emitData frames segments of a Send (untagged) or Write (tagged) from
// e.off on; it reports whether the L segment was framed.
func (qp *QP) emitData(e *sqEntry, sgl []SGE, n int, budget *int, tagged bool) (int, bool) {
	hl := ddp.UntaggedHeaderLen
	if tagged {
		hl = ddp.TaggedHeaderLen
	}
	seg := uint64(qp.mulpdu - hl)
	for {
		if !qp.space(n) {
			return n, false
		}
		rem := e.length - e.off
		last := rem <= seg
		if !last {
			rem = seg
		}
		h := qp.framer.HeaderLen()
		u := qp.txbuf[n+h:]
		var k int
		var rop rdmap.OpCode
		if tagged {
			rop = rdmap.OpWrite
			k, _ = rdmap.PutWrite(u, e.wr.RemoteSTag, e.wr.RemoteTO+e.off, last, int(rem))
		} else {
			rop = sendOpcode(&e.wr)
			k, _ = rdmap.PutSend(u, rop, e.wr.InvalidateSTag, e.msn, uint32(e.off), last, int(rem))
		}
		if !qp.gather(u[hl:hl+int(rem)], sgl, e.off) {
			qp.localFail(e, StatusLocProtErr)
			return n, false
		}
		n = qp.seal(n, k)
		qp.stats.tx(rop, int(rem), last)
		e.off += rem
		*budget -= int(rem) + hl
		if last {
			return n, true
		}
		if *budget <= 0 {
			return n, false
		}
	}
}
