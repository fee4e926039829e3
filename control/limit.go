package control

import (
	"errors"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// LogFunc receives the servers' reports of refused connections and
// accept errors. key is a constant naming the kind of report (the daemon
// rate-limits by it); args are slog key-value pairs.
type LogFunc func(level slog.Level, key, msg string, args ...any)

// ServerStats counts what one of the daemon's servers turned away. Its
// counters are exact; the daemon's log of the same events is rate-limited.
// All methods are safe for concurrent use.
type ServerStats struct {
	// Name is the server label value: "metrics", "control" or "mpa".
	Name string
	// Max is the connection cap (0: the server is not capped here, and
	// only accept errors are exported for it).
	Max int

	open                            atomic.Int64
	overLimit, evicted, credentials atomic.Uint64
	acceptErrors                    atomic.Uint64
}

// Open is the number of connections the server holds now.
func (s *ServerStats) Open() int { return int(s.open.Load()) }

// OverLimit counts connections closed at accept because the cap was
// reached with every connection busy.
func (s *ServerStats) OverLimit() uint64 { return s.overLimit.Load() }

// Evicted counts idle connections closed to make room for a new one.
func (s *ServerStats) Evicted() uint64 { return s.evicted.Load() }

// Credentials counts control socket peers refused by the policy.
func (s *ServerStats) Credentials() uint64 { return s.credentials.Load() }

// AcceptErrors counts failed accepts (EMFILE, ENFILE, ECONNABORTED, ...).
func (s *ServerStats) AcceptErrors() uint64 { return s.acceptErrors.Load() }

// CountAcceptError counts one failed accept of a listener that is not
// wrapped by LimitListener (the MPA listener).
func (s *ServerStats) CountAcceptError() { s.acceptErrors.Add(1) }

// LimitListener wraps a listener so that it holds at most max connections
// (max <= 0: no cap). At the cap a new connection takes the place of the
// connection that has been idle longest (no request in progress, as
// reported to ConnState), which is closed; when none is idle the new
// connection is closed at once. Both are counted in st. Accept errors
// (out of file descriptors, a connection aborted before it was accepted)
// are counted, reported to log and retried with a backoff of 5 ms
// doubling to 1 s, so a server on the listener never stops because of
// them; only closing the listener ends Accept.
type LimitListener struct {
	net.Listener
	max   int
	st    *ServerStats
	log   LogFunc
	now   func() time.Time
	sleep func(time.Duration, <-chan struct{})

	mu     sync.Mutex
	conns  map[*limitConn]struct{}
	closed chan struct{}
	once   sync.Once
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
	return &LimitListener{Listener: ln, max: max, st: st, log: log, now: time.Now, sleep: sleepOrDone,
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

// Accept waits for the next connection within the cap.
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
		backoff = 0
		lc := &limitConn{Conn: c, l: l, idle: true, since: l.now()}
		l.mu.Lock()
		var victim *limitConn
		if l.max > 0 && len(l.conns) >= l.max {
			for o := range l.conns {
				if o.idle && (victim == nil || o.since.Before(victim.since)) {
					victim = o
				}
			}
			if victim == nil {
				l.mu.Unlock()
				l.st.overLimit.Add(1) // counted before the peer can see the close
				c.Close()
				l.log(slog.LevelWarn, l.st.Name+"-over-limit", "connection closed: the server holds its maximum of connections, all busy",
					"server", l.st.Name, "max_conns", l.max, "peer", addrString(c.RemoteAddr()))
				continue
			}
			delete(l.conns, victim)
		}
		l.conns[lc] = struct{}{}
		l.st.open.Store(int64(len(l.conns)))
		l.mu.Unlock()
		if victim != nil {
			l.st.evicted.Add(1)
			victim.Conn.Close()
			l.log(slog.LevelDebug, l.st.Name+"-evicted", "idle connection closed to make room for a new one",
				"server", l.st.Name, "max_conns", l.max)
		}
		return lc, nil
	}
}

// Close closes the listener (not the connections it handed out).
func (l *LimitListener) Close() error {
	l.once.Do(func() { close(l.closed) })
	return l.Listener.Close()
}

// ConnState records whether a connection is idle (http.StateNew or
// StateIdle: no request in progress, so closing it loses nothing the
// client cannot retry, RFC 9112 §9.3.1); set it as the http.Server's
// ConnState.
func (l *LimitListener) ConnState(c net.Conn, s http.ConnState) {
	lc, ok := c.(*limitConn)
	if !ok || lc.l != l {
		return
	}
	idle := s == http.StateNew || s == http.StateIdle
	l.mu.Lock()
	lc.idle, lc.since = idle, l.now()
	l.mu.Unlock()
}

// Open returns the connections held now.
func (l *LimitListener) Open() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.conns)
}

func (l *LimitListener) remove(c *limitConn) {
	l.mu.Lock()
	delete(l.conns, c)
	l.st.open.Store(int64(len(l.conns)))
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
	idle  bool
	since time.Time
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
	descSrvClosed = desc("xrnic_server_connections_closed_total", "Connections the servers closed to stay within their bounds, by reason: over_limit (cap reached, all busy; closed at accept), idle_evicted (idle, closed for a new one), credentials (control socket peer refused by SO_PEERCRED).", "server", "reason")
	descSrvAccept = desc("xrnic_server_accept_errors_total", "Failed accepts (out of file descriptors, aborted connections) by server: metrics, control, mpa.", "server")
)

// serverCollector exports ServerStats.
type serverCollector []*ServerStats

func (c serverCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descSrvConns, descSrvMax, descSrvClosed, descSrvAccept} {
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
		counter(ch, descSrvClosed, s.overLimit.Load(), s.Name, "over_limit")
		counter(ch, descSrvClosed, s.evicted.Load(), s.Name, "idle_evicted")
		if s.Name == "control" {
			counter(ch, descSrvClosed, s.credentials.Load(), s.Name, "credentials")
		}
	}
}
