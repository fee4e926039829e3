package engine

import (
	"cmp"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"xrnic/mem"
	"xrnic/transport"
	"xrnic/wire/mpa"
	"xrnic/wire/term"
)

// QPAttr are the creation attributes of a QP (ibv_qp_init_attr).
type QPAttr struct {
	PD             mem.PD
	SendCQ, RecvCQ *CQ
	SQDepth        int // send work requests outstanding at most
	RQDepth        int // receive work requests outstanding at most
	MaxSGE         int // SGEs per work request (default 4)
	// SigAll completes every send WR; otherwise only those with
	// FlagSignaled (and every error).
	SigAll bool
	// MaxORD and MaxIRD bound the outbound and inbound Reads+Atomics the
	// QP will negotiate (default and upper limit: the device's).
	MaxORD, MaxIRD int
	// RequestTimeout overrides Config.RequestTimeout for this QP (0: the
	// device's; negative: never).
	RequestTimeout time.Duration
	// WakeAfter is how long an outstanding Read or Atomic may see no
	// response, while we send nothing else, before the QP sends a
	// zero-length RDMA Write to wake the peer (at most maxWakes per
	// request; watchdog.go). 0: 100 ms; negative: never.
	WakeAfter time.Duration
	// RecvSink, when set, makes the receive queue a sink that reposts
	// itself: a receive that a Send, Immediate Data or Write with
	// Immediate completes successfully is handed to RecvSink as a
	// completion (ID, Op, ByteLen, Flags, Imm) and put back at the tail
	// of the receive queue at once, with the same ID and SGL, instead of
	// completing on RecvCQ. Both happen on the receive path, in stream
	// order, before the next inbound message is looked at, so the queue
	// holds as many receives after a message as before it whatever the
	// scheduling of the application's goroutines: a peer that never has
	// more messages outstanding than receives were posted never meets an
	// empty queue (iWARP has no receiver-not-ready: that would be
	// Terminate DDP 1/2/0x02). The buffer's contents are valid only
	// during the call: the next message may overwrite them.
	//
	// RecvSink runs under the QP's lock: it must return promptly and must
	// not call the QP's methods. A posted receive still completes on
	// RecvCQ exactly once, when it leaves the queue: flushed when the QP
	// ends, with an error status when a message does not fit it, or
	// (since its completion waits for a grace period, RFC 5041 §8.3.1)
	// when a Send with Invalidate filled it or it completed while such a
	// completion was still held; those are not reposted.
	RecvSink func(Completion)
	// SRQ, when set, is the shared receive queue the QP takes its
	// receives from (srq.go); RQDepth is then ignored and the QP has no
	// receive queue of its own. With RecvSink, a receive handed to the
	// sink goes back to the SRQ's tail.
	SRQ *SRQ
}

// ErrPeerClosed is what Disconnected reports once the peer has closed its
// half of the connection in order (its FIN at a message boundary): a
// disconnect, as rdma_cm's RDMA_CM_EVENT_DISCONNECTED, not a failure.
var ErrPeerClosed = errors.New("engine: the peer closed the connection")

// sq entry states
const (
	sqPosted       = iota // not started
	sqStarted             // some segments framed
	sqFramed              // all framed, waiting for the LLP write to return
	sqWaiting             // Read/Atomic sent, waiting for its response
	sqInvalidating        // Local Invalidate done, waiting for placements in flight (invalidate.go)
	sqDone                // ready to complete (in order)
)

type sqEntry struct {
	wr      SendWR // SGL nil: the SGEs live in QP.sqSGE
	nsge    int
	length  uint64
	state   uint8
	stage   uint8 // OpWriteWithImm: 0 Write, 1 Immediate
	sig     bool
	intern  uint8 // internalNone, internalRTR, internalProbe
	off     uint64
	msn     uint32 // QN 0 or QN 1 MSN of the (last) message
	got     uint64 // Read: response bytes placed
	orig    uint64
	status  Status
	err     *term.Error
	reserve bool // holds a CQ entry
}

const (
	internalNone = iota
	internalRTR
	internalProbe
)

type rqEntry struct {
	id     uint64
	nsge   int
	length uint64
}

// inbound Read or Atomic request (IRD queue)
type irdEntry struct {
	atomic  bool
	reqID   uint32
	orig    uint64
	sinkSTg uint32
	sinkTO  uint64
	size    uint64
	srcSTag uint32
	srcTO   uint64
	off     uint64
}

// QP is an iWARP queue pair: one RDMAP stream over one LLP connection.
type QP struct {
	dev    *Device
	num    uint32
	pd     mem.PD
	scq    *CQ
	rcq    *CQ
	maxSGE int
	sigAll bool
	maxORD int
	maxIRD int
	// recvSink, when set, takes successful receives, which are reposted
	// at once (QPAttr.RecvSink, consumeRecvLocked).
	recvSink func(Completion)
	// srq, when set, supplies the receives (srq.go): rq then has length
	// 0 and one slot (its capacity), which holds the WR taken for the
	// message being received, if any. rqPD
	// is the PD the receives' lkeys belong to (the SRQ's or the QP's),
	// rqSGEs the SGEs per rq slot.
	srq    *SRQ
	rqPD   mem.PD
	rqSGEs int

	reqTimeout time.Duration // outstanding Read/Atomic without a response (watchdog.go)
	// Progress the watchdog reads: bytes handed to input, whether a
	// partial FPDU waits in the deframer, responses to our requests.
	rxBytes   atomic.Uint64
	rxPartial atomic.Bool
	responses uint64 // under mu
	wd        watchState
	stalls    atomic.Uint64 // QPs the watchdog ended (Stats.Stalls)
	wakeAfter time.Duration // see QPAttr.WakeAfter (<= 0: off)
	wakes     atomic.Uint64 // zero-length Writes sent to wake the peer

	// Invalidation grace periods (invalidate.go).
	invPending atomic.Bool  // an SQ entry is sqInvalidating
	holdRecv   atomic.Bool  // receive completions wait behind a remote invalidation
	held       []Completion // those completions, in order (under mu)

	mu    sync.Mutex
	state QPState

	sq                     []sqEntry
	sqSGE                  []SGE
	sqHead, sqNext, sqTail uint32 // completed < sqHead <= started/next <= sqTail
	sqWritten              uint32 // entries before it had their bytes written

	rq             []rqEntry
	rqSGE          []SGE
	rqHead, rqTail uint32

	// negotiated
	conn ConnInfo
	ord  int
	ird  int

	// requester side of Reads/Atomics
	ordQ             []uint32 // SQ sequence numbers awaiting a response, in order
	ordHead, ordTail uint32
	// responder side
	irdQ             []irdEntry
	irdHead, irdTail uint32

	// tx state (under mu)
	txOpen      bool // responder: first FPDU received
	rtrPending  mpa.RTR
	sendMSN     uint32 // next QN 0 MSN to send
	reqMSN      uint32 // next QN 1 MSN to send
	atomRespMSN uint32 // next QN 3 MSN to send
	termPending bool
	termULPDU   [ddpUntaggedLen + 64]byte
	termLen     int
	txDone      bool
	probeCh     chan sqEntry
	peerTerm    *term.Error
	firstErr    *term.Error
	rxStopped   bool
	peerFIN     bool // the peer closed its half in order (under mu)
	txStarted   bool // runTx was started (establish)

	// rx state (under mu)
	recvMSN     uint32 // expected QN 0 MSN
	recvActive  bool
	recvLen     uint64
	inReqMSN    uint32 // expected QN 1 MSN
	atomRespExp uint32 // expected QN 3 MSN
	rxAwaitRTR  bool   // responder in peer-to-peer mode: first FPDU is the RTR
	rxFirst     bool   // responder: no FPDU received yet
	inWrite     bool
	writeLen    uint64
	prevWrite   bool
	lastWrite   uint64

	llp      LLP
	framer   *mpa.Framer
	deframer *mpa.Deframer
	mulpdu   int
	txbuf    []byte // lent by the device while a transmitter owns it (nil idle)
	txLen    int    // its length
	rxbuf    []byte // kernel transport: lent while the stream is read (rx.go)
	// rxMu serializes the readers of a TryReader LLP's stream: runRxPolled
	// when the socket wakes it, and a CQ poller's Drive (driveRx). rxTR is
	// that LLP; rxErr, under rxMu, the end of the stream one of them met;
	// rxWanted, the reader was woken while a poller held rxMu (rx.go).
	rxMu     sync.Mutex
	rxTR     transport.TryReader
	rxTry    func() bool
	rxErr    error
	rxWanted atomic.Bool
	rxLast   time.Time // under rxMu: when the reader last found data (Config.RxSpin)
	txReader *mem.Reader
	rxReader *mem.Reader
	doorbell chan struct{}
	stop     chan struct{}
	rxExit   chan struct{}
	// txEnded is closed by runTx once the stream's end is on its way: the
	// Terminate (if any) written and the LLP half-closed, or tx stopped.
	txEnded  chan struct{}
	txEndSet bool // owned by runTx
	// ended is closed (endLocked) when the connection ends: the peer's
	// orderly close, or the QP going to error for any reason (Done).
	ended    chan struct{}
	endedSet bool
	wg       sync.WaitGroup
	closing  atomic.Bool
	// fpduEnds, with an inline LLP, records where each FPDU that seal
	// framed into txbuf ends, so txStep hands them over one at a time.
	fpduEnds []int
	// txKick, when set (an inline LLP, inline.go), asks the LLP's owner
	// goroutine to run txStep instead of ringing the doorbell; runTx then
	// only handles the end of the stream.
	txKick func()
	txi    txInline // inline transmission (txinline.go)
	pipe   txPipe   // pipelined writes (txpipe.go)

	stats counters
}

const ddpUntaggedLen = 18

// CreateQP creates a QP in state QPInit. Its queues may be deeper than
// its CQs: a CQ grows as posts reserve its entries (CQ), so no
// completion is ever lost.
func (d *Device) CreateQP(a QPAttr) (*QP, error) {
	if a.MaxSGE == 0 {
		a.MaxSGE = 4
	}
	if a.MaxORD == 0 || a.MaxORD > d.cfg.MaxORD {
		a.MaxORD = d.cfg.MaxORD
	}
	if a.MaxIRD == 0 || a.MaxIRD > d.cfg.MaxIRD {
		a.MaxIRD = d.cfg.MaxIRD
	}
	if a.SRQ != nil {
		a.RQDepth = 0 // its receives are reserved on RecvCQ as it takes them (srq.go)
	}
	if a.SendCQ == nil || a.RecvCQ == nil || a.SQDepth <= 0 || a.RQDepth < 0 ||
		a.SQDepth > d.cfg.MaxWR || a.RQDepth > d.cfg.MaxWR || a.MaxSGE < 0 || a.MaxSGE > d.cfg.MaxSGE {
		return nil, ErrBadAttr
	}
	if a.SendCQ.dev != d || a.RecvCQ.dev != d {
		return nil, ErrWrongDevice
	}
	if !a.SendCQ.attach() {
		return nil, ErrClosed
	}
	if a.RecvCQ != a.SendCQ && !a.RecvCQ.attach() {
		a.SendCQ.detach()
		return nil, ErrClosed
	}
	rq := a.RQDepth
	if rq == 0 {
		rq = 1
	}
	qp := &QP{
		dev: d, pd: a.PD, scq: a.SendCQ, rcq: a.RecvCQ, maxSGE: a.MaxSGE, sigAll: a.SigAll, recvSink: a.RecvSink,
		maxORD: a.MaxORD, maxIRD: a.MaxIRD, reqTimeout: cmp.Or(a.RequestTimeout, d.cfg.RequestTimeout), wakeAfter: cmp.Or(a.WakeAfter, defaultWakeAfter),
		sq: make([]sqEntry, a.SQDepth+1), sqSGE: make([]SGE, (a.SQDepth+1)*max(a.MaxSGE, 1)),
		rq: make([]rqEntry, rq), rqSGE: make([]SGE, rq*max(a.MaxSGE, 1)), held: make([]Completion, 0, rq),
		ordQ: make([]uint32, a.MaxORD+1), irdQ: make([]irdEntry, a.MaxIRD+1),
		sendMSN: 1, reqMSN: 1, atomRespMSN: 1, recvMSN: 1, inReqMSN: 1, atomRespExp: 1,
		doorbell: make(chan struct{}, 1), stop: make(chan struct{}), rxExit: make(chan struct{}), txEnded: make(chan struct{}),
		ended: make(chan struct{}),
	}
	qp.rq = qp.rq[:a.RQDepth]
	qp.stats.init()
	qp.rqPD, qp.rqSGEs = a.PD, max(a.MaxSGE, 1)
	if err := qp.useSRQ(a.SRQ); err != nil {
		qp.detachCQs()
		return nil, err
	}
	d.mu.Lock()
	if d.closed || len(d.qps) >= d.cfg.MaxQPs {
		d.mu.Unlock()
		qp.detachCQs()
		a.SRQ.detachIf()
		if d.closed {
			return nil, ErrClosed
		}
		return nil, ErrTooManyQPs
	}
	for {
		d.nextQP++
		if d.nextQP != 0 && d.qps[d.nextQP] == nil {
			break
		}
	}
	qp.num = d.nextQP
	d.qps[qp.num] = qp
	d.mu.Unlock()
	return qp, nil
}

func (qp *QP) detachCQs() {
	qp.scq.detach()
	if qp.rcq != qp.scq {
		qp.rcq.detach()
	}
}

// Num returns the QP number (also the stream id MRs can be bound to).
func (qp *QP) Num() uint32 { return qp.num }

// PD returns the QP's protection domain.
func (qp *QP) PD() mem.PD { return qp.pd }

// State returns the QP state.
func (qp *QP) State() QPState {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	return qp.state
}

// ConnInfo returns the negotiated connection parameters (valid once
// connected).
func (qp *QP) ConnInfo() ConnInfo {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	return qp.conn
}

// QueueInfo is the depth and occupancy of a QP's queues.
type QueueInfo struct {
	SQDepth, RQDepth int // work requests each queue holds
	SQOutstanding    int // send WRs posted and not yet completed
	RQPosted         int // receive WRs posted and not yet consumed (on an SRQ: taken, 0 or 1)
	ORDOutstanding   int // our Reads and Atomics awaiting a response
	IRDOutstanding   int // the peer's Reads and Atomics being answered
}

// Queues returns the QP's queue depths and how much of them is in use.
func (qp *QP) Queues() QueueInfo {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	return QueueInfo{SQDepth: qp.sqLen(), RQDepth: len(qp.rq), SQOutstanding: int(qp.sqTail - qp.sqHead),
		RQPosted: int(qp.rqTail - qp.rqHead), ORDOutstanding: int(qp.ordTail - qp.ordHead),
		IRDOutstanding: int(qp.irdTail - qp.irdHead)}
}

// PeerTerminate returns the error of the Terminate received from the peer,
// or nil.
func (qp *QP) PeerTerminate() *term.Error {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	return qp.peerTerm
}

// Err returns the iWARP error that moved the QP to error (sent or received
// Terminate, or term.MPAConnectionLost), or nil. An orderly close by
// either side is no error (see Disconnected).
func (qp *QP) Err() *term.Error {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	return qp.firstErr
}

// Disconnected returns ErrPeerClosed once the peer has closed its half of
// the connection in order, else nil (connected, or ended by an error:
// see Err). The QP stays in QPRTS after the peer's FIN: what is posted
// is still sent, receives and Reads/Atomics, which can no longer
// complete, are flushed. It sends its own FIN on Disconnect or Close, or
// once it has been idle for closeLinger (watchdog.go); then QPError.
func (qp *QP) Disconnected() error {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	if qp.peerFIN {
		return ErrPeerClosed
	}
	return nil
}

func (qp *QP) sqLen() int { return len(qp.sq) - 1 }

func (qp *QP) sqSlot(seq uint32) (*sqEntry, []SGE) {
	i := int(seq % uint32(len(qp.sq)))
	m := max(qp.maxSGE, 1)
	return &qp.sq[i], qp.sqSGE[i*m : i*m+m]
}

func (qp *QP) rqSlot(seq uint32) (*rqEntry, []SGE) {
	rq := qp.rq[:cap(qp.rq)] // an SRQ's QP: length 0, one slot
	i := int(seq % uint32(len(rq)))
	m := qp.rqSGEs
	return &rq[i], qp.rqSGE[i*m : i*m+m]
}

// PostSend queues a send work request (ibv_post_send). It copies wr and its
// SGL and returns at once; the WR completes on the send CQ. Malformed WRs
// are refused with ErrInvalidWR or ErrTooLong; ErrQueueFull and ErrCQFull
// mean the caller must poll first. On a QP in error the WR completes with
// StatusWRFlushErr. It allocates nothing.
func (qp *QP) PostSend(wr *SendWR) error {
	if len(wr.SGL) > qp.maxSGE {
		return ErrInvalidWR
	}
	var length uint64
	for i := range wr.SGL {
		length += uint64(wr.SGL[i].Length)
	}
	switch wr.Op {
	case OpSend, OpSendWithInv, OpWrite, OpWriteWithImm:
	case OpRead:
		if len(wr.SGL) > 1 {
			return ErrInvalidWR
		}
	case OpFetchAdd, OpCmpSwap:
		if len(wr.SGL) != 1 || wr.SGL[0].Length != 8 {
			return ErrInvalidWR
		}
	case OpImm, OpLocalInv:
		if len(wr.SGL) != 0 {
			return ErrInvalidWR
		}
	default:
		return ErrInvalidWR
	}
	if wr.Flags&^(FlagSignaled|FlagSolicited|FlagFence) != 0 ||
		wr.Flags&FlagSolicited != 0 && wr.Op != OpSend && wr.Op != OpSendWithInv && wr.Op != OpImm {
		return ErrInvalidWR // the Solicited Event flag exists on Sends and Immediate Data only
	}
	if length > uint64(qp.dev.cfg.MaxMsgSize) {
		return ErrTooLong
	}
	qp.mu.Lock()
	if qp.state == QPClosing || qp.state == QPClosed {
		qp.mu.Unlock()
		return ErrState
	}
	if int(qp.sqTail-qp.sqHead) >= qp.sqLen() {
		qp.mu.Unlock()
		return ErrQueueFull
	}
	if !qp.scq.reserve() {
		qp.mu.Unlock()
		return ErrCQFull
	}
	e, sgl := qp.sqSlot(qp.sqTail)
	*e = sqEntry{wr: *wr, nsge: copy(sgl, wr.SGL), length: length, reserve: true,
		sig: qp.sigAll || wr.Flags&FlagSignaled != 0}
	e.wr.SGL = nil
	if qp.state == QPError {
		// Complete it flushed right away, in order behind the others.
		e.state = sqDone
		e.status = StatusWRFlushErr
		qp.sqTail++
		qp.sqNext = qp.sqTail
		qp.completeSQLocked()
		qp.mu.Unlock()
		return nil
	}
	qp.sqTail++
	qp.mu.Unlock()
	qp.kick(false)
	return nil
}

// postInternal queues an internal WR (RTR, probe) that never reaches the CQ.
func (qp *QP) postInternalLocked(wr SendWR, kind uint8) bool {
	if int(qp.sqTail-qp.sqHead) >= qp.sqLen() {
		return false
	}
	e, _ := qp.sqSlot(qp.sqTail)
	*e = sqEntry{wr: wr, intern: kind}
	qp.sqTail++
	return true
}

// PostRecv queues a receive work request (ibv_post_recv). It copies wr and
// allocates nothing. A QP on an SRQ refuses it (ErrInvalidWR, EINVAL in
// libibverbs): its receives are the SRQ's.
func (qp *QP) PostRecv(wr *RecvWR) error {
	if len(wr.SGL) > qp.maxSGE || qp.srq != nil {
		return ErrInvalidWR
	}
	var length uint64
	for i := range wr.SGL {
		length += uint64(wr.SGL[i].Length)
	}
	qp.mu.Lock()
	if qp.state == QPClosed {
		qp.mu.Unlock()
		return ErrState
	}
	if int(qp.rqTail-qp.rqHead) >= len(qp.rq) {
		qp.mu.Unlock()
		return ErrQueueFull
	}
	if !qp.rcq.reserve() {
		qp.mu.Unlock()
		return ErrCQFull
	}
	e, sgl := qp.rqSlot(qp.rqTail)
	*e = rqEntry{id: wr.ID, nsge: copy(sgl, wr.SGL), length: length}
	qp.rqTail++
	if qp.state == QPError || qp.peerFIN {
		qp.flushRQLocked() // nothing more can arrive
	}
	qp.mu.Unlock()
	return nil
}

func (qp *QP) ring() {
	if k := qp.txKick; k != nil {
		k()
		return
	}
	qp.ringTx()
}

// ringTx wakes the tx goroutine.
func (qp *QP) ringTx() {
	select {
	case qp.doorbell <- struct{}{}:
	default:
	}
}

// completeSQLocked completes, in order, every finished entry at the head.
func (qp *QP) completeSQLocked() {
	for qp.sqHead != qp.sqTail {
		e, _ := qp.sqSlot(qp.sqHead)
		if e.state != sqDone {
			return
		}
		qp.sqHead++
		qp.finishSQ(e)
	}
}

func (qp *QP) finishSQ(e *sqEntry) {
	if e.intern != internalNone {
		if e.intern == internalProbe && qp.probeCh != nil {
			select {
			case qp.probeCh <- *e:
			default:
			}
		}
		return
	}
	if e.status == StatusSuccess && !e.sig {
		qp.scq.release()
		return
	}
	c := Completion{ID: e.wr.ID, Status: e.status, Op: e.wr.Op, QPNum: qp.num}
	if e.err != nil {
		c.Err = e.err
	}
	switch e.wr.Op {
	case OpFetchAdd, OpCmpSwap:
		c.ByteLen = 8
		c.AtomicOrig = e.orig
	case OpLocalInv:
	default:
		c.ByteLen = uint32(e.length)
	}
	qp.scq.push(&c)
}

func (qp *QP) completeRecv(e *rqEntry, c *Completion) {
	c.ID = e.id
	c.QPNum = qp.num
	if qp.holdRecv.Load() {
		qp.held = append(qp.held, *c) // in order behind the invalidation
		return
	}
	qp.rcq.push(c)
}

// consumeRecvLocked completes the receive at the head of the RQ, which a
// message filled successfully (c: its completion). On a sink QP
// (QPAttr.RecvSink) it is handed to the sink and reposted at the tail
// with the same ID and SGL, keeping its CQ reservation, unless its
// completion must wait for an invalidation's grace period: then it
// completes on the CQ (completeRecv) like any other.
func (qp *QP) consumeRecvLocked(c *Completion) {
	r, sgl := qp.rqSlot(qp.rqHead)
	qp.rqHead++
	if qp.recvSink == nil || c.Flags&WCWithInv != 0 || qp.holdRecv.Load() {
		qp.completeRecv(r, c)
		return
	}
	c.ID, c.QPNum = r.id, qp.num
	if qp.srq != nil {
		// Back to the SRQ, for any of its QPs; the CQ entry reserved
		// when it was taken is not needed. A full SRQ (the application
		// posted meanwhile) leaves it to complete as usual.
		if !qp.srq.putBack(r, sgl) {
			qp.completeRecv(r, c)
			return
		}
		qp.rcq.release()
		qp.recvSink(*c)
		return
	}
	// The head's slot is free now; the tail's is the same slot when the
	// queue was full, else an empty one.
	if t, tsgl := qp.rqSlot(qp.rqTail); t != r {
		*t = *r
		copy(tsgl, sgl[:r.nsge])
	}
	qp.rqTail++
	qp.recvSink(*c)
}

// flushRQLocked completes every queued receive with StatusWRFlushErr.
func (qp *QP) flushRQLocked() {
	for qp.rqHead != qp.rqTail {
		e, _ := qp.rqSlot(qp.rqHead)
		qp.rqHead++
		c := Completion{Status: StatusWRFlushErr, Op: OpRecv}
		qp.completeRecv(e, &c)
	}
	qp.recvActive = false
}

// flushLocked completes every outstanding WR exactly once: unfinished
// entries that were given a specific error status keep it, the others are
// flushed; the receive queue is flushed.
func (qp *QP) flushLocked() {
	// Completions are reported in order: a WR behind one that failed or
	// never finished is flushed too, even if it was already handed to the
	// LLP (a Send queued behind a Read that the peer refused never reached
	// its receive, and must not be reported as a success after the error).
	behind := false
	for s := qp.sqHead; s != qp.sqTail; s++ {
		e, _ := qp.sqSlot(s)
		switch {
		case e.state != sqDone:
			if e.status == StatusSuccess {
				e.status = StatusWRFlushErr
			}
			e.state = sqDone
			behind = true
		case e.status != StatusSuccess:
			behind = true
		case behind:
			e.status = StatusWRFlushErr
		}
	}
	qp.completeSQLocked()
	qp.sqNext = qp.sqTail
	qp.sqWritten = qp.sqTail
	qp.ordHead, qp.ordTail = 0, 0
	qp.irdHead, qp.irdTail = 0, 0
	qp.flushRQLocked()
}

// flushORDLocked completes our outstanding Reads and Atomics flushed:
// after the peer's FIN no response can come. Later WRs go on.
func (qp *QP) flushORDLocked() {
	for ; qp.ordHead != qp.ordTail; qp.ordHead++ {
		seq := qp.ordQ[qp.ordHead%uint32(len(qp.ordQ))]
		if seq == ordRTR {
			continue
		}
		if e, _ := qp.sqSlot(seq); e.state == sqWaiting {
			e.state, e.status = sqDone, StatusWRFlushErr
		}
	}
	qp.completeSQLocked()
}

// peerClosedLocked handles the peer's orderly FIN (RFC 5041 §6.2.1: the
// half-close is reported, outbound work goes on): what can no longer
// complete is flushed, the rest stays.
func (qp *QP) peerClosedLocked() {
	qp.peerFIN = true
	qp.endLocked()
	// A responder waits for the first FPDU before it sends (RFC 5044
	// §7.1.2 rule 4); the FIN, after the initiator's Request, does as well.
	qp.txOpen = true
	qp.flushRQLocked()
	qp.flushORDLocked()
	qp.ring()
}

// endPeerClosed waits until tx has ended the stream in order (or Close
// stops the QP), then moves the QP to error: both halves are closed. It
// runs on the rx goroutine, or its own one over a PushLLP.
func (qp *QP) endPeerClosed() {
	select {
	case <-qp.txEnded:
	case <-qp.stop:
	}
	qp.mu.Lock()
	if qp.state == QPRTS || qp.state == QPClosing {
		qp.state = QPError
		qp.endLocked()
		qp.flushLocked()
		qp.ring()
	}
	qp.mu.Unlock()
}

// endLocked closes the Done channel, once.
func (qp *QP) endLocked() {
	if !qp.endedSet {
		qp.endedSet = true
		close(qp.ended)
	}
}

// Done returns a channel closed when the QP's connection has ended: the
// peer closed it in order (Disconnected), or the QP went to error (Err
// tells whether an error did it), was moved there (ToError) or closed.
// Front ends wait on it to report a disconnect or an asynchronous error.
func (qp *QP) Done() <-chan struct{} { return qp.ended }

// ToError moves the QP to error (ibv_modify_qp to IBV_QPS_ERR): every
// outstanding WR is flushed and the stream ends without a Terminate. Err
// stays nil: it was asked for.
func (qp *QP) ToError() {
	qp.mu.Lock()
	qp.fatalLocked(nil, nil, false)
	qp.mu.Unlock()
}

// fatalLocked moves the QP to error because of e. When sendTerm is set and
// the stream still allows it, a Terminate reporting e about the offending
// segment (nil if none) is queued as the last thing tx sends. Every
// outstanding WR is completed.
func (qp *QP) fatalLocked(e *term.Error, offending []byte, sendTerm bool) {
	if qp.state == QPError || qp.state == QPClosed {
		return
	}
	qp.state = QPError
	qp.firstErr = e
	qp.endLocked()
	if sendTerm && e != nil && !qp.txDone && qp.llp != nil {
		n, err := putTerminate(qp.termULPDU[:], e, offending)
		if err == nil {
			qp.termLen = n
			qp.termPending = true
			qp.txOpen = true
			qp.stats.termSent(e)
		}
	}
	qp.flushLocked()
	qp.ring()
}

// Close closes the QP: an orderly disconnect when connected (bounded by
// the device's ConnTimeout), then the LLP is closed, the goroutines stop,
// every outstanding WR completes (flushed) and the QP is destroyed.
func (qp *QP) Close() error {
	if !qp.closing.CompareAndSwap(false, true) {
		return nil
	}
	qp.mu.Lock()
	st := qp.state
	qp.mu.Unlock()
	deadline := time.Now().Add(qp.dev.cfg.ConnTimeout)
	if st == QPRTS {
		qp.disconnect(deadline)
	}
	qp.mu.Lock()
	if (qp.state == QPError || qp.state == QPClosing) && qp.txStarted {
		// A QP in error: tx sends the Terminate as the last FPDU and
		// half-closes; closing (the peer's FIN came first): tx sends
		// what is queued, then its FIN. Let it finish before the LLP is
		// closed under it, so the peer gets all of it rather than a
		// lost connection (bounded by ConnTimeout: a stalled LLP does
		// not hold Close).
		qp.mu.Unlock()
		t := time.NewTimer(max(time.Until(deadline), 0))
		select {
		case <-qp.txEnded:
		case <-t.C:
		}
		t.Stop()
		qp.mu.Lock()
	}
	if qp.state != QPError {
		qp.state = QPError
	}
	qp.endLocked()
	qp.flushLocked()
	llp := qp.llp
	qp.mu.Unlock()
	close(qp.stop)
	if llp != nil {
		llp.Close()
	}
	qp.wg.Wait()
	qp.mu.Lock()
	qp.flushLocked()
	qp.state = QPClosed
	qp.mu.Unlock()
	if qp.txReader != nil {
		qp.txReader.Close()
	}
	if qp.rxReader != nil {
		qp.rxReader.Close()
	}
	qp.detachCQs()
	qp.srq.detachIf()
	qp.dev.mu.Lock()
	delete(qp.dev.qps, qp.num)
	qp.dev.mu.Unlock()
	return nil
}
