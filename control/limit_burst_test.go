package control

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"xrnic/internal/require"
)

// The tests here hold the servers to their cap without turning anyone
// away: a burst of clients larger than the cap waits in the kernel's
// listen backlog and is served in turn (the issue: 128 of 200 parallel
// scrapes answered, 199 of 200 control requests), idle keep-alive
// connections make room, and what a silent or stalled client holds is
// bounded by the read timeout. Deadlines are generous; what is asserted
// is observable state (answers, counters, the kernel's accept queue).

// needBacklog requires a listen backlog that holds a burst of n
// connections: beyond it the kernel drops TCP handshakes (the clients
// retransmit, slowly) and fails unix socket connects with EAGAIN.
func needBacklog(t *testing.T, n int) {
	t.Helper()
	if b := ListenBacklog(); b < n {
		require.Unavailable(t, "net.core.somaxconn %d is below the burst of %d connections this test makes (sysctl -w net.core.somaxconn=4096)", b, n)
	}
}

// gate holds the first n requests in the handler until release is
// closed, so that the server is at its cap with every connection busy
// while the rest of a burst arrives.
type gate struct {
	n        int32
	seen     atomic.Int32
	inflight atomic.Int32
	release  chan struct{}
	once     sync.Once
}

func newGate(n int) *gate { return &gate{n: int32(n), release: make(chan struct{})} }

func (g *gate) open() { g.once.Do(func() { close(g.release) }) }

func (g *gate) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if g.seen.Add(1) <= g.n {
			g.inflight.Add(1)
			select {
			case <-g.release:
			case <-time.After(time.Minute):
			}
		}
		h.ServeHTTP(w, r)
	})
}

// holdUntilBurst opens g once its n requests are held and more than n
// connections are established (dials): the next one finds every place
// busy.
func (g *gate) holdUntilBurst(t *testing.T, dials *atomic.Int32) {
	t.Helper()
	eventually(t, "the cap is busy and one more connection is established", func() bool {
		return g.inflight.Load() == g.n && dials.Load() > g.n
	})
	g.open()
}

// validMetrics checks a /metrics body: the text format parses and has
// the metrics server's connection gauge.
func validMetrics(body []byte) error {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(string(body)))
	if err != nil {
		return fmt.Errorf("body does not parse: %w", err)
	}
	f := fams["xrnic_server_connections"]
	if f == nil || len(f.GetMetric()) == 0 {
		return fmt.Errorf("body (%d bytes, %d families) lacks xrnic_server_connections", len(body), len(fams))
	}
	return nil
}

// metricsServer serves the real metrics handler, behind g (nil: none),
// on a loopback port with cfg's bounds.
func metricsServer(t *testing.T, r *rig, g *gate, cfg ServerConfig) (*HTTPServer, *ServerStats) {
	t.Helper()
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	st := &ServerStats{Name: "metrics"}
	cfg.Stats = st
	var h http.Handler = HTTPHandler(r.state, NewRegistry(r.state, Options{NoProcess: true, Servers: []*ServerStats{st}}))
	if g != nil {
		h = g.wrap(h)
	}
	srv := NewHTTPServer(raw, h, cfg)
	go srv.Serve()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
	})
	return srv, st
}

// TestHTTPBurstQueued: 200 parallel scrapes, each on its own keep-alive
// connection, against a metrics server with a cap of 8 (and of 64): all
// are answered 200 with a valid body. The first cap requests are held
// until the cap is busy and more connections arrive, so the burst meets
// a full server; the server never holds more than the cap.
func TestHTTPBurstQueued(t *testing.T) {
	const n = 200
	needBacklog(t, n)
	r := newRig(t)
	for _, max := range []int{8, 64} {
		t.Run(fmt.Sprintf("cap%d", max), func(t *testing.T) {
			g := newGate(max)
			srv, st := metricsServer(t, r, g, ServerConfig{MaxConns: max})
			url := "http://" + srv.Addr().String() + "/metrics"
			var dials atomic.Int32
			var answered atomic.Int32
			errs := make(chan error, n)
			var wg sync.WaitGroup
			var transports []*http.Transport
			for i := 0; i < n; i++ {
				tr := &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
					var d net.Dialer
					c, err := d.DialContext(ctx, network, addr)
					if err == nil {
						dials.Add(1)
					}
					return c, err
				}}
				transports = append(transports, tr)
				wg.Add(1)
				go func() {
					defer wg.Done()
					hc := &http.Client{Transport: tr, Timeout: 2 * time.Minute}
					resp, err := hc.Get(url)
					if err != nil {
						errs <- err
						return
					}
					body, err := io.ReadAll(resp.Body)
					resp.Body.Close() // the connection stays open, idle
					if err == nil && resp.StatusCode != http.StatusOK {
						err = fmt.Errorf("status %s", resp.Status)
					}
					if err == nil {
						err = validMetrics(body)
					}
					if err != nil {
						errs <- err
						return
					}
					answered.Add(1)
				}()
			}
			g.holdUntilBurst(t, &dials)
			wg.Wait()
			close(errs)
			for _, tr := range transports {
				tr.CloseIdleConnections()
			}
			var first []string
			for err := range errs {
				if len(first) < 5 {
					first = append(first, err.Error())
				}
			}
			ll := limitOf(srv)
			t.Logf("cap %d: %d/%d scrapes answered; waits %d (%v), idle evicted %d, peak held %d", max, answered.Load(), n,
				st.Waits(), st.WaitTime().Round(time.Millisecond), st.Evicted(), ll.peakOpen())
			if answered.Load() != n {
				t.Fatalf("%d/%d parallel scrapes answered with 200 and a valid body; first errors: %s", answered.Load(), n, strings.Join(first, "; "))
			}
			if st.Waits() == 0 { // new policy only
				t.Error("no connection waited at the cap: the test did not fill the server")
			}
			if ll.peakOpen() > max {
				t.Errorf("held %d connections, cap %d", ll.peakOpen(), max)
			}
		})
	}
}

// TestSocketBurstQueued: 200 parallel control requests (control.Client:
// one connection each) against a control socket with a cap of 4 are all
// answered.
func TestSocketBurstQueued(t *testing.T) {
	const n, max = 200, 4
	needBacklog(t, n)
	r := newRig(t)
	path := filepath.Join(t.TempDir(), "x.sock")
	ss, err := ListenSocket(path, -1)
	if err != nil {
		t.Fatal(err)
	}
	defer ss.Close()
	st := &ServerStats{Name: "control"}
	g := newGate(max)
	go ss.ServeConfig(g.wrap(APIHandler(r.state)), func(Cred) bool { return true }, ServerConfig{MaxConns: max, Stats: st})
	var dials, answered atomic.Int32
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		cl := NewClient(path)
		cl.hc.Timeout = 2 * time.Minute // generous: the burst is answered in turn
		tr := cl.hc.Transport.(*http.Transport)
		dial := tr.DialContext
		tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := dial(ctx, network, addr)
			if err == nil {
				dials.Add(1)
			}
			return c, err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			var s StatusInfo
			if err := cl.Get(context.Background(), PathStatus, &s); err != nil {
				errs <- err
				return
			}
			if s.Transport != "kernel" || s.Regions != 1 {
				errs <- fmt.Errorf("status %+v", s)
				return
			}
			answered.Add(1)
		}()
	}
	g.holdUntilBurst(t, &dials)
	wg.Wait()
	close(errs)
	var first []string
	for err := range errs {
		if len(first) < 5 {
			first = append(first, err.Error())
		}
	}
	t.Logf("cap %d: %d/%d control requests answered; waits %d (%v), credentials refused %d", max, answered.Load(), n,
		st.Waits(), st.WaitTime().Round(time.Millisecond), st.Credentials())
	if answered.Load() != n {
		t.Fatalf("%d/%d parallel control requests answered; first errors: %s", answered.Load(), n, strings.Join(first, "; "))
	}
	if st.Waits() == 0 { // new policy only
		t.Error("no connection waited at the cap: the test did not fill the server")
	}
}

// TestHTTPWaitInBacklog: while every place is busy, a burst of 1,000
// connections with their requests waits in the kernel's accept queue (one
// accepted, waiting for a place): the server holds its cap, and neither
// its goroutines nor its connections grow with the burst. Released, every
// one is answered.
func TestHTTPWaitInBacklog(t *testing.T) {
	const n, max = 1000, 8
	needBacklog(t, n)
	r := newRig(t)
	g := newGate(max)
	srv, st := metricsServer(t, r, g, ServerConfig{MaxConns: max, IdleTimeout: 10 * time.Minute})
	addr := srv.Addr()
	req := []byte("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	dial := func() {
		c, err := net.Dial("tcp", addr.String())
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		if _, err := c.Write(req); err != nil {
			t.Fatal(err)
		}
	}
	for range max {
		dial()
	}
	eventually(t, "the cap is busy", func() bool { return g.inflight.Load() == max })
	before := runtime.NumGoroutine()
	for range n - max {
		dial()
	}
	eventually(t, "the burst waits in the accept queue", func() bool { return st.Paused() && listenQueue(t, addr) == n-max-1 })
	during := runtime.NumGoroutine()
	ll := limitOf(srv)
	t.Logf("%d connections queued by the kernel, 1 waiting for a place, %d held; goroutines %d before the burst, %d during", listenQueue(t, addr), ll.Open(), before, during)
	if during > before+4 || ll.Open() != max {
		t.Fatalf("while the burst waits: goroutines %d (before it %d), held %d (cap %d)", during, before, ll.Open(), max)
	}
	g.open()
	for i, c := range conns {
		c.SetReadDeadline(time.Now().Add(2 * time.Minute))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("connection %d of %d: %v", i, n, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("connection %d: %s", i, resp.Status)
		}
	}
	if ll.peakOpen() > max || st.Evicted() != n-max {
		t.Fatalf("peak held %d (cap %d), idle evicted %d (want %d)", ll.peakOpen(), max, st.Evicted(), n-max)
	}
}

// TestHTTPIdleFloodBounded: 2,000 keep-alive connections, each having
// sent one request and staying open, against a cap of 8: each is
// answered, the server never holds more than 8 (the longest idle makes
// room for the next, the rest wait in the backlog), and a fresh scrape is
// served while they are held. The replaced ones are counted exactly.
func TestHTTPIdleFloodBounded(t *testing.T) {
	const n, max = 2000, 8
	needBacklog(t, n)
	r := newRig(t)
	srv, st := metricsServer(t, r, nil, ServerConfig{MaxConns: max, IdleTimeout: 10 * time.Minute})
	req := []byte("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
	held := make([]net.Conn, 0, n)
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	for i := 0; i < n; i++ {
		c, err := net.Dial("tcp", srv.Addr().String())
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		held = append(held, c)
		if _, err := c.Write(req); err != nil {
			t.Fatalf("connection %d: write: %v", i, err)
		}
	}
	for i, c := range held {
		c.SetReadDeadline(time.Now().Add(2 * time.Minute))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("held connection %d not answered: %v", i, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || resp.Close {
			t.Fatalf("held connection %d: %s, close %v", i, resp.Status, resp.Close)
		}
	}
	ll := limitOf(srv)
	eventually(t, "the last connections are idle and held", func() bool { return st.Evicted() == n-max && ll.Open() == max })
	hc := &http.Client{Timeout: time.Minute, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := hc.Get("http://" + srv.Addr().String() + "/metrics")
	if err != nil {
		t.Fatalf("fresh scrape while %d connections are held: %v", n, err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("fresh scrape: %v %s", err, resp.Status)
	}
	if err := validMetrics(body); err != nil {
		t.Fatalf("fresh scrape: %v", err)
	}
	t.Logf("%d idle connections: peak held %d, idle evicted %d, waits %d", n, ll.peakOpen(), st.Evicted(), st.Waits())
	if ll.peakOpen() > max || st.Evicted() != n+1-max {
		t.Fatalf("peak held %d (cap %d), idle evicted %d (want %d)", ll.peakOpen(), max, st.Evicted(), n+1-max)
	}
	// The first ones were closed to make room.
	if !closedByPeer(t, held[0]) {
		t.Fatal("the longest idle connection is still open")
	}
}

// TestHTTPSlowloris: clients that connect, send half a request and stall,
// reconnecting as soon as the server closes them, hold every place; a
// legitimate request made then is served within the read timeout and a
// margin: the stalled connections are closed by the read (header)
// timeout, and the waiting request is ahead of their reconnections in
// the backlog. The stalled connections are busy, never evicted.
func TestHTTPSlowloris(t *testing.T) {
	const max = 4
	const readTimeout = 2 * time.Second
	const margin = 15 * time.Second
	r := newRig(t)
	srv, st := metricsServer(t, r, nil, ServerConfig{MaxConns: max, ReadTimeout: readTimeout})
	addr := srv.Addr().String()
	stop := make(chan struct{})
	var closed atomic.Int32
	var wg sync.WaitGroup
	var mu sync.Mutex
	var open []net.Conn
	for range max {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				c, err := net.Dial("tcp", addr)
				if err != nil {
					time.Sleep(10 * time.Millisecond)
					continue
				}
				mu.Lock()
				open = append(open, c)
				mu.Unlock()
				c.Write([]byte("GET /healthz HTTP/1.1\r\nHost: x\r\n"))
				if _, err := io.Copy(io.Discard, c); err == nil || !errors.Is(err, net.ErrClosed) {
					closed.Add(1) // closed by the server (EOF or reset), not by the test
				}
				c.Close()
			}
		}()
	}
	defer func() {
		close(stop)
		mu.Lock()
		for _, c := range open {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	}()
	ll := limitOf(srv)
	eventually(t, "the stalled connections hold every place", func() bool { return ll.Open() == max })
	start := time.Now()
	hc := &http.Client{Timeout: readTimeout + margin, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := hc.Get("http://" + addr + "/healthz")
	took := time.Since(start)
	if err != nil {
		t.Fatalf("a request behind %d stalled connections was not served within the read timeout %v + %v: %v (waits %d, stalled closed %d)",
			max, readTimeout, margin, err, st.Waits(), closed.Load())
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	t.Logf("served after %v behind %d stalled connections (read timeout %v); stalled ones closed by the server %d, waits %d, idle evicted %d",
		took.Round(time.Millisecond), max, readTimeout, closed.Load(), st.Waits(), st.Evicted())
	if resp.StatusCode != http.StatusOK || string(body) != "ok\n" {
		t.Fatalf("%s %q", resp.Status, body)
	}
	if closed.Load() < 1 || st.Evicted() != 0 {
		t.Fatalf("stalled connections closed %d, idle evicted %d; want >= 1 (by the read timeout), 0", closed.Load(), st.Evicted())
	}
}
