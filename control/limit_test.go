package control

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
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

// TestLimitListener: at the cap with every connection busy, a new one is
// closed at once and counted; with one idle, the idle one is closed in
// its favour (the longest idle first) and counted; a closed connection
// frees its place.
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
	ll.ConnState(s1, http.StateActive)
	ll.ConnState(s2, http.StateActive)
	if ll.Open() != 2 || st.Open() != 2 {
		t.Fatalf("open %d/%d, want 2", ll.Open(), st.Open())
	}
	// Both busy: the third is closed at accept.
	c3 := dial()
	if !closedByPeer(t, c3) {
		t.Fatal("a connection over the cap (all busy) was not closed")
	}
	if st.OverLimit() != 1 || st.Evicted() != 0 {
		t.Fatalf("over limit %d, evicted %d; want 1, 0", st.OverLimit(), st.Evicted())
	}
	// s2 then s1 go idle: the fourth replaces s2, the longest idle.
	ll.ConnState(s2, http.StateIdle)
	time.Sleep(2 * time.Millisecond)
	ll.ConnState(s1, http.StateIdle)
	c4 := dial()
	s4 := <-accepted
	if !closedByPeer(t, c2) {
		t.Fatal("the longest idle connection was not closed for the new one")
	}
	if !stillOpen(c1, 100*time.Millisecond) {
		t.Fatal("the more recently idle connection was closed")
	}
	if st.OverLimit() != 1 || st.Evicted() != 1 || ll.Open() != 2 {
		t.Fatalf("over limit %d, evicted %d, open %d; want 1, 1, 2", st.OverLimit(), st.Evicted(), ll.Open())
	}
	// Closing frees the place (twice is harmless, the count drops once).
	s4.Close()
	s4.Close()
	if ll.Open() != 1 {
		t.Fatalf("open %d after a close, want 1", ll.Open())
	}
	_ = c4
	mu.Lock()
	got := strings.Join(logged, ",")
	mu.Unlock()
	if got != "metrics-over-limit,metrics-evicted" {
		t.Fatalf("reports %q", got)
	}
	ll.Close()
	if _, ok := <-accepted; ok {
		t.Fatal("Accept went on after Close")
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
