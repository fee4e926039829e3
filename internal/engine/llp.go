package datapath

import (
	"net"
	"time"
)

// LLP is the lower layer the engine runs over: an established, reliable,
// in-order byte stream (RFC 5044 over TCP). The kernel-TCP adapter is
// NewTCPLLP; the user-space TCP plugs in here too.
//
// Read is used for the MPA exchange and, unless the LLP is a PushLLP, by
// the QP's receive loop. Write is called by one goroutine at a time with
// whole FPDUs and must write all of p (or fail). EMSS is the effective
// maximum segment size, from which MULPDU is derived (RFC 5044 §5.1).
type LLP interface {
	Read(p []byte) (int, error)
	Write(p []byte) (int, error)
	CloseWrite() error
	Close() error
	SetReadDeadline(t time.Time) error
	SetWriteDeadline(t time.Time) error
	EMSS() int
}

// PushLLP is the seam for a push-based stack (the user-space TCP): after the
// MPA exchange the QP does not start a read loop but calls StartPush once
// with its receive function, which the stack then calls with each in-order
// piece of payload (a zero-copy view valid only during the call). rx always
// consumes the whole piece and returns len(p); a non-nil error means the QP
// stopped receiving (it has gone to error) and the stack may drop the rest.
// The stack calls rx from one goroutine at a time and reports the peer's FIN
// or a lost connection by calling rx with a nil piece and then never again.
type PushLLP interface {
	LLP
	StartPush(rx func(p []byte) (int, error))
}

// tcpLLP is a kernel TCP connection.
type tcpLLP struct {
	*net.TCPConn
	emss int
}

// NewTCPLLP adapts an established kernel TCP connection: it disables Nagle
// (FPDUs are sized to the segment; RFC 5044 §5.1) and reads the EMSS from
// TCP_MAXSEG.
func NewTCPLLP(c *net.TCPConn) LLP {
	c.SetNoDelay(true)
	emss := tcpMaxSeg(c)
	if emss <= 0 {
		emss = 1460
	}
	return &tcpLLP{TCPConn: c, emss: emss}
}

func (t *tcpLLP) EMSS() int { return t.emss }

// connLLP adapts any net.Conn (CloseWrite when the conn has it).
type connLLP struct {
	net.Conn
	emss int
}

// WrapConn adapts a net.Conn with a given EMSS (for tests and tunnels).
// CloseWrite is passed through when the conn has it and is a no-op
// otherwise.
func WrapConn(c net.Conn, emss int) LLP {
	if tc, ok := c.(*net.TCPConn); ok && emss <= 0 {
		return NewTCPLLP(tc)
	}
	if emss <= 0 {
		emss = 1460
	}
	return &connLLP{Conn: c, emss: emss}
}

func (c *connLLP) EMSS() int { return c.emss }

func (c *connLLP) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}
