package afxdp

import (
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"xrnic/bpf"
	"xrnic/tcpstack"
	"xrnic/transport"
)

// xconn is one user-space TCP connection as a transport.InlineConn. Its
// tcpstack.Conn belongs to the poll loop of its queue; the Conn methods
// called from other goroutines run there as commands.
type xconn struct {
	q    *xdpQueue
	c    *tcpstack.Conn
	flow bpf.Flow
	resv int // port reservation (dials), -1 if none
	kick atomic.Uint32

	// loop-owned
	estab    chan error
	rx       func([]byte) (int, error)
	step     transport.TxStep // the QP's transmit step (nil until StartInline)
	segN     int              // bytes of FPDUs in the open (uncommitted) segment
	pend     []byte           // FPDUs accepted but not yet in segments
	pendLens []int            // their lengths, so they are never re-parsed
	finAfter bool             // CloseWrite once pend drained
	eofSent  bool
	closed   bool
	released bool
	mss      int
	txKickFn func()

	// handshake mode (before StartPush): bytes for Read
	rmu   sync.Mutex
	rbuf  []byte
	rerr  error
	rdl   time.Time
	rsig  chan struct{}
	rfull bool
}

var (
	_ transport.InlineConn = (*xconn)(nil)
	_ transport.Aborter    = (*xconn)(nil)
)

const handshakeBuf = 1 << 20

// LocalAddr returns our address and port.
func (x *xconn) LocalAddr() net.Addr {
	a := x.flow.LocalIP
	return &net.TCPAddr{IP: net.IPv4(a[0], a[1], a[2], a[3]), Port: int(x.flow.LocalPort)}
}

// RemoteAddr returns the peer's address and port.
func (x *xconn) RemoteAddr() net.Addr {
	a := x.flow.RemoteIP
	return &net.TCPAddr{IP: net.IPv4(a[0], a[1], a[2], a[3]), Port: int(x.flow.RemotePort)}
}

func (q *xdpQueue) newConn(c *tcpstack.Conn, flow bpf.Flow, resv int) *xconn {
	x := &xconn{q: q, c: c, flow: flow, resv: resv, rsig: make(chan struct{}, 1)}
	q.conns[c] = x
	return x
}

// release drops the flow and the port reservation (on the loop, once the
// stack has forgotten the connection or the device closes).
func (x *xconn) release() {
	if x.released {
		return
	}
	x.released = true
	x.q.x.prog.DeleteFlow(x.flow)
	if x.resv >= 0 {
		unix.Close(x.resv)
		x.resv = -1
	}
	delete(x.q.conns, x.c)
}

// fail ends Read with err (handshake mode) and the QP's stream.
func (x *xconn) fail(err error) {
	x.rmu.Lock()
	if x.rerr == nil {
		x.rerr = err
	}
	x.rmu.Unlock()
	x.signal()
	if x.rx != nil && !x.eofSent {
		x.eofSent = true
		x.rx(endPiece(err))
	}
}

// finPiece tells the QP of the peer's FIN (transport.PushConn).
var finPiece = []byte{}

// endPiece is the last piece for rx: the FIN's, or nil for a lost
// connection.
func endPiece(err error) []byte {
	if err == io.EOF {
		return finPiece
	}
	return nil
}

func (x *xconn) signal() {
	select {
	case x.rsig <- struct{}{}:
	default:
	}
}

// deliver hands the in-order payload to the QP (push mode) or to Read's
// buffer (handshake), on the loop.
func (x *xconn) deliver() {
	if x.closed {
		return
	}
	c := x.c
	if x.rx != nil {
		for {
			views := c.Views(x.q.views[:0])
			if len(views) == 0 {
				break
			}
			x.q.views = views[:0] // keep what append grew (no garbage per batch)
			total := 0
			for i, v := range views {
				if !x.eofSent && len(v) > 0 { // (an empty piece means FIN)
					x.rx(v)
				}
				total += len(v)
				views[i] = nil
			}
			c.Release(total)
		}
	} else {
		x.rmu.Lock()
		for len(x.rbuf) < handshakeBuf {
			views := c.Views(x.q.views[:0])
			if len(views) == 0 {
				break
			}
			x.q.views = views[:0]
			total := 0
			for i, v := range views {
				k := min(len(v), handshakeBuf-len(x.rbuf))
				x.rbuf = append(x.rbuf, v[:k]...)
				total += k
				views[i] = nil
			}
			c.Release(total)
		}
		x.rfull = c.Buffered() > 0
		got := len(x.rbuf) > 0
		x.rmu.Unlock()
		if got {
			x.signal()
		}
		if x.rfull {
			return
		}
	}
	if c.EOF() && c.Err() == nil {
		x.fail(io.EOF) // the peer's FIN
	} else if c.EOF() || c.State() == tcpstack.StateClosed {
		err := c.Err()
		if err == nil {
			err = io.EOF
		}
		x.fail(err)
	}
}

// writable: the stack freed send buffers.
func (x *xconn) writable() {
	if len(x.pend) > 0 {
		x.flushPend()
	}
	if len(x.pend) == 0 {
		if x.finAfter {
			x.finAfter = false
			x.c.CloseWrite()
			x.q.dirty = true
		}
		if x.step != nil {
			x.txStep()
		}
	}
}

// txStep runs the QP's transmit step with the room the send queue has.
func (x *xconn) txStep() {
	if x.step == nil || x.closed {
		return
	}
	if len(x.pend) > 0 {
		x.flushPend()
		if len(x.pend) > 0 {
			return
		}
	}
	room := x.c.FreeSegments() * x.mss
	if room <= 0 {
		// Ask for EvWritable: the stack signals it only after a
		// Segment call found the queue full.
		x.c.Segment()
		return
	}
	x.step(room, x.put)
	x.commitOpen()
	if len(x.pend) == 0 && x.c.FreeSegments() == 0 {
		// The step filled the send queue exactly (nothing overflowed into
		// pend, so no Segment call found it full): ask for EvWritable,
		// or what the QP still has to send waits for a kick that may
		// never come (every WR posted, the poster waiting for them).
		x.c.Segment()
	}
}

// put takes one FPDU from the QP's transmit step. FPDUs are packed whole
// into segment buffers, each segment starting with an FPDU (RFC 5044
// §4.1; several may share one); what finds no free segment waits in pend.
func (x *xconn) put(fpdu []byte) {
	x.q.dirty = true
	if len(x.pend) == 0 {
		fpdu = x.place(fpdu)
		if len(fpdu) == 0 {
			return
		}
	}
	x.pend = append(x.pend, fpdu...)
	x.pendLens = append(x.pendLens, len(fpdu))
}

// place copies fpdu into the open segment, or commits it and opens the
// next; it returns what found no room (the send queue is full).
func (x *xconn) place(fpdu []byte) []byte {
	for len(fpdu) > 0 {
		seg, err := x.c.Segment() // the open one until Commit
		if err != nil {
			if errors.Is(err, tcpstack.ErrWouldBlock) {
				return fpdu
			}
			return nil // connection gone: the QP learns it from rx
		}
		if free := len(seg) - x.segN; len(fpdu) <= free {
			x.segN += copy(seg[x.segN:], fpdu)
			return nil
		}
		if x.segN > 0 {
			if !x.commitOpen() {
				return nil
			}
			continue
		}
		// Longer than a segment (FPDUs are sized to the EMSS, so only
		// if the MSS shrank): split it, losing alignment only here.
		n := copy(seg, fpdu)
		if err := x.c.Commit(n); err != nil {
			return nil
		}
		fpdu = fpdu[n:]
	}
	return nil
}

// commitOpen queues the open segment, if it holds anything; false if the
// connection is gone.
func (x *xconn) commitOpen() bool {
	if x.segN == 0 {
		return true
	}
	n := x.segN
	x.segN = 0
	return x.c.Commit(n) == nil
}

// flushPend moves waiting FPDUs into segments, in order.
func (x *xconn) flushPend() {
	x.q.dirty = true
	off, i := 0, 0
	for ; i < len(x.pendLens); i++ {
		l := x.pendLens[i]
		if rest := x.place(x.pend[off : off+l]); len(rest) > 0 {
			// Keep the unsent tail of this FPDU and everything after it.
			x.pendLens[i] = len(rest)
			off += l - len(rest)
			break
		}
		off += l
	}
	x.commitOpen()
	n := copy(x.pend, x.pend[off:])
	x.pend = x.pend[:n]
	m := copy(x.pendLens, x.pendLens[i:])
	x.pendLens = x.pendLens[:m]
}

// closeOnLoop closes the connection (FIN after queued data).
func (x *xconn) closeOnLoop() {
	if x.closed {
		return
	}
	if len(x.pend) > 0 {
		x.flushPend()
	}
	x.closed = true
	x.rx = nil
	x.step = nil
	x.c.Close()
	x.q.dirty = true
	x.rmu.Lock()
	if x.rerr == nil {
		x.rerr = net.ErrClosed
	}
	x.rmu.Unlock()
	x.signal()
	x.q.addClosing(x)
}

// LLP methods (any goroutine).

func (x *xconn) Read(p []byte) (int, error) {
	for {
		x.rmu.Lock()
		if len(x.rbuf) > 0 {
			n := copy(p, x.rbuf)
			rest := copy(x.rbuf, x.rbuf[n:])
			x.rbuf = x.rbuf[:rest]
			refill := x.rfull && rest == 0
			x.rmu.Unlock()
			if refill {
				x.q.l.kick(x, kickRx)
			}
			return n, nil
		}
		err, dl := x.rerr, x.rdl
		x.rmu.Unlock()
		if err != nil {
			return 0, err
		}
		var tc <-chan time.Time
		if !dl.IsZero() {
			d := time.Until(dl)
			if d <= 0 {
				return 0, os.ErrDeadlineExceeded
			}
			t := time.NewTimer(d)
			defer t.Stop()
			tc = t.C
		}
		select {
		case <-x.rsig:
		case <-tc:
		case <-x.q.l.done:
			return 0, net.ErrClosed
		}
	}
}

// Pending reports whether received bytes wait for Read (transport.Pender).
func (x *xconn) Pending() bool {
	x.rmu.Lock()
	defer x.rmu.Unlock()
	return len(x.rbuf) > 0
}

func (x *xconn) Write(p []byte) (int, error) {
	var err error
	if lerr := x.q.l.do(func() {
		if x.closed || x.finAfter {
			err = net.ErrClosed
			return
		}
		if e := x.c.Err(); e != nil {
			err = e
			return
		}
		x.put(p)
		x.commitOpen()
		x.q.flush()
	}); lerr != nil {
		return 0, lerr
	}
	if err != nil {
		return 0, err
	}
	return len(p), nil
}

func (x *xconn) CloseWrite() error {
	return x.q.l.do(func() {
		if x.closed {
			return
		}
		if len(x.pend) > 0 {
			x.flushPend()
		}
		if len(x.pend) > 0 {
			x.finAfter = true
			return
		}
		x.c.CloseWrite()
		x.q.dirty = true
	})
}

func (x *xconn) Close() error {
	err := x.q.l.do(x.closeOnLoop)
	if errors.Is(err, errLoopClosed) {
		return nil // the device closed: everything is gone already
	}
	return err
}

// Abort resets the connection at once (RST, nothing more is sent).
func (x *xconn) Abort() error {
	err := x.q.l.do(func() {
		if !x.closed {
			x.c.Abort()
		}
		x.closeOnLoop()
	})
	if errors.Is(err, errLoopClosed) {
		return nil
	}
	return err
}

func (x *xconn) SetReadDeadline(t time.Time) error {
	x.rmu.Lock()
	x.rdl = t
	x.rmu.Unlock()
	x.signal()
	return nil
}

// SetWriteDeadline is accepted and ignored: Write never blocks (the loop
// takes the bytes at once).
func (x *xconn) SetWriteDeadline(t time.Time) error { return nil }

// EMSS is the connection's send MSS.
func (x *xconn) EMSS() int {
	var m int
	x.q.l.do(func() { m = x.c.MSS() })
	if m <= 0 {
		m = 1460
	}
	x.mss = m
	return m
}

// StartPush switches to push delivery: what Read left is handed to rx
// first.
func (x *xconn) StartPush(rx func(p []byte) (int, error)) {
	x.q.l.post(func() {
		if x.closed {
			rx(nil)
			return
		}
		x.rmu.Lock()
		left := x.rbuf
		x.rbuf = nil
		rerr := x.rerr
		x.rmu.Unlock()
		x.rx = rx
		if len(left) > 0 {
			rx(left)
		}
		if rerr != nil && !x.eofSent {
			x.eofSent = true
			rx(endPiece(rerr))
			return
		}
		x.deliver()
	})
}

// StartInline implements transport.InlineConn.
func (x *xconn) StartInline(step transport.TxStep) func() {
	l := x.q.l
	x.txKickFn = func() { l.kick(x, kickTx) }
	l.post(func() {
		if x.mss <= 0 {
			x.mss = max(x.c.MSS(), 536)
		}
		x.step = step
		x.txStep() // a kick may have come before step was set
	})
	return x.txKickFn
}
