// Package enginetest has a raw iWARP peer for tests of the
// engine: it performs the MPA exchange by hand over a kernel TCP
// connection and then sends arbitrary (also malformed) DDP segments and
// reads back what the engine answers, typically a Terminate to decode with
// term.Decode. It imports only the wire packages, so the engine's own tests
// can use it.
package enginetest

import (
	"context"
	"errors"
	"io"
	"net"
	"time"

	"xrnic/wire/ddp"
	"xrnic/wire/mpa"
	"xrnic/wire/rdmap"
	"xrnic/wire/term"
)

// Options are the raw peer's MPA Request.
type Options struct {
	Rev         uint8 // 2 (default) or 1
	NoCRC       bool
	Markers     bool
	PrivateData []byte
	IRD, ORD    uint16 // Rev 2 enhanced word (default 16/16)
	PeerToPeer  bool
	RTR         mpa.RTR
	// RcvBuf, when positive, sets the socket's receive buffer (SO_RCVBUF)
	// right after the TCP connect, which also stops the kernel from
	// growing it: the engine's sends then block as soon as the peer stops
	// reading (tests that need a response to stay in progress).
	RcvBuf int
}

// Peer is a connected raw MPA initiator.
type Peer struct {
	Conn     net.Conn
	Reply    mpa.Frame
	CRC      bool
	Framer   *mpa.Framer
	Deframer *mpa.Deframer
	rbuf     []byte
	pending  []byte
	wbuf     []byte
}

// Dial connects to addr and performs the MPA exchange as initiator.
func Dial(ctx context.Context, addr string, o Options) (*Peer, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	c.(*net.TCPConn).SetNoDelay(true)
	if o.RcvBuf > 0 {
		c.(*net.TCPConn).SetReadBuffer(o.RcvBuf)
	}
	p, err := Handshake(c, o)
	if err != nil {
		c.Close()
		return nil, err
	}
	return p, nil
}

// Handshake performs the MPA exchange as initiator on an open connection.
func Handshake(c net.Conn, o Options) (*Peer, error) {
	if o.Rev == 0 {
		o.Rev = mpa.Rev2
	}
	if o.IRD == 0 {
		o.IRD = 16
	}
	if o.ORD == 0 {
		o.ORD = 16
	}
	fp := mpa.FrameParams{M: o.Markers, C: !o.NoCRC, Rev: o.Rev}
	if o.Rev == mpa.Rev2 {
		fp.HasEnhanced = true
		fp.Enhanced = mpa.Enhanced{PeerToPeer: o.PeerToPeer, RTR: o.RTR, IRD: o.IRD, ORD: o.ORD}
	}
	buf := make([]byte, mpa.MaxFrameLen)
	n, err := mpa.PutFrame(buf, mpa.Request, fp, o.PrivateData)
	if err != nil {
		return nil, err
	}
	c.SetDeadline(time.Now().Add(5 * time.Second))
	defer c.SetDeadline(time.Time{})
	if _, err := c.Write(buf[:n]); err != nil {
		return nil, err
	}
	reply, err := readFrame(c, mpa.Reply)
	if err != nil {
		return nil, err
	}
	p := &Peer{Conn: c, Reply: reply, CRC: fp.C || reply.C(), rbuf: make([]byte, 1<<16), wbuf: make([]byte, 1<<17)}
	p.Framer = mpa.NewFramer(mpa.FramerConfig{Markers: reply.M(), CRC: p.CRC})
	p.Deframer = mpa.NewDeframer(mpa.DeframerConfig{Markers: o.Markers, CRC: p.CRC})
	if reply.R() {
		return p, errors.New("enginetest: rejected")
	}
	return p, nil
}

// Respond performs the MPA exchange as responder on an accepted
// connection: it reads the initiator's Request and accepts it in the same
// revision (RFC 6581 IRD/ORD 16 each, every RTR type), so the engine under
// test can be the requester. Markers are not supported.
func Respond(c net.Conn, o Options) (*Peer, error) {
	c.SetDeadline(time.Now().Add(5 * time.Second))
	defer c.SetDeadline(time.Time{})
	req, err := readFrame(c, mpa.Request)
	if err != nil {
		return nil, err
	}
	fp := mpa.FrameParams{C: !o.NoCRC, Rev: req.Rev()}
	if e, ok := req.Enhanced(); ok {
		reply, _, err := mpa.Respond(e, mpa.ResponderParams{MaxIRD: 16, ORD: 16, RTR: mpa.RTRAll})
		if err != nil {
			return nil, err
		}
		fp.HasEnhanced, fp.Enhanced = true, reply
	}
	buf := make([]byte, mpa.MaxFrameLen)
	n, err := mpa.PutFrame(buf, mpa.Reply, fp, o.PrivateData)
	if err != nil {
		return nil, err
	}
	if _, err := c.Write(buf[:n]); err != nil {
		return nil, err
	}
	p := &Peer{Conn: c, Reply: mpa.Frame(buf[:n]), CRC: fp.C || req.C(), rbuf: make([]byte, 1<<16), wbuf: make([]byte, 1<<17)}
	p.Framer = mpa.NewFramer(mpa.FramerConfig{CRC: p.CRC})
	p.Deframer = mpa.NewDeframer(mpa.DeframerConfig{CRC: p.CRC})
	return p, nil
}

// readFrame reads one MPA Request or Reply exactly: the header, then
// PD_Length bytes.
func readFrame(c net.Conn, kind mpa.Kind) (mpa.Frame, error) {
	hdr := make([]byte, mpa.FrameHeaderLen)
	if _, err := io.ReadFull(c, hdr); err != nil {
		return nil, err
	}
	rem, err := mpa.FrameRemaining(hdr, kind)
	if err != nil {
		return nil, err
	}
	f := make([]byte, mpa.FrameHeaderLen+rem)
	copy(f, hdr)
	if _, err := io.ReadFull(c, f[mpa.FrameHeaderLen:]); err != nil {
		return nil, err
	}
	return mpa.ParseFrame(f, kind)
}

// FPDU frames ulpdu as the next FPDU and returns the wire bytes (to send
// with WriteRaw, possibly corrupted).
func (p *Peer) FPDU(ulpdu []byte) []byte {
	n, err := p.Framer.Frame(p.wbuf, ulpdu)
	if err != nil {
		panic(err)
	}
	return append([]byte(nil), p.wbuf[:n]...)
}

// Send frames ulpdu (one DDP segment) and writes it.
func (p *Peer) Send(ulpdu []byte) error { return p.WriteRaw(p.FPDU(ulpdu)) }

// WriteRaw writes bytes as they are.
func (p *Peer) WriteRaw(b []byte) error {
	_, err := p.Conn.Write(b)
	return err
}

// Next returns the next ULPDU received (a copy), or an error (io.EOF when
// the engine closed the stream).
func (p *Peer) Next(timeout time.Duration) ([]byte, error) {
	p.Conn.SetReadDeadline(time.Now().Add(timeout))
	defer p.Conn.SetReadDeadline(time.Time{})
	for {
		for len(p.pending) > 0 {
			u, k, err := p.Deframer.Next(p.pending)
			if err != nil {
				return nil, err
			}
			p.pending = p.pending[k:]
			if u != nil {
				return append([]byte(nil), u...), nil
			}
		}
		n, err := p.Conn.Read(p.rbuf)
		if n > 0 {
			p.pending = p.rbuf[:n]
			continue
		}
		if err != nil {
			return nil, err
		}
	}
}

// ExpectTerminate reads until a Terminate arrives and returns its decoded
// header and the whole ULPDU (skipping any other segments).
func (p *Peer) ExpectTerminate(timeout time.Duration) (term.Terminate, []byte, error) {
	for {
		u, err := p.Next(timeout)
		if err != nil {
			return term.Terminate{}, nil, err
		}
		seg, err := ddp.Parse(u)
		if err != nil || seg.IsTagged() || rdmap.Control(seg.RsvdULP()).OpCode() != rdmap.OpTerminate {
			continue
		}
		t, err := term.Decode(seg.Payload())
		return t, u, err
	}
}

// ExpectEOF reads until the engine closes the stream.
func (p *Peer) ExpectEOF(timeout time.Duration) error {
	for {
		if _, err := p.Next(timeout); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
	}
}

// Close closes the connection.
func (p *Peer) Close() error { return p.Conn.Close() }

// RawFrame builds an MPA Request or Reply frame byte by byte, without the
// validation of mpa.PutFrame, so tests can send malformed ones: key (16
// bytes, padded or cut), the flags octet (M 0x80, C 0x40, R 0x20, S 0x10),
// Rev, the PD_Length field as given, then the private data bytes (which
// need not agree with pdLength).
func RawFrame(key string, flags, rev byte, pdLength uint16, pd []byte) []byte {
	b := make([]byte, 20, 20+len(pd))
	copy(b[:16], key)
	b[16], b[17] = flags, rev
	b[18], b[19] = byte(pdLength>>8), byte(pdLength)
	return append(b, pd...)
}

// ErrReplied: the responder answered a frame it should have dropped.
var ErrReplied = errors.New("enginetest: the responder sent bytes before closing")

// ExpectDropped connects to addr, writes frame and waits until the
// responder closes the connection. It returns nil when the connection was
// closed (FIN or reset) without a single byte coming back, ErrReplied
// (and the bytes) when something came back, or the read error (a timeout
// means the responder neither answered nor closed).
func ExpectDropped(ctx context.Context, addr string, frame []byte, timeout time.Duration) ([]byte, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(timeout))
	if _, err := c.Write(frame); err != nil {
		return nil, err
	}
	var got []byte
	buf := make([]byte, 1024)
	for {
		n, err := c.Read(buf)
		got = append(got, buf[:n]...)
		if err != nil {
			var ne net.Error
			switch {
			case errors.As(err, &ne) && ne.Timeout():
				return got, err
			case len(got) > 0:
				return got, ErrReplied
			}
			return nil, nil // io.EOF or a reset: dropped
		}
	}
}
