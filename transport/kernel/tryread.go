package kernel

import (
	"io"
	"syscall"

	"xrnic/transport"
)

// tryRead is a non-blocking read on the socket behind a *net.TCPConn,
// made through RawConn.Control: unlike RawConn.Read it takes no read
// lock, so it runs while the connection's own reader waits in ReadLoop.
// The callback is made once per connection, so a TryRead allocates
// nothing.
type tryRead struct {
	fn  func(fd uintptr)
	p   []byte
	n   int
	err error
}

func (r *tryRead) init() {
	r.fn = func(fd uintptr) {
		for {
			// syscall.Read, not unix.Read: its race annotation pairs with
			// the peer's writes in tests.
			k, err := syscall.Read(int(fd), r.p)
			switch {
			case err == syscall.EINTR:
				continue
			case err == syscall.EAGAIN:
			case err != nil:
				r.err = err
			case k == 0 && len(r.p) > 0:
				r.err = io.EOF
			default:
				r.n = k
			}
			return
		}
	}
}

// TryRead reads what the socket holds now: (0, nil) if nothing.
func (t *tcpConn) TryRead(p []byte) (int, error) {
	r := &t.tr
	if t.tw.rc == nil {
		return 0, errNoRawConn
	}
	r.p, r.n, r.err = p, 0, nil
	if err := t.tw.rc.Control(r.fn); err != nil {
		r.p = nil
		return 0, err
	}
	r.p = nil
	return r.n, r.err
}

// ReadLoop calls try, then waits for the socket to become readable and
// calls it again, until try returns true. The runtime's poller arms the
// socket edge-triggered and resets its readiness before the first call,
// so try must read until the socket is empty (TryRead returns 0, nil)
// before it returns false: data that was there before then raises no
// further wake-up.
func (t *tcpConn) ReadLoop(try func() bool) error {
	if t.tw.rc == nil {
		return errNoRawConn
	}
	return t.tw.rc.Read(func(uintptr) bool { return try() })
}

var _ transport.TryReader = (*tcpConn)(nil)
