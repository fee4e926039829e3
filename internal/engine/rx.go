package engine

import (
	"encoding/binary"
	"errors"
	"io"
	"runtime"
	"time"

	"xrnic/atomics"
	"xrnic/mem"
	"xrnic/transport"
	"xrnic/wire/ddp"
	"xrnic/wire/mpa"
	"xrnic/wire/rdmap"
	"xrnic/wire/term"
)

const (
	// rxBufLen is what one read of a kernel TCP socket takes at most.
	rxBufLen = 256 << 10
	// rxBufsKept is how many free receive buffers a device keeps for
	// the next QP that has data (the rest go back to the GC).
	rxBufsKept = 16
)

// runRx is the kernel-LLP read loop: it reads into the QP's buffer and
// feeds input.
func (qp *QP) runRx() {
	defer qp.wg.Done()
	for {
		n, err := qp.llp.Read(qp.rxbuf)
		if n > 0 {
			qp.input(qp.rxbuf[:n])
			qp.releaseHeld()
		}
		if err != nil {
			fin := qp.rxEOF(errors.Is(err, io.EOF))
			qp.releaseHeld()
			if fin {
				qp.endPeerClosed()
			}
			close(qp.rxExit)
			return
		}
	}
}

// runRxPolled is runRx for a TryReader LLP (kernel TCP): the stream is
// read by whoever holds rxMu, this goroutine when the socket wakes it or
// a poller of one of the QP's CQs (driveRx), so an application that spins
// on its CQ places data and completes work on its own thread, with no
// wake-up of this goroutine on the way (run to completion).
func (qp *QP) runRxPolled() {
	defer qp.wg.Done()
	err := qp.rxTR.ReadLoop(qp.rxTry)
	qp.rxMu.Lock()
	if qp.rxErr != nil {
		err = qp.rxErr // also when a poller's deadline ended ReadLoop
	}
	qp.rxErr = err // pollers read no more
	qp.dropRxBuf()
	qp.rxMu.Unlock()
	qp.scq.removeDriven(qp)
	qp.rcq.removeDriven(qp)
	fin := qp.rxEOF(errors.Is(err, io.EOF))
	qp.releaseHeld()
	if fin {
		qp.endPeerClosed()
	}
	close(qp.rxExit)
}

// rxTryRead is runRxPolled's ReadLoop callback, called when the socket
// may have data: it handles everything there (the wake-ups are
// edge-triggered) and reports true once the stream has ended. When a
// poller holds rxMu it does not wait for it: it raises rxWanted, and
// the holder reads on before it lets go (rxUnlock).
func (qp *QP) rxTryRead() bool {
	qp.rxWanted.Store(true)
	if !qp.rxMu.TryLock() {
		return false
	}
	qp.rxWanted.Store(false)
	got := false
	for qp.rxErr == nil && qp.rxOnce() {
		got = true
	}
	qp.rxSpin(got)
	end := qp.rxErr != nil
	qp.dropRxBuf() // the socket is empty: the buffer goes back until data comes
	qp.rxMu.Unlock()
	return end
}

// rxSpin polls the emptied socket until Config.RxSpin has passed since
// the last data (rxMu held; got: this call read some), if the device has
// a spinner's place free. It yields between polls; a poller that wants
// the stream meanwhile (driveRx) finds rxMu taken and leaves the reading
// to it. A wake-up without data long after the last (edge-triggered
// readiness, a place freed by another spinner) starts no new spin.
func (qp *QP) rxSpin(got bool) {
	d := qp.dev
	spin := d.cfg.RxSpin
	if spin <= 0 || qp.rxErr != nil {
		return
	}
	if got {
		qp.rxLast = time.Now()
	} else if time.Since(qp.rxLast) >= spin {
		return
	}
	for {
		n := d.rxSpinners.Load()
		if n >= d.rxSpinnersMax {
			return
		}
		if d.rxSpinners.CompareAndSwap(n, n+1) {
			break
		}
	}
	for qp.rxErr == nil && !qp.closing.Load() && time.Since(qp.rxLast) < spin {
		if qp.rxOnce() {
			qp.rxLast = time.Now()
			continue
		}
		runtime.Gosched()
	}
	d.rxSpinners.Add(-1)
}

// dropRxBuf returns the receive buffer to the device (rxMu held).
func (qp *QP) dropRxBuf() {
	if qp.rxbuf != nil {
		qp.dev.rxBufs.put(qp.rxbuf)
		qp.rxbuf = nil
	}
}

// rxOnce is one read of the stream (rxMu held): it handles what arrived
// and reports whether there was any; the end of the stream goes to rxErr.
func (qp *QP) rxOnce() bool {
	if qp.rxbuf == nil {
		qp.rxbuf = qp.dev.rxBufs.get(rxBufLen)
	}
	n, err := qp.rxTR.TryRead(qp.rxbuf)
	if n > 0 {
		qp.input(qp.rxbuf[:n])
		qp.releaseHeld()
		return true
	}
	if err != nil {
		qp.rxErr = err
	}
	return false
}

// driveRx is one read of the stream on the caller's goroutine (a CQ
// poller's Drive).
func (qp *QP) driveRx() transport.DriveResult {
	if !qp.rxMu.TryLock() {
		return transport.DriveNone // the reader (or another poller) is at it
	}
	r := transport.DriveIdle
	if qp.rxErr == nil && qp.rxOnce() {
		r = transport.DriveWork
	} else {
		qp.dropRxBuf() // nothing came: an idle QP holds no buffer
	}
	qp.rxUnlock()
	return r
}

// rxUnlock releases rxMu held by a poller. If the reader was woken
// meanwhile (rxWanted), it first reads the socket empty on the reader's
// behalf, taking rxMu again unless another poller has (who then does
// the same). If a poller met the end of the stream, the reader is woken
// to end the QP (a past read deadline ends ReadLoop): no further wake-up
// will come from the socket.
func (qp *QP) rxUnlock() {
	for {
		end := qp.rxErr != nil
		qp.rxMu.Unlock()
		if end {
			qp.llp.SetReadDeadline(time.Unix(1, 0))
			return
		}
		if !qp.rxWanted.Load() || !qp.rxMu.TryLock() {
			return
		}
		qp.rxWanted.Store(false)
		for qp.rxErr == nil && qp.rxOnce() {
		}
		qp.dropRxBuf() // the socket is empty, as the reader would leave it
	}
}

// rxPush is the receive function handed to a PushLLP (see PushLLP).
func (qp *QP) rxPush(p []byte) (int, error) {
	if len(p) == 0 { // the end: nil, connection lost; empty, the peer's FIN
		if qp.rxEOF(p != nil) {
			// The loop must not wait: end the QP once tx has ended.
			go func() {
				qp.endPeerClosed()
				qp.stopRx()
			}()
		} else {
			qp.stopRx()
		}
		return 0, nil
	}
	ok := qp.input(p)
	qp.releaseHeld()
	if !ok {
		return len(p), ErrState
	}
	return len(p), nil
}

func (qp *QP) stopRx() {
	qp.mu.Lock()
	if !qp.rxStopped {
		qp.rxStopped = true
		close(qp.rxExit)
	}
	qp.mu.Unlock()
}

// rxEOF handles the end of the inbound stream. The peer's FIN at a
// message boundary is an orderly close (peerClosedLocked; it reports
// true): outbound work goes on. A FIN inside an FPDU or a message or
// before the peer-to-peer RTR, a reset or a lost connection is an error.
func (qp *QP) rxEOF(fin bool) bool {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	if qp.state != QPRTS && qp.state != QPClosing {
		return false
	}
	if fin && qp.deframer.Pending() == 0 && !qp.recvActive && !qp.inWrite && !qp.rxAwaitRTR {
		qp.peerClosedLocked()
		return true
	}
	qp.fatalLocked(term.MPAConnectionLost, nil, false)
	return false
}

// input consumes a piece of the in-order inbound stream: MPA deframing
// (CRC and markers checked over the received bytes before anything is
// placed), then each DDP segment is validated and placed or executed. It
// reports false once the QP no longer receives (in error: later segments
// are dropped, RFC 5041 §7.1).
func (qp *QP) input(p []byte) bool {
	qp.rxBytes.Add(uint64(len(p)))
	qp.rxReader.Enter()
	ok, want := true, false
	for len(p) > 0 {
		ulpdu, k, err := qp.deframer.Next(p)
		if err != nil {
			qp.mu.Lock()
			qp.fatalLocked(asTermError(err), nil, true)
			qp.mu.Unlock()
			ok = false
			break
		}
		p = p[k:]
		if ulpdu == nil {
			continue
		}
		qp.mu.Lock()
		if qp.state >= QPError {
			qp.mu.Unlock()
			ok = false
			break
		}
		qp.stats.rxFPDUs.Add(1)
		if e := qp.handleLocked(ulpdu); e != nil {
			qp.fatalLocked(e, ulpdu, true)
		}
		want = want || qp.txi.rxWant
		qp.txi.rxWant = false
		qp.txi.streak = 0
		qp.mu.Unlock()
	}
	qp.rxReader.Exit()
	qp.rxPartial.Store(qp.deframer.Pending() > 0)
	if want {
		qp.kick(true) // answer in this goroutine (txinline.go)
	}
	return ok
}

func asTermError(err error) *term.Error {
	var te *term.Error
	if errors.As(err, &te) {
		return te
	}
	return term.MPALocalCatastrophic
}

// handleLocked validates one DDP segment and acts on it; it returns the
// error to report in a Terminate, or nil.
func (qp *QP) handleLocked(ulpdu []byte) *term.Error {
	seg, err := ddp.Parse(ulpdu)
	if err != nil {
		return term.RDMAPOperationUnspecified // shorter than its DDP header
	}
	op, te := rdmap.Classify(seg, false)
	if te != nil {
		return te
	}
	pl := seg.Payload()
	qp.stats.rx(op, len(pl), seg.Last())
	if qp.rxFirst {
		// RFC 5044 §7.1.2 rule 4: the responder sends nothing before the
		// first FPDU; in peer-to-peer mode that FPDU is the RTR (RFC 6581).
		qp.rxFirst = false
		qp.txOpen = true
		qp.ringRx()
		if qp.rxAwaitRTR && op != rdmap.OpTerminate { // a Terminate reports a failed setup
			qp.rxAwaitRTR = false
			rtr := qp.conn.RTR
			switch {
			case op == rdmap.OpWrite && rtr.Has(mpa.RTRWrite) && len(pl) == 0 && seg.Last():
				return nil
			case op == rdmap.OpReadRequest && rtr.Has(mpa.RTRRead) && rdmap.ReadRequest(pl).Size() == 0:
				// answered like any zero-length Read
			case op == rdmap.OpSend && rtr.Has(mpa.RTRSend) && len(pl) == 0 && seg.Last() &&
				seg.Untagged().MSN() == qp.recvMSN && seg.Untagged().MO() == 0:
				qp.recvMSN++ // consumes MSN 1 but no receive buffer
				return nil
			default:
				return term.MPANoMatchingRTR
			}
		}
	}
	switch op {
	case rdmap.OpWrite:
		return qp.rxWrite(seg, pl)
	case rdmap.OpReadResponse:
		return qp.rxReadResponse(seg, pl)
	case rdmap.OpSend, rdmap.OpSendSE, rdmap.OpSendInvalidate, rdmap.OpSendSEInvalidate:
		return qp.rxSend(seg, op, pl)
	case rdmap.OpImmediate, rdmap.OpImmediateSE:
		return qp.rxImmediate(seg, op, pl)
	case rdmap.OpReadRequest:
		return qp.rxReadRequest(seg, pl)
	case rdmap.OpAtomicRequest:
		return qp.rxAtomicRequest(seg, pl)
	case rdmap.OpAtomicResponse:
		return qp.rxAtomicResponse(seg, pl)
	case rdmap.OpTerminate:
		qp.rxTerminate(pl)
		return nil
	}
	return term.RDMAPUnexpectedOpCode
}

func (qp *QP) rxWrite(seg ddp.Segment, pl []byte) *term.Error {
	t := seg.Tagged()
	if len(pl) > 0 { // zero-length tagged messages are not checked (RFC 5041 §5.2)
		w, e := qp.dev.table.Check(t.STag(), qp.pd, qp.num, mem.RemoteWrite, t.TO(), uint64(len(pl)), mem.OpWrite)
		if e != nil {
			return e
		}
		if h := placeHook.Load(); h != nil {
			(*h)()
		}
		copy(w, pl)
	}
	if !qp.inWrite {
		qp.inWrite = true
		qp.writeLen = 0
	}
	qp.writeLen += uint64(len(pl))
	if seg.Last() {
		qp.inWrite = false
		qp.prevWrite = true
		qp.lastWrite = qp.writeLen
	}
	return nil
}

// rxReadResponse places a Read Response segment into the sink of the
// oldest outstanding Read, checking STag, TO and length against the
// request (RFC 5040 §5.2 sink checks).
func (qp *QP) rxReadResponse(seg ddp.Segment, pl []byte) *term.Error {
	if qp.ordHead == qp.ordTail {
		return term.DDPTaggedInvalidSTag
	}
	t := seg.Tagged()
	seq := qp.ordQ[qp.ordHead%uint32(len(qp.ordQ))]
	if seq == ordRTR {
		if len(pl) != 0 || !seg.Last() {
			return term.DDPTaggedBaseBounds
		}
		qp.ordHead++
		qp.ringRx()
		return nil
	}
	e, sgl := qp.sqSlot(seq)
	if e.wr.Op != OpRead {
		return term.DDPTaggedInvalidSTag // an Atomic is answered first
	}
	var stag uint32
	var to uint64
	if e.nsge == 1 {
		stag, to = sgl[0].LKey, sgl[0].Addr
	}
	n := uint64(len(pl))
	if t.STag() != stag {
		e.status, e.err = StatusBadRespErr, term.DDPTaggedInvalidSTag
		return term.DDPTaggedInvalidSTag
	}
	if t.TO() != to+e.got || n > e.length-e.got {
		e.status, e.err = StatusBadRespErr, term.DDPTaggedBaseBounds
		return term.DDPTaggedBaseBounds
	}
	if n > 0 {
		w, ok := qp.dev.table.CheckLocal(stag, qp.pd, mem.LocalWrite, t.TO(), n)
		if !ok {
			e.status, e.err = StatusLocProtErr, term.DDPTaggedInvalidSTag
			return term.DDPTaggedInvalidSTag
		}
		copy(w, pl)
	}
	e.got += n
	qp.responses++
	if seg.Last() {
		if e.got != e.length {
			e.status, e.err = StatusBadRespErr, term.DDPTaggedBaseBounds
			return term.DDPTaggedBaseBounds
		}
		e.state = sqDone
		qp.ordHead++
		qp.completeSQLocked()
		qp.ringRx()
	}
	return nil
}

// failRecvHead completes the receive being filled with an error status.
func (qp *QP) failRecvHead(st Status, te *term.Error) {
	r, _ := qp.rqSlot(qp.rqHead)
	qp.rqHead++
	qp.recvActive = false
	c := Completion{Status: st, Op: OpRecv, Err: te}
	qp.completeRecv(r, &c)
}

// scatter copies src to offset off of a receive SGL.
func (qp *QP) scatter(src []byte, sgl []SGE, off uint64) bool {
	for i := 0; i < len(sgl) && len(src) > 0; i++ {
		l := uint64(sgl[i].Length)
		if off >= l {
			off -= l
			continue
		}
		k := min(l-off, uint64(len(src)))
		w, ok := qp.dev.table.CheckLocal(sgl[i].LKey, qp.rqPD, mem.LocalWrite, sgl[i].Addr+off, k)
		if !ok {
			return false
		}
		copy(w, src[:k])
		src = src[k:]
		off = 0
	}
	return len(src) == 0
}

// rxSend reassembles a Send-family message into the head receive WR by
// MSN/MO and completes it at the L segment (RFC 5041 §7.1 checks).
func (qp *QP) rxSend(seg ddp.Segment, op rdmap.OpCode, pl []byte) *term.Error {
	u := seg.Untagged()
	if qp.rqHead == qp.rqTail && qp.srq == nil {
		return term.DDPUntaggedNoBuffer
	}
	if u.MSN() != qp.recvMSN {
		return term.DDPUntaggedMSNRange
	}
	if qp.rqHead == qp.rqTail { // on an SRQ: the first segment takes one
		if e := qp.srqTakeLocked(); e != nil {
			return e
		}
	}
	r, sgl := qp.rqSlot(qp.rqHead)
	if !qp.recvActive {
		qp.recvActive = true
		qp.recvLen = 0
	}
	// The segments of an untagged message arrive in order on a stream
	// LLP: each starts where the message so far ends (RFC 5041 §5.2, §7;
	// docs/spec/ddp.md#validation). Anything else would complete bytes
	// that never arrived.
	mo := uint64(u.MO())
	if mo != qp.recvLen || mo > r.length {
		return term.DDPUntaggedInvalidMO
	}
	end := mo + uint64(len(pl))
	if end > r.length {
		qp.failRecvHead(StatusLocLenErr, term.DDPUntaggedTooLong)
		return term.DDPUntaggedTooLong
	}
	if !qp.scatter(pl, sgl[:r.nsge], mo) {
		qp.failRecvHead(StatusLocProtErr, term.RDMAPLocalCatastrophic)
		return term.RDMAPLocalCatastrophic
	}
	qp.recvLen = end
	qp.prevWrite = false
	if !seg.Last() {
		return nil
	}
	c := Completion{Op: OpRecv, ByteLen: uint32(qp.recvLen)}
	if op == rdmap.OpSendSE || op == rdmap.OpSendSEInvalidate {
		c.Flags |= WCSolicited
	}
	if op == rdmap.OpSendInvalidate || op == rdmap.OpSendSEInvalidate {
		inv := u.RsvdULPWord()
		if e := qp.dev.table.RemoteInvalidate(inv, qp.pd, qp.num); e != nil {
			return e
		}
		// This completion, and any after it, waits until no placement
		// into the STag is in flight on any QP (releaseHeld, RFC 5041
		// §8.3.1).
		qp.holdRecv.Store(true)
		c.Flags |= WCWithInv
		c.InvalidatedSTag = inv
	}
	qp.recvMSN++
	qp.recvActive = false
	qp.consumeRecvLocked(&c)
	return nil
}

// rxImmediate delivers Immediate Data (RFC 7306 §6): it consumes a receive
// WR, whose buffer gets the 8 bytes, and completes it with the value. A
// receive with no buffer (empty SGL or 0 bytes, what InfiniBand-style
// applications post for Write with Immediate) takes the value in the
// completion only, and so does one shorter than 8 bytes after an RDMA
// Write: InfiniBand's Write with Immediate never touches the receive
// buffer, and qperf posts its message size (1 byte) there. A lone
// Immediate Data into 1 to 7 bytes is too short.
func (qp *QP) rxImmediate(seg ddp.Segment, op rdmap.OpCode, pl []byte) *term.Error {
	u := seg.Untagged()
	if qp.rqHead == qp.rqTail && qp.srq == nil {
		return term.DDPUntaggedNoBuffer
	}
	if u.MSN() != qp.recvMSN || qp.recvActive {
		return term.DDPUntaggedMSNRange
	}
	if qp.rqHead == qp.rqTail {
		if e := qp.srqTakeLocked(); e != nil {
			return e
		}
	}
	r, sgl := qp.rqSlot(qp.rqHead)
	c := Completion{Op: OpRecvImm, ByteLen: rdmap.ImmediateLen, Flags: WCWithImm, Imm: binary.BigEndian.Uint64(pl)}
	switch {
	case r.length == 0, qp.prevWrite && r.length < rdmap.ImmediateLen:
		c.ByteLen = 0
	case r.length < rdmap.ImmediateLen:
		qp.failRecvHead(StatusLocLenErr, term.DDPUntaggedTooLong)
		return term.DDPUntaggedTooLong
	case !qp.scatter(pl, sgl[:r.nsge], 0):
		qp.failRecvHead(StatusLocProtErr, term.RDMAPLocalCatastrophic)
		return term.RDMAPLocalCatastrophic
	}
	if qp.prevWrite {
		// RDMA Write followed by Immediate Data: the Write is placed.
		c.Op = OpRecvWriteImm
		c.ByteLen = uint32(qp.lastWrite)
		qp.prevWrite = false
	}
	if op == rdmap.OpImmediateSE {
		c.Flags |= WCSolicited
	}
	qp.recvMSN++
	qp.consumeRecvLocked(&c)
	return nil
}

// checkInbound checks a QN 1 request's MSN and the IRD limit.
func (qp *QP) checkInbound(seg ddp.Segment) *term.Error {
	if seg.Untagged().MSN() != qp.inReqMSN {
		return term.DDPUntaggedMSNRange
	}
	if int(qp.irdTail-qp.irdHead) >= qp.ird {
		return term.RDMAPCatastrophicStream // more than IRD outstanding (docs/spec/rfc7306.md#ord-ird)
	}
	return nil
}

func (qp *QP) rxReadRequest(seg ddp.Segment, pl []byte) *term.Error {
	if e := qp.checkInbound(seg); e != nil {
		return e
	}
	h := rdmap.ReadRequest(pl)
	size := uint64(h.Size())
	if size > 0 { // zero-length Reads are not validated (RFC 5040 §5.2)
		if _, e := qp.dev.table.Check(h.SrcSTag(), qp.pd, qp.num, mem.RemoteRead, h.SrcTO(), size, mem.OpReadSource); e != nil {
			return e
		}
	}
	qp.irdQ[qp.irdTail%uint32(len(qp.irdQ))] = irdEntry{sinkSTg: h.SinkSTag(), sinkTO: h.SinkTO(), size: size, srcSTag: h.SrcSTag(), srcTO: h.SrcTO()}
	qp.irdTail++
	qp.inReqMSN++
	qp.prevWrite = false
	qp.ringRx()
	return nil
}

// rxAtomicRequest executes an atomic at delivery (RFC 7306 §5.2.1) and
// queues its response in request order.
func (qp *QP) rxAtomicRequest(seg ddp.Segment, pl []byte) *term.Error {
	if e := qp.checkInbound(seg); e != nil {
		return e
	}
	h := rdmap.AtomicRequest(pl)
	w, e := qp.dev.table.Check(h.STag(), qp.pd, qp.num, mem.RemoteAtomic, h.TO(), 8, mem.OpAtomic)
	if e != nil {
		return e
	}
	var orig uint64
	var err error
	if h.AOpCode() == rdmap.AOpFetchAdd {
		orig, err = atomics.FetchAddAt(w, 0, h.AddSwap(), h.AddSwapMask())
		qp.stats.atomic(0, true)
	} else {
		var matched bool
		orig, matched, err = atomics.CmpSwapAt(w, 0, h.Compare(), h.CompareMask(), h.AddSwap(), h.AddSwapMask())
		qp.stats.atomic(1, matched)
	}
	if err != nil {
		if err == atomics.ErrMisaligned {
			return term.RDMAPCatastrophicStream
		}
		return term.RDMAPBaseBounds
	}
	qp.irdQ[qp.irdTail%uint32(len(qp.irdQ))] = irdEntry{atomic: true, reqID: h.RequestID(), orig: orig}
	qp.irdTail++
	qp.inReqMSN++
	qp.prevWrite = false
	qp.ringRx()
	return nil
}

// rxAtomicResponse matches an Atomic Response to the oldest outstanding
// request by MSN, cross-checks the Request Identifier and completes the WR.
func (qp *QP) rxAtomicResponse(seg ddp.Segment, pl []byte) *term.Error {
	if qp.ordHead == qp.ordTail {
		return term.DDPUntaggedNoBuffer
	}
	if seg.Untagged().MSN() != qp.atomRespExp {
		return term.DDPUntaggedMSNRange
	}
	seq := qp.ordQ[qp.ordHead%uint32(len(qp.ordQ))]
	if seq == ordRTR {
		return term.DDPUntaggedMSNRange
	}
	e, sgl := qp.sqSlot(seq)
	if e.wr.Op != OpFetchAdd && e.wr.Op != OpCmpSwap {
		return term.DDPUntaggedMSNRange // a Read must be answered first
	}
	h := rdmap.AtomicResponse(pl)
	if h.RequestID() != e.msn {
		e.status, e.err = StatusBadRespErr, term.RDMAPOperationUnspecified
		return term.RDMAPOperationUnspecified
	}
	v := h.Value()
	if e.intern == internalNone {
		w, ok := qp.dev.table.CheckLocal(sgl[0].LKey, qp.pd, mem.LocalWrite, sgl[0].Addr, 8)
		if !ok {
			e.status, e.err = StatusLocProtErr, term.RDMAPLocalCatastrophic
			return term.RDMAPLocalCatastrophic
		}
		binary.NativeEndian.PutUint64(w, v)
	}
	e.orig = v
	e.state = sqDone
	qp.atomRespExp++
	qp.ordHead++
	qp.completeSQLocked()
	qp.ringRx()
	return nil
}

// statusForPeerError maps the error of a received Terminate to the status
// of the work request it refers to.
func statusForPeerError(e *term.Error) Status {
	switch {
	case e.Layer == term.LayerRDMAP && e.EType == term.ETypeRDMAPRemoteProtection,
		e.Layer == term.LayerDDP && e.EType == term.ETypeDDPTagged && e != term.DDPTaggedInvalidVersion && !e.Is(term.DDPTaggedInvalidVersion):
		return StatusRemAccessErr
	case e.Layer == term.LayerDDP && e.EType == term.ETypeDDPUntagged,
		e.Is(term.DDPTaggedInvalidVersion), e.Is(term.RDMAPInvalidVersion), e.Is(term.RDMAPUnexpectedOpCode):
		return StatusRemInvReqErr
	}
	return StatusRemOpErr
}

// rxTerminate handles a received Terminate: the WR it refers to gets a
// specific status, everything else is flushed, and no Terminate is sent
// back (RFC 5040 §5.4). Linux siw's control word layout is read as siw
// meant it (docs/spec/interop.md#siw-terminate).
func (qp *QP) rxTerminate(pl []byte) {
	t, err := qp.decodePeerTermLocked(pl)
	te := t.Err
	if err != nil || te == nil {
		te = term.RDMAPLocalCatastrophic
	} else if t.Layout == term.LayoutSiw {
		qp.stats.termsSiw.Add(1)
	}
	qp.peerTerm = te
	qp.stats.termRecv(te)
	if e := qp.termTarget(t.DDPHeader); e != nil && e.state != sqDone {
		e.status, e.err = statusForPeerError(te), te
	}
	qp.fatalLocked(te, nil, false)
}

// termTarget finds the outstanding WR a received Terminate refers to by
// its terminated DDP header, or the oldest one when it has none.
func (qp *QP) termTarget(hdr []byte) *sqEntry {
	if len(hdr) == 0 {
		if qp.sqHead == qp.sqTail {
			return nil
		}
		e, _ := qp.sqSlot(qp.sqHead)
		return e
	}
	if hdr[0]&ddp.FlagTagged != 0 && len(hdr) >= ddp.TaggedHeaderLen {
		stag := binary.BigEndian.Uint32(hdr[2:6])
		for s := qp.sqHead; s != qp.sqTail; s++ {
			e, _ := qp.sqSlot(s)
			if (e.wr.Op == OpWrite || e.wr.Op == OpWriteWithImm) && e.wr.RemoteSTag == stag {
				return e
			}
		}
		return nil
	}
	if len(hdr) < ddp.UntaggedHeaderLen {
		return nil
	}
	qn := binary.BigEndian.Uint32(hdr[6:10])
	msn := binary.BigEndian.Uint32(hdr[10:14])
	// A header whose MSN matches nothing (Linux siw always reports MSN 1)
	// still names the queue: the oldest sent WR of that queue is the one
	// the peer failed on, since it handles each queue in order.
	var oldest *sqEntry
	for s := qp.sqHead; s != qp.sqTail; s++ {
		e, _ := qp.sqSlot(s)
		if e.state == sqPosted {
			continue
		}
		var match bool
		switch e.wr.Op {
		case OpRead, OpFetchAdd, OpCmpSwap:
			match = qn == ddp.QNReadRequest
		case OpSend, OpSendWithInv, OpImm, OpWriteWithImm:
			match = qn == ddp.QNSend
		}
		if !match {
			continue
		}
		if e.msn == msn {
			return e
		}
		if oldest == nil && e.state != sqDone {
			oldest = e
		}
	}
	return oldest
}
