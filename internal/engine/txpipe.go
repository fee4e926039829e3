package engine

// Pipelined transmission over a blocking LLP (the kernel transport): while
// a helper goroutine writes one framed buffer, runTx frames the next. A
// stream's sender otherwise alternates between framing (the gather copy
// and the MPA CRC, about a third of its time) and the write (the kernel's
// copy and TCP, on a veth also the receiver's softirq), so one core does
// both in turn while the other waits; measured on the 2-vCPU host (kernel
// write_bw, 64 KiB): 415 ms framing and 885 ms in write(2) for 1.3 GB.
//
// The pipeline starts only when a build filled txbuf (more work is
// queued), so a ping-pong never pays for the hand-over, and it drains
// before runTx does anything but frame: the Terminate, the half-close and
// the end of the stream follow every FPDU before them, in order. At most
// one write is in flight, so the FPDUs reach the LLP in the order framed.
// The writer goroutine lives for a burst: it ends when the pipeline
// drains, so an idle QP keeps no goroutine (and no second buffer) for it.
type txPipe struct {
	req  chan []byte // runTx -> writer: a buffer to write; nil ends the writer
	done chan error  // writer -> runTx: the write's result (nil after the end)
	live bool        // the writer goroutine runs (runTx only)
	on   bool        // a write is in flight (under qp.mu)
	end  uint32      // qp.sqNext when the buffer in flight was framed
	buf  []byte      // the buffer in flight, lent by the device
}

// pipeStart hands the framed txbuf[:n] to the writer; end is qp.sqNext
// after its build (runTx, qp.mu not held, no write in flight).
func (qp *QP) pipeStart(n int, end uint32) {
	p := &qp.pipe
	if p.req == nil {
		p.req, p.done = make(chan []byte), make(chan error)
	}
	if !p.live {
		p.live = true
		go qp.txWriter(p.req, p.done)
	}
	qp.mu.Lock()
	b := qp.txbuf
	qp.txbuf = nil // the next build borrows another
	p.on, p.end, p.buf = true, end, b
	qp.mu.Unlock()
	p.req <- b[:n]
}

// pipeWait waits for the write in flight and records it as pipe.end's
// framed WRs written (runTx, qp.mu not held). It keeps txbuf owned if
// the next buffer is framed already.
func (qp *QP) pipeWait() {
	p := &qp.pipe
	err := <-p.done
	qp.mu.Lock()
	qp.dev.txBufs.put(p.buf)
	p.on, p.buf = false, nil
	if err == nil {
		qp.stats.txPiped.Add(1)
	}
	qp.wroteToLocked(err, p.end)
	if qp.txbuf == nil {
		qp.txi.busy, qp.txi.more = false, false
	}
	qp.mu.Unlock()
}

// pipeStop ends the writer goroutine once nothing is in flight (runTx).
func (qp *QP) pipeStop() {
	p := &qp.pipe
	if p.live {
		p.req <- nil
		<-p.done
		p.live = false
	}
}

// txWriter is the pipeline's writer goroutine.
func (qp *QP) txWriter(req <-chan []byte, done chan<- error) {
	for b := range req {
		if b == nil {
			done <- nil
			return
		}
		_, err := qp.llp.Write(b)
		done <- err
	}
}
