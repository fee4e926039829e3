package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"time"

	"xrnic/verbs"
	"xrnic/wire/term"
)

// connOpts are the connection options of one-shot remote operations.
type connOpts struct {
	Transport  string
	Iface      string
	Timeout    time.Duration
	MPATimeout time.Duration // bound of the wait for the MPA Reply
	MPARev     int
	NoCRC      bool
	PeerToPeer bool
}

// session is an in-process device with one QP connected to the peer.
type session struct {
	dev      *verbs.Device
	scq, rcq *verbs.CQ
	qp       *verbs.QP
	buf      []byte
	mr       *verbs.MR
}

// opError is a failed remote operation: the completion status and the
// Terminate behind it, in words.
type opError struct {
	Status verbs.Status
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

// DefaultPort is the port a PEER without one gets: xrnicd's default
// --listen port.
const DefaultPort = "7306"

// peerAddr returns HOST:PORT for a PEER given as HOST, HOST:PORT, [V6] or
// [V6]:PORT (a bare IPv6 address is a host, too).
func peerAddr(peer string) string {
	if _, _, err := net.SplitHostPort(peer); err == nil {
		return peer
	}
	h := peer
	if strings.HasPrefix(h, "[") && strings.HasSuffix(h, "]") {
		h = h[1 : len(h)-1]
	}
	if strings.Contains(h, ":") {
		if _, err := netip.ParseAddr(h); err != nil {
			return peer // not an address: let the dial say so
		}
	}
	return net.JoinHostPort(h, DefaultPort)
}

// dial opens a device with a local buffer of bufLen bytes and connects a QP
// to peer (HOST:PORT) as MPA initiator.
func dial(ctx context.Context, peer string, bufLen int, o connOpts) (*session, error) {
	cfg := verbs.DeviceConfig{MaxQPs: 1, ConnTimeout: o.Timeout}
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
		cfg.Transport = "afxdp"
		cfg.XDP = verbs.XDPConfig{Iface: o.Iface, Logger: slog.New(slog.DiscardHandler)}
	default:
		return nil, fmt.Errorf("--transport %q: want kernel or afxdp", o.Transport)
	}
	dev, err := verbs.Open(cfg)
	if err != nil {
		return nil, err
	}
	s := &session{dev: dev}
	fail := func(err error) (*session, error) {
		dev.Close()
		return nil, err
	}
	pd, err := dev.AllocPD()
	if err != nil {
		return fail(err)
	}
	if s.scq, err = dev.CreateCQ(8); err != nil {
		return fail(err)
	}
	if s.rcq, err = dev.CreateCQ(4); err != nil {
		return fail(err)
	}
	if s.qp, err = pd.CreateQP(verbs.QPAttr{SendCQ: s.scq, RecvCQ: s.rcq, SQDepth: 8, RQDepth: 4, MaxSGE: 1}); err != nil {
		return fail(err)
	}
	s.buf = make([]byte, max(bufLen, 8))
	if s.mr, err = pd.RegMR(s.buf, verbs.AccessLocalWrite|verbs.AccessZeroBased); err != nil {
		return fail(err)
	}
	// An MPA responder answers the Request at once; a port that is not
	// iWARP mostly never does, so the Reply is awaited briefly, not for
	// the whole --timeout.
	p := verbs.ConnParam{MPARev: uint8(o.MPARev), NoCRC: o.NoCRC, PeerToPeer: o.PeerToPeer, Timeout: min(o.MPATimeout, o.Timeout)}
	if err := s.qp.Dial(ctx, peer, p); err != nil {
		if errors.Is(err, verbs.ErrNoMPAReply) {
			return fail(fmt.Errorf("connect to %s: no MPA reply: not an iWARP endpoint? (the port accepted TCP but did not answer the MPA Request within %v; an xrnicd listens on --listen, 7306 by default): %w",
				peer, p.Timeout, err))
		}
		return fail(fmt.Errorf("connect to %s: %w", peer, err))
	}
	return s, nil
}

func (s *session) sge(off, n int) []verbs.SGE {
	return []verbs.SGE{s.mr.SGE(off, n)}
}

// do runs one work request (verbs.QP.Exec) and, on an error status, names
// the Terminate behind it.
func (s *session) do(ctx context.Context, wr verbs.SendWR) (verbs.Completion, error) {
	c, err := s.qp.Exec(ctx, &wr)
	var wce *verbs.WCError
	if !errors.As(err, &wce) {
		return c, err
	}
	te, _ := wce.Err.(*term.Error)
	if te == nil {
		te = s.qp.PeerTerminate()
	}
	if te == nil {
		te, _ = s.qp.Err().(*term.Error)
	}
	return c, &opError{Status: wce.Status, Term: te, Err: wce.Err}
}

// confirm waits until the peer has processed everything sent before: a
// Write, Send or Immediate Data completes locally once TCP has its bytes,
// so only a later round trip shows whether the peer accepted it. A
// zero-length Read (never checked, RFC 5040 §5.2) is answered after the
// earlier messages; if one of them was refused, the peer's Terminate fails
// the Read and names the error.
func (s *session) confirm(ctx context.Context) error {
	_, err := s.do(ctx, verbs.SendWR{Op: verbs.OpRead})
	return err
}

// close disconnects (a FIN after draining) and destroys the device.
func (s *session) close() {
	s.qp.Close()
	s.dev.Close()
}
