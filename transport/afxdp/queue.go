package afxdp

import (
	"net"
	"time"

	xsk "xrnic/afxdp"
	"xrnic/tcpstack"
	"xrnic/wire/eth"
)

// xdpQueue is the state of one queue, owned by its poll loop.
type xdpQueue struct {
	x     *Transport
	l     *pollLoop
	sock  *xsk.Socket
	link  *xskLink
	stack *tcpstack.Stack
	clock tcpstack.Clock
	clk   *loopClock // clock, updated by the poll loop

	conns   map[*tcpstack.Conn]*xconn
	lns     map[uint16]*listener
	events  []connEvent
	views   [][]byte
	closing []*xconn // closed by the QP, waiting for the stack to forget them
	sweepAt time.Duration
	dirty   bool

	stats queueStats
}

// queueStats are the loop's counters (LoopStats), written by whoever
// holds the queue's token.
type queueStats struct {
	Iterations, Sleeps, Drives, Handovers, TakenBack, TakenBackStream, SpinsCut uint64
}

type connEvent struct {
	c  *tcpstack.Conn
	ev tcpstack.Event
}

func (x *Transport) newQueue(l *pollLoop, s *xsk.Socket) error {
	clk := newLoopClock()
	q := &xdpQueue{x: x, l: l, sock: s, clock: clk, clk: clk, conns: map[*tcpstack.Conn]*xconn{},
		lns: map[uint16]*listener{}, views: make([][]byte, 0, 64), sweepAt: tcpstack.NoDeadline}
	q.link = newXSKLink(s, x.umem.Bytes(), min(txReserve, x.cfg.Frames/3), x.mtu+eth.HeaderLen, x.umem.FrameSize())
	st, err := tcpstack.New(tcpstack.Config{
		Link: q.link, Clock: q.clock, MAC: x.mac, Addr: x.addr, MTU: x.mtu,
		RecvBuffer: x.cfg.RecvBuffer, MinRTO: x.cfg.MinRTO, TimeWait: x.cfg.TimeWait,
		// Stretch ACKs: every frame costs a sendto and the peer's kernel
		// receive path in copy mode (docs/PERFORMANCE.md); the delayed
		// ACK is short because a stretched tail waits for it.
		AckEvery: xdpAckEvery, DelayedACK: 2 * time.Millisecond,
		AcceptPartialChecksum: true,
		Notify: func(c *tcpstack.Conn, ev tcpstack.Event) {
			q.events = append(q.events, connEvent{c, ev})
		},
	})
	if err != nil {
		return err
	}
	q.stack = st
	l.q = q
	q.link.flush()
	return nil
}

// timeoutMS is the poll(2) timeout until the next timer, or 1 ms while a
// busy kernel left frames on the TX ring (nothing else would retry them
// before the next timer: an RTO, with backoff). It reads the stack's
// timers as they are now, not as the iteration's Poll left them (what the
// iteration sent after its Poll armed the RTO), and the clock afresh (an
// iteration that framed for a long while began long ago): a sleep that
// outlasts an armed timer stalls a connection whose last segment or ACK
// was lost until some unrelated frame happens to wake the loop.
func (q *xdpQueue) timeoutMS() int {
	now := q.clk.update()
	next := min(q.stack.NextTimer(), q.sweepAt)
	if q.link.txQueued > 0 {
		next = min(next, now+time.Millisecond)
	}
	if next == tcpstack.NoDeadline {
		return -1
	}
	d := next - now
	if d <= 0 {
		return 0
	}
	return int((d + time.Millisecond - 1) / time.Millisecond)
}

// pollStack runs the stack and handles its events; it reports whether
// anything happened.
func (q *xdpQueue) pollStack() bool {
	q.link.rxCount = 0
	q.stack.Poll()
	work := q.link.rxCount > 0 || len(q.events) > 0
	for i := range q.events {
		e := q.events[i]
		q.events[i] = connEvent{}
		x := q.conns[e.c]
		if x == nil {
			continue
		}
		if e.ev&tcpstack.EvEstablished != 0 && x.estab != nil {
			x.estab <- nil
			x.estab = nil
		}
		if e.ev&tcpstack.EvClosed != 0 && x.estab != nil {
			err := e.c.Err()
			if err == nil {
				err = tcpstack.ErrClosed
			}
			x.estab <- err
			x.estab = nil
		}
		if e.ev&tcpstack.EvWritable != 0 {
			x.writable()
		}
		if e.ev&(tcpstack.EvReadable|tcpstack.EvClosed) != 0 {
			x.deliver()
		}
	}
	q.events = q.events[:0]
	for _, ln := range q.lns {
		for ln.pendingOn(q) {
			c := ln.stacks[q].Accept()
			if c == nil {
				break
			}
			work = true
			ln.accepted(q, c)
		}
	}
	if len(q.closing) > 0 && q.clock.Now() >= q.sweepAt {
		q.sweep()
	}
	return work
}

// flush transmits what the iteration queued and refills the fill ring.
func (q *xdpQueue) flush() {
	if q.dirty {
		q.dirty = false
		q.stack.Flush()
	}
	q.link.flush()
}

// sweep removes the flows of closed connections the stack has forgotten.
func (q *xdpQueue) sweep() {
	j := 0
	for _, x := range q.closing {
		if x.c.State() == tcpstack.StateClosed {
			x.release()
			continue
		}
		q.closing[j] = x
		j++
	}
	clear(q.closing[j:])
	q.closing = q.closing[:j]
	q.sweepAt = tcpstack.NoDeadline
	if j > 0 {
		q.sweepAt = q.clock.Now() + 100*time.Millisecond
	}
}

func (q *xdpQueue) addClosing(x *xconn) {
	q.closing = append(q.closing, x)
	if q.sweepAt == tcpstack.NoDeadline {
		q.sweepAt = q.clock.Now() + 100*time.Millisecond
	}
}

// shutdown ends every connection and listener of the queue (the loop is
// stopping).
func (q *xdpQueue) shutdown() {
	for _, x := range q.conns {
		x.c.Abort()
		x.fail(net.ErrClosed)
		x.release()
	}
	for _, x := range q.closing {
		x.release()
	}
	q.closing = nil
	for _, ln := range q.lns {
		ln.stacks[q].Close()
	}
	q.stack.Flush()
}

func (q *xdpQueue) closeSockets() {
	if q.sock != nil {
		q.sock.Close()
		q.sock = nil
	}
}
