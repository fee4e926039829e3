package engine

import (
	"container/list"
	"context"
	"errors"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"xrnic/transport"
)

// Listener errors reported to ListenConfig.OnSetupError.
var (
	ErrRefused   = errors.New("engine: connection refused by the listener's admission check")
	ErrSetupFull = errors.New("engine: too many connections in MPA setup")
	// ErrSetupEvicted: a newer connection from the same peer took the
	// setup slot of this one, whose Request had not arrived yet.
	ErrSetupEvicted = errors.New("engine: evicted from MPA setup by a newer connection")
)

// ListenConfig configures a Listener. Zero fields take the defaults shown.
type ListenConfig struct {
	// Admit decides from the peer's address, before anything is read,
	// whether a connection may go on to MPA setup; a refused one is reset
	// at once. nil admits every peer.
	Admit func(remote net.Addr) bool
	// MaxSetup bounds the connections in MPA setup (Request being read,
	// or read and waiting for Accept): 1024. MaxSetupPerPeer bounds them
	// per peer IP address: 256 (a client opening many QPs at once sets
	// them up concurrently). A new connection over a bound evicts (resets)
	// the oldest connection whose Request is still being read: from its
	// own address over MaxSetupPerPeer, from the address holding the most
	// over MaxSetup. Whoever floods an address with silent connections
	// then only evicts its own, and a client behind the same address (a
	// NAT, the same host) still gets through, since its Request arrives
	// within a round trip. Only when every connection over the bound has
	// sent a valid Request (waiting for Accept) is the newest refused.
	// Connections whose Request has begun to arrive, unread, are evicted
	// last (transport.Pender).
	MaxSetup, MaxSetupPerPeer int
	// OnSetupError, when set, hears of every connection that did not
	// become a valid Request: refused by Admit (ErrRefused), over a bound
	// (ErrSetupFull), evicted by a newer one (ErrSetupEvicted), a
	// malformed, silent or late Request (a *ConnError),
	// or a failed transport accept (remote nil). It is called from the
	// listener's goroutines and must not block.
	OnSetupError func(remote net.Addr, err error)
}

func (c *ListenConfig) setDefaults() {
	if c.MaxSetup <= 0 {
		c.MaxSetup = 1024
	}
	if c.MaxSetupPerPeer <= 0 {
		c.MaxSetupPerPeer = 256
	}
}

// ListenerStats count what a Listener turned away.
type ListenerStats struct {
	Refused   uint64 // by Admit
	Overflow  uint64 // over MaxSetup or MaxSetupPerPeer, nothing to evict
	Evicted   uint64 // reset in setup for a newer connection (ListenConfig.MaxSetup)
	Malformed uint64 // bad, silent or late Requests (closed without a Reply, RFC 5044 §7.1.2)
	InSetup   int    // connections in MPA setup now
}

// Listener accepts MPA connection requests on a listener of the device's
// transport. Each connection's Request is read on a goroutine of its own,
// bounded in number and in time, so a silent or trickling peer delays
// nobody else.
type Listener struct {
	dev *Device
	ln  transport.Listener
	cfg ListenConfig

	ctx    context.Context // ends at Close
	cancel context.CancelFunc
	ready  chan *ConnRequest // valid Requests waiting for Accept
	done   chan struct{}     // the accept loop has ended
	wg     sync.WaitGroup    // the accept loop and the handshakes

	mu      sync.Mutex
	inSetup int
	perPeer map[netip.Addr]int
	reading map[netip.Addr]*list.List // of *setup whose Request is being read, oldest first

	refused, overflow, evicted, malformed atomic.Uint64
}

// setup is a connection whose MPA Request is being read.
type setup struct {
	c       LLP
	remote  net.Addr
	peer    netip.Addr
	elem    *list.Element // in reading[peer]; nil once out
	evicted bool          // under mu: its slot went to a newer connection
}

// Listen listens through the device's transport (network "tcp", "tcp4"
// or "tcp6"; the afxdp transport is IPv4 only) with the default
// ListenConfig.
func (d *Device) Listen(network, addr string) (*Listener, error) {
	return d.ListenConfig(network, addr, ListenConfig{})
}

// ListenConfig listens as Listen, configured by lc.
func (d *Device) ListenConfig(network, addr string, lc ListenConfig) (*Listener, error) {
	lc.setDefaults()
	ln, err := d.tr.Listen(network, addr)
	if err != nil {
		return nil, err
	}
	l := &Listener{dev: d, ln: ln, cfg: lc, ready: make(chan *ConnRequest, lc.MaxSetup),
		done: make(chan struct{}), perPeer: map[netip.Addr]int{}, reading: map[netip.Addr]*list.List{}}
	l.ctx, l.cancel = context.WithCancel(context.Background())
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		ln.Close()
		return nil, ErrClosed
	}
	d.lns[l] = struct{}{}
	d.mu.Unlock()
	l.wg.Add(1)
	go l.runAccept()
	return l, nil
}

// Addr returns the listening address.
func (l *Listener) Addr() net.Addr { return l.ln.Addr() }

// Stats returns the listener's counters.
func (l *Listener) Stats() ListenerStats {
	l.mu.Lock()
	n := l.inSetup
	l.mu.Unlock()
	return ListenerStats{Refused: l.refused.Load(), Overflow: l.overflow.Load(), Evicted: l.evicted.Load(), Malformed: l.malformed.Load(), InSetup: n}
}

// Malformed returns how many connections were dropped for a bad Request.
func (l *Listener) Malformed() int { return int(l.malformed.Load()) }

// Close stops listening; connections in setup and Requests not yet
// accepted are closed.
func (l *Listener) Close() error {
	l.dev.mu.Lock()
	delete(l.dev.lns, l)
	l.dev.mu.Unlock()
	l.cancel()
	err := l.ln.Close()
	l.wg.Wait()
	for {
		select {
		case r := <-l.ready:
			r.Close()
		default:
			return err
		}
	}
}

// Accept waits for a connection carrying a valid MPA Request and returns
// it. After Close it returns net.ErrClosed.
func (l *Listener) Accept(ctx context.Context) (*ConnRequest, error) {
	select {
	case r := <-l.ready:
		l.release(r.peer)
		return r, nil
	case <-l.done:
		return nil, net.ErrClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (l *Listener) report(remote net.Addr, err error) {
	if l.cfg.OnSetupError != nil {
		l.cfg.OnSetupError(remote, err)
	}
}

// runAccept takes established connections from the transport and starts
// a handshake for each one that is admitted and fits the bounds.
func (l *Listener) runAccept() {
	defer l.wg.Done()
	defer close(l.done)
	for {
		c, err := l.ln.Accept(l.ctx)
		if err != nil {
			if l.ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return
			}
			l.report(nil, err) // e.g. out of file descriptors: try again shortly
			select {
			case <-l.ctx.Done():
				return
			case <-time.After(50 * time.Millisecond):
			}
			continue
		}
		remote := peerAddr(c)
		if l.cfg.Admit != nil && !l.cfg.Admit(remote) {
			// Counted and reported before the reset, so whoever sees the
			// reset also sees them.
			l.refused.Add(1)
			l.report(remote, ErrRefused)
			abort(c)
			continue
		}
		s := &setup{c: c, remote: remote, peer: addrKey(remote)}
		victim, ok := l.reserve(s)
		if !ok {
			l.overflow.Add(1)
			l.report(remote, ErrSetupFull)
			abort(c)
			continue
		}
		if victim != nil {
			// Its handshake sees the reset, and that it was evicted.
			l.evicted.Add(1)
			abort(victim.c)
		}
		l.wg.Add(1)
		go l.handshake(s)
	}
}

// handshake reads one connection's MPA Request (bounded by ConnTimeout).
func (l *Listener) handshake(s *setup) {
	defer l.wg.Done()
	req, err := l.dev.ReadConnRequest(l.ctx, s.c)
	l.mu.Lock()
	evicted := s.evicted
	if !evicted {
		l.unread(s)
	}
	l.mu.Unlock()
	if evicted { // its slot is the newer connection's already
		if err == nil {
			req.Close()
		}
		l.report(s.remote, ErrSetupEvicted)
		return
	}
	peer := s.peer
	if err != nil {
		l.release(peer)
		if l.ctx.Err() == nil {
			l.malformed.Add(1)
			l.report(s.remote, err)
		}
		return
	}
	req.peer = peer
	select {
	case l.ready <- req: // never blocks: ready holds MaxSetup
	case <-l.ctx.Done():
		l.release(peer)
		req.Close()
	}
}

// reserve takes a setup slot for s, evicting the oldest connection still
// being read when a bound is reached (ListenConfig.MaxSetup); the victim,
// already out of the counts, is the caller's to reset. ok is false when
// nothing could be evicted.
func (l *Listener) reserve(s *setup) (victim *setup, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.perPeer[s.peer] >= l.cfg.MaxSetupPerPeer:
		if victim = l.oldest(s.peer); victim == nil {
			return nil, false
		}
	case l.inSetup >= l.cfg.MaxSetup:
		if victim = l.oldest(l.heaviest()); victim == nil {
			return nil, false
		}
	}
	if victim != nil {
		victim.evicted = true
		l.unread(victim)
		l.releaseLocked(victim.peer)
	}
	l.inSetup++
	l.perPeer[s.peer]++
	r := l.reading[s.peer]
	if r == nil {
		r = list.New()
		l.reading[s.peer] = r
	}
	s.elem = r.PushBack(s)
	return victim, true
}

// evictScan bounds how many of an address's oldest connections eviction
// looks at for one whose Request has not begun to arrive.
const evictScan = 8

// oldest is the connection of peer to evict (nil: none being read): the
// oldest with no bytes waiting (transport.Pender), since a client's
// Request may have arrived before its handshake goroutine ran; failing
// that among the evictScan oldest, the oldest.
func (l *Listener) oldest(peer netip.Addr) *setup {
	r := l.reading[peer]
	if r == nil || r.Len() == 0 {
		return nil
	}
	e := r.Front()
	for i := 0; e != nil && i < evictScan; e, i = e.Next(), i+1 {
		s := e.Value.(*setup)
		if p, ok := s.c.(transport.Pender); !ok || !p.Pending() {
			return s
		}
	}
	return r.Front().Value.(*setup)
}

// heaviest is the address with the most connections being read.
func (l *Listener) heaviest() netip.Addr {
	var peer netip.Addr
	most := 0
	for p, r := range l.reading {
		if r.Len() > most {
			peer, most = p, r.Len()
		}
	}
	return peer
}

// unread takes s off the list of connections being read.
func (l *Listener) unread(s *setup) {
	if s.elem == nil {
		return
	}
	r := l.reading[s.peer]
	r.Remove(s.elem)
	s.elem = nil
	if r.Len() == 0 {
		delete(l.reading, s.peer)
	}
}

func (l *Listener) release(peer netip.Addr) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.releaseLocked(peer)
}

func (l *Listener) releaseLocked(peer netip.Addr) {
	l.inSetup--
	if l.perPeer[peer]--; l.perPeer[peer] <= 0 {
		delete(l.perPeer, peer)
	}
}

// addrKey is the IP address of a peer (the zero Addr when unknown).
func addrKey(a net.Addr) netip.Addr {
	if ta, ok := a.(*net.TCPAddr); ok {
		if ip, ok := netip.AddrFromSlice(ta.IP); ok {
			return ip.Unmap()
		}
	}
	return netip.Addr{}
}

// abort closes a connection that must not proceed: at once, with a reset
// where the transport can (transport.Aborter).
func abort(c LLP) {
	if a, ok := c.(transport.Aborter); ok {
		a.Abort()
		return
	}
	c.Close()
}
