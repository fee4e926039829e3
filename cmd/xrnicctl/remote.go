package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"xrnic/internal/engine"
	"xrnic/mem"
	"xrnic/wire/mpa"
	"xrnic/wire/term"
)

// connOpts are the connection options of one-shot remote operations.
type connOpts struct {
	Transport  string
	Iface      string
	Timeout    time.Duration
	MPARev     int
	NoCRC      bool
	PeerToPeer bool
}

// session is an in-process device with one QP connected to the peer.
type session struct {
	dev      *engine.Device
	scq, rcq *engine.CQ
	qp       *engine.QP
	buf      []byte
	mr       *mem.MR
}

// opError is a failed remote operation: the completion status and the
// Terminate behind it, in words.
type opError struct {
	Status engine.Status
	Term   *term.Error
	Err    error
}

func (e *opError) Error() string {
	s := e.Status.String()
	if e.Term != nil {
		s += " (Terminate " + e.Term.String() + ")"
	} else if e.Err != nil {
		s += " (" + e.Err.Error() + ")"
	}
	return s
}

// dial opens a device with a local buffer of bufLen bytes and connects a QP
// to peer (HOST:PORT) as MPA initiator.
func dial(ctx context.Context, peer string, bufLen int, o connOpts) (*session, error) {
	cfg := engine.Config{MaxQPs: 1, ConnTimeout: o.Timeout}
	switch o.Transport {
	case "", "kernel":
	case "afxdp":
		// The whole afxdp transport for one operation: the XDP program is
		// attached to --iface for the command's lifetime and detached at
		// the end (one XDP program per interface: not beside an xrnicd on
		// afxdp on the same interface).
		if o.Iface == "" {
			return nil, errors.New("--transport afxdp needs --iface")
		}
		if err := engine.XDPPrivileges(); err != nil {
			return nil, err
		}
		cfg.Transport = engine.TransportAFXDP
		cfg.XDP = engine.XDPConfig{Iface: o.Iface, Logger: slog.New(slog.DiscardHandler)}
	default:
		return nil, fmt.Errorf("--transport %q: want kernel or afxdp", o.Transport)
	}
	dev, err := engine.Open(cfg)
	if err != nil {
		return nil, err
	}
	s := &session{dev: dev}
	fail := func(err error) (*session, error) {
		dev.Close()
		return nil, err
	}
	pd := dev.AllocPD()
	if s.scq, err = dev.CreateCQ(8); err != nil {
		return fail(err)
	}
	if s.rcq, err = dev.CreateCQ(4); err != nil {
		return fail(err)
	}
	if s.qp, err = dev.CreateQP(engine.QPAttr{PD: pd, SendCQ: s.scq, RecvCQ: s.rcq, SQDepth: 8, RQDepth: 4, MaxSGE: 1}); err != nil {
		return fail(err)
	}
	s.buf = make([]byte, max(bufLen, 8))
	if s.mr, err = dev.RegMR(s.buf, mem.MROptions{PD: pd, Access: mem.LocalWrite, TO: mem.TOZeroBased}); err != nil {
		return fail(err)
	}
	p := engine.ConnParams{Rev: uint8(o.MPARev), NoCRC: o.NoCRC, PeerToPeer: o.PeerToPeer}
	if o.PeerToPeer {
		p.RTR = mpa.RTRAll
	}
	if err := s.qp.Connect(ctx, peer, p); err != nil {
		return fail(fmt.Errorf("connect to %s: %w", peer, err))
	}
	return s, nil
}

func (s *session) sge(off, n int) []engine.SGE {
	return []engine.SGE{{Addr: uint64(off), Length: uint32(n), LKey: s.mr.STag()}}
}

// do posts one signalled work request and waits for its completion.
func (s *session) do(ctx context.Context, wr engine.SendWR) (engine.Completion, error) {
	wr.Flags |= engine.FlagSignaled
	if err := s.qp.PostSend(&wr); err != nil {
		return engine.Completion{}, err
	}
	wc := make([]engine.Completion, 1)
	for {
		if s.scq.Poll(wc) == 1 {
			c := wc[0]
			if c.Status != engine.StatusSuccess {
				te, _ := c.Err.(*term.Error)
				if te == nil {
					te = s.qp.PeerTerminate()
				}
				if te == nil {
					te = s.qp.Err()
				}
				return c, &opError{Status: c.Status, Term: te, Err: c.Err}
			}
			return c, nil
		}
		if err := s.scq.Wait(ctx); err != nil {
			return engine.Completion{}, fmt.Errorf("waiting for the completion: %w", err)
		}
	}
}

// close disconnects (a FIN after draining) and destroys the device.
func (s *session) close() {
	s.qp.Close()
	s.dev.Close()
}
