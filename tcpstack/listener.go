package tcpstack

// ListenOptions configure Listen.
type ListenOptions struct {
	Backlog     int // established connections waiting for Accept, default 128
	MaxHalfOpen int // connections in SYN-RECEIVED, default 256
}

// Listener accepts connections on a local port (passive open). SYNs beyond
// MaxHalfOpen half-open connections, or while the accept queue is full, are
// dropped (the peer retries).
type Listener struct {
	s        *Stack
	port     uint16
	o        ListenOptions
	halfOpen int
	q        []*Conn
	closed   bool
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
	if l.halfOpen >= l.o.MaxHalfOpen || len(l.q)+l.halfOpen >= l.o.Backlog+l.o.MaxHalfOpen ||
		len(l.q) >= l.o.Backlog || s.nconns >= s.cfg.MaxConns {
		s.Stats.RxSynDropped++
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
	l.halfOpen++
	c.sendSYN()
	c.rtoAt, c.tlp = s.now+c.rto, false
	c.rearm()
}

func (l *Listener) established(c *Conn) {
	l.halfOpen--
	l.q = append(l.q, c)
	l.s.addEvent(c, EvEstablished)
}

// drop forgets a connection that closed before Accept.
func (l *Listener) drop(c *Conn, wasEstablished bool) {
	if !wasEstablished {
		l.halfOpen--
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
