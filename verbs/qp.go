package verbs

import (
	"context"
	"errors"
	"sync"
	"time"

	"xrnic/internal/engine"
	"xrnic/wire/term"
)

// QPAttr are the creation attributes of a QP (ibv_qp_init_attr plus the
// iWARP ORD/IRD limits).
type QPAttr struct {
	SendCQ, RecvCQ *CQ
	SQDepth        int // send WRs outstanding at most (max_send_wr)
	RQDepth        int // receive WRs outstanding at most (max_recv_wr)
	MaxSGE         int // SGEs per WR (max_send_sge, max_recv_sge); default 4
	// SigAll completes every send WR (sq_sig_all); otherwise only those
	// with FlagSignaled, and every error (selective signalling).
	SigAll bool
	// MaxORD and MaxIRD bound the outbound and inbound RDMA Reads and
	// Atomics the QP will negotiate (default and upper limit: the
	// device's).
	MaxORD, MaxIRD int
	// RequestTimeout is how long an outstanding RDMA Read or Atomic may
	// wait without any response before it completes with
	// StatusRetryExcErr and the QP goes to error (an RC QP's timeout in
	// libibverbs). 0: DeviceConfig.RequestTimeout (30 s); negative: never.
	RequestTimeout time.Duration
	// WakeAfter is how long an outstanding RDMA Read or Atomic may see no
	// response, while the QP sends nothing else, before it sends a
	// zero-length RDMA Write (never checked by the peer) to wake a peer
	// that missed the request: Linux siw attaches its QP to the socket
	// only after sending its MPA Reply. At most 3 per request. 0: 100 ms;
	// negative: never.
	WakeAfter time.Duration
	// MaxInlineData is the largest payload PostSendInline takes
	// (max_inline_data; 0: none, at most MaxInlineData of the package).
	// The QP keeps a registered bounce ring of 2*SQDepth slots that size.
	MaxInlineData int
	// RecvSink, when set, makes the receive queue repost itself: each
	// receive a Send, Immediate Data or Write with Immediate fills
	// successfully is handed to RecvSink (its completion: ID, Op,
	// ByteLen, Flags, Imm) and posted again at once, same ID and SGL,
	// on the engine's receive path before the next message is looked at,
	// instead of completing on RecvCQ. So the receive queue never runs
	// empty because the application's goroutines were not scheduled in
	// time: a peer that keeps at most as many messages outstanding as
	// receives were posted always finds one (iWARP has no
	// receiver-not-ready; a message with no receive ends the stream with
	// a Terminate). The buffer may be overwritten by the next message
	// once RecvSink returns.
	//
	// RecvSink runs under the QP's lock: it must be quick, must not block
	// and must not call the QP's methods. Each posted receive still
	// completes on RecvCQ exactly once, when it leaves the queue: flushed
	// when the QP ends, with an error when a message does not fit it, or
	// (not reposted) when a Send with Invalidate filled it, or it
	// completed behind one, since those completions wait for the
	// invalidation's grace period.
	RecvSink func(Completion)
	// SRQ, when set, is the shared receive queue the QP takes its
	// receives from (ibv_qp_init_attr.srq): RQDepth is ignored and
	// PostRecv refuses (ErrInvalidWR). With RecvSink, a receive handed
	// to the sink goes back to the SRQ. See SRQ.
	SRQ *SRQ
}

// MaxInlineData is the largest QPAttr.MaxInlineData.
const MaxInlineData = 4096

// QP is an iWARP queue pair (ibv_qp + rdma_cm_id): one RDMAP stream over
// one connection. Post methods may be called from several goroutines.
type QP struct {
	pd       *PD
	q        qpImpl
	scq, rcq *CQ
	num      uint32

	smu  sync.Mutex // send post: wr and sgl are the copy handed down
	swr  SendWR
	ssge []SGE
	// Inline sends (under smu): slot n of the bounce ring is reused by
	// inline WR n+islots, when WR n has completed (the SQ holds at most
	// islots/2 WRs, posted in order under smu).
	inline        int // slot size, 0: none
	imr           *MR
	islots, inext uint64
	rmu           sync.Mutex
	rwr           RecvWR
	rsge          []SGE
}

// CreateQP creates a QP in QPInit (ibv_create_qp). Receives may be posted
// before it is connected.
func (pd *PD) CreateQP(a QPAttr) (*QP, error) {
	if a.SendCQ == nil || a.RecvCQ == nil {
		return nil, ErrBadAttr
	}
	if a.SendCQ.dev != pd.dev || a.RecvCQ.dev != pd.dev || a.SRQ != nil && a.SRQ.pd.dev != pd.dev {
		return nil, ErrWrongDevice
	}
	if a.MaxSGE <= 0 {
		a.MaxSGE = 4
	}
	if a.MaxSGE > pd.dev.attrs.MaxSGE {
		return nil, ErrBadAttr
	}
	if a.MaxInlineData < 0 || a.MaxInlineData > MaxInlineData {
		return nil, ErrBadAttr
	}
	q, err := pd.dev.p.createQP(pd.id, &a)
	if err != nil {
		return nil, err
	}
	qp := &QP{pd: pd, q: q, scq: a.SendCQ, rcq: a.RecvCQ, num: q.num(),
		ssge: make([]SGE, a.MaxSGE), rsge: make([]SGE, a.MaxSGE)}
	if a.MaxInlineData > 0 {
		qp.inline = (a.MaxInlineData + 63) &^ 63
		qp.islots = uint64(2 * max(q.queues().SQDepth, 1))
		if qp.imr, err = pd.RegMR(make([]byte, qp.inline*int(qp.islots)), 0); err != nil {
			q.close()
			return nil, err
		}
	}
	return qp, nil
}

// MaxInlineData returns the largest payload PostSendInline takes: the
// QPAttr.MaxInlineData asked, rounded up to 64 bytes (0: none).
func (qp *QP) MaxInlineData() int { return qp.inline }

// PostSendInline posts wr with the concatenation of data as its payload,
// copied now (IBV_SEND_INLINE): the buffers may be reused at once and
// need no registration. wr.SGL must be empty; the payload may be up to
// QPAttr.MaxInlineData bytes (ErrTooLong beyond, ErrInvalidWR on a QP
// created without it). Reads and atomics cannot be inline. Like PostSend
// it never allocates.
func (qp *QP) PostSendInline(wr *SendWR, data ...[]byte) error {
	if len(wr.SGL) != 0 || qp.inline == 0 || wr.Op == OpRead || wr.Op == OpFetchAdd || wr.Op == OpCmpSwap {
		return ErrInvalidWR
	}
	total := 0
	for _, d := range data {
		total += len(d)
	}
	if total > qp.inline {
		return ErrTooLong
	}
	qp.smu.Lock()
	off := int(qp.inext%qp.islots) * qp.inline
	dst := qp.imr.buf[off : off+total]
	for _, d := range data {
		dst = dst[copy(dst, d):]
	}
	w := &qp.swr
	*w = SendWR{ID: wr.ID, Op: wr.Op, Flags: wr.Flags, Imm: wr.Imm, InvalidateSTag: wr.InvalidateSTag,
		RemoteSTag: wr.RemoteSTag, RemoteTO: wr.RemoteTO}
	if total > 0 {
		qp.ssge[0] = qp.imr.SGE(off, total)
		w.SGL = qp.ssge[:1]
	}
	err := qp.q.postSend(w)
	if err == nil {
		qp.inext++
	}
	qp.smu.Unlock()
	return err
}

// Num returns the QP number (qp_num).
func (qp *QP) Num() uint32 { return qp.num }

// PD returns the QP's protection domain.
func (qp *QP) PD() *PD { return qp.pd }

// SendCQ and RecvCQ return the QP's CQs.
func (qp *QP) SendCQ() *CQ { return qp.scq }

// RecvCQ returns the receive CQ.
func (qp *QP) RecvCQ() *CQ { return qp.rcq }

// State returns the QP state.
func (qp *QP) State() QPState { return qp.q.state() }

// Err returns the iWARP error (a *term.Error) that moved the QP to error,
// or nil. An orderly close by either side is no error: see Disconnected.
func (qp *QP) Err() error { return qp.q.err() }

// Disconnected returns ErrPeerClosed once the peer has closed the
// connection in order (RDMA_CM_EVENT_DISCONNECTED), else nil: still
// connected, or ended by an error (Err; a lost connection is
// term.MPAConnectionLost). After the peer's close the QP stays in
// QPRTS for a while: posted receives and Reads/Atomics are flushed, what
// else is posted is still sent; it then closes its side too (after
// Disconnect, Close, or 200 ms with nothing to send) and goes to QPError.
func (qp *QP) Disconnected() error { return qp.q.disconnected() }

// Done returns a channel closed when the QP's connection has ended: the
// peer closed it in order (Disconnected), or the QP went to error (Err
// says whether an error did it), was moved there (ToError) or closed. A
// front end waits on it to report RDMA_CM_EVENT_DISCONNECTED or an
// asynchronous error event.
func (qp *QP) Done() <-chan struct{} { return qp.q.done() }

// ToError moves the QP to error (ibv_modify_qp to IBV_QPS_ERR): every
// outstanding WR completes flushed and the connection ends without a
// Terminate; Err stays nil.
func (qp *QP) ToError() { qp.q.toError() }

// Wakes returns how many zero-length Writes the QP sent to wake a peer
// that left a Read or Atomic unanswered (see QPAttr.WakeAfter).
func (qp *QP) Wakes() uint64 { return qp.q.wakes() }

// Stats returns a snapshot of the QP's counters (messages and bytes by
// RDMAP opcode and direction, Terminates by error, atomics executed).
func (qp *QP) Stats() Stats { return qp.q.stats() }

// PeerTerminate returns the Terminate the peer sent, or nil: after an
// error completion it tells what the peer refused (RFC 5040 §7.1).
func (qp *QP) PeerTerminate() *term.Error { return qp.q.peerTerminate() }

// ConnInfo returns the negotiated connection parameters (valid once
// connected).
func (qp *QP) ConnInfo() ConnInfo { return qp.q.connInfo() }

// QueueInfo is the depth and occupancy of a QP's queues (ibv_query_qp's
// max_send_wr and max_recv_wr, plus what is posted now).
type QueueInfo = engine.QueueInfo

// Queues returns the QP's queue depths and how much of them is in use.
func (qp *QP) Queues() QueueInfo { return qp.q.queues() }

// PostSend posts a send work request (ibv_post_send). It copies wr and its
// SGL, returns at once and never allocates; the WR completes on the send
// CQ. ErrQueueFull and ErrCQFull mean: poll first. Unlike ibv_post_send it
// takes one WR (no chains); post in a loop.
func (qp *QP) PostSend(wr *SendWR) error {
	if len(wr.SGL) > len(qp.ssge) {
		return ErrInvalidWR
	}
	qp.smu.Lock()
	w := &qp.swr
	*w = SendWR{ID: wr.ID, Op: wr.Op, Flags: wr.Flags, Imm: wr.Imm, InvalidateSTag: wr.InvalidateSTag,
		RemoteSTag: wr.RemoteSTag, RemoteTO: wr.RemoteTO, CompareAdd: wr.CompareAdd, Swap: wr.Swap,
		AddMask: wr.AddMask, CompareMask: wr.CompareMask, SwapMask: wr.SwapMask}
	w.SGL = qp.ssge[:copy(qp.ssge, wr.SGL)]
	err := qp.q.postSend(w)
	qp.smu.Unlock()
	return err
}

// PostRecv posts a receive work request (ibv_post_recv). It copies wr and
// never allocates.
func (qp *QP) PostRecv(wr *RecvWR) error {
	if len(wr.SGL) > len(qp.rsge) {
		return ErrInvalidWR
	}
	qp.rmu.Lock()
	qp.rwr.ID = wr.ID
	qp.rwr.SGL = qp.rsge[:copy(qp.rsge, wr.SGL)]
	err := qp.q.postRecv(&qp.rwr)
	qp.rmu.Unlock()
	return err
}

// post1 posts a WR with at most one SGE built in place.
func (qp *QP) post1(w SendWR, local *SGE) error {
	qp.smu.Lock()
	qp.swr = w
	if local != nil {
		qp.ssge[0] = *local
		qp.swr.SGL = qp.ssge[:1]
	}
	err := qp.q.postSend(&qp.swr)
	qp.smu.Unlock()
	return err
}

// PostRecvBuf posts a receive of one buffer.
func (qp *QP) PostRecvBuf(id uint64, buf SGE) error {
	qp.rmu.Lock()
	qp.rsge[0] = buf
	qp.rwr = RecvWR{ID: id, SGL: qp.rsge[:1]}
	err := qp.q.postRecv(&qp.rwr)
	qp.rmu.Unlock()
	return err
}

// PostSendBuf posts a Send of one buffer (with FlagSolicited: Send with
// SE).
func (qp *QP) PostSendBuf(id uint64, local SGE, flags SendFlags) error {
	return qp.post1(SendWR{ID: id, Op: OpSend, Flags: flags}, &local)
}

// PostSendInv posts a Send with Invalidate of the peer's STag inv (with
// FlagSolicited: Send with SE and Invalidate).
func (qp *QP) PostSendInv(id uint64, local SGE, inv uint32, flags SendFlags) error {
	return qp.post1(SendWR{ID: id, Op: OpSendWithInv, Flags: flags, InvalidateSTag: inv}, &local)
}

// PostWrite posts an RDMA Write of local to the peer's rstag at rto.
func (qp *QP) PostWrite(id uint64, local SGE, rstag uint32, rto uint64, flags SendFlags) error {
	return qp.post1(SendWR{ID: id, Op: OpWrite, Flags: flags, RemoteSTag: rstag, RemoteTO: rto}, &local)
}

// PostWriteImm posts an RDMA Write followed by Immediate Data imm, which
// completes a posted receive at the peer (OpRecvWriteImm).
func (qp *QP) PostWriteImm(id uint64, local SGE, rstag uint32, rto uint64, imm uint64, flags SendFlags) error {
	return qp.post1(SendWR{ID: id, Op: OpWriteWithImm, Flags: flags, RemoteSTag: rstag, RemoteTO: rto, Imm: imm}, &local)
}

// PostRead posts an RDMA Read of local.Length bytes at the peer's rstag/rto
// into local.
func (qp *QP) PostRead(id uint64, local SGE, rstag uint32, rto uint64, flags SendFlags) error {
	return qp.post1(SendWR{ID: id, Op: OpRead, Flags: flags, RemoteSTag: rstag, RemoteTO: rto}, &local)
}

// PostImm posts RFC 7306 Immediate Data (with FlagSolicited: Immediate
// Data with SE).
func (qp *QP) PostImm(id uint64, imm uint64, flags SendFlags) error {
	return qp.post1(SendWR{ID: id, Op: OpImm, Flags: flags, Imm: imm}, nil)
}

// PostFetchAdd posts an atomic FetchAdd of add to the peer's 64-bit word
// at rstag/rto with the RFC 7306 Add Mask mask (0: plain add). The original
// value lands in result (8 bytes, local write access) and in the
// completion.
func (qp *QP) PostFetchAdd(id uint64, result SGE, rstag uint32, rto uint64, add, mask uint64, flags SendFlags) error {
	return qp.post1(SendWR{ID: id, Op: OpFetchAdd, Flags: flags, RemoteSTag: rstag, RemoteTO: rto, CompareAdd: add, AddMask: mask}, &result)
}

// PostCmpSwap posts an atomic CmpSwap on the peer's word at rstag/rto:
// if ((cmp ^ word) & cmpMask) == 0 the bits of swapMask are replaced from
// swap (pass CmpSwapAll twice for the plain compare-and-swap). The
// original value lands in result and in the completion.
func (qp *QP) PostCmpSwap(id uint64, result SGE, rstag uint32, rto uint64, cmp, cmpMask, swap, swapMask uint64, flags SendFlags) error {
	return qp.post1(SendWR{ID: id, Op: OpCmpSwap, Flags: flags, RemoteSTag: rstag, RemoteTO: rto,
		CompareAdd: cmp, CompareMask: cmpMask, Swap: swap, SwapMask: swapMask}, &result)
}

// PostLocalInv posts a local invalidation of the STag stag.
func (qp *QP) PostLocalInv(id uint64, stag uint32, flags SendFlags) error {
	return qp.post1(SendWR{ID: id, Op: OpLocalInv, Flags: flags, InvalidateSTag: stag}, nil)
}

// Dial connects the QP to a listener at addr ("host:port") as MPA
// initiator (rdma_resolve_addr + rdma_connect). p.PrivateData goes to the
// peer; its reply's private data is in ConnInfo().PeerPrivateData. A
// rejection is a *RejectedError (errors.Is(err, ErrRejected)) carrying the
// peer's private data. ctx bounds the whole setup.
func (qp *QP) Dial(ctx context.Context, addr string, p ConnParam) error {
	err := qp.q.connect(ctx, addr, &p)
	var rej *RejectedError
	if p.Markers && errors.As(err, &rej) {
		// Many RNICs (Linux siw among them) refuse markers with a plain
		// reject: say which option to drop.
		rej.Hint = "we asked for MPA markers (ConnParam.Markers), which many RNICs refuse; dial without them"
	}
	return err
}

// ProbeAtomics reports whether the peer supports the RFC 7306 extensions
// by issuing a FetchAdd of 0 to rstag/rto (an 8-byte aligned word the peer
// registered with AccessRemoteAtomic; its value is not changed). The probe
// produces no completion. A peer without the extensions terminates the
// connection, so probe on a connection you can afford to lose: the QP is
// then in error and ProbeNotSupported comes with ErrNoAtomics.
func (qp *QP) ProbeAtomics(ctx context.Context, rstag uint32, rto uint64) (ProbeResult, error) {
	return qp.q.probe(ctx, rstag, rto)
}

// Disconnect closes the connection in order (rdma_disconnect): posting is
// refused, the SQ drains, then it waits for the peer (or ctx). Remaining
// receives complete flushed.
func (qp *QP) Disconnect(ctx context.Context) error { return qp.q.disconnect(ctx) }

// Close disconnects if connected, flushes every outstanding WR and
// destroys the QP (ibv_destroy_qp).
func (qp *QP) Close() error {
	err := qp.q.close()
	if qp.imr != nil {
		qp.imr.Dereg()
	}
	return err
}
