package engine

// txStep is the transmit path of a QP over a transport.InlineConn, run by
// the connection's owner goroutine (a transport.TxStep): it frames what is
// ready (responses first, then the SQ, exactly as runTx) into txbuf, at
// most about room bytes, and hands each FPDU to put. The end of the stream
// (Terminate, error, orderly close) is left to runTx.
func (qp *QP) txStep(room int, put func(fpdu []byte)) {
	for room > 0 {
		qp.mu.Lock()
		if qp.termPending || qp.txDone || qp.state == QPError || qp.state == QPClosed ||
			qp.state == QPClosing && qp.sqHead == qp.sqTail && qp.irdHead == qp.irdTail && qp.rtrPending == 0 {
			qp.mu.Unlock()
			qp.ringTx()
			return
		}
		if !qp.txOpen || qp.state != QPRTS && qp.state != QPClosing {
			qp.mu.Unlock()
			return
		}
		qp.txBufLocked()
		full := qp.txbuf
		qp.txbuf = full[:min(len(full), room+qp.maxWire())]
		qp.fpduEnds = qp.fpduEnds[:0]
		qp.txReader.Enter()
		n := qp.buildLocked()
		qp.txReader.Exit()
		qp.txbuf = full
		if n == 0 {
			qp.txDropLocked()
			qp.completeSQLocked()
			qp.mu.Unlock()
			qp.syncInvalidations()
			return
		}
		start := 0
		for _, end := range qp.fpduEnds {
			put(full[start:end])
			start = end
		}
		qp.stats.txBatches.Add(1)
		qp.markWrittenLocked()
		qp.txDropLocked() // put took every FPDU
		qp.mu.Unlock()
		qp.syncInvalidations()
		room -= n
	}
}
