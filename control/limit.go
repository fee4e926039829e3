package control

import (
	"errors"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// LogFunc receives the servers' reports of refused connections and
// accept errors. key is a constant naming the kind of report (the daemon
// rate-limits by it); args are slog key-value pairs.
type LogFunc func(level slog.Level, key, msg string, args ...any)

// ServerStats counts what one of the daemon's servers turned away or made
// wait. Its counters are exact; the daemon's log of the same events is
// rate-limited. All methods are safe for concurrent use.
type ServerStats struct {
	// Name is the server label value: "metrics", "control" or "mpa".
	Name string
	// Max is the connection cap (0: the server is not capped here, and
	// only accept errors are exported for it).
	Max int

	open                             atomic.Int64
	evicted, busyClosed, credentials atomic.Uint64
	acceptErrors                     atomic.Uint64
	waits                            atomic.Uint64
	waitNanos                        atomic.Int64 // pauses that ended
	pausedSince                      atomic.Int64 // UnixNano of the pause in progress, 0: none
}

// Open is the number of connections the server holds now.
func (s *ServerStats) Open() int { return int(s.open.Load()) }

// Evicted counts idle keep-alive connections closed to make room for a
// new one.
func (s *ServerStats) Evicted() uint64 { return s.evicted.Load() }

// BusyClosed counts connections closed because one request kept them busy
// longer than the read and write timeouts together allow (a handler that
// does not return); see LimitListener.
func (s *ServerStats) BusyClosed() uint64 { return s.busyClosed.Load() }

// Credentials counts control socket peers refused by the policy.
func (s *ServerStats) Credentials() uint64 { return s.credentials.Load() }

// AcceptErrors counts failed accepts (EMFILE, ENFILE, ECONNABORTED, ...).
func (s *ServerStats) AcceptErrors() uint64 { return s.acceptErrors.Load() }

// CountAcceptError counts one failed accept of a listener that is not
// wrapped by LimitListener (the MPA listener).
func (s *ServerStats) CountAcceptError() { s.acceptErrors.Add(1) }

// Waits counts the connections that had to wait for a place: accepted
// while the server held its maximum of connections, all busy. Each is a
// pause of the server's accepting; the connections behind it wait in the
// kernel's listen backlog, uncounted.
func (s *ServerStats) Waits() uint64 { return s.waits.Load() }

// WaitTime is how long the server has not accepted because of its cap
// (a connection waited for a place), including a pause in progress.
func (s *ServerStats) WaitTime() time.Duration {
	d := s.waitNanos.Load()
	if since := s.pausedSince.Load(); since != 0 {
		if now := time.Now().UnixNano(); now > since {
			d += now - since
		}
	}
	return time.Duration(d)
}

// Paused reports whether a connection waits for a place now (the server
// does not accept).
func (s *ServerStats) Paused() bool { return s.pausedSince.Load() != 0 }

// ListenBacklog is the accept backlog the kernel gives the listeners Go
// creates (net.Listen, net.ListenUnix): net.core.somaxconn, or 128 when it
// cannot be read. Connections a LimitListener does not accept wait there;
// when it is full, the kernel drops a TCP client's handshake (the client
// retransmits its SYN, 1 s later and then backing off; counted in the
// kernel's TcpExtListenOverflows), fails a non-blocking unix socket
// connect (Go's) with EAGAIN and makes a blocking one wait.
func ListenBacklog() int {
	b, err := os.ReadFile("/proc/sys/net/core/somaxconn")
	if err != nil {
		return 128
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || n <= 0 {
		return 128
	}
	return n
}

// LimitListener wraps a listener so that it holds at most max connections
// (max <= 0: no cap) without closing a connection with a request to serve:
//
//   - Below the cap, Accept accepts.
//   - At the cap, a new connection takes the place of the connection that
//     has been idle longest, a keep-alive connection between two requests
//     (http.StateIdle, reported to ConnState), which is closed: a client
//     retries a request on a kept-alive connection closed before it was
//     answered (RFC 9112 §9.3.1). A connection that has not yet sent its
//     first request (http.StateNew) is busy: closing it would fail that
//     request.
//   - At the cap with every connection busy, the connection just accepted
//     waits until a held connection closes or turns idle, and Accept
//     accepts nothing meanwhile: the next connections wait, connected, in
//     the kernel's listen backlog (ListenBacklog), and are served in their
//     order of arrival. A burst beyond the backlog is the kernel's to drop
//     and the clients' to retry (TCP SYN retransmission). The wait takes
//     no goroutine or timer of its own, and one connection at most (per
//     Accept in progress) is open over the cap, unserved.
//
// What bounds busy connections are the server's timeouts: net/http closes
// a connection that has not sent a whole request within its read header
// timeout, a request that is not read within ReadTimeout, a response that
// is not written within WriteTimeout. A connection busy longer than the
// busy limit (the read and write timeouts together, for NewHTTPServer and
// the control socket), i.e. a handler that does not return, is closed by
// the listener and counted; it keeps its place until the server lets go of
// it, so a stuck handler costs a place, never a goroutine more per
// connection.
//
// Evictions, pauses and closed busy connections are counted in st.
// Accept errors (out of file descriptors, a connection aborted before it
// was accepted) are counted, reported to log and retried with a backoff of
// 5 ms doubling to 1 s, so a server on the listener never stops because
// of them; only closing the listener ends Accept.
type LimitListener struct {
	net.Listener
	max     int
	st      *ServerStats
	log     LogFunc
	now     func() time.Time
	sleep   func(time.Duration, <-chan struct{})
	backlog int
	// busyLimit: a connection busy this long is closed (0: never).
	// Set before the first Accept.
	busyLimit time.Duration

	mu      sync.Mutex
	conns   map[*limitConn]struct{}
	changed chan struct{} // closed when a place may have come free; nil: nobody waits
	waiters int           // Accepts waiting for a place
	peak    int           // most connections held at once
	closed  chan struct{}
	once    sync.Once
}

// NewLimitListener wraps ln; st and log may be nil.
func NewLimitListener(ln net.Listener, max int, st *ServerStats, log LogFunc) *LimitListener {
	if st == nil {
		st = &ServerStats{}
	}
	st.Max = max
	if log == nil {
		log = func(slog.Level, string, string, ...any) {}
	}
	return &LimitListener{Listener: ln, max: max, st: st, log: log, now: time.Now, sleep: sleepOrDone, backlog: ListenBacklog(),
		conns: map[*limitConn]struct{}{}, closed: make(chan struct{})}
}

func sleepOrDone(d time.Duration, done <-chan struct{}) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-done:
	}
}

// Stats returns the counters.
func (l *LimitListener) Stats() *ServerStats { return l.st }

// Accept returns the next connection within the cap; at the cap with
// every held connection busy, it returns it once a place comes free, and
// accepts no other meanwhile.
func (l *LimitListener) Accept() (net.Conn, error) {
	var backoff time.Duration
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			select {
			case <-l.closed:
				return nil, net.ErrClosed
			default:
			}
			if errors.Is(err, net.ErrClosed) {
				return nil, err
			}
			if backoff == 0 {
				backoff = 5 * time.Millisecond
			} else if backoff *= 2; backoff > time.Second {
				backoff = time.Second
			}
			l.st.acceptErrors.Add(1)
			l.log(slog.LevelWarn, l.st.Name+"-accept", "accept failed; retrying", "server", l.st.Name, "err", err, "retry_in", backoff)
			l.sleep(backoff, l.closed)
			continue
		}
		lc := &limitConn{Conn: c, l: l}
		victim, err := l.admit(lc)
		if err != nil {
			c.Close() // the listener is closed: the server is stopping
			return nil, err
		}
		if victim != nil {
			l.st.evicted.Add(1)
			victim.Conn.Close()
			l.log(slog.LevelDebug, l.st.Name+"-evicted", "idle keep-alive connection closed to make room for a new one",
				"server", l.st.Name, "max_conns", l.max)
		}
		return lc, nil
	}
}

// admit holds lc in a place: below the cap, or at it in the place of the
// longest idle connection, which it returns to be closed; at the cap with
// every connection busy, it first waits until one closes or turns idle
// (the listener accepts nothing meanwhile). It returns net.ErrClosed when
// the listener is closed while it waits.
func (l *LimitListener) admit(lc *limitConn) (*limitConn, error) {
	waited := false
	l.mu.Lock()
	defer func() {
		if waited {
			l.endWaitLocked()
		}
		l.mu.Unlock()
	}()
	for {
		var victim *limitConn
		if l.max > 0 && len(l.conns) >= l.max {
			for o := range l.conns {
				if o.idle && (victim == nil || o.since.Before(victim.since)) {
					victim = o
				}
			}
			if victim == nil {
				if !waited {
					waited = true
					l.beginWaitLocked(lc)
				}
				if l.changed == nil {
					l.changed = make(chan struct{})
				}
				ch := l.changed
				l.mu.Unlock()
				select {
				case <-ch:
				case <-l.closed:
				}
				l.mu.Lock()
				select {
				case <-l.closed:
					return nil, net.ErrClosed
				default:
				}
				continue
			}
			l.dropLocked(victim)
		}
		lc.held, lc.idle, lc.since = true, false, l.now() // http.StateNew: busy
		l.armLocked(lc)
		l.conns[lc] = struct{}{}
		l.peak = max(l.peak, len(l.conns))
		l.st.open.Store(int64(len(l.conns)))
		return victim, nil
	}
}

// beginWaitLocked and endWaitLocked count a pause: from the first
// connection that waits for a place to the last one admitted.
func (l *LimitListener) beginWaitLocked(c *limitConn) {
	l.waiters++
	if l.waiters > 1 {
		return
	}
	l.st.waits.Add(1)
	l.st.pausedSince.Store(time.Now().UnixNano())
	l.log(slog.LevelInfo, l.st.Name+"-at-cap", "connection waits: the server holds its maximum of connections, all busy; the next ones wait in the listen backlog",
		"server", l.st.Name, "max_conns", l.max, "backlog", l.backlog, "peer", addrString(c.RemoteAddr()))
}

func (l *LimitListener) endWaitLocked() {
	l.waiters--
	if l.waiters > 0 {
		return
	}
	if since := l.st.pausedSince.Swap(0); since != 0 {
		if d := time.Now().UnixNano() - since; d > 0 {
			l.st.waitNanos.Add(d)
		}
	}
}

// notifyLocked wakes the Accepts waiting for a place.
func (l *LimitListener) notifyLocked() {
	if l.changed != nil {
		close(l.changed)
		l.changed = nil
	}
}

// dropLocked stops holding c.
func (l *LimitListener) dropLocked(c *limitConn) {
	if c.timer != nil {
		c.timer.Stop()
	}
	if !c.held {
		return
	}
	c.held = false
	delete(l.conns, c)
	l.st.open.Store(int64(len(l.conns)))
	l.notifyLocked()
}

// armLocked starts the busy limit of c, busy since c.since.
func (l *LimitListener) armLocked(c *limitConn) {
	if l.busyLimit <= 0 {
		return
	}
	if c.timer == nil {
		c.timer = time.AfterFunc(l.busyLimit, func() { l.busyExpired(c) })
	} else {
		c.timer.Reset(l.busyLimit)
	}
}

// busyExpired closes c if it is still busy past the busy limit. It keeps
// its place until the server closes it (its goroutine returns).
func (l *LimitListener) busyExpired(c *limitConn) {
	l.mu.Lock()
	expired := c.held && !c.idle && !c.busyClosed && l.now().Sub(c.since) >= l.busyLimit
	if expired {
		c.busyClosed = true
	}
	l.mu.Unlock()
	if !expired {
		return
	}
	l.st.busyClosed.Add(1)
	c.Conn.Close()
	l.log(slog.LevelWarn, l.st.Name+"-busy-timeout", "connection closed: one request kept it busy beyond the read and write timeouts",
		"server", l.st.Name, "busy_limit", l.busyLimit, "peer", addrString(c.RemoteAddr()))
}

// Close closes the listener (not the connections it handed out).
func (l *LimitListener) Close() error {
	l.once.Do(func() { close(l.closed) })
	return l.Listener.Close()
}

// ConnState records whether a connection is idle (http.StateIdle: a
// keep-alive connection between requests, so closing it loses nothing
// the client cannot retry, RFC 9112 §9.3.1) or busy (StateNew, its first
// request still to come; StateActive; StateHijacked); set it as the
// http.Server's ConnState. A connection turning idle frees a place for an
// Accept waiting at the cap.
func (l *LimitListener) ConnState(c net.Conn, s http.ConnState) {
	lc, ok := c.(*limitConn)
	if !ok || lc.l != l || s == http.StateClosed {
		return
	}
	idle := s == http.StateIdle
	l.mu.Lock()
	defer l.mu.Unlock()
	if !lc.held || lc.idle == idle {
		return
	}
	lc.idle, lc.since = idle, l.now()
	if idle {
		if lc.timer != nil {
			lc.timer.Stop()
		}
		l.notifyLocked()
	} else {
		l.armLocked(lc)
	}
}

// Open returns the connections held now.
func (l *LimitListener) Open() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.conns)
}

// peakOpen returns the most connections held at once.
func (l *LimitListener) peakOpen() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.peak
}

func (l *LimitListener) remove(c *limitConn) {
	l.mu.Lock()
	l.dropLocked(c)
	l.mu.Unlock()
}

func addrString(a net.Addr) string {
	if a == nil {
		return ""
	}
	return a.String()
}

// limitConn is a connection counted by its LimitListener until closed.
type limitConn struct {
	net.Conn
	l    *LimitListener
	once sync.Once
	// guarded by l.mu
	held       bool        // counted in l.conns
	idle       bool        // between two requests of a keep-alive connection
	since      time.Time   // when it last turned idle or busy
	timer      *time.Timer // the busy limit (nil: not armed yet, or none)
	busyClosed bool        // closed by the busy limit
}

func (c *limitConn) Close() error {
	c.once.Do(func() { c.l.remove(c) })
	return c.Conn.Close()
}

// NetConn returns the wrapped connection.
func (c *limitConn) NetConn() net.Conn { return c.Conn }

var (
	descSrvConns  = desc("xrnic_server_connections", "Connections held now by the daemon's HTTP servers (metrics port, control socket).", "server")
	descSrvMax    = desc("xrnic_server_max_connections", "The connection cap of each server (--http-max-conns, --socket-max-conns).", "server")
	descSrvClosed = desc("xrnic_server_connections_closed_total", "Connections the servers closed to stay within their bounds, by reason: idle_evicted (an idle keep-alive connection, closed at the cap to admit a new one), busy_timeout (one request kept it busy beyond the read and write timeouts together), credentials (control socket peer refused by SO_PEERCRED), over_limit (always 0: at the cap with every connection busy, new connections wait in the listen backlog instead of being closed).", "server", "reason")
	descSrvAccept = desc("xrnic_server_accept_errors_total", "Failed accepts (out of file descriptors, aborted connections) by server: metrics, control, mpa.", "server")
	descSrvWaits  = desc("xrnic_server_accept_waits_total", "Times a server stopped accepting because it held its cap of connections, all busy; new connections then wait in the kernel's listen backlog.", "server")
	descSrvWaitS  = desc("xrnic_server_accept_wait_seconds_total", "Time a server did not accept because it held its cap of connections, all busy, including a pause in progress.", "server")
)

// serverCollector exports ServerStats.
type serverCollector []*ServerStats

func (c serverCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descSrvConns, descSrvMax, descSrvClosed, descSrvAccept, descSrvWaits, descSrvWaitS} {
		ch <- d
	}
}

func (c serverCollector) Collect(ch chan<- prometheus.Metric) {
	for _, s := range c {
		if s == nil {
			continue
		}
		counter(ch, descSrvAccept, s.acceptErrors.Load(), s.Name)
		if s.Max <= 0 {
			continue
		}
		gauge(ch, descSrvConns, float64(s.open.Load()), s.Name)
		gauge(ch, descSrvMax, float64(s.Max), s.Name)
		counter(ch, descSrvClosed, 0, s.Name, "over_limit") // kept for the alerts written against it
		counter(ch, descSrvClosed, s.evicted.Load(), s.Name, "idle_evicted")
		counter(ch, descSrvClosed, s.busyClosed.Load(), s.Name, "busy_timeout")
		if s.Name == "control" {
			counter(ch, descSrvClosed, s.credentials.Load(), s.Name, "credentials")
		}
		counter(ch, descSrvWaits, s.waits.Load(), s.Name)
		ch <- prometheus.MustNewConstMetric(descSrvWaitS, prometheus.CounterValue, s.WaitTime().Seconds(), s.Name)
	}
}
