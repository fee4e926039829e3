package control

import (
	"bytes"
	"context"
	"errors"
	"log"
	"log/slog"
	"net"
	"net/http"
	"time"
)

// ServerConfig bounds one of the daemon's HTTP servers (the metrics port,
// the control socket): connections held and the time a request and an
// idle connection may take. Zero durations and caps take the defaults.
type ServerConfig struct {
	MaxConns     int           // connections held at a time (DefaultMaxConns); more wait in the listen backlog (LimitListener)
	ReadTimeout  time.Duration // reading one request, headers and body (DefaultReadTimeout)
	WriteTimeout time.Duration // from the end of the request headers to the end of the response (DefaultWriteTimeout)
	IdleTimeout  time.Duration // a keep-alive connection waiting for its next request (DefaultIdleTimeout)
	Stats        *ServerStats  // counters (nil: a private one)
	Log          LogFunc       // reports (nil: none)
}

// Server bounds: a silent new connection is closed after
// min(ReadTimeout, DefaultHeaderTimeout).
const (
	DefaultMaxConns      = 64
	DefaultReadTimeout   = 10 * time.Second
	DefaultWriteTimeout  = 30 * time.Second
	DefaultIdleTimeout   = 60 * time.Second
	DefaultHeaderTimeout = 5 * time.Second
	maxHeaderBytes       = 16 << 10
)

func (c ServerConfig) withDefaults() ServerConfig {
	if c.MaxConns <= 0 {
		c.MaxConns = DefaultMaxConns
	}
	if c.ReadTimeout <= 0 {
		c.ReadTimeout = DefaultReadTimeout
	}
	if c.WriteTimeout <= 0 {
		c.WriteTimeout = DefaultWriteTimeout
	}
	if c.IdleTimeout <= 0 {
		c.IdleTimeout = DefaultIdleTimeout
	}
	if c.Stats == nil {
		c.Stats = &ServerStats{}
	}
	if c.Log == nil {
		c.Log = func(slog.Level, string, string, ...any) {}
	}
	return c
}

// newHTTPServer is an http.Server for h on the capped listener ln,
// bounded by c; net/http's own error log goes to c.Log. It sets ln's busy
// limit, so it is called before ln accepts.
func newHTTPServer(h http.Handler, ln *LimitListener, c ServerConfig) *http.Server {
	hdr := DefaultHeaderTimeout
	if c.ReadTimeout < hdr {
		hdr = c.ReadTimeout
	}
	name := c.Stats.Name
	// A request busy beyond both timeouts is a handler that does not
	// return: the listener closes its connection (see LimitListener).
	ln.busyLimit = c.ReadTimeout + c.WriteTimeout
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: hdr,
		ReadTimeout:       c.ReadTimeout,
		WriteTimeout:      c.WriteTimeout,
		IdleTimeout:       c.IdleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		ConnState:         ln.ConnState,
		ErrorLog: log.New(logWriter(func(p []byte) {
			c.Log(slog.LevelWarn, name+"-http", "http server", "server", name, "err", string(bytes.TrimSpace(p)))
		}), "", 0),
	}
}

type logWriter func([]byte)

func (w logWriter) Write(p []byte) (int, error) { w(p); return len(p), nil }

// HTTPServer serves an HTTP handler (the metrics endpoints) on a TCP
// listener within a ServerConfig's bounds.
type HTTPServer struct {
	ln  *LimitListener
	srv *http.Server
}

// NewHTTPServer wraps ln (see LimitListener) and prepares to serve h.
func NewHTTPServer(ln net.Listener, h http.Handler, c ServerConfig) *HTTPServer {
	c = c.withDefaults()
	ll := NewLimitListener(ln, c.MaxConns, c.Stats, c.Log)
	return &HTTPServer{ln: ll, srv: newHTTPServer(h, ll, c)}
}

// Addr is the listening address.
func (s *HTTPServer) Addr() net.Addr { return s.ln.Addr() }

// Serve serves until Shutdown; it returns nil then.
func (s *HTTPServer) Serve() error {
	if err := s.srv.Serve(s.ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// Shutdown stops accepting and closes the connections (waiting for
// requests in progress until ctx ends).
func (s *HTTPServer) Shutdown(ctx context.Context) error {
	err := s.srv.Shutdown(ctx)
	s.ln.Close() // also when Serve never ran
	return err
}
