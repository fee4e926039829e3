package control

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// The bounds of SECURITY.md, "Connections to the metrics port": headers
// within 5 s (or the read timeout, if shorter), the whole request within
// the read timeout, the response within the write timeout, headers of at
// most 16 KiB, a connection busy beyond both timeouts closed.
// TestHTTPServerBounds and the LimitListener tests hold the cap and the
// idle timeout; these hold the rest (scripts/mutants.sh removes each and
// expects a failure here).

// serveBounded serves h on loopback within c and returns the address.
func serveBounded(t *testing.T, h http.Handler, c ServerConfig) string {
	t.Helper()
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := NewHTTPServer(raw, h, c)
	go srv.Serve()
	t.Cleanup(func() { srv.Shutdown(context.Background()) })
	return raw.Addr().String()
}

// TestServerBoundsDefaults: the servers' http.Server carries the documented
// numbers (the 5 s header cap cannot be shortened for a test, so it is read
// back here; net/http enforces it).
func TestServerBoundsDefaults(t *testing.T) {
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	for _, tc := range []struct {
		c                         ServerConfig
		header, read, write, idle time.Duration
	}{
		{ServerConfig{}, 5 * time.Second, 10 * time.Second, 30 * time.Second, 60 * time.Second},
		{ServerConfig{ReadTimeout: 2 * time.Second}, 2 * time.Second, 2 * time.Second, 30 * time.Second, 60 * time.Second},
		{ServerConfig{ReadTimeout: time.Minute, WriteTimeout: time.Second, IdleTimeout: 3 * time.Second}, 5 * time.Second, time.Minute, time.Second, 3 * time.Second},
	} {
		srv := NewHTTPServer(raw, http.NotFoundHandler(), tc.c)
		s := srv.srv
		if s.ReadHeaderTimeout != tc.header || s.ReadTimeout != tc.read || s.WriteTimeout != tc.write || s.IdleTimeout != tc.idle {
			t.Errorf("%+v: header %v read %v write %v idle %v; want %v %v %v %v", tc.c,
				s.ReadHeaderTimeout, s.ReadTimeout, s.WriteTimeout, s.IdleTimeout, tc.header, tc.read, tc.write, tc.idle)
		}
		if s.MaxHeaderBytes != 16<<10 {
			t.Errorf("MaxHeaderBytes %d, want 16 KiB", s.MaxHeaderBytes)
		}
		// A connection busy beyond the read and write timeouts together
		// (a handler that does not return) is closed by the listener.
		if b := limitOf(srv).busyLimit; b != tc.read+tc.write {
			t.Errorf("%+v: busy limit %v, want the read and write timeouts together, %v", tc.c, b, tc.read+tc.write)
		}
	}
}

// TestServerBoundsSlowBody: a client that sends its headers at once but
// trickles the body past the read timeout does not get its request read:
// the whole request, not only the headers, is bounded.
func TestServerBoundsSlowBody(t *testing.T) {
	addr := serveBounded(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, "body: "+err.Error(), http.StatusRequestTimeout)
			return
		}
		w.Write(b)
	}), ServerConfig{ReadTimeout: 300 * time.Millisecond})
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write([]byte("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n12345"))
	time.Sleep(time.Second)
	c.Write([]byte("67890")) // may fail: the server may have closed already
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return // closed without an answer: bounded
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode == http.StatusOK || string(b) == "1234567890" {
		t.Fatalf("a body that took 1 s with a 300 ms read timeout was read: %d %q", resp.StatusCode, b)
	}
}

// TestServerBoundsSlowReader: a client that sends a request and then does
// not read holds the handler for at most the write timeout: the response
// is cut, not delivered in full once the client reads at last.
func TestServerBoundsSlowReader(t *testing.T) {
	const size = 64 << 20 // far beyond what the loopback socket buffers hold
	chunk := make([]byte, 1<<20)
	done := make(chan error, 1)
	addr := serveBounded(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "67108864")
		var err error
		for n := 0; n < size && err == nil; n += len(chunk) {
			_, err = w.Write(chunk)
		}
		done <- err
	}), ServerConfig{WriteTimeout: 300 * time.Millisecond})
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
	var herr error
	select {
	case herr = <-done:
	case <-time.After(1500 * time.Millisecond):
		// Still writing after 1.5 s: unbounded. Read to let it finish.
	}
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	got, _ := io.Copy(io.Discard, c)
	if herr == nil {
		select {
		case herr = <-done:
		case <-time.After(5 * time.Second):
		}
	}
	if herr == nil || got >= size {
		t.Fatalf("a client that did not read for 1.5 s (write timeout 300 ms) got %d of %d bytes; handler's write error %v", got, size, herr)
	}
}

// TestServerBoundsHeaderBytes: headers over 16 KiB are refused with 431;
// 8 KiB are served.
func TestServerBoundsHeaderBytes(t *testing.T) {
	addr := serveBounded(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok\n")) }), ServerConfig{})
	for _, tc := range []struct {
		n    int
		want int
	}{{8 << 10, http.StatusOK}, {32 << 10, http.StatusRequestHeaderFieldsTooLarge}} {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(5 * time.Second))
		req := "GET / HTTP/1.1\r\nHost: x\r\nX-Pad: " + strings.Repeat("a", tc.n) + "\r\n\r\n"
		if _, err := c.Write([]byte(req)); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("%d bytes of headers: %v", tc.n, err)
		}
		resp.Body.Close()
		c.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("%d bytes of headers: status %d, want %d", tc.n, resp.StatusCode, tc.want)
		}
	}
}
