package kernel

import (
	"errors"
	"net"
	"syscall"

	"xrnic/transport"
)

// tryWrite is a non-blocking write on the socket behind a *net.TCPConn.
// The callback is made once per connection, so a TryWrite allocates
// nothing.
type tryWrite struct {
	rc  syscall.RawConn
	fn  func(fd uintptr) bool
	p   []byte
	n   int
	err error
}

func (w *tryWrite) init(c *net.TCPConn) {
	rc, err := c.SyscallConn()
	if err != nil {
		return
	}
	w.rc = rc
	w.fn = func(fd uintptr) bool {
		for w.n < len(w.p) {
			// syscall.Write, not unix.Write: its race annotation pairs
			// with the peer's net.Conn Read in tests.
			k, err := syscall.Write(int(fd), w.p[w.n:])
			if err == syscall.EINTR {
				continue
			}
			if err != nil {
				if err != syscall.EAGAIN {
					w.err = err
				}
				break
			}
			w.n += k
		}
		return true // never wait for the poller: that is runTx's job
	}
}

var errNoRawConn = errors.New("kernel: no raw socket access")

// TryWrite writes what the socket's send buffer takes now.
func (t *tcpConn) TryWrite(p []byte) (int, error) {
	w := &t.tw
	if w.rc == nil {
		return 0, errNoRawConn
	}
	w.p, w.n, w.err = p, 0, nil
	if err := w.rc.Write(w.fn); err != nil {
		w.p = nil
		return 0, err
	}
	w.p = nil
	return w.n, w.err
}

var _ transport.TryWriter = (*tcpConn)(nil)
