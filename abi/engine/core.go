package main

import (
	"encoding/binary"
	"errors"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"

	"xrnic/verbs"
	"xrnic/wire/term"
)

// ctl serializes the destroy paths (control path only).
var ctl sync.Mutex

type pdObj struct {
	pd   *verbs.PD
	nqps atomic.Int32 // QPs and SRQs
}

type mrObj struct {
	mr *verbs.MR
}

type cqObj struct {
	cq     *verbs.CQ
	ch     *channel
	cookie uint64
	nqps   atomic.Int32
	stop   chan struct{}
	wg     sync.WaitGroup
}

type qpObj struct {
	qp       *verbs.QP
	pd       *pdObj
	scq, rcq *cqObj
	srq      *srqObj // nil: the QP's own RQ
	async    *channel
	cookie   uint64
	maxSGE   int
	stop     chan struct{}
	wg       sync.WaitGroup
	closing  atomic.Bool

	inline int // max_inline_data as made, 0: none
}

// inlineSGEs bounds the SGEs of an inline WR (the device's MaxSGE, 16).
const inlineSGEs = 16

func allocPD(out *uint64) int {
	d := device()
	if d == nil {
		return fail(syscall.ENODEV, "xrnic_alloc_pd: the device is not open")
	}
	pd, err := d.AllocPD()
	if err != nil {
		return fail(syscall.ENOMEM, "xrnic_alloc_pd: %v", err)
	}
	h := handles.add(&pdObj{pd: pd})
	if h == 0 {
		pd.Dealloc()
		return fail(syscall.ENOMEM, "xrnic_alloc_pd: too many objects")
	}
	*out = h
	return 0
}

func deallocPD(h uint64) int {
	ctl.Lock()
	defer ctl.Unlock()
	p := getT[pdObj](h)
	if p == nil {
		return fail(syscall.EBADF, "xrnic_dealloc_pd: no such PD")
	}
	if p.nqps.Load() > 0 {
		return fail(syscall.EBUSY, "xrnic_dealloc_pd: the PD still has QPs (destroy them first)")
	}
	if err := p.pd.Dealloc(); err != nil {
		if errors.Is(err, verbs.ErrPDBusy) {
			return fail(syscall.EBUSY, "xrnic_dealloc_pd: %v", err)
		}
		if !errors.Is(err, verbs.ErrClosed) {
			return fail(syscall.EINVAL, "xrnic_dealloc_pd: %v", err)
		}
	}
	handles.remove(h)
	return 0
}

// accessOf maps IBV_ACCESS_* to verbs; ok false for bits we cannot honour.
func accessOf(a int32) (verbs.Access, bool) {
	var out verbs.Access
	if a&IBV_ACCESS_LOCAL_WRITE != 0 {
		out |= verbs.AccessLocalWrite
	}
	if a&IBV_ACCESS_REMOTE_WRITE != 0 {
		out |= verbs.AccessRemoteWrite
	}
	if a&IBV_ACCESS_REMOTE_READ != 0 {
		out |= verbs.AccessRemoteRead
	}
	if a&IBV_ACCESS_REMOTE_ATOMIC != 0 {
		out |= verbs.AccessRemoteAtomic
	}
	if a&IBV_ACCESS_ZERO_BASED != 0 {
		out |= verbs.AccessZeroBased
	}
	// Memory windows are not offered (max_mw 0); on-demand paging and
	// hugetlb hints change nothing here (the engine reads the memory
	// as the process sees it); optional flags may be ignored by
	// definition.
	known := int32(IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
		IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_ZERO_BASED | IBV_ACCESS_ON_DEMAND | IBV_ACCESS_HUGETLB |
		IBV_ACCESS_OPTIONAL_RANGE)
	return out, a&^known == 0
}

func regMR(pdh uint64, addr unsafe.Pointer, length, iova uint64, access int32, mrOut *uint64, stag *uint32) int {
	p := getT[pdObj](pdh)
	if p == nil {
		return fail(syscall.EBADF, "xrnic_reg_mr: no such PD")
	}
	acc, ok := accessOf(access)
	if !ok {
		return fail(syscall.EINVAL, "xrnic_reg_mr: access flags %#x: only LOCAL_WRITE, REMOTE_WRITE, REMOTE_READ, REMOTE_ATOMIC and ZERO_BASED are supported (no memory windows)", access)
	}
	if addr == nil || length == 0 || length > 1<<46 {
		return fail(syscall.EINVAL, "xrnic_reg_mr: bad range (addr %p, length %d)", addr, length)
	}
	switch {
	case iova == 0 && uintptr(addr) != 0:
		acc |= verbs.AccessZeroBased
	case iova == uint64(uintptr(addr)):
		if acc&verbs.AccessZeroBased != 0 {
			return fail(syscall.EINVAL, "xrnic_reg_mr: IBV_ACCESS_ZERO_BASED with iova = addr")
		}
	default:
		return fail(syscall.EINVAL, "xrnic_reg_mr: iova %#x: only the address itself or 0 (zero-based) is supported", iova)
	}
	buf := unsafe.Slice((*byte)(addr), length)
	mr, err := p.pd.RegMR(buf, acc)
	if err != nil {
		return fail(syscall.EINVAL, "xrnic_reg_mr: %v", err)
	}
	h := handles.add(&mrObj{mr: mr})
	if h == 0 {
		mr.Dereg()
		return fail(syscall.ENOMEM, "xrnic_reg_mr: too many objects")
	}
	*mrOut, *stag = h, mr.STag()
	return 0
}

func deregMR(h uint64) int {
	ctl.Lock()
	defer ctl.Unlock()
	m := getT[mrObj](h)
	if m == nil {
		return fail(syscall.EBADF, "xrnic_dereg_mr: no such MR")
	}
	handles.remove(h)
	if err := m.mr.Dereg(); err != nil && !errors.Is(err, verbs.ErrClosed) {
		return fail(syscall.EINVAL, "xrnic_dereg_mr: %v", err)
	}
	return 0
}

func createCQ(cqe int32, chh, cookie uint64, out *uint64, depth *int32) int {
	d := device()
	if d == nil {
		return fail(syscall.ENODEV, "xrnic_create_cq: the device is not open")
	}
	var ch *channel
	if chh != 0 {
		if ch = getT[channel](chh); ch == nil {
			return fail(syscall.EBADF, "xrnic_create_cq: no such completion channel")
		}
	}
	maxCQE := dev.a.MaxCQE
	if cqe <= 0 || int(cqe) > maxCQE {
		return fail(syscall.EINVAL, "xrnic_create_cq: cqe %d outside 1..%d", cqe, maxCQE)
	}
	// What was asked: the CQ grows when the queues attached to it need
	// more (up to max_cqe), so no headroom is needed here.
	cq, err := d.CreateCQ(int(cqe))
	if err != nil {
		return fail(syscall.ENOMEM, "xrnic_create_cq: %v", err)
	}
	c := &cqObj{cq: cq, ch: ch, cookie: cookie, stop: make(chan struct{})}
	h := handles.add(c)
	if h == 0 {
		cq.Close()
		return fail(syscall.ENOMEM, "xrnic_create_cq: too many objects")
	}
	if ch != nil {
		c.wg.Add(1)
		go c.notifier()
	}
	*out, *depth = h, int32(cq.Depth())
	return 0
}

// resizeCQ is xrnic_cq_resize.
func resizeCQ(h uint64, cqe int32, actual *int32) int {
	c := getT[cqObj](h)
	if c == nil {
		return fail(syscall.EBADF, "xrnic_cq_resize: no such CQ")
	}
	if maxCQE := dev.a.MaxCQE; cqe <= 0 || int(cqe) > maxCQE {
		return fail(syscall.EINVAL, "xrnic_cq_resize: cqe %d outside 1..%d", cqe, maxCQE)
	}
	n, err := c.cq.Resize(int(cqe))
	if err != nil {
		if errors.Is(err, verbs.ErrBadAttr) {
			return fail(syscall.EINVAL, "xrnic_cq_resize: cqe %d is below the %d completions queued (poll them first)", cqe, c.cq.Len())
		}
		return fail(syscall.EINVAL, "xrnic_cq_resize: %v", err)
	}
	*actual = int32(n)
	return 0
}

// notifier turns the CQ's notifications into XRNIC_EV_COMP events.
func (c *cqObj) notifier() {
	defer c.wg.Done()
	for {
		select {
		case <-c.cq.Events():
			ev := eventT{Kind: xEvComp, Cookie: c.cookie}
			c.ch.push(&ev)
		case <-c.stop:
			return
		}
	}
}

func destroyCQ(h uint64) int {
	ctl.Lock()
	defer ctl.Unlock()
	c := getT[cqObj](h)
	if c == nil {
		return fail(syscall.EBADF, "xrnic_destroy_cq: no such CQ")
	}
	if c.nqps.Load() > 0 {
		return fail(syscall.EBUSY, "xrnic_destroy_cq: QPs still use the CQ (destroy them first)")
	}
	if err := c.cq.Close(); err != nil && !errors.Is(err, verbs.ErrClosed) {
		if errors.Is(err, verbs.ErrCQBusy) {
			return fail(syscall.EBUSY, "xrnic_destroy_cq: %v", err)
		}
		return fail(syscall.EINVAL, "xrnic_destroy_cq: %v", err)
	}
	c.cq.CountPushes(nil) // the counter is the caller's memory
	handles.remove(h)
	close(c.stop)
	c.wg.Wait()
	return 0
}

// countPushes makes the CQ count its completions into *p (C memory).
func countPushes(h uint64, p unsafe.Pointer) int {
	c := getT[cqObj](h)
	if c == nil {
		return int(syscall.EBADF)
	}
	if uintptr(p)%8 != 0 {
		return fail(syscall.EINVAL, "xrnic_cq_count_pushes: the counter must be 8-byte aligned")
	}
	c.cq.CountPushes((*verbs.PushCounter)(p))
	return 0
}

func reqNotifyCQ(h uint64, solicitedOnly int32) int {
	c := getT[cqObj](h)
	if c == nil {
		return int(syscall.EBADF)
	}
	c.cq.Notify(solicitedOnly != 0)
	if b := driver.Load(); b != nil {
		b.d.Undrive() // the application is about to wait for the event
	}
	return 0
}

// ibv_wc_status by rnic.Status.
var wcStatus = [...]uint32{
	verbs.StatusSuccess:      IBV_WC_SUCCESS,
	verbs.StatusLocLenErr:    IBV_WC_LOC_LEN_ERR,
	verbs.StatusLocQPOpErr:   IBV_WC_LOC_QP_OP_ERR,
	verbs.StatusLocProtErr:   IBV_WC_LOC_PROT_ERR,
	verbs.StatusWRFlushErr:   IBV_WC_WR_FLUSH_ERR,
	verbs.StatusBadRespErr:   IBV_WC_BAD_RESP_ERR,
	verbs.StatusLocAccessErr: IBV_WC_LOC_ACCESS_ERR,
	verbs.StatusRemInvReqErr: IBV_WC_REM_INV_REQ_ERR,
	verbs.StatusRemAccessErr: IBV_WC_REM_ACCESS_ERR,
	verbs.StatusRemOpErr:     IBV_WC_REM_OP_ERR,
	verbs.StatusRetryExcErr:  IBV_WC_RETRY_EXC_ERR,
	verbs.StatusFatalErr:     IBV_WC_FATAL_ERR,
	verbs.StatusGeneralErr:   IBV_WC_GENERAL_ERR,
}

// ibv_wc_opcode by rnic.Opcode.
var wcOpcode = [...]uint32{
	verbs.OpSend:         IBV_WC_SEND,
	verbs.OpSendWithInv:  IBV_WC_SEND,
	verbs.OpWrite:        IBV_WC_RDMA_WRITE,
	verbs.OpWriteWithImm: IBV_WC_RDMA_WRITE,
	verbs.OpRead:         IBV_WC_RDMA_READ,
	verbs.OpFetchAdd:     IBV_WC_FETCH_ADD,
	verbs.OpCmpSwap:      IBV_WC_COMP_SWAP,
	verbs.OpImm:          IBV_WC_SEND,
	verbs.OpLocalInv:     IBV_WC_LOCAL_INV,
	verbs.OpRecv:         IBV_WC_RECV,
	verbs.OpRecvImm:      IBV_WC_RECV,
	verbs.OpRecvWriteImm: IBV_WC_RECV_RDMA_WITH_IMM,
}

func htonl(v uint32) uint32 {
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], v)
	return binary.NativeEndian.Uint32(b[:])
}

// toWC converts a completion to struct ibv_wc's layout.
func toWC(c *verbs.Completion, w *wcT) {
	*w = wcT{WRID: c.ID, ByteLen: c.ByteLen, QPNum: c.QPNum, Status: IBV_WC_GENERAL_ERR}
	if int(c.Status) < len(wcStatus) {
		w.Status = wcStatus[c.Status]
	}
	if int(c.Op) < len(wcOpcode) {
		w.Opcode = wcOpcode[c.Op]
	}
	if c.Flags&verbs.WCWithImm != 0 {
		w.WCFlags |= IBV_WC_WITH_IMM
		w.ImmData = htonl(uint32(c.Imm))
	}
	if c.Flags&verbs.WCWithInv != 0 {
		w.WCFlags |= IBV_WC_WITH_INV
		w.ImmData = c.InvalidatedSTag
	}
	// vendor_err: the iWARP error (layer, type, code) behind an error.
	if te, ok := c.Err.(*term.Error); ok && te != nil {
		w.VendorErr = uint32(te.Layer)<<16 | uint32(te.EType)<<8 | uint32(te.Code)
	}
}

// scratchPool holds pollCQ's conversion scratch.
var scratchPool = sync.Pool{New: func() any { return new([16]verbs.Completion) }}

// pollCQ is xrnic_poll_cq: a count or a negative errno.
func pollCQ(h uint64, n int32, wc *wcT) int {
	c := getT[cqObj](h)
	if c == nil {
		return -int(syscall.EBADF)
	}
	if n < 0 || (n > 0 && wc == nil) {
		return -int(syscall.EINVAL)
	}
	out := unsafe.Slice(wc, n)
	total := 0
	// The conversion's scratch comes from a sync.Pool (per-P caches):
	// pollers share no lock but the CQ's own, and a steady poll allocates
	// nothing (a stack array escapes through CQ.Poll: 1 KiB a call).
	scratch := scratchPool.Get().(*[16]verbs.Completion)
	for total < len(out) {
		k := c.cq.Poll(scratch[:min(len(scratch), len(out)-total)])
		for i := 0; i < k; i++ {
			toWC(&scratch[i], &out[total+i])
			scratch[i].Err = nil
		}
		total += k
		if k < len(scratch) {
			break
		}
	}
	scratchPool.Put(scratch)
	return total
}

func createQP(pdh uint64, in *qpInitT, out *uint64, qpn *uint32) int {
	p := getT[pdObj](pdh)
	if p == nil {
		return fail(syscall.EBADF, "xrnic_create_qp: no such PD")
	}
	scq, rcq := getT[cqObj](in.SendCQ), getT[cqObj](in.RecvCQ)
	if scq == nil || rcq == nil {
		return fail(syscall.EBADF, "xrnic_create_qp: no such send or receive CQ")
	}
	var async *channel
	if in.AsyncCh != 0 {
		if async = getT[channel](in.AsyncCh); async == nil {
			return fail(syscall.EBADF, "xrnic_create_qp: no such async channel")
		}
	}
	var srq *srqObj
	if in.SRQ != 0 {
		if srq = getT[srqObj](in.SRQ); srq == nil {
			return fail(syscall.EBADF, "xrnic_create_qp: no such SRQ")
		}
		in.MaxRecvWR, in.MaxRecvSGE = 0, 0 // the SRQ's
	}
	a := dev.a
	sge := int(max(in.MaxSendSGE, in.MaxRecvSGE, 1))
	if int(in.MaxSendWR) > a.MaxWR || int(in.MaxRecvWR) > a.MaxWR || sge > a.MaxSGE || in.MaxInlineData > maxInline {
		return fail(syscall.EINVAL, "xrnic_create_qp: max_send_wr %d, max_recv_wr %d (at most %d), SGEs %d (at most %d), max_inline_data %d (at most %d)",
			in.MaxSendWR, in.MaxRecvWR, a.MaxWR, sge, a.MaxSGE, in.MaxInlineData, maxInline)
	}
	sq := int(max(in.MaxSendWR, 1))
	qa := verbs.QPAttr{SendCQ: scq.cq, RecvCQ: rcq.cq, SQDepth: sq, RQDepth: int(in.MaxRecvWR),
		MaxSGE: sge, SigAll: in.SQSigAll != 0, MaxInlineData: int(in.MaxInlineData)}
	if srq != nil {
		qa.SRQ = srq.srq
	}
	qp, err := p.pd.CreateQP(qa)
	if err != nil {
		if errors.Is(err, verbs.ErrTooManyQPs) {
			return fail(syscall.ENOMEM, "xrnic_create_qp: %v", err)
		}
		if errors.Is(err, verbs.ErrWrongDevice) || errors.Is(err, verbs.ErrClosed) {
			return fail(syscall.EINVAL, "xrnic_create_qp: %v (the SRQ was destroyed, or is not this device's)", err)
		}
		return fail(syscall.EINVAL, "xrnic_create_qp: %v", err)
	}
	q := &qpObj{qp: qp, pd: p, scq: scq, rcq: rcq, srq: srq, async: async, cookie: in.Cookie, maxSGE: sge, stop: make(chan struct{}), inline: qp.MaxInlineData()}
	h := handles.add(q)
	if h == 0 {
		q.release()
		return fail(syscall.ENOMEM, "xrnic_create_qp: too many objects")
	}
	p.nqps.Add(1)
	scq.nqps.Add(1)
	rcq.nqps.Add(1)
	if srq != nil {
		srq.nqps.Add(1)
	}
	if async != nil {
		q.wg.Add(1)
		go q.watch()
	}
	in.MaxSendWR = uint32(sq)
	in.MaxSendSGE, in.MaxRecvSGE = uint32(sge), uint32(sge)
	if srq != nil {
		in.MaxRecvSGE = 0
	}
	in.MaxInlineData = uint32(q.inline)
	*out, *qpn = h, qp.Num()
	return 0
}

func (q *qpObj) release() { q.qp.Close() }

// watch queues the QP's async event when an error (a Terminate sent or
// received, a lost connection) ends it; an orderly close, ToError or
// destroy is none.
func (q *qpObj) watch() {
	defer q.wg.Done()
	select {
	case <-q.qp.Done():
	case <-q.stop:
		return
	}
	err := q.qp.Err()
	if err == nil || q.closing.Load() {
		return
	}
	code := uint32(IBV_EVENT_QP_FATAL)
	if te, ok := err.(*term.Error); ok && te != nil && te.EType == 0x1 &&
		(te.Layer == term.LayerRDMAP || te.Layer == term.LayerDDP) {
		code = IBV_EVENT_QP_ACCESS_ERR // a protection error
	}
	debugf("QP %d: async event %d: %v", q.qp.Num(), code, err)
	ev := eventT{Kind: xEvAsync, Code: code, Cookie: q.cookie}
	q.async.push(&ev)
}

func destroyQP(h uint64) int {
	ctl.Lock()
	q := getT[qpObj](h)
	if q == nil || !handles.remove(h) {
		ctl.Unlock()
		return fail(syscall.EBADF, "xrnic_destroy_qp: no such QP")
	}
	ctl.Unlock()
	debugf("QP %d: destroyed", q.qp.Num())
	q.closing.Store(true)
	close(q.stop)
	q.release()
	q.wg.Wait()
	q.pd.nqps.Add(-1)
	q.scq.nqps.Add(-1)
	q.rcq.nqps.Add(-1)
	if q.srq != nil {
		q.srq.nqps.Add(-1)
	}
	return 0
}

func qpState(h uint64, out *int32) int {
	q := getT[qpObj](h)
	if q == nil {
		return fail(syscall.EBADF, "xrnic_qp_state: no such QP")
	}
	switch q.qp.State() {
	case verbs.QPInit:
		*out = IBV_QPS_INIT
	case verbs.QPConnecting:
		*out = IBV_QPS_RTR
	case verbs.QPRTS:
		*out = IBV_QPS_RTS
	case verbs.QPClosing:
		*out = IBV_QPS_SQD
	default:
		*out = IBV_QPS_ERR
	}
	return 0
}

func qpToError(h uint64) int {
	q := getT[qpObj](h)
	if q == nil {
		return fail(syscall.EBADF, "xrnic_qp_to_error: no such QP")
	}
	debugf("QP %d: moved to error", q.qp.Num())
	q.qp.ToError()
	return 0
}

func postErr(err error) int {
	if err == verbs.ErrQueueFull || err == verbs.ErrCQFull {
		return failErr(syscall.ENOMEM, err)
	}
	return failErr(syscall.EINVAL, err)
}

var errInline = errors.New("xrnic: inline data longer than the QP's max_inline_data, or an inline WR on a QP created without it")
var errBadWR = errors.New("xrnic: malformed work request (opcode, flags or SGE list)")

// postSend is xrnic_post_send.
func postSend(h uint64, wrs *sendWRT, n int32, posted *int32) int {
	if posted != nil {
		*posted = 0
	}
	q := getT[qpObj](h)
	if q == nil {
		return int(syscall.EBADF)
	}
	if n < 0 || (n > 0 && wrs == nil) {
		return failErr(syscall.EINVAL, errBadWR)
	}
	for i := range unsafe.Slice(wrs, n) {
		if e := q.post(&unsafe.Slice(wrs, n)[i]); e != 0 {
			return e
		}
		if posted != nil {
			*posted++
		}
	}
	if b := driver.Load(); b != nil && n > 0 {
		b.d.Drive() // transmit now, on the posting thread
	}
	return 0
}

var sendOp = [...]verbs.Opcode{
	wrWrite: verbs.OpWrite, wrWriteWithImm: verbs.OpWriteWithImm, wrSend: verbs.OpSend,
	wrSendWithInv: verbs.OpSendWithInv, wrRead: verbs.OpRead, wrFetchAdd: verbs.OpFetchAdd,
	wrCmpSwap: verbs.OpCmpSwap, wrLocalInv: verbs.OpLocalInv, wrImm: verbs.OpImm,
}

func (q *qpObj) post(w *sendWRT) int {
	if w.Opcode == 0 || int(w.Opcode) >= len(sendOp) || w.Flags&^(sendSignaled|sendSolicited|sendFence|sendInline) != 0 ||
		w.NumSGE < 0 || int(w.NumSGE) > q.maxSGE || (w.NumSGE > 0 && w.SgList == nil) {
		return failErr(syscall.EINVAL, errBadWR)
	}
	wr := verbs.SendWR{ID: w.WRID, Op: sendOp[w.Opcode], Imm: w.Imm, InvalidateSTag: w.InvalidateRKey,
		RemoteSTag: w.RKey, RemoteTO: w.RemoteAddr, CompareAdd: w.CompareAdd, Swap: w.Swap,
		AddMask: w.AddMask, CompareMask: w.CompareMask, SwapMask: w.SwapMask}
	if w.Flags&sendSignaled != 0 {
		wr.Flags |= verbs.FlagSignaled
	}
	if w.Flags&sendSolicited != 0 {
		wr.Flags |= verbs.FlagSolicited
	}
	if w.Flags&sendFence != 0 {
		wr.Flags |= verbs.FlagFence
	}
	if w.NumSGE > 0 {
		// struct xrnic_sge has rnic.SGE's layout; PostSend copies it.
		wr.SGL = unsafe.Slice((*verbs.SGE)(w.SgList), w.NumSGE)
	}
	if w.Flags&sendInline != 0 {
		switch wr.Op {
		case verbs.OpSend, verbs.OpSendWithInv, verbs.OpWrite, verbs.OpWriteWithImm:
			return q.postInline(&wr)
		}
	}
	if err := q.qp.PostSend(&wr); err != nil {
		return postErr(err)
	}
	return 0
}

// postInline posts the WR with its bytes copied now (verbs'
// PostSendInline: the copy and the post under the QP's own post lock).
func (q *qpObj) postInline(wr *verbs.SendWR) int {
	var src [inlineSGEs][]byte
	if len(wr.SGL) > len(src) {
		return failErr(syscall.EINVAL, errBadWR)
	}
	n := 0
	for i := range wr.SGL {
		s := &wr.SGL[i]
		if s.Length == 0 {
			continue
		}
		// The SGE's address is the application's pointer (lkey unused).
		src[n] = unsafe.Slice((*byte)(*(*unsafe.Pointer)(unsafe.Pointer(&s.Addr))), s.Length)
		n++
	}
	wr.SGL = nil
	switch err := q.qp.PostSendInline(wr, src[:n]...); err {
	case nil:
	case verbs.ErrTooLong, verbs.ErrInvalidWR: // longer than made, or no inline on this QP
		return failErr(syscall.EINVAL, errInline)
	default:
		return postErr(err)
	}
	return 0
}

// postRecv is xrnic_post_recv.
func postRecv(h uint64, wrs *recvWRT, n int32, posted *int32) int {
	if posted != nil {
		*posted = 0
	}
	q := getT[qpObj](h)
	if q == nil {
		return int(syscall.EBADF)
	}
	ws, ok := recvWRs(wrs, n)
	if !ok {
		return failErr(syscall.EINVAL, errBadWR)
	}
	for i := range ws {
		wr, ok := recvWR(&ws[i], q.maxSGE)
		if !ok {
			return failErr(syscall.EINVAL, errBadWR)
		}
		if err := q.qp.PostRecv(&wr); err != nil {
			return postErr(err)
		}
		if posted != nil {
			*posted++
		}
	}
	return 0
}

// recvWRs is the C array of n receive WRs; false if n or the pointer is bad.
func recvWRs(wrs *recvWRT, n int32) ([]recvWRT, bool) {
	if n < 0 || (n > 0 && wrs == nil) {
		return nil, false
	}
	return unsafe.Slice(wrs, n), true
}

// recvWR checks a C receive WR (for a queue taking maxSGE entries) and
// gives the engine's, whose SGL is the C array itself.
func recvWR(w *recvWRT, maxSGE int) (verbs.RecvWR, bool) {
	if w.NumSGE < 0 || int(w.NumSGE) > maxSGE || (w.NumSGE > 0 && w.SgList == nil) {
		return verbs.RecvWR{}, false
	}
	wr := verbs.RecvWR{ID: w.WRID}
	if w.NumSGE > 0 {
		wr.SGL = unsafe.Slice((*verbs.SGE)(w.SgList), w.NumSGE)
	}
	return wr, true
}
