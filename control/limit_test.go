package control

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// closedByPeer reports whether the server closed c (EOF or reset within
// 5 s, after any bytes it sent).
func closedByPeer(t *testing.T, c net.Conn) bool {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err := io.Copy(io.Discard, c)
	var ne net.Error
	return !(errors.As(err, &ne) && ne.Timeout())
}

// stillOpen reports whether c stays open, unread, for d.
func stillOpen(c net.Conn, d time.Duration) bool {
	c.SetReadDeadline(time.Now().Add(d))
	_, err := c.Read(make([]byte, 1))
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// listenQueue is the number of connections the kernel holds in the
// accept queue of the TCP listener at addr (/proc/net/tcp, rx_queue of
// the LISTEN socket), -1 when it is not found.
func listenQueue(t *testing.T, addr net.Addr) int {
	t.Helper()
	port := addr.(*net.TCPAddr).Port
	b, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) < 5 || f[3] != "0A" || !strings.HasSuffix(f[1], fmt.Sprintf(":%04X", port)) {
			continue
		}
		_, rx, _ := strings.Cut(f[4], ":")
		n, err := strconv.ParseInt(rx, 16, 64)
		if err != nil {
			t.Fatalf("/proc/net/tcp: %q", line)
		}
		return int(n)
	}
	return -1
}

// eventually polls cond every 5 ms until it holds or 20 s pass.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(20 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("not within 20 s: %s", what)
		}
	}
}

// TestLimitListener: at the cap with every connection busy (a new one,
// its request still to come, is busy) a connection accepted waits for a
// place, neither handed out nor closed, and the listener accepts nothing
// more: the next connection waits in the kernel's accept queue. The pause
// is counted. When a held connection turns idle, the waiting one takes
// its place (the idle one is closed and counted) and the next one is
// accepted; with several idle, the longest idle makes room; a closed
// connection frees its place.
func TestLimitListener(t *testing.T) {
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var logged []string
	var mu sync.Mutex
	st := &ServerStats{Name: "metrics"}
	ll := NewLimitListener(raw, 2, st, func(_ slog.Level, key, _ string, _ ...any) {
		mu.Lock()
		logged = append(logged, key)
		mu.Unlock()
	})
	defer ll.Close()
	accepted := make(chan net.Conn, 8)
	go func() {
		for {
			c, err := ll.Accept()
			if err != nil {
				close(accepted)
				return
			}
			accepted <- c
		}
	}()
	dial := func() net.Conn {
		c, err := net.Dial("tcp", raw.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	c1, c2 := dial(), dial()
	s1, s2 := <-accepted, <-accepted
	ll.ConnState(s1, http.StateNew)
	ll.ConnState(s2, http.StateNew)
	if ll.Open() != 2 || st.Open() != 2 {
		t.Fatalf("open %d/%d, want 2", ll.Open(), st.Open())
	}
	// Both busy (new, no request yet): the third waits for a place, the
	// fourth in the kernel's queue.
	c3 := dial()
	eventually(t, "the third connection waits at the cap", st.Paused)
	c4 := dial()
	eventually(t, "the fourth connection waits in the accept queue", func() bool { return listenQueue(t, raw.Addr()) == 1 })
	if !stillOpen(c3, 200*time.Millisecond) || !stillOpen(c4, 10*time.Millisecond) || len(accepted) != 0 {
		t.Fatal("a connection over the cap (all busy) was closed or handed out")
	}
	if st.Waits() != 1 || st.Evicted() != 0 || ll.Open() != 2 {
		t.Fatalf("waits %d, evicted %d, open %d; want 1, 0, 2", st.Waits(), st.Evicted(), ll.Open())
	}
	ll.ConnState(s1, http.StateActive)
	ll.ConnState(s2, http.StateActive)
	if len(accepted) != 0 {
		t.Fatal("handed out at the cap while every connection is busy")
	}
	// s2 finishes its request and turns idle: c3 takes its place; c4 is
	// accepted and waits in turn.
	ll.ConnState(s2, http.StateIdle)
	s3 := <-accepted
	if !closedByPeer(t, c2) {
		t.Fatal("the idle connection was not closed for the waiting one")
	}
	eventually(t, "the fourth connection is accepted and waits", func() bool { return listenQueue(t, raw.Addr()) == 0 && st.Waits() == 2 })
	if !st.Paused() || st.WaitTime() <= 0 || st.Evicted() != 1 || ll.Open() != 2 {
		t.Fatalf("paused %v, waited %v, evicted %d, open %d; want true, > 0, 1, 2", st.Paused(), st.WaitTime(), st.Evicted(), ll.Open())
	}
	// s1 then s3 turn idle: the fourth replaces s1, the longest idle.
	ll.ConnState(s3, http.StateActive)
	ll.ConnState(s1, http.StateIdle)
	time.Sleep(2 * time.Millisecond)
	ll.ConnState(s3, http.StateIdle)
	s4 := <-accepted
	if !closedByPeer(t, c1) {
		t.Fatal("the longest idle connection was not closed for the waiting one")
	}
	if !stillOpen(c3, 100*time.Millisecond) {
		t.Fatal("the more recently idle connection was closed")
	}
	if st.Paused() || st.Waits() != 2 || st.Evicted() != 2 || ll.Open() != 2 {
		t.Fatalf("paused %v, waits %d, evicted %d, open %d; want false, 2, 2, 2", st.Paused(), st.Waits(), st.Evicted(), ll.Open())
	}
	// Closing frees the place (twice is harmless, the count drops once).
	s4.Close()
	s4.Close()
	if ll.Open() != 1 || st.Open() != 1 {
		t.Fatalf("open %d/%d after a close, want 1", ll.Open(), st.Open())
	}
	if ll.peakOpen() != 2 {
		t.Fatalf("peak %d, want 2", ll.peakOpen())
	}
	mu.Lock()
	got := strings.Join(logged, ",")
	mu.Unlock()
	if got != "metrics-at-cap,metrics-evicted,metrics-at-cap,metrics-evicted" {
		t.Fatalf("reports %q", got)
	}
	ll.Close()
	if _, ok := <-accepted; ok {
		t.Fatal("Accept went on after Close")
	}
}

// TestLimitListenerWaitCloses: an Accept whose connection waits at the
// cap returns net.ErrClosed when the listener is closed (the connection
// is closed), and the pause ends.
func TestLimitListenerWaitCloses(t *testing.T) {
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	st := &ServerStats{Name: "metrics"}
	ll := NewLimitListener(raw, 1, st, nil)
	c, err := net.Dial("tcp", raw.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, err := ll.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	errc := make(chan error, 1)
	go func() { _, err := ll.Accept(); errc <- err }()
	c2, err := net.Dial("tcp", raw.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	eventually(t, "the second connection waits at the cap", st.Paused)
	ll.Close()
	if err := <-errc; !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Accept waiting at the cap, after Close: %v", err)
	}
	if st.Paused() || st.Waits() != 1 {
		t.Fatalf("paused %v, waits %d after Close; want false, 1", st.Paused(), st.Waits())
	}
	if !closedByPeer(t, c2) {
		t.Fatal("the waiting connection was left open by Close")
	}
}

// chanListener hands out the connections sent on conns and tells on
// accepting when an Accept waits for one.
type chanListener struct {
	conns     chan net.Conn
	accepting chan struct{}
	closed    chan struct{}
	once      sync.Once
}

func (f *chanListener) Accept() (net.Conn, error) {
	f.accepting <- struct{}{}
	select {
	case c := <-f.conns:
		return c, nil
	case <-f.closed:
		return nil, net.ErrClosed
	}
}
func (f *chanListener) Close() error   { f.once.Do(func() { close(f.closed) }); return nil }
func (f *chanListener) Addr() net.Addr { return &net.TCPAddr{} }

// TestLimitListenerRace: the held connection was idle while Accept waited
// for the next one, and turned busy before it came: the accepted
// connection then waits for a place (one over the cap, not served), and
// takes the place of the next connection to close.
func TestLimitListenerRace(t *testing.T) {
	f := &chanListener{conns: make(chan net.Conn), accepting: make(chan struct{}, 1), closed: make(chan struct{})}
	st := &ServerStats{Name: "control"}
	ll := NewLimitListener(f, 1, st, nil)
	defer ll.Close()
	a, a2 := net.Pipe()
	defer a2.Close()
	b, b2 := net.Pipe()
	defer b2.Close()
	go func() { <-f.accepting; f.conns <- a }()
	s1, err := ll.Accept()
	if err != nil {
		t.Fatal(err)
	}
	ll.ConnState(s1, http.StateActive)
	ll.ConnState(s1, http.StateIdle)
	got := make(chan net.Conn, 1)
	go func() {
		c, err := ll.Accept()
		if err != nil {
			t.Error(err)
		}
		got <- c
	}()
	<-f.accepting // s1 is idle now
	ll.ConnState(s1, http.StateActive)
	f.conns <- b
	eventually(t, "the accepted connection waits for a place", st.Paused)
	select {
	case <-got:
		t.Fatal("admitted over the cap")
	case <-time.After(100 * time.Millisecond):
	}
	if ll.Open() != 1 || st.Evicted() != 0 {
		t.Fatalf("open %d, evicted %d; want 1, 0", ll.Open(), st.Evicted())
	}
	s1.Close()
	s2 := <-got
	if s2 == nil || s2.(*limitConn).Conn != b || ll.Open() != 1 || st.Evicted() != 0 || st.Waits() != 1 || st.Paused() {
		t.Fatalf("after the close: open %d, evicted %d, waits %d, paused %v; want 1, 0, 1, false", ll.Open(), st.Evicted(), st.Waits(), st.Paused())
	}
}

// TestLimitListenerBusyLimit: a connection busy beyond the busy limit is
// closed and counted, and keeps its place until the server closes it; an
// idle one is left alone.
func TestLimitListenerBusyLimit(t *testing.T) {
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	st := &ServerStats{Name: "metrics"}
	ll := NewLimitListener(raw, 4, st, nil)
	ll.busyLimit = 200 * time.Millisecond
	defer ll.Close()
	dial := func() (net.Conn, net.Conn) {
		c, err := net.Dial("tcp", raw.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		s, err := ll.Accept()
		if err != nil {
			t.Fatal(err)
		}
		return c, s
	}
	c1, s1 := dial()
	ll.ConnState(s1, http.StateActive)
	c2, s2 := dial()
	ll.ConnState(s2, http.StateActive)
	ll.ConnState(s2, http.StateIdle)
	if !closedByPeer(t, c1) {
		t.Fatal("a connection busy beyond the busy limit was left open")
	}
	if st.BusyClosed() != 1 || ll.Open() != 2 {
		t.Fatalf("busy closed %d, open %d; want 1, 2 (the closed one keeps its place until the server closes it)", st.BusyClosed(), ll.Open())
	}
	if !stillOpen(c2, 400*time.Millisecond) || st.BusyClosed() != 1 {
		t.Fatal("an idle connection was closed by the busy limit")
	}
	s1.Close()
	if ll.Open() != 1 {
		t.Fatalf("open %d, want 1", ll.Open())
	}
}

// fakeListener fails Accept with errs, then hands out one end of a pipe,
// then blocks until closed.
type fakeListener struct {
	errs   []error
	conn   net.Conn
	closed chan struct{}
	once   sync.Once
}

func (f *fakeListener) Accept() (net.Conn, error) {
	if len(f.errs) > 0 {
		err := f.errs[0]
		f.errs = f.errs[1:]
		return nil, err
	}
	if c := f.conn; c != nil {
		f.conn = nil
		return c, nil
	}
	<-f.closed
	return nil, net.ErrClosed
}
func (f *fakeListener) Close() error   { f.once.Do(func() { close(f.closed) }); return nil }
func (f *fakeListener) Addr() net.Addr { return &net.TCPAddr{} }

// TestLimitListenerAcceptErrors: EMFILE and friends are counted,
// reported and retried with a growing backoff; Accept returns the next
// connection, and net.ErrClosed only after Close.
func TestLimitListenerAcceptErrors(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	f := &fakeListener{errs: []error{syscall.EMFILE, syscall.EMFILE, syscall.ENFILE, syscall.ECONNABORTED}, conn: a, closed: make(chan struct{})}
	reports := 0
	st := &ServerStats{Name: "control"}
	ll := NewLimitListener(f, 4, st, func(_ slog.Level, key, _ string, _ ...any) {
		if key != "control-accept" {
			t.Errorf("report key %q", key)
		}
		reports++
	})
	var slept []time.Duration
	ll.sleep = func(d time.Duration, _ <-chan struct{}) { slept = append(slept, d) }
	c, err := ll.Accept()
	if err != nil || c == nil {
		t.Fatalf("Accept: %v", err)
	}
	if st.AcceptErrors() != 4 || reports != 4 {
		t.Fatalf("accept errors %d, reports %d; want 4", st.AcceptErrors(), reports)
	}
	want := []time.Duration{5 * time.Millisecond, 10 * time.Millisecond, 20 * time.Millisecond, 40 * time.Millisecond}
	if len(slept) != len(want) {
		t.Fatalf("backoffs %v, want %v", slept, want)
	}
	for i := range want {
		if slept[i] != want[i] {
			t.Fatalf("backoffs %v, want %v", slept, want)
		}
	}
	ll.Close()
	if _, err := ll.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Accept after Close: %v", err)
	}
}

// TestHTTPServerBounds: a keep-alive connection is closed after
// IdleTimeout, a silent one after the header timeout (ReadTimeout here),
// and a server holding MaxConns idle connections still answers a new
// client (the longest idle makes room).
func TestHTTPServerBounds(t *testing.T) {
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	st := &ServerStats{Name: "metrics"}
	srv := NewHTTPServer(raw, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok\n")) }),
		ServerConfig{MaxConns: 4, ReadTimeout: 300 * time.Millisecond, IdleTimeout: 300 * time.Millisecond, Stats: st})
	go srv.Serve()
	defer srv.Shutdown(context.Background())
	get := func() net.Conn {
		c, err := net.Dial("tcp", raw.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		c.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("request: %v", err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 || resp.Close {
			t.Fatalf("status %d close %v", resp.StatusCode, resp.Close)
		}
		return c
	}
	idle := get()
	if !closedByPeer(t, idle) {
		t.Fatal("an idle keep-alive connection outlived IdleTimeout")
	}
	silent, err := net.Dial("tcp", raw.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	if !closedByPeer(t, silent) {
		t.Fatal("a silent connection outlived the header timeout")
	}
	for range 12 {
		get()
	}
	if st.Evicted() < 8 || limitOf(srv).Open() > 4 {
		t.Fatalf("evicted %d, open %d; want >= 8 and <= 4", st.Evicted(), limitOf(srv).Open())
	}
}

func limitOf(s *HTTPServer) *LimitListener { return s.ln }

// TestSocketRefusedAtAccept: the control socket reads SO_PEERCRED at
// accept and closes a refused peer at once (before it sends anything,
// without holding a connection), which the client reports as a refusal;
// an admitted peer stays connected.
func TestSocketRefusedAtAccept(t *testing.T) {
	r := newRig(t)
	for _, admit := range []bool{false, true} {
		path := filepath.Join(t.TempDir(), "x.sock")
		ss, err := ListenSocket(path, -1)
		if err != nil {
			t.Fatal(err)
		}
		st := &ServerStats{Name: "control"}
		go ss.ServeConfig(APIHandler(r.state), func(Cred) bool { return admit }, ServerConfig{Stats: st})
		c, err := net.Dial("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		if admit {
			if !stillOpen(c, 300*time.Millisecond) || st.Credentials() != 0 {
				t.Fatalf("admitted peer: closed, or counted refused (%d)", st.Credentials())
			}
		} else {
			if !closedByPeer(t, c) {
				t.Fatal("refused peer left connected")
			}
			if st.Credentials() != 1 || st.Open() != 0 {
				t.Fatalf("credentials refused %d, open %d; want 1, 0", st.Credentials(), st.Open())
			}
			if err := NewClient(path).Get(context.Background(), PathStatus, &StatusInfo{}); err == nil || !strings.Contains(err.Error(), "this user") {
				t.Fatalf("client as refused user: %v", err)
			}
		}
		c.Close()
		ss.Close()
	}
}

// TestServerMetricsLint: the xrnic_server_* families pass the linter.
func TestServerMetricsLint(t *testing.T) {
	problems, err := testutil.CollectAndLint(serverCollector{{Name: "metrics", Max: 64}, {Name: "control", Max: 32}, {Name: "mpa"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("%s: %s", p.Metric, p.Text)
	}
}
