// Package kernel is the engine's transport over kernel TCP sockets: no
// privileges, any network namespace, IPv4 and IPv6. It is the default
// transport and the baseline the afxdp transport is measured against.
package kernel

import (
	"context"
	"net"
	"time"

	"golang.org/x/sys/unix"

	"xrnic/transport"
)

// Transport dials and listens with kernel TCP sockets.
type Transport struct{}

var _ transport.Transport = Transport{}

// New returns the kernel TCP transport.
func New() Transport { return Transport{} }

// Name implements transport.Transport.
func (Transport) Name() string { return "kernel" }

// Dial connects to addr (host:port) over TCP.
func (Transport) Dial(ctx context.Context, addr string) (transport.Conn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	return NewConn(c.(*net.TCPConn)), nil
}

// Listen opens a TCP listener (network "tcp", "tcp4" or "tcp6").
func (Transport) Listen(network, addr string) (transport.Listener, error) {
	ln, err := net.Listen(network, addr)
	if err != nil {
		return nil, err
	}
	return &Listener{ln: ln.(*net.TCPListener)}, nil
}

// Close implements transport.Transport (a kernel transport holds nothing).
func (Transport) Close() error { return nil }

// Listener is a kernel TCP listener.
type Listener struct{ ln *net.TCPListener }

var _ transport.Listener = (*Listener)(nil)

// Accept waits for a connection or for ctx.
func (l *Listener) Accept(ctx context.Context) (transport.Conn, error) {
	stop := context.AfterFunc(ctx, func() { l.ln.SetDeadline(time.Unix(1, 0)) })
	c, err := l.ln.AcceptTCP()
	if !stop() && ctx.Err() != nil {
		if c != nil {
			c.Close()
		}
		l.ln.SetDeadline(time.Time{})
		return nil, ctx.Err()
	}
	if err != nil {
		return nil, err
	}
	return NewConn(c), nil
}

// Addr returns the listening address.
func (l *Listener) Addr() net.Addr { return l.ln.Addr() }

// Close stops listening.
func (l *Listener) Close() error { return l.ln.Close() }

// tcpConn is a kernel TCP connection.
type tcpConn struct {
	*net.TCPConn
	emss int
	tw   tryWrite
	tr   tryRead
}

// NewConn adapts an established kernel TCP connection: it disables Nagle
// (FPDUs are sized to the segment; RFC 5044 §5.1) and reads the EMSS from
// TCP_MAXSEG.
func NewConn(c *net.TCPConn) transport.Conn {
	c.SetNoDelay(true)
	emss := tcpMaxSeg(c)
	if emss <= 0 {
		emss = 1460
	}
	t := &tcpConn{TCPConn: c, emss: emss}
	t.tw.init(c)
	t.tr.init()
	return t
}

func (t *tcpConn) EMSS() int { return t.emss }

// AdvertisedMSS is the MSS the kernel advertised to the peer
// (TCP_INFO tcpi_advmss), or 0 if it cannot be read.
func (t *tcpConn) AdvertisedMSS() int { return tcpAdvMSS(t.TCPConn) }

var _ transport.MSSAdvertiser = (*tcpConn)(nil)

// Abort closes the connection with a reset (SO_LINGER 0).
func (t *tcpConn) Abort() error {
	t.SetLinger(0)
	return t.Close()
}

var _ transport.Aborter = (*tcpConn)(nil)

// Pending reports whether the socket's receive queue holds bytes
// (SIOCINQ); false when it cannot be read.
func (t *tcpConn) Pending() bool {
	if t.tw.rc == nil {
		return false
	}
	n := 0
	t.tw.rc.Control(func(fd uintptr) { n, _ = unix.IoctlGetInt(int(fd), unix.SIOCINQ) })
	return n > 0
}

var _ transport.Pender = (*tcpConn)(nil)

// netConn adapts any net.Conn (CloseWrite when the conn has it).
type netConn struct {
	net.Conn
	emss int
}

// WrapConn adapts a net.Conn with a given EMSS (for tests and tunnels).
// A *net.TCPConn with emss <= 0 is NewConn. CloseWrite is passed through
// when the conn has it and is a no-op otherwise.
func WrapConn(c net.Conn, emss int) transport.Conn {
	if tc, ok := c.(*net.TCPConn); ok && emss <= 0 {
		return NewConn(tc)
	}
	if emss <= 0 {
		emss = 1460
	}
	return &netConn{Conn: c, emss: emss}
}

func (c *netConn) EMSS() int { return c.emss }

func (c *netConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}
