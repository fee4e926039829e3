package kernel

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"syscall"
	"testing"
	"time"
)

// pair returns a connected loopback pair: ours adapted by NewConn, and
// the peer's plain socket.
func pair(t *testing.T) (*tcpConn, *net.TCPConn) {
	t.Helper()
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	acc := make(chan *net.TCPConn, 1)
	go func() {
		c, _ := ln.AcceptTCP()
		acc <- c
	}()
	c, err := net.DialTCP("tcp", nil, ln.Addr().(*net.TCPAddr))
	if err != nil {
		t.Fatal(err)
	}
	peer := <-acc
	if peer == nil {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { c.Close(); peer.Close() })
	return NewConn(c).(*tcpConn), peer
}

// readUntil TryReads until want bytes arrived or the deadline.
func readUntil(t *testing.T, c *tcpConn, want int) []byte {
	t.Helper()
	var got []byte
	buf := make([]byte, 4096)
	for end := time.Now().Add(5 * time.Second); len(got) < want; {
		n, err := c.TryRead(buf)
		if err != nil {
			t.Fatalf("TryRead after %d bytes: %v", len(got), err)
		}
		got = append(got, buf[:n]...)
		if time.Now().After(end) {
			t.Fatalf("only %d of %d bytes", len(got), want)
		}
	}
	return got
}

// TestTryRead: nothing yet is (0, nil), data comes as written, the peer's
// FIN is io.EOF (and stays so), a reset is an error.
func TestTryRead(t *testing.T) {
	c, peer := pair(t)
	buf := make([]byte, 64)
	if n, err := c.TryRead(buf); n != 0 || err != nil {
		t.Fatalf("empty socket: %d, %v", n, err)
	}
	peer.Write([]byte("hello"))
	if got := readUntil(t, c, 5); string(got) != "hello" {
		t.Fatalf("got %q", got)
	}
	peer.CloseWrite()
	var err error
	for end := time.Now().Add(5 * time.Second); err == nil && time.Now().Before(end); {
		_, err = c.TryRead(buf)
	}
	if err != io.EOF {
		t.Fatalf("after the FIN: %v, want io.EOF", err)
	}
	if _, err := c.TryRead(buf); err != io.EOF {
		t.Fatalf("again after the FIN: %v", err)
	}

	c2, peer2 := pair(t)
	peer2.SetLinger(0)
	peer2.Close()
	err = nil
	for end := time.Now().Add(5 * time.Second); err == nil && time.Now().Before(end); {
		_, err = c2.TryRead(buf)
	}
	if !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("after a reset: %v, want ECONNRESET", err)
	}
}

// TestReadLoopWithTryReaders: a ReadLoop reader and a busy-polling
// TryReader take turns under one lock, as the engine's reader and a CQ
// poller do; together they see the peer's 4 MiB stream whole and in
// order, and ReadLoop ends once the stream has.
func TestReadLoopWithTryReaders(t *testing.T) {
	c, peer := pair(t)
	want := make([]byte, 4<<20)
	for i := range want {
		want[i] = byte(rand.Uint32())
	}
	var (
		mu            sync.Mutex
		got           []byte
		ended         bool
		byLoop, byTry int
	)
	buf := make([]byte, 64<<10)
	step := func(loop bool) (done bool) {
		for {
			n, err := c.TryRead(buf)
			got = append(got, buf[:n]...)
			if loop {
				byLoop += n
			} else {
				byTry += n
			}
			if err == io.EOF {
				ended = true
				return true
			}
			if err != nil {
				t.Errorf("TryRead: %v", err)
				return true
			}
			if n == 0 || !loop {
				return false
			}
		}
	}
	stop := make(chan struct{})
	polled := make(chan struct{})
	go func() {
		defer close(polled)
		for {
			select {
			case <-stop:
				return
			default:
			}
			if mu.TryLock() {
				if !ended {
					step(false)
				}
				mu.Unlock()
			}
		}
	}()
	go func() {
		for off := 0; off < len(want); {
			k := min(len(want)-off, 1+rand.IntN(20000))
			peer.Write(want[off : off+k])
			off += k
		}
		peer.CloseWrite()
	}()
	errc := make(chan error, 1)
	go func() {
		errc <- c.ReadLoop(func() bool {
			mu.Lock()
			defer mu.Unlock()
			if byTry == 0 && !ended {
				// Leave the first bytes to the poller: on a loaded
				// machine the loop could otherwise win every turn.
				// Bytes left behind raise no wake-up, but the
				// poller spins and later writes wake the loop.
				return false
			}
			return ended || step(true)
		})
	}()
	select {
	case err := <-errc:
		if err != nil {
			t.Fatalf("ReadLoop: %v", err)
		}
	case <-time.After(20 * time.Second):
		mu.Lock()
		n := byTry
		mu.Unlock()
		t.Fatalf("ReadLoop did not end with the stream (the poller read %d bytes; it must read first)", n)
	}
	close(stop)
	<-polled
	if !bytes.Equal(got, want) {
		t.Fatalf("got %d bytes, want %d, equal prefix %d", len(got), len(want), commonPrefix(got, want))
	}
	t.Logf("ReadLoop read %d bytes, the poller %d", byLoop, byTry)
	if byTry == 0 {
		t.Error("the busy poller never read anything: TryRead does not run beside ReadLoop")
	}
	if byLoop == 0 {
		t.Log("the poller read everything; ReadLoop only saw the end")
	}
}

func commonPrefix(a, b []byte) int {
	i := 0
	for i < len(a) && i < len(b) && a[i] == b[i] {
		i++
	}
	return i
}

// TestTryReadAllocs: a TryRead allocates nothing (it runs on every empty
// poll of a spinning application).
func TestTryReadAllocs(t *testing.T) {
	c, _ := pair(t)
	buf := make([]byte, 64)
	if a := testing.AllocsPerRun(100, func() { c.TryRead(buf) }); a != 0 {
		t.Fatalf("%v allocations per TryRead", a)
	}
}
