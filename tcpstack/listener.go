package tcpstack

import "time"

// ListenOptions configure Listen.
type ListenOptions struct {
	Backlog     int // established connections waiting for Accept, default 128
	MaxHalfOpen int // connections in SYN-RECEIVED, default 256; SYNs beyond get SYN cookies
}

// Listener accepts connections on a local port (passive open). Beyond
// MaxHalfOpen half-open connections SYNs are answered with SYN cookies
// (cookie.go; or dropped with Config.DisableSYNCookies); while the accept
// queue is full, or at Config.MaxConns, they are dropped (the peer retries).
type Listener struct {
	s           *Stack
	port        uint16
	o           ListenOptions
	halfOpen    int
	q           []*Conn
	closed      bool
	cookieUntil time.Duration // final ACKs are checked for cookies until then
}

// Listen opens a listener on port.
func (s *Stack) Listen(port uint16, o ListenOptions) (*Listener, error) {
	if o.Backlog <= 0 {
		o.Backlog = 128
	}
	if o.MaxHalfOpen <= 0 {
		o.MaxHalfOpen = 256
	}
	if port == 0 || s.listeners[port] != nil {
		return nil, ErrAddrInUse
	}
	l := &Listener{s: s, port: port, o: o, q: make([]*Conn, 0, o.Backlog)}
	s.listeners[port] = l
	return l, nil
}

// Port returns the listening port.
func (l *Listener) Port() uint16 { return l.port }

// Pending returns the number of established connections waiting for Accept.
func (l *Listener) Pending() int { return len(l.q) }

// Accept returns the next established connection, or nil if none waits.
// The caller owns it and must Close it eventually.
func (l *Listener) Accept() *Conn {
	if len(l.q) == 0 {
		return nil
	}
	c := l.q[0]
	copy(l.q, l.q[1:])
	l.q[len(l.q)-1] = nil
	l.q = l.q[:len(l.q)-1]
	c.listener = nil
	c.accepted = true
	return c
}

// Close stops listening and resets the connections not yet accepted.
func (l *Listener) Close() {
	if l.closed {
		return
	}
	l.closed = true
	delete(l.s.listeners, l.port)
	var toClose []*Conn
	for _, c := range l.s.conns {
		if c.listener == l {
			toClose = append(toClose, c)
		}
	}
	for _, c := range toClose {
		c.Abort()
	}
}

func (l *Listener) onSYN(g *inSeg, key connKey) {
	s := l.s
	if len(l.q) >= l.o.Backlog || s.nconns >= s.cfg.MaxConns {
		s.Stats.RxSynDropped++
		return
	}
	if l.halfOpen >= l.o.MaxHalfOpen {
		if s.cfg.DisableSYNCookies {
			s.Stats.RxSynDropped++
			return
		}
		l.sendCookieSynAck(g, key)
		return
	}
	c := s.newConn(key, g.srcMAC)
	c.listener = l
	c.state = StateSynRcvd
	c.irs = g.seq
	c.rcvNxt = g.seq.Add(1)
	c.sndNxt = c.iss.Add(1)
	c.sndMax = c.sndNxt
	c.applySynOptions(g)
	l.addHalfOpen()
	c.sendSYN()
	c.rtoAt, c.tlp = s.now+c.rto, false
	c.rearm()
}

// usesCookies reports whether final ACKs without a connection are to be
// checked for cookies: the listener sent some in the last two periods.
func (l *Listener) usesCookies() bool { return l.s.now < l.cookieUntil }

func (l *Listener) addHalfOpen() {
	l.halfOpen++
	s := l.s
	s.Stats.HalfOpen++
	s.Stats.HalfOpenPeak = max(s.Stats.HalfOpenPeak, s.Stats.HalfOpen)
}

func (l *Listener) subHalfOpen() {
	l.halfOpen--
	l.s.Stats.HalfOpen--
}

func (l *Listener) established(c *Conn) {
	l.subHalfOpen()
	l.q = append(l.q, c)
	l.s.addEvent(c, EvEstablished)
}

// drop forgets a connection that closed before Accept.
func (l *Listener) drop(c *Conn, wasEstablished bool) {
	if !wasEstablished {
		l.subHalfOpen()
		return
	}
	for i, x := range l.q {
		if x == c {
			copy(l.q[i:], l.q[i+1:])
			l.q[len(l.q)-1] = nil
			l.q = l.q[:len(l.q)-1]
			return
		}
	}
}
