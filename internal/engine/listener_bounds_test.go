package engine

import (
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestListenerTotalBoundEvictsHeaviest: a connection over MaxSetup (within
// its address's MaxSetupPerPeer) evicts the oldest silent connection of
// the address holding the most connections in setup, not one of its own
// address: the flood pays, the quiet address keeps its connection.
func TestListenerTotalBoundEvictsHeaviest(t *testing.T) {
	_, ln := listenFor(t, ListenConfig{MaxSetup: 3, MaxSetupPerPeer: 100})
	dial := func(src string) net.Conn {
		t.Helper()
		n := min(ln.Stats().InSetup+1, 3)
		dl := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
		c, err := dl.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		waitInSetup(t, ln, n) // in order: the first of each address is its oldest
		return c
	}
	quiet := dial("127.0.0.2")
	flood := []net.Conn{dial("127.0.0.1"), dial("127.0.0.1")}
	dial("127.0.0.2") // over MaxSetup 3
	for deadline := time.Now().Add(5 * time.Second); ln.Stats().Evicted == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("stats %+v: a 4th connection with MaxSetup 3 evicted nothing", ln.Stats())
		}
	}
	flood[0].SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := flood[0].Read(make([]byte, 1)); !errors.Is(err, syscall.ECONNRESET) {
		t.Errorf("oldest connection of the heaviest address: %v, want a reset", err)
	}
	for name, c := range map[string]net.Conn{"the quiet address's connection": quiet, "the newer flood connection": flood[1]} {
		c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		if _, err := c.Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Errorf("%s: %v, want it still waiting in setup", name, err)
		}
	}
	if st := ln.Stats(); st.Evicted != 1 || st.Overflow != 0 || st.InSetup != 3 {
		t.Errorf("stats %+v, want 1 evicted, none refused, 3 in setup", st)
	}
}

// TestListenerSetupTimeout: a peer that connects and sends no MPA Request
// holds its setup slot for at most the device's ConnTimeout, even with no
// newer connection to evict it; then it is closed, counted as malformed
// and reported.
func TestListenerSetupTimeout(t *testing.T) {
	d, err := Open(Config{ConnTimeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	var mu sync.Mutex
	var reported []error
	ln, err := d.ListenConfig("tcp", "127.0.0.1:0", ListenConfig{OnSetupError: func(_ net.Addr, err error) {
		mu.Lock()
		reported = append(reported, err)
		mu.Unlock()
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err = c.Read(make([]byte, 1))
	if errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) {
		t.Logf("silent peer closed after %v", time.Since(start).Round(time.Millisecond))
	} else {
		t.Fatalf("silent peer with a 300 ms ConnTimeout: read %v after %v, want the connection closed", err, time.Since(start).Round(time.Millisecond))
	}
	waitInSetup(t, ln, 0)
	if st := ln.Stats(); st.Malformed != 1 {
		t.Fatalf("stats %+v, want 1 malformed", st)
	}
	mu.Lock()
	defer mu.Unlock()
	var ce *ConnError
	if len(reported) != 1 || !errors.As(reported[0], &ce) {
		t.Fatalf("reported %v, want one *ConnError", reported)
	}
}
