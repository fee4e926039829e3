package verbs

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"

	"xrnic/atomics"
	"xrnic/internal/engine"
	"xrnic/mem"
	"xrnic/transport"
	"xrnic/wire/term"
)

// The engine provider: the engine in this process, over kernel TCP
// sockets ("kernel") or the user-space TCP over AF_XDP ("afxdp", see
// afxdp.go; the transport hides the difference). Work requests and
// completions pass through unchanged (they are the engine's types); only
// control-path values (attributes, connection parameters) are converted.

type kernelDev struct {
	d   *engine.Device
	llp string         // "kernel" or "afxdp"
	xdp *XDPAttributes // afxdp only
}

func engineConfig(cfg DeviceConfig) engine.Config {
	return engine.Config{
		MaxQPs: cfg.MaxQPs, MaxWR: cfg.MaxWR, MaxSGE: cfg.MaxSGE, MaxCQE: cfg.MaxCQE, MaxMR: cfg.MaxMR,
		MaxORD: cfg.MaxORD, MaxIRD: cfg.MaxIRD, MaxMsgSize: cfg.MaxMsgSize, ConnTimeout: cfg.ConnTimeout,
		FPDUTimeout: cfg.FPDUTimeout, RequestTimeout: cfg.RequestTimeout, NoInlineTx: cfg.NoInlineTx,
		RxSpin: cfg.RxSpin,
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
		MaxORD: a.MaxORD, MaxIRD: a.MaxIRD, MaxMsgSize: a.MaxMsgSize, MaxMRSize: math.MaxInt,
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

func (k *kernelDev) regMR(pd uint32, buf []byte, a Access, stream uint32) (mrImpl, error) {
	o := memOptions(pd, a)
	o.Stream = stream
	m, err := k.d.RegMR(buf, o)
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

type kernelCQ struct{ cq *engine.CQ }

func (k *kernelDev) createCQ(depth int) (cqImpl, error) {
	cq, err := k.d.CreateCQ(depth)
	if err != nil {
		return nil, mapErr(err)
	}
	return &kernelCQ{cq: cq}, nil
}

// poll hands wc to the engine as it is: the completion type is shared.
func (c *kernelCQ) poll(wc []Completion) int          { return c.cq.Poll(wc) }
func (c *kernelCQ) wait(ctx context.Context) error    { return c.cq.Wait(ctx) }
func (c *kernelCQ) arm(solicitedOnly bool)            { c.cq.Arm(solicitedOnly) }
func (c *kernelCQ) events() <-chan struct{}           { return c.cq.Events() }
func (c *kernelCQ) countPushes(p *engine.PushCounter) { c.cq.CountPushes(p) }
func (c *kernelCQ) drive() transport.DriveResult      { return c.cq.Drive() }
func (c *kernelCQ) len() int                          { return c.cq.Len() }
func (c *kernelCQ) cap() int                          { return c.cq.Cap() }
func (c *kernelCQ) resize(n int) (int, error)         { return c.cq.Resize(n) }
func (c *kernelCQ) close() error                      { return mapErr(c.cq.Close()) }
func (k *kernelDev) close() error                     { return k.d.Close() }
func (k *kernelDev) memStats() (mem.CheckCounts, int) {
	t := k.d.Table()
	return t.Counts(), t.Live()
}

func (k *kernelDev) transport() transport.Transport { return k.d.Transport() }

func (k *kernelDev) listen(network, addr string, lc ListenConfig) (listenerImpl, error) {
	l, err := k.d.ListenConfig(network, addr, engine.ListenConfig{Admit: lc.Admit, MaxSetup: lc.MaxSetup,
		MaxSetupPerPeer: lc.MaxSetupPerPeer, OnSetupError: lc.OnSetupError})
	if err != nil {
		return nil, fmt.Errorf("verbs: listen: %w", err)
	}
	return &kernelListener{l: l}, nil
}

// QP

type kernelQP struct{ qp *engine.QP }

func (k *kernelDev) createQP(pd uint32, a *QPAttr) (qpImpl, error) {
	scq, ok1 := a.SendCQ.c.(*kernelCQ)
	rcq, ok2 := a.RecvCQ.c.(*kernelCQ)
	if !ok1 || !ok2 {
		return nil, ErrWrongDevice
	}
	var srq *engine.SRQ
	if a.SRQ != nil {
		s, ok := a.SRQ.s.(*kernelSRQ)
		if !ok {
			return nil, ErrWrongDevice
		}
		srq = s.srq
	}
	qp, err := k.d.CreateQP(engine.QPAttr{PD: mem.PD(pd), SendCQ: scq.cq, RecvCQ: rcq.cq,
		SQDepth: a.SQDepth, RQDepth: a.RQDepth, MaxSGE: a.MaxSGE, SigAll: a.SigAll, MaxORD: a.MaxORD, MaxIRD: a.MaxIRD,
		RequestTimeout: a.RequestTimeout, WakeAfter: a.WakeAfter, RecvSink: a.RecvSink, SRQ: srq})
	if err != nil {
		return nil, mapErr(err)
	}
	return &kernelQP{qp: qp}, nil
}

func (q *kernelQP) num() uint32 { return q.qp.Num() }

// SRQ

type kernelSRQ struct{ srq *engine.SRQ }

func (k *kernelDev) createSRQ(pd uint32, a *SRQAttr) (srqImpl, error) {
	s, err := k.d.CreateSRQ(engine.SRQAttr{PD: mem.PD(pd), Depth: a.Depth, MaxSGE: a.MaxSGE, Limit: a.Limit})
	if err != nil {
		return nil, mapErr(err)
	}
	return &kernelSRQ{srq: s}, nil
}

func (s *kernelSRQ) postRecv(wr *RecvWR) error    { return s.srq.PostRecv(wr) }
func (s *kernelSRQ) setLimit(limit int) error     { return s.srq.SetLimit(limit) }
func (s *kernelSRQ) limitEvents() <-chan struct{} { return s.srq.LimitEvents() }
func (s *kernelSRQ) query() SRQInfo               { return s.srq.Query() }
func (s *kernelSRQ) close() error                 { return s.srq.Close() }

// The work requests are the engine's own type: posted as they are.
func (q *kernelQP) postSend(wr *SendWR) error { return mapErr(q.qp.PostSend(wr)) }
func (q *kernelQP) postRecv(wr *RecvWR) error { return mapErr(q.qp.PostRecv(wr)) }

func connParams(p *ConnParam) engine.ConnParams {
	return engine.ConnParams{PrivateData: p.PrivateData, IRD: p.IRD, ORD: p.ORD, Rev: p.MPARev, NoRevFallback: p.NoMPARevFallback,
		PeerToPeer: p.PeerToPeer, NoCRC: p.NoCRC, Markers: p.Markers, RTR: p.RTR,
		RequiredORD: uint16(min(max(p.RequiredORD, 0), 0x3FFE)), Timeout: p.Timeout}
}

func connErr(op string, err error) error {
	if err == nil {
		return nil
	}
	var rej *engine.RejectedError
	if errors.As(err, &rej) {
		out := &RejectedError{PrivateData: rej.PrivateData}
		if rej.HasEnhanced {
			out.HasPeerIRDORD, out.PeerIRD, out.PeerORD = true, int(rej.PeerEnhanced.IRD), int(rej.PeerEnhanced.ORD)
		}
		return out
	}
	switch err {
	case ErrClosed, ErrState, ErrWrongDevice, ErrNotConnected, ErrAlreadyInUse, ErrNoAtomics,
		context.Canceled, context.DeadlineExceeded:
		return err // a sentinel the caller compares with
	}
	if m := mapErr(err); m != err {
		return m
	}
	return fmt.Errorf("verbs: %s: %w", op, err)
}

func (q *kernelQP) connect(ctx context.Context, addr string, p *ConnParam) error {
	return connErr("dial", q.qp.Connect(ctx, addr, connParams(p)))
}

func (q *kernelQP) probe(ctx context.Context, stag uint32, to uint64) (ProbeResult, error) {
	r, err := q.qp.ProbeAtomics(ctx, stag, to)
	return r, mapErr(err)
}

func (q *kernelQP) connInfo() ConnInfo {
	c := q.qp.ConnInfo()
	out := ConnInfo{Initiator: c.Initiator, MPARev: c.Rev, MPARevFallback: c.RevFallback, CRC: c.CRC, MarkersTx: c.MarkersTx, MarkersRx: c.MarkersRx,
		IRD: c.IRD, ORD: c.ORD, PeerToPeer: c.PeerToPeer, MULPDU: c.MULPDU, PeerPrivateData: c.PeerPrivateData}
	if c.HasEnhanced {
		out.HasPeerIRDORD, out.PeerIRD, out.PeerORD = true, int(c.PeerEnhanced.IRD), int(c.PeerEnhanced.ORD)
	}
	out.LocalAddr, out.RemoteAddr = q.qp.Addrs()
	return out
}

func (q *kernelQP) queues() QueueInfo { return q.qp.Queues() }

func (q *kernelQP) state() QPState { return q.qp.State() }

func (q *kernelQP) peerTerminate() *term.Error { return q.qp.PeerTerminate() }
func (q *kernelQP) stats() Stats               { return q.qp.Stats() }

func (q *kernelQP) err() error {
	if e := q.qp.Err(); e != nil {
		return e
	}
	return nil
}

func (q *kernelQP) disconnected() error { return q.qp.Disconnected() }
func (q *kernelQP) wakes() uint64       { return q.qp.Wakes() }

func (q *kernelQP) disconnect(ctx context.Context) error { return mapErr(q.qp.Disconnect(ctx)) }
func (q *kernelQP) close() error                         { return mapErr(q.qp.Close()) }
func (q *kernelQP) done() <-chan struct{}                { return q.qp.Done() }
func (q *kernelQP) toError()                             { q.qp.ToError() }

// connection management

type kernelListener struct{ l *engine.Listener }

func (l *kernelListener) accept(ctx context.Context) (connReqImpl, ConnRequestInfo, error) {
	r, err := l.l.Accept(ctx)
	if err != nil {
		return nil, ConnRequestInfo{}, connErr("accept", err)
	}
	info := ConnRequestInfo{RemoteAddr: r.RemoteAddr(), MPARev: r.Rev, PrivateData: r.PrivateData, PeerCRC: r.PeerCRC, PeerMarkers: r.PeerMarkers}
	if r.HasEnhanced {
		info.HasPeerIRDORD, info.PeerIRD, info.PeerORD = true, int(r.Enhanced.IRD), int(r.Enhanced.ORD)
		info.PeerToPeer = r.Enhanced.PeerToPeer
	}
	return kernelReq{r}, info, nil
}

func (l *kernelListener) addr() net.Addr { return l.l.Addr() }
func (l *kernelListener) stats() ListenerStats {
	s := l.l.Stats()
	return ListenerStats{Refused: s.Refused, Overflow: s.Overflow, Evicted: s.Evicted, Malformed: s.Malformed, InSetup: s.InSetup}
}
func (l *kernelListener) close() error { return l.l.Close() }

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

// mapErr maps the engine's own errors to verbs sentinels; the shared ones
// (package rnic) are the same values already.
func mapErr(err error) error {
	switch err {
	case mem.ErrPDBusy:
		return ErrPDBusy
	case mem.ErrAccessLocalWrite:
		return ErrAccessLocalWr
	}
	return err
}
