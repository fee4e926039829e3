package engine

import (
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
	// them up concurrently). A connection over a bound is reset (the
	// newest is refused; those already in setup are not disturbed, and
	// each ends within the device's ConnTimeout).
	MaxSetup, MaxSetupPerPeer int
	// OnSetupError, when set, hears of every connection that did not
	// become a valid Request: refused by Admit (ErrRefused), over a bound
	// (ErrSetupFull), a malformed, silent or late Request (a *ConnError),
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
	Overflow  uint64 // over MaxSetup or MaxSetupPerPeer
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

	refused, overflow, malformed atomic.Uint64
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
		done: make(chan struct{}), perPeer: map[netip.Addr]int{}}
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
	return ListenerStats{Refused: l.refused.Load(), Overflow: l.overflow.Load(), Malformed: l.malformed.Load(), InSetup: n}
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
		peer := addrKey(remote)
		if !l.reserve(peer) {
			l.overflow.Add(1)
			l.report(remote, ErrSetupFull)
			abort(c)
			continue
		}
		l.wg.Add(1)
		go l.handshake(c, remote, peer)
	}
}

// handshake reads one connection's MPA Request (bounded by ConnTimeout).
func (l *Listener) handshake(c LLP, remote net.Addr, peer netip.Addr) {
	defer l.wg.Done()
	req, err := l.dev.ReadConnRequest(l.ctx, c)
	if err != nil {
		l.release(peer)
		if l.ctx.Err() == nil {
			l.malformed.Add(1)
			l.report(remote, err)
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

func (l *Listener) reserve(peer netip.Addr) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.inSetup >= l.cfg.MaxSetup || l.perPeer[peer] >= l.cfg.MaxSetupPerPeer {
		return false
	}
	l.inSetup++
	l.perPeer[peer]++
	return true
}

func (l *Listener) release(peer netip.Addr) {
	l.mu.Lock()
	defer l.mu.Unlock()
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
