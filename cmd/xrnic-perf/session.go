package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"runtime"
	"strconv"
	"time"

	"xrnic/transport"
	"xrnic/verbs"
)

// session is one side of a run: a device, the control QP and the data QPs
// with their buffers.
type session struct {
	p      *params
	client bool
	dev    *verbs.Device
	pd     *verbs.PD
	drv    transport.Driver // --drive: afxdp's transport, the kernel transport's data CQ; else nil

	// Control QP.
	cqp          *verbs.QP
	cscq, crcq   *verbs.CQ
	cmr          *verbs.MR
	cbuf         []byte
	ctlSendIdx   int
	ctlWC        []verbs.Completion
	ctlOutstands int

	// Data QPs share one send and one receive CQ.
	qps      []*verbs.QP
	scq, rcq *verbs.CQ
	slot     int
	dmr      *verbs.MR // per QP: [recv slot | src slot | check slot]
	dbuf     []byte
	rmr      *verbs.MR // send tests: rxD receive buffers of slot bytes per QP; credit buffers
	rbuf     []byte
	rxD      int       // receive buffers per QP (server), credits (client)
	amr      *verbs.MR // atomic results: txDepth words per QP
	abuf     []byte
	remote   []bufInfo
	wc       []verbs.Completion
	rwc      []verbs.Completion

	// Posted receives: recvN buffers of recvLen bytes per QP in rbuf.
	recvN, recvLen int
	// Credits (client of send_bw and write_bw --write_with_imm): the
	// peer's cumulative grants and our sends, per QP. Server: receives
	// reposted and the count at the last grant.
	granted, sent       []uint64
	reposted, lastGrant []uint64
	pongOut             int // server: ping-pong replies not yet polled (they hold SQ and CQ entries across sizes)
}

const (
	ctlDepth   = 4
	creditBufs = 8 // client: receives for credit Immediate Data per QP
)

func openDevice(p *params) (*verbs.Device, error) {
	cfg := verbs.DeviceConfig{Transport: p.transport, ConnTimeout: p.timeout, MaxQPs: p.qps + 2, MaxORD: p.outs, MaxIRD: p.outs, RxSpin: p.rxSpin}
	setIface(&cfg, p.iface)
	cfg.XDP.Logger = slog.New(slog.DiscardHandler)
	dev, err := verbs.Open(cfg)
	if err != nil {
		if errors.Is(err, verbs.ErrNotSupported) && p.transport == "afxdp" {
			return nil, fmt.Errorf("open the afxdp transport on %s: %w (needs root, AF_XDP and an interface that exists in this namespace)", p.iface, err)
		}
		return nil, fmt.Errorf("open %s device: %w", p.transport, err)
	}
	return dev, nil
}

func newSession(p *params, client bool) (*session, error) {
	s := &session{p: p, client: client}
	var err error
	if s.dev, err = openDevice(p); err != nil {
		return nil, err
	}
	if d, ok := s.dev.Transport().(transport.Driver); ok && p.drive {
		s.drv = d
	}
	if s.pd, err = s.dev.AllocPD(); err != nil {
		s.close()
		return nil, err
	}
	if err := s.newCtlQP(); err != nil {
		s.close()
		return nil, err
	}
	s.ctlWC = make([]verbs.Completion, 1)
	return s, nil
}

// newCtlQP (re)creates the control QP with its CQs and receives.
func (s *session) newCtlQP() error {
	s.ctlOutstands = 0
	if s.cqp != nil {
		s.cqp.Close()
		s.cscq.Close()
		s.crcq.Close()
	}
	var err error
	if s.cscq, err = s.dev.CreateCQ(ctlDepth); err != nil {
		return err
	}
	if s.crcq, err = s.dev.CreateCQ(ctlDepth); err != nil {
		return err
	}
	if s.cqp, err = s.pd.CreateQP(verbs.QPAttr{SendCQ: s.cscq, RecvCQ: s.crcq, SQDepth: ctlDepth, RQDepth: ctlDepth, MaxSGE: 1}); err != nil {
		return err
	}
	if s.cbuf == nil {
		s.cbuf = make([]byte, 2*ctlDepth*ctlMsgLen)
		if s.cmr, err = s.pd.RegMR(s.cbuf, verbs.AccessLocalWrite); err != nil {
			return err
		}
	}
	for i := range ctlDepth {
		if err := s.cqp.PostRecvBuf(uint64(i), s.cmr.SGE(i*ctlMsgLen, ctlMsgLen)); err != nil {
			return err
		}
	}
	return nil
}

// setupData creates the data QPs and buffers once the parameters are
// known (the server learns them from the client's hello).
func (s *session) setupData() error {
	p := s.p
	s.slot = slotSize(p)
	sq := p.txDepth + 2 // +1 for the flush Read, +1 for a credit Imm
	rq := 1
	if p.consumesRecv() {
		switch {
		case !p.test.bw:
			rq, s.rxD = 2, 2
		case s.client:
			rq = creditBufs
		default:
			s.rxD = min(p.rxDepth, max(2, (32<<20)/s.slot))
			rq = s.rxD
		}
	}
	var err error
	if s.scq, err = s.dev.CreateCQ(p.qps * sq); err != nil {
		return err
	}
	if s.rcq, err = s.dev.CreateCQ(p.qps * rq); err != nil {
		return err
	}
	if p.drive && s.drv == nil {
		// Kernel TCP: the data QPs' sockets, which either CQ reads.
		s.drv = s.scq
	}
	for range p.qps {
		qp, err := s.pd.CreateQP(verbs.QPAttr{SendCQ: s.scq, RecvCQ: s.rcq, SQDepth: sq, RQDepth: rq, MaxSGE: 1, MaxORD: p.outs, MaxIRD: p.outs})
		if err != nil {
			return err
		}
		s.qps = append(s.qps, qp)
	}
	acc := verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic
	s.dbuf = make([]byte, p.qps*3*s.slot)
	if s.dmr, err = s.pd.RegMR(s.dbuf, acc); err != nil {
		return err
	}
	for q := range p.qps {
		src := s.src(q)
		for j := range src {
			src[j] = pattern(q, j)
		}
	}
	if rq > 1 {
		n := rq
		bl := s.slot
		if s.client && p.test.bw {
			bl = 64
		}
		s.rbuf = make([]byte, p.qps*n*bl)
		if s.rmr, err = s.pd.RegMR(s.rbuf, verbs.AccessLocalWrite); err != nil {
			return err
		}
	}
	s.abuf = make([]byte, p.qps*max(p.txDepth, 1)*8)
	if s.amr, err = s.pd.RegMR(s.abuf, verbs.AccessLocalWrite); err != nil {
		return err
	}
	s.wc = make([]verbs.Completion, 64)
	s.rwc = make([]verbs.Completion, 64)
	return nil
}

// Offsets in dbuf of QP q's slots: recv (the peer writes and atomics
// land here, reads land here), src (what we send and the peer reads),
// check (read-backs of validation).
func (s *session) recvOff(q int) int  { return q * 3 * s.slot }
func (s *session) srcOff(q int) int   { return q*3*s.slot + s.slot }
func (s *session) checkOff(q int) int { return q*3*s.slot + 2*s.slot }

func (s *session) recvSlot(q int) []byte { return s.dbuf[s.recvOff(q) : s.recvOff(q)+s.slot] }
func (s *session) src(q int) []byte      { return s.dbuf[s.srcOff(q) : s.srcOff(q)+s.slot] }
func (s *session) check(q int) []byte    { return s.dbuf[s.checkOff(q) : s.checkOff(q)+s.slot] }

func (s *session) bufInfo(q int) bufInfo {
	return bufInfo{STag: s.dmr.STag(), RecvTO: s.dmr.TO(s.recvOff(q)), SrcTO: s.dmr.TO(s.srcOff(q)),
		Slot: uint32(s.slot), RxD: uint16(s.rxD), Index: uint16(q)}
}

func (s *session) close() {
	if s.dev != nil {
		s.dev.Close()
	}
	for _, mr := range []*verbs.MR{s.cmr, s.dmr, s.rmr, s.amr} {
		if mr != nil {
			mr.Dereg()
		}
	}
}

// sendCtl posts a control message. It does not wait for the Send's
// completion (a completion may trail the peer's reaction to the message,
// and the peer may close first): completions are reaped before the next
// post, and a flush at the very end is harmless.
func (s *session) sendCtl(ctx context.Context, m ctlMsg) error {
	for {
		n := s.cscq.Poll(s.ctlWC)
		if n == 1 {
			s.ctlOutstands--
			if c := s.ctlWC[0]; c.Status != verbs.StatusSuccess {
				return fmt.Errorf("control QP: %s (the peer went away?)", c.Status)
			}
			continue
		}
		if s.ctlOutstands < ctlDepth {
			break
		}
		if err := s.cscq.Wait(ctx); err != nil {
			return fmt.Errorf("control QP: %w", err)
		}
	}
	i := ctlDepth + s.ctlSendIdx%ctlDepth
	s.ctlSendIdx++
	m.put(s.cbuf[i*ctlMsgLen:])
	if err := s.cqp.PostSendBuf(uint64(i), s.cmr.SGE(i*ctlMsgLen, ctlMsgLen), verbs.FlagSignaled); err != nil {
		return fmt.Errorf("control QP: message %d: %w", m.Kind, err)
	}
	s.ctlOutstands++
	return nil
}

// recvCtl waits for the next control message.
func (s *session) recvCtl(ctx context.Context) (ctlMsg, error) {
	for {
		if s.crcq.Poll(s.ctlWC) == 1 {
			c := s.ctlWC[0]
			if c.Status != verbs.StatusSuccess {
				return ctlMsg{}, fmt.Errorf("control QP: %s (the peer went away?)", c.Status)
			}
			i := int(c.ID)
			m := parseCtl(s.cbuf[i*ctlMsgLen:])
			if err := s.cqp.PostRecvBuf(c.ID, s.cmr.SGE(i*ctlMsgLen, ctlMsgLen)); err != nil {
				return ctlMsg{}, err
			}
			return m, nil
		}
		if err := s.crcq.Wait(ctx); err != nil {
			return ctlMsg{}, fmt.Errorf("waiting for the peer: %w", err)
		}
	}
}

func (s *session) expectCtl(ctx context.Context, kind uint8) (ctlMsg, error) {
	m, err := s.recvCtl(ctx)
	if err == nil && m.Kind != kind {
		err = fmt.Errorf("control QP: got message %d, want %d (client and server out of step)", m.Kind, kind)
	}
	return m, err
}

// bye ends a run in order: the client sends bye, both disconnect the
// control QP (waiting for the peer), so neither side's last Send is
// flushed by the other's close.
func (s *session) bye(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if s.client {
		s.sendCtl(ctx, ctlMsg{Kind: msgBye})
	}
	s.cqp.Disconnect(ctx)
}

// poller polls a CQ: it spins (yielding) briefly, then sleeps on the CQ
// (with -e at once).
type poller struct {
	spin time.Duration
	drv  transport.Driver
}

func (s *session) newPoller() poller {
	if s.p.events {
		return poller{}
	}
	return poller{spin: s.p.spin, drv: s.drv}
}

// wait returns when cq has completions or ctx ends; idleSince is when the
// caller last made progress.
func (pl poller) wait(ctx context.Context, cq *verbs.CQ, idleSince time.Time) error {
	return pl.waitFor(ctx, cq, idleSince, 0)
}

// waitFor is wait that sleeps on cq at most bound (> 0), for loops that
// look at more than the CQ. The bounded context is made only to sleep:
// a spinning or driving loop calls this once per empty poll.
func (pl poller) waitFor(ctx context.Context, cq *verbs.CQ, idleSince time.Time, bound time.Duration) error {
	if cq.Len() > 0 {
		return nil
	}
	if pl.drv != nil {
		if pl.drv.Drive() == transport.DriveNone {
			runtime.Gosched() // the transport's loop still polls
		}
		return ctx.Err()
	}
	if pl.spin > 0 && time.Since(idleSince) < pl.spin {
		runtime.Gosched()
		return ctx.Err()
	}
	if bound > 0 {
		wctx, cancel := context.WithTimeout(ctx, bound)
		defer cancel()
		return cq.Wait(wctx)
	}
	return cq.Wait(ctx)
}

func hostPort(server string, port int) string {
	if _, _, err := net.SplitHostPort(server); err == nil {
		return server
	}
	return net.JoinHostPort(server, strconv.Itoa(port))
}
