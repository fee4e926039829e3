package tcpstack

import (
	"fmt"
	"io"
	"time"

	"xrnic/wire/eth"
	"xrnic/wire/tcp"
)

// State is a TCP connection state (RFC 9293 §3.3.2).
type State uint8

// States.
const (
	StateClosed State = iota
	StateSynSent
	StateSynRcvd
	StateEstablished
	StateFinWait1
	StateFinWait2
	StateCloseWait
	StateClosing
	StateLastAck
	StateTimeWait
)

var stateNames = [...]string{"CLOSED", "SYN-SENT", "SYN-RECEIVED", "ESTABLISHED", "FIN-WAIT-1", "FIN-WAIT-2", "CLOSE-WAIT", "CLOSING", "LAST-ACK", "TIME-WAIT"}

func (s State) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return "?"
}

// Quick ACKs (Linux's quick ACK mode): how many data segments are
// acknowledged every second one whatever Config.AckEvery says. After the
// handshake, enough for slow start to take the congestion window well past
// AckEvery segments; after out-of-order data (a loss), enough for the
// halved window to grow back in congestion avoidance: a sender whose
// window is below AckEvery segments would otherwise wait for the delayed
// ACK every round trip. A link that keeps losing stays in quick mode.
const (
	quickAcks     = 64
	quickAcksLoss = 1024
)

// seg is one send segment: a frame-sized buffer whose payload starts at
// headroom, so headers are written in front of it in place.
type seg struct {
	buf     []byte
	seq     tcp.Seq
	n       int  // payload bytes
	fin     bool // the FIN follows the payload (a FIN segment has n == 0)
	sealed  bool // committed as a whole (iWARP) or already (partly) sent: never appended to
	sacked  bool
	rexmit  bool   // retransmitted at least once (Karn)
	rexmitR bool   // retransmitted in the current recovery episode
	lost    bool   // presumed lost by the SACK scoreboard (RFC 6675 IsLost)
	sendN   uint32 // Conn.xmitN of its latest transmission
}

func (g *seg) end() tcp.Seq {
	e := g.seq.Add(uint32(g.n))
	if g.fin {
		e++
	}
	return e
}

type view struct{ data, frame []byte }

type oooEnt struct {
	seq         tcp.Seq
	data, frame []byte
}

// inSeg is a parsed received segment.
type inSeg struct {
	frame  []byte
	hdr    tcp.Header
	seq    tcp.Seq
	ack    tcp.Seq
	flags  tcp.Flags
	wnd    uint16
	data   []byte
	opts   *tcp.Options
	src    [4]byte
	srcMAC eth.MAC
	synAck bool // a SYN-ACK of a simultaneous open, its SYN stripped
}

// window returns the segment's window in bytes (never scaled in a SYN).
func (g *inSeg) window(shift uint8) uint32 {
	if g.synAck {
		return uint32(g.wnd)
	}
	return uint32(g.wnd) << shift
}

func (g *inSeg) seqLen() int {
	n := len(g.data)
	if g.flags&tcp.FlagSYN != 0 {
		n++
	}
	if g.flags&tcp.FlagFIN != 0 {
		n++
	}
	return n
}

// Conn is one TCP connection. Only the stack's owner goroutine may call its
// methods.
type Conn struct {
	s        *Stack
	key      connKey
	rmac     eth.MAC
	state    State
	err      error
	listener *Listener
	accepted bool // handed to the application (Dial or Accept)
	estab    bool // the handshake completed
	appGone  bool // Close called
	wrShut   bool // CloseWrite called
	removed  bool // out of the connection table

	// send side
	iss, sndUna, sndNxt, sndMax tcp.Seq
	sndWnd, maxSndWnd           uint32
	sndWl1, sndWl2              tcp.Seq
	sndWScale                   uint8
	sndMSS                      int
	sq                          []*seg
	sqHead, sqLen               int
	cwnd, ssthresh              uint32
	dupAcks                     int
	inRecovery                  bool
	headLost                    bool // a partial ACK in SACK recovery: the segment at SND.UNA is lost
	recover                     tcp.Seq
	srtt, rttvar, rto           time.Duration
	hasRTT                      bool
	retries                     int
	rttSeq                      tcp.Seq
	rttStart                    time.Duration
	rttTiming                   bool
	wasFull                     bool // send queue was full: signal EvWritable when it drains

	// options
	sackOK, tsOK, wsOK bool
	highSacked         tcp.Seq
	xmitN, rackN       uint32 // transmissions so far; sendN of the latest-sent segment delivered (never retransmitted)
	rcvWScale          uint8
	tsRecent           uint32
	tsRecentAt         time.Duration
	tsOffset           uint32

	// receive side
	irs, rcvNxt  tcp.Seq
	rcvAdv       tcp.Seq // right edge of the window we advertised
	ready        []view
	rdHead       int
	rdLen        int
	readyBytes   int
	ooo          []oooEnt
	oooBytes     int
	lastOOO      tcp.Seq
	finRcvd      bool
	oooFin       bool
	oooFinSeq    tcp.Seq
	ackPending   int
	quickAcks    int // segments still acknowledged every second one (Config.AckEvery)
	ackNow       bool
	rcvBufWindow int

	// timers (NoDeadline when off)
	rtoAt, delackAt, twAt time.Duration
	persist               bool
	tlp                   bool          // rtoAt is the tail loss probe's timeout, not the RTO
	tlpEnd                tcp.Seq       // SND.MAX when the probe went out (tlpOut)
	tlpOut, tlpRexmit     bool          // a probe is outstanding; it was a retransmission
	rtoDue                time.Duration // when the RTO is due while the probe timer runs
	probes                int           // zero-window probes since the peer last answered
	orphanProbes          int           // zero-window probes since Close
	deadline              time.Duration
	heapIdx               int

	inDirty, inEvents bool
	ev                Event
}

func (s *Stack) newConn(key connKey, rmac eth.MAC) *Conn {
	c := &Conn{
		s: s, key: key, rmac: rmac, heapIdx: -1,
		rto:      s.cfg.InitialRTO,
		rtoAt:    NoDeadline,
		delackAt: NoDeadline,
		twAt:     NoDeadline,
		deadline: NoDeadline,
		tsOffset: s.rng.Uint32(),
		sndMSS:   536,
	}
	c.quickAcks = quickAcks
	c.rcvBufWindow = s.cfg.RecvBuffer
	c.rcvWScale = s.rcvWScale
	c.iss = s.iss()
	c.sndUna, c.sndNxt, c.sndMax = c.iss, c.iss, c.iss
	s.conns[key] = c
	s.nconns++
	return c
}

// allocQueues gives the connection its send, receive and out-of-order
// queues: at Dial, and for a passive open only once the handshake
// completes, so a half-open entry costs a few hundred bytes, not the
// tens of KiB of its queues (a SYN flood fills the table).
func (c *Conn) allocQueues() {
	if c.sq != nil {
		return
	}
	s := c.s
	c.sq = make([]*seg, s.cfg.SendSegments+1)
	c.ready = make([]view, s.cfg.RecvFrames)
	c.ooo = make([]oooEnt, 0, s.cfg.MaxOOO)
}

// DialOptions configure Dial.
type DialOptions struct {
	RemoteMAC *eth.MAC // default: Config.Resolve
	LocalPort uint16   // default: a free ephemeral port
}

// Dial starts an active open to raddr:rport. The returned connection is in
// SYN-SENT; EvEstablished (or EvClosed with Err) reports the outcome.
func (s *Stack) Dial(raddr [4]byte, rport uint16, o DialOptions) (*Conn, error) {
	s.now = s.clock.Now()
	var mac eth.MAC
	switch {
	case o.RemoteMAC != nil:
		mac = *o.RemoteMAC
	case s.cfg.Resolve != nil:
		m, ok := s.cfg.Resolve(raddr)
		if !ok {
			return nil, ErrNoRoute
		}
		mac = m
	default:
		return nil, ErrNoRoute
	}
	if s.nconns >= s.cfg.MaxConns {
		return nil, ErrTooMany
	}
	key := connKey{raddr: raddr, rport: rport, lport: o.LocalPort}
	if key.lport == 0 {
		const lo, hi = 32768, 61000
		start := lo + s.rng.IntN(hi-lo)
		for i := 0; ; i++ {
			if i == hi-lo {
				return nil, ErrNoPorts
			}
			key.lport = uint16(lo + (start-lo+i)%(hi-lo))
			if s.conns[key] == nil && s.listeners[key.lport] == nil {
				break
			}
		}
	} else if s.conns[key] != nil {
		return nil, ErrAddrInUse
	}
	c := s.newConn(key, mac)
	c.allocQueues()
	c.accepted = true
	c.state = StateSynSent
	c.sndNxt = c.iss.Add(1)
	c.sndMax = c.sndNxt
	c.sendSYN()
	c.rtoAt, c.tlp = s.now+c.rto, false
	c.rearm()
	s.flushTx()
	return c, nil
}

// State returns the connection state.
func (c *Conn) State() State { return c.state }

// Err returns why the connection ended (nil while it is alive or after an
// orderly close).
func (c *Conn) Err() error { return c.err }

// LocalPort returns the local port.
func (c *Conn) LocalPort() uint16 { return c.key.lport }

// RemoteAddr returns the peer's address and port.
func (c *Conn) RemoteAddr() ([4]byte, uint16) { return c.key.raddr, c.key.rport }

// MSS returns the payload size of one send segment (the effective send MSS:
// the peer's MSS and our MTU, less the timestamp option when in use). Valid
// once established.
func (c *Conn) MSS() int { return c.sndMSS }

// Established reports whether the handshake completed (the connection may
// have closed since).
func (c *Conn) Established() bool { return c.estab }

func (c *Conn) canSend() error {
	if c.err != nil {
		return c.err
	}
	if c.wrShut || c.appGone {
		return ErrClosed
	}
	if c.state != StateEstablished && c.state != StateCloseWait {
		if c.state < StateEstablished {
			return ErrNotConnected
		}
		return ErrClosed
	}
	return nil
}

// Debug describes the connection's sequence, window and timer state in
// one line, for stall reports (not for parsing).
func (c *Conn) Debug() string {
	timer := func(at time.Duration) string {
		if at == NoDeadline {
			return "off"
		}
		return (at - c.s.now).String()
	}
	return fmt.Sprintf("%v una+%d nxt+%d max+%d sq %d wnd %d cwnd %d ssthresh %d rto %v in %s retries %d persist %v probes %d tlp %v recovery %v dupacks %d"+
		" | rcv nxt+%d adv+%d ready %d/%d frames ooo %d (%d B) ack pending %d delack %s",
		c.state, c.iss.Size(c.sndUna), c.iss.Size(c.sndNxt), c.iss.Size(c.sndMax), c.sqLen, c.sndWnd, c.cwnd, c.ssthresh, c.rto, timer(c.rtoAt),
		c.retries, c.persist, c.probes, c.tlp, c.inRecovery, c.dupAcks,
		c.irs.Size(c.rcvNxt), c.irs.Size(c.rcvAdv), c.readyBytes, c.rdLen, len(c.ooo), c.oooBytes, c.ackPending, timer(c.delackAt))
}

// RTO returns the current retransmission timeout (RFC 6298, with backoff).
func (c *Conn) RTO() time.Duration { return c.rto }

// Unacked returns the bytes sent and not yet acknowledged (a FIN counts
// one).
func (c *Conn) Unacked() int { return int(c.sndUna.Size(c.sndMax)) }

// FreeSegments returns how many more segments may be queued for sending.
func (c *Conn) FreeSegments() int { return len(c.sq) - 1 - c.sqLen }

func (c *Conn) sqAt(i int) *seg { return c.sq[(c.sqHead+i)%len(c.sq)] }

func (c *Conn) sqPush(g *seg) {
	c.sq[(c.sqHead+c.sqLen)%len(c.sq)] = g
	c.sqLen++
}

// sqEnd is the sequence number after the last queued octet (or FIN).
func (c *Conn) sqEnd() tcp.Seq {
	if c.sqLen == 0 {
		return c.sndUna.Max(c.sndNxt)
	}
	return c.sqAt(c.sqLen - 1).end()
}

// Segment returns the payload area of a free send segment (len == MSS()).
// Write whole FPDUs into a prefix of it and call Commit with their length;
// until Commit the buffer is not queued and Segment returns the same one.
// It fails with ErrWouldBlock when the send queue is full.
func (c *Conn) Segment() ([]byte, error) {
	if err := c.canSend(); err != nil {
		return nil, err
	}
	if c.FreeSegments() == 0 {
		c.wasFull = true
		return nil, ErrWouldBlock
	}
	g := c.sq[(c.sqHead+c.sqLen)%len(c.sq)]
	if g == nil {
		g = c.s.allocSeg()
		c.sq[(c.sqHead+c.sqLen)%len(c.sq)] = g
	}
	return g.buf[headroom : headroom+c.sndMSS], nil
}

// Commit queues the segment obtained from Segment with n payload bytes as
// one TCP segment of its own.
func (c *Conn) Commit(n int) error {
	if err := c.canSend(); err != nil {
		return err
	}
	g := c.sq[(c.sqHead+c.sqLen)%len(c.sq)]
	if g == nil || c.FreeSegments() == 0 || n <= 0 || n > c.sndMSS {
		return ErrConfig
	}
	g.seq = c.sqEnd()
	g.n = n
	g.sealed = true
	c.sqPush(g)
	c.s.markDirty(c)
	return nil
}

// Write queues bytes from p for sending, copying them into send segments;
// it may append to the last queued segment if that has not been sent or
// committed. It returns how many bytes it took: less than len(p) (with
// ErrWouldBlock) when the send queue is full.
func (c *Conn) Write(p []byte) (int, error) {
	if err := c.canSend(); err != nil {
		return 0, err
	}
	done := 0
	if c.sqLen > 0 {
		g := c.sqAt(c.sqLen - 1)
		if !g.sealed && !g.fin && g.n < c.sndMSS && c.sndNxt.LessThanEq(g.seq) {
			k := copy(g.buf[headroom+g.n:headroom+c.sndMSS], p)
			g.n += k
			done += k
		}
	}
	for done < len(p) {
		b, err := c.Segment()
		if err != nil {
			break
		}
		k := copy(b, p[done:])
		g := c.sq[(c.sqHead+c.sqLen)%len(c.sq)]
		g.seq = c.sqEnd()
		g.n = k
		c.sqPush(g)
		done += k
	}
	if done > 0 {
		c.s.markDirty(c)
	}
	if done < len(p) {
		return done, ErrWouldBlock
	}
	return done, nil
}

// Views appends the pending in-order received payload to dst as views into
// the received frames and returns it. The views stay valid until released.
func (c *Conn) Views(dst [][]byte) [][]byte {
	for i := 0; i < c.rdLen; i++ {
		dst = append(dst, c.ready[(c.rdHead+i)%len(c.ready)].data)
	}
	return dst
}

// Buffered returns the number of received in-order bytes not yet released.
func (c *Conn) Buffered() int { return c.readyBytes }

// EOF reports whether the peer closed its side and every byte before its FIN
// has been released.
func (c *Conn) EOF() bool { return c.readyBytes == 0 && (c.finRcvd || c.err != nil) }

// Release tells the stack the consumer is done with the first n bytes of the
// pending views; fully released frames return to the link and the receive
// window opens.
func (c *Conn) Release(n int) {
	if n > c.readyBytes {
		n = c.readyBytes
	}
	before := c.readyBytes
	for n > 0 {
		v := &c.ready[c.rdHead]
		if n < len(v.data) {
			v.data = v.data[n:]
			c.readyBytes -= n
			break
		}
		n -= len(v.data)
		c.readyBytes -= len(v.data)
		c.s.link.Release(v.frame)
		*v = view{}
		c.rdHead = (c.rdHead + 1) % len(c.ready)
		c.rdLen--
	}
	if before != c.readyBytes && !c.removed && c.state != StateClosed {
		// Window update when it opened by at least min(buffer/2, MSS)
		// (RFC 9293 §3.8.6.2.2) and, with stretch ACKs, only once the
		// window the peer knows has fallen to half the buffer (as Linux's
		// tcp_cleanup_rbuf): a consumer that keeps up would otherwise
		// send an update after every read, an ACK per receive batch.
		adv := int(c.rcvAdv - c.rcvNxt)
		if c.rcvWindow()-adv >= min(c.rcvBufWindow/2, c.sndMSSRecv()) &&
			(c.s.cfg.AckEvery <= 2 || 2*adv <= c.rcvBufWindow) {
			c.ackNow = true
			c.s.markDirty(c)
		}
	}
}

// Read copies received bytes into p and releases them. It returns 0, io.EOF
// at the end of the stream, the connection error after a reset, and 0, nil
// when nothing is pending.
func (c *Conn) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) && c.rdLen > 0 {
		k := copy(p[n:], c.ready[c.rdHead].data)
		c.Release(k)
		n += k
	}
	if n == 0 && c.EOF() {
		if c.err != nil {
			return 0, c.err
		}
		return 0, io.EOF
	}
	return n, nil
}

// CloseWrite queues a FIN after the data already queued (shutdown of the
// send direction).
func (c *Conn) CloseWrite() error {
	if c.wrShut {
		return nil
	}
	if c.err != nil {
		return c.err
	}
	switch c.state {
	case StateSynSent:
		c.wrShut = true
		c.closeConn(nil)
		return nil
	case StateEstablished, StateCloseWait, StateSynRcvd:
	default:
		return ErrClosed
	}
	if c.FreeSegments() < 0 {
		return ErrWouldBlock
	}
	c.wrShut = true
	g := c.sq[(c.sqHead+c.sqLen)%len(c.sq)]
	if g == nil {
		g = &seg{}
		c.sq[(c.sqHead+c.sqLen)%len(c.sq)] = g
	}
	g.seq = c.sqEnd()
	g.n = 0
	g.fin = true
	g.sealed = true
	c.sqPush(g)
	if c.state == StateEstablished {
		c.state = StateFinWait1
	} else if c.state == StateCloseWait {
		c.state = StateLastAck
	}
	c.s.markDirty(c)
	return nil
}

// Close ends the application's use of the connection: it sends a FIN after
// queued data (or a RST if received data was left unread, as Linux does),
// releases every pending view, and lets the stack finish the close and
// free the connection on its own. New data arriving after Close resets the
// connection (RFC 1122 §4.2.2.13): nobody is left to read it.
func (c *Conn) Close() error {
	if c.appGone {
		return nil
	}
	unread := c.readyBytes > 0 && !c.finRcvd
	c.appGone = true
	c.Release(c.readyBytes)
	if c.state == StateClosed {
		c.freeIfDone()
		return nil
	}
	if unread {
		c.Abort()
		return nil
	}
	if !c.wrShut {
		if err := c.CloseWrite(); err != nil && c.state != StateClosed {
			c.Abort()
			return nil
		}
	}
	if c.state == StateFinWait2 {
		c.setTW(c.s.cfg.FinWait2)
	}
	return nil
}

// Abort resets the connection: a RST goes to the peer and everything is
// dropped.
func (c *Conn) Abort() {
	if c.state == StateClosed {
		return
	}
	if c.state != StateSynSent && c.state != StateTimeWait {
		c.sendCtl(c.sndNxt.Max(c.sndMax), tcp.FlagRST|tcp.FlagACK)
	}
	c.closeConn(ErrAborted)
	c.s.flushTx()
}

// closeConn moves the connection to CLOSED with err: it leaves the table,
// stops its timers, frees send buffers and out-of-order frames, and frees
// the rest once the application has closed (or never had) it.
func (c *Conn) closeConn(err error) {
	if c.state == StateClosed {
		return
	}
	s := c.s
	wasEst := c.state >= StateEstablished
	c.state = StateClosed
	if c.err == nil && err != nil {
		c.err = err
	}
	if !c.removed {
		c.removed = true
		delete(s.conns, c.key)
		s.nconns--
	}
	c.rtoAt, c.delackAt, c.twAt = NoDeadline, NoDeadline, NoDeadline
	c.rearm()
	for i := range c.sq {
		if g := c.sq[i]; g != nil {
			s.freeSeg(g)
			c.sq[i] = nil
		}
	}
	c.sqLen = 0
	for i := range c.ooo {
		s.link.Release(c.ooo[i].frame)
		c.ooo[i] = oooEnt{}
	}
	c.ooo = c.ooo[:0]
	c.oooBytes = 0
	if l := c.listener; l != nil {
		l.drop(c, wasEst)
	}
	if c.accepted && !c.appGone {
		s.addEvent(c, EvClosed|EvReadable)
	}
	c.freeIfDone()
}

func (c *Conn) freeIfDone() {
	if c.state != StateClosed || (c.accepted && !c.appGone) {
		return
	}
	c.Release(c.readyBytes)
}

// setTW arms the TIME-WAIT (or orphan FIN-WAIT-2) timer.
func (c *Conn) setTW(d time.Duration) {
	c.twAt = c.s.now + d
	c.rearm()
}

// rearm recomputes the connection's earliest deadline and fixes the heap.
func (c *Conn) rearm() {
	d := min(c.rtoAt, c.delackAt, c.twAt)
	if d == c.deadline && (c.heapIdx >= 0 || d == NoDeadline) {
		return
	}
	c.deadline = d
	c.s.timers.update(c)
}

func (c *Conn) fireTimers() {
	now := c.s.now
	if c.twAt <= now {
		c.twAt = NoDeadline
		if c.state == StateTimeWait || c.state == StateFinWait2 {
			c.closeConn(nil)
			return
		}
	}
	if c.delackAt <= now {
		c.delackAt = NoDeadline
		if c.ackPending > 0 {
			c.ackNow = true
			c.s.markDirty(c)
		}
	}
	if c.rtoAt <= now {
		probe := c.tlp
		c.rtoAt, c.tlp = NoDeadline, false
		if c.persist {
			c.onPersist()
		} else if probe {
			c.onPTO()
		} else {
			c.onRTO()
		}
	}
}
