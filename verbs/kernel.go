package verbs

import (
	"context"
	"errors"
	"fmt"
	"net"

	"xrnic/atomics"
	"xrnic/internal/engine"
	"xrnic/mem"
)

// The engine provider: the datapath engine in this process, over kernel
// TCP sockets ("kernel") or the user-space TCP over AF_XDP ("afxdp", see
// afxdp.go; the engine hides the difference). It converts verbs values to
// engine values and back, field by field, into per-object scratch space
// (no allocation per WR or completion).

type kernelDev struct {
	d   *engine.Device
	llp string         // "kernel" or "afxdp"
	xdp *XDPAttributes // afxdp only
}

func engineConfig(cfg DeviceConfig) engine.Config {
	return engine.Config{
		MaxQPs: cfg.MaxQPs, MaxWR: cfg.MaxWR, MaxSGE: cfg.MaxSGE, MaxCQE: cfg.MaxCQE, MaxMR: cfg.MaxMR,
		MaxORD: cfg.MaxORD, MaxIRD: cfg.MaxIRD, MaxMsgSize: cfg.MaxMsgSize, ConnTimeout: cfg.ConnTimeout,
	}
}

func openKernel(cfg DeviceConfig) (provider, error) {
	d, err := engine.Open(engineConfig(cfg))
	if err != nil {
		return nil, fmt.Errorf("verbs: open device: %w", err)
	}
	return &kernelDev{d: d, llp: "kernel"}, nil
}

func (k *kernelDev) attributes() Attributes {
	a := k.d.Attributes()
	out := Attributes{
		Transport: a.Transport, LLP: k.llp, MPARev: a.MPARev, CRC: a.CRC, Markers: a.Markers,
		MaxQPs: a.MaxQPs, MaxWR: a.MaxWR, MaxSGE: a.MaxSGE, MaxCQE: a.MaxCQE, MaxMR: a.MaxMR,
		MaxORD: a.MaxORD, MaxIRD: a.MaxIRD, MaxMsgSize: a.MaxMsgSize,
		MaskedAtomics: a.MaskedAtomics, ImmediateData: true,
	}
	if k.xdp != nil {
		x := *k.xdp
		out.XDP = &x
	}
	switch a.AtomicScope {
	case atomics.ScopeGlobal:
		out.AtomicCap = AtomicGlob
	case atomics.ScopeRNIC:
		out.AtomicCap = AtomicHCA
	}
	return out
}

func (k *kernelDev) allocPD() (uint32, error) { return uint32(k.d.AllocPD()), nil }

func (k *kernelDev) deallocPD(pd uint32) error {
	err := k.d.DeallocPD(mem.PD(pd))
	if errors.Is(err, mem.ErrPDBusy) {
		return fmt.Errorf("%w: %v", ErrPDBusy, err)
	}
	return mapErr(err)
}

func memOptions(pd uint32, a Access) mem.MROptions {
	o := mem.MROptions{PD: mem.PD(pd), RemoteInvalidate: a&AccessRemoteInvalidate != 0}
	if a&AccessLocalWrite != 0 {
		o.Access |= mem.LocalWrite
	}
	if a&AccessRemoteWrite != 0 {
		o.Access |= mem.RemoteWrite
	}
	if a&AccessRemoteRead != 0 {
		o.Access |= mem.RemoteRead
	}
	if a&AccessRemoteAtomic != 0 {
		o.Access |= mem.RemoteAtomic
	}
	if a&AccessZeroBased != 0 {
		o.TO = mem.TOZeroBased
	}
	return o
}

type kernelMR struct {
	d   *engine.Device
	m   *mem.MR
	reg *mem.Region // nil for caller memory
}

func (k *kernelDev) regMR(pd uint32, buf []byte, a Access) (mrImpl, error) {
	m, err := k.d.RegMR(buf, memOptions(pd, a))
	if err != nil {
		return nil, mapErr(err)
	}
	return &kernelMR{d: k.d, m: m}, nil
}

func (k *kernelDev) allocMR(pd uint32, size int, a Access, o AllocOptions) (mrImpl, error) {
	ao := mem.AllocOptions{NoFallback: o.NoFallback, Prefault: o.Prefault}
	switch o.PageSize {
	case Page1G:
		ao.PageSize = mem.Page1G
	case Page4K:
		ao.PageSize = mem.Page4K
	default:
		ao.PageSize = mem.Page2M
	}
	r, err := mem.Alloc(size, ao)
	if err != nil {
		return nil, fmt.Errorf("verbs: allocate MR memory: %w", err)
	}
	m, err := k.d.RegMR(r.Bytes(), memOptions(pd, a))
	if err != nil {
		r.Close()
		return nil, mapErr(err)
	}
	return &kernelMR{d: k.d, m: m, reg: r}, nil
}

func (m *kernelMR) stag() uint32    { return m.m.STag() }
func (m *kernelMR) baseTO() uint64  { return m.m.BaseTO() }
func (m *kernelMR) bytes() []byte   { return m.m.Bytes() }
func (m *kernelMR) valid() bool     { return m.m.Valid() }
func (m *kernelMR) warning() string { return m.regWarning() }

func (m *kernelMR) regWarning() string {
	if m.reg == nil {
		return ""
	}
	return m.reg.Warning()
}

func (m *kernelMR) backing() Backing {
	if m.reg == nil {
		return BackingUser
	}
	switch m.reg.Backing() {
	case mem.BackingTHP:
		return BackingTHP
	case mem.BackingHugeTLB2M:
		return BackingHugeTLB2M
	case mem.BackingHugeTLB1G:
		return BackingHugeTLB1G
	}
	return Backing4K
}

func (m *kernelMR) dereg() error {
	if err := m.d.DeregMR(m.m); err != nil {
		return mapErr(err)
	}
	if m.reg != nil {
		return m.reg.Close()
	}
	return nil
}

// CQ

type kernelCQ struct {
	cq      *engine.CQ
	scratch [32]engine.Completion
}

func (k *kernelDev) createCQ(depth int) (cqImpl, error) {
	cq, err := k.d.CreateCQ(depth)
	if err != nil {
		return nil, mapErr(err)
	}
	return &kernelCQ{cq: cq}, nil
}

// dpOpToVerbs maps engine opcodes (send and receive) to verbs opcodes.
var dpOpToVerbs = [...]Opcode{
	engine.OpSend: OpSend, engine.OpSendSE: OpSend,
	engine.OpSendInv: OpSendWithInv, engine.OpSendSEInv: OpSendWithInv,
	engine.OpWrite: OpWrite, engine.OpWriteImm: OpWriteWithImm, engine.OpRead: OpRead,
	engine.OpFetchAdd: OpFetchAdd, engine.OpCmpSwap: OpCmpSwap,
	engine.OpImm: OpImm, engine.OpImmSE: OpImm, engine.OpLocalInv: OpLocalInv,
	engine.OpRecv: OpRecv, engine.OpRecvImm: OpRecvImm, engine.OpRecvWriteImm: OpRecvWriteImm,
}

var dpStatusToVerbs = [...]Status{
	engine.StatusSuccess: StatusSuccess, engine.StatusLocLenErr: StatusLocLenErr,
	engine.StatusLocQPOpErr: StatusLocQPOpErr, engine.StatusLocProtErr: StatusLocProtErr,
	engine.StatusWRFlushErr: StatusWRFlushErr, engine.StatusBadRespErr: StatusBadRespErr,
	engine.StatusLocAccessErr: StatusLocAccessErr, engine.StatusRemInvReqErr: StatusRemInvReqErr,
	engine.StatusRemAccessErr: StatusRemAccessErr, engine.StatusRemOpErr: StatusRemOpErr,
	engine.StatusRetryExcErr: StatusRetryExcErr, engine.StatusFatalErr: StatusFatalErr,
	engine.StatusGeneralErr: StatusGeneralErr,
}

func convCompletion(d *Completion, s *engine.Completion) {
	*d = Completion{ID: s.ID, Status: StatusGeneralErr, QPNum: s.QPNum, ByteLen: s.ByteLen, Imm: s.Imm,
		InvalidatedSTag: s.InvalidatedSTag, AtomicOrig: s.AtomicOrig, Err: s.Err}
	if int(s.Status) < len(dpStatusToVerbs) {
		d.Status = dpStatusToVerbs[s.Status]
	}
	if int(s.Op) < len(dpOpToVerbs) {
		d.Op = dpOpToVerbs[s.Op]
	}
	if s.Flags&engine.WCWithImm != 0 {
		d.Flags |= WCWithImm
	}
	if s.Flags&engine.WCWithInv != 0 {
		d.Flags |= WCWithInv
	}
	if s.Flags&engine.WCSolicited != 0 {
		d.Flags |= WCSolicited
	}
}

func (c *kernelCQ) poll(wc []Completion) int {
	n := 0
	for n < len(wc) {
		k := c.cq.Poll(c.scratch[:min(len(c.scratch), len(wc)-n)])
		for i := range k {
			convCompletion(&wc[n+i], &c.scratch[i])
			c.scratch[i] = engine.Completion{}
		}
		n += k
		if k < len(c.scratch) {
			break
		}
	}
	return n
}

func (c *kernelCQ) wait(ctx context.Context) error { return c.cq.Wait(ctx) }
func (c *kernelCQ) arm(solicitedOnly bool)         { c.cq.Arm(solicitedOnly) }
func (c *kernelCQ) events() <-chan struct{}        { return c.cq.Events() }
func (c *kernelCQ) len() int                       { return c.cq.Len() }
func (c *kernelCQ) cap() int                       { return c.cq.Cap() }
func (c *kernelCQ) close() error                   { return mapErr(c.cq.Close()) }
func (k *kernelDev) close() error                  { return k.d.Close() }
func (k *kernelDev) listen(network, addr string) (listenerImpl, error) {
	l, err := k.d.Listen(network, addr)
	if err != nil {
		return nil, fmt.Errorf("verbs: listen: %w", err)
	}
	return &kernelListener{l: l}, nil
}

// QP

type kernelQP struct {
	qp   *engine.QP
	swr  engine.SendWR
	ssge []engine.SGE
	rwr  engine.RecvWR
	rsge []engine.SGE
}

func (k *kernelDev) createQP(pd uint32, a *QPAttr) (qpImpl, error) {
	scq, ok1 := a.SendCQ.c.(*kernelCQ)
	rcq, ok2 := a.RecvCQ.c.(*kernelCQ)
	if !ok1 || !ok2 {
		return nil, ErrWrongDevice
	}
	qp, err := k.d.CreateQP(engine.QPAttr{PD: mem.PD(pd), SendCQ: scq.cq, RecvCQ: rcq.cq,
		SQDepth: a.SQDepth, RQDepth: a.RQDepth, MaxSGE: a.MaxSGE, SigAll: a.SigAll, MaxORD: a.MaxORD, MaxIRD: a.MaxIRD})
	if err != nil {
		return nil, mapErr(err)
	}
	return &kernelQP{qp: qp, ssge: make([]engine.SGE, a.MaxSGE), rsge: make([]engine.SGE, a.MaxSGE)}, nil
}

func (q *kernelQP) num() uint32 { return q.qp.Num() }

// sendOp maps a verbs opcode and the solicited flag to the engine opcode.
func sendOp(op Opcode, se bool) (engine.Opcode, bool) {
	switch op {
	case OpSend:
		if se {
			return engine.OpSendSE, true
		}
		return engine.OpSend, true
	case OpSendWithInv:
		if se {
			return engine.OpSendSEInv, true
		}
		return engine.OpSendInv, true
	case OpImm:
		if se {
			return engine.OpImmSE, true
		}
		return engine.OpImm, true
	}
	if se {
		return 0, false
	}
	switch op {
	case OpWrite:
		return engine.OpWrite, true
	case OpWriteWithImm:
		return engine.OpWriteImm, true
	case OpRead:
		return engine.OpRead, true
	case OpFetchAdd:
		return engine.OpFetchAdd, true
	case OpCmpSwap:
		return engine.OpCmpSwap, true
	case OpLocalInv:
		return engine.OpLocalInv, true
	}
	return 0, false
}

func (q *kernelQP) postSend(wr *SendWR) error {
	op, ok := sendOp(wr.Op, wr.Flags&FlagSolicited != 0)
	if !ok || wr.Flags&^(FlagSignaled|FlagSolicited|FlagFence) != 0 || len(wr.SGL) > len(q.ssge) {
		return ErrInvalidWR
	}
	var f engine.SendFlags
	if wr.Flags&FlagSignaled != 0 {
		f |= engine.FlagSignaled
	}
	if wr.Flags&FlagFence != 0 {
		f |= engine.FlagFence
	}
	for i := range wr.SGL {
		q.ssge[i] = engine.SGE{Addr: wr.SGL[i].Addr, Length: wr.SGL[i].Length, LKey: wr.SGL[i].LKey}
	}
	q.swr = engine.SendWR{ID: wr.ID, Op: op, Flags: f, SGL: q.ssge[:len(wr.SGL)], Imm: wr.Imm,
		InvalidateSTag: wr.InvalidateSTag, RemoteSTag: wr.RemoteSTag, RemoteTO: wr.RemoteTO,
		CompareAdd: wr.CompareAdd, Swap: wr.Swap, AddMask: wr.AddMask, CompareMask: wr.CompareMask, SwapMask: wr.SwapMask}
	return mapErr(q.qp.PostSend(&q.swr))
}

func (q *kernelQP) postRecv(wr *RecvWR) error {
	if len(wr.SGL) > len(q.rsge) {
		return ErrInvalidWR
	}
	for i := range wr.SGL {
		q.rsge[i] = engine.SGE{Addr: wr.SGL[i].Addr, Length: wr.SGL[i].Length, LKey: wr.SGL[i].LKey}
	}
	q.rwr = engine.RecvWR{ID: wr.ID, SGL: q.rsge[:len(wr.SGL)]}
	return mapErr(q.qp.PostRecv(&q.rwr))
}

func connParams(p *ConnParam) engine.ConnParams {
	return engine.ConnParams{PrivateData: p.PrivateData, IRD: p.IRD, ORD: p.ORD, Rev: p.MPARev,
		PeerToPeer: p.PeerToPeer, NoCRC: p.NoCRC, Markers: p.Markers,
		RequiredORD: uint16(min(max(p.RequiredORD, 0), 0x3FFE)), Timeout: p.Timeout}
}

func connErr(op string, err error) error {
	if err == nil {
		return nil
	}
	var rej *engine.RejectedError
	if errors.As(err, &rej) {
		return &RejectedError{PrivateData: rej.PrivateData}
	}
	if m := mapErr(err); m != err {
		return m
	}
	if err == context.Canceled || err == context.DeadlineExceeded {
		return err
	}
	return fmt.Errorf("verbs: %s: %w", op, err)
}

func (q *kernelQP) connect(ctx context.Context, addr string, p *ConnParam) error {
	return connErr("dial", q.qp.Connect(ctx, addr, connParams(p)))
}

func (q *kernelQP) probe(ctx context.Context, stag uint32, to uint64) (ProbeResult, error) {
	r, err := q.qp.ProbeAtomics(ctx, stag, to)
	var out ProbeResult
	switch r {
	case engine.ProbeSupported:
		out = ProbeSupported
	case engine.ProbeNotSupported:
		out = ProbeNotSupported
	}
	return out, mapErr(err)
}

func (q *kernelQP) connInfo() ConnInfo {
	c := q.qp.ConnInfo()
	out := ConnInfo{Initiator: c.Initiator, MPARev: c.Rev, CRC: c.CRC, MarkersTx: c.MarkersTx, MarkersRx: c.MarkersRx,
		IRD: c.IRD, ORD: c.ORD, PeerToPeer: c.PeerToPeer, MULPDU: c.MULPDU, PeerPrivateData: c.PeerPrivateData}
	if c.HasEnhanced {
		out.HasPeerIRDORD, out.PeerIRD, out.PeerORD = true, int(c.PeerEnhanced.IRD), int(c.PeerEnhanced.ORD)
	}
	return out
}

var dpStateToVerbs = [...]QPState{
	engine.QPInit: QPInit, engine.QPConnecting: QPConnecting, engine.QPRTS: QPRTS,
	engine.QPClosing: QPClosing, engine.QPError: QPError, engine.QPClosed: QPClosed,
}

func (q *kernelQP) state() QPState {
	s := q.qp.State()
	if int(s) < len(dpStateToVerbs) {
		return dpStateToVerbs[s]
	}
	return QPError
}

func (q *kernelQP) err() error {
	if e := q.qp.Err(); e != nil {
		return e
	}
	return nil
}

func (q *kernelQP) disconnect(ctx context.Context) error { return mapErr(q.qp.Disconnect(ctx)) }
func (q *kernelQP) close() error                         { return mapErr(q.qp.Close()) }

// connection management

type kernelListener struct{ l *engine.Listener }

func (l *kernelListener) accept(ctx context.Context) (connReqImpl, ConnRequestInfo, error) {
	r, err := l.l.Accept(ctx)
	if err != nil {
		return nil, ConnRequestInfo{}, connErr("accept", err)
	}
	info := ConnRequestInfo{MPARev: r.Rev, PrivateData: r.PrivateData, PeerCRC: r.PeerCRC, PeerMarkers: r.PeerMarkers}
	if r.HasEnhanced {
		info.HasPeerIRDORD, info.PeerIRD, info.PeerORD = true, int(r.Enhanced.IRD), int(r.Enhanced.ORD)
		info.PeerToPeer = r.Enhanced.PeerToPeer
	}
	return kernelReq{r}, info, nil
}

func (l *kernelListener) addr() net.Addr { return l.l.Addr() }
func (l *kernelListener) close() error   { return l.l.Close() }

type kernelReq struct{ r *engine.ConnRequest }

func (r kernelReq) accept(ctx context.Context, qp qpImpl, p *ConnParam) error {
	kq, ok := qp.(*kernelQP)
	if !ok {
		return ErrWrongDevice
	}
	return connErr("accept", r.r.Accept(ctx, kq.qp, connParams(p)))
}

func (r kernelReq) reject(pd []byte) error { return connErr("reject", r.r.Reject(pd)) }
func (r kernelReq) close() error           { return r.r.Close() }

// mapErr maps engine sentinels to verbs sentinels (a comparison chain: no
// allocation on the post path).
func mapErr(err error) error {
	switch err {
	case nil:
		return nil
	case engine.ErrQueueFull:
		return ErrQueueFull
	case engine.ErrCQFull:
		return ErrCQFull
	case engine.ErrInvalidWR:
		return ErrInvalidWR
	case engine.ErrTooLong:
		return ErrTooLong
	case engine.ErrState:
		return ErrState
	case engine.ErrClosed:
		return ErrClosed
	case engine.ErrTooManyQPs:
		return ErrTooManyQPs
	case engine.ErrCQOverflow:
		return ErrCQOverflow
	case engine.ErrCQBusy:
		return ErrCQBusy
	case engine.ErrBadAttr:
		return ErrBadAttr
	case engine.ErrWrongDevice:
		return ErrWrongDevice
	case engine.ErrNotConnected:
		return ErrNotConnected
	case engine.ErrAlreadyInUse:
		return ErrAlreadyInUse
	case engine.ErrNoAtomics:
		return ErrNoAtomics
	case mem.ErrPDBusy:
		return ErrPDBusy
	case mem.ErrAccessLocalWrite:
		return ErrAccessLocalWr
	}
	return err
}
