package engine

import (
	"context"
	"errors"
	"net"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"
)

// listenFor opens a device with a long ConnTimeout (so a serial listener
// would visibly hold everyone behind a silent peer) and a listener on it.
func listenFor(t *testing.T, lc ListenConfig) (*Device, *Listener) {
	t.Helper()
	d, err := Open(Config{ConnTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	ln, err := d.ListenConfig("tcp", "127.0.0.1:0", lc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return d, ln
}

// acceptOne accepts one Request onto a fresh QP of d.
func acceptOne(ctx context.Context, d *Device, ln *Listener) error {
	req, err := ln.Accept(ctx)
	if err != nil {
		return err
	}
	pd := d.AllocPD()
	cq, _ := d.CreateCQ(16)
	qp, err := d.CreateQP(QPAttr{PD: pd, SendCQ: cq, RecvCQ: cq, SQDepth: 8, RQDepth: 8})
	if err != nil {
		return err
	}
	return req.Accept(ctx, qp, ConnParams{})
}

// connectAccepted connects a client with a valid MPA Request to ln and
// accepts it on d; who names the client in failures.
func connectAccepted(t *testing.T, d *Device, ln *Listener, who string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- acceptOne(ctx, d, ln) }()
	cli := newSide(t, 64, QPAttr{})
	if err := cli.qp.Connect(ctx, ln.Addr().String(), ConnParams{}); err != nil {
		t.Fatalf("%s: %v", who, err)
	}
	if err := <-errc; err != nil {
		t.Fatalf("accept: %v", err)
	}
}

// TestListenerSilentPeersDelayNobody: silent TCP connections (no MPA
// Request) do not hold a legitimate client behind them; each handshake
// runs on its own. A serial listener (the old one) made the client wait
// ConnTimeout per silent peer: 90 s here, far past the test's deadline.
func TestListenerSilentPeersDelayNobody(t *testing.T) {
	d, ln := listenFor(t, ListenConfig{})
	for range 3 {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
	}
	waitInSetup(t, ln, 3)
	connectAccepted(t, d, ln, "legitimate client behind 3 silent peers")
	if st := ln.Stats(); st.InSetup != 3 {
		t.Errorf("in setup %d, want the 3 silent peers", st.InSetup)
	}
}

// TestListenerAdmitBeforeRead: a refused peer is reset before anything is
// read, counted, and reported; the next admitted peer is served.
func TestListenerAdmitBeforeRead(t *testing.T) {
	var mu sync.Mutex
	var reported []error
	admit := true
	d, ln := listenFor(t, ListenConfig{
		Admit: func(net.Addr) bool { mu.Lock(); defer mu.Unlock(); return admit },
		OnSetupError: func(_ net.Addr, err error) {
			mu.Lock()
			reported = append(reported, err)
			mu.Unlock()
		},
	})
	mu.Lock()
	admit = false
	mu.Unlock()
	expectReset(t, ln.Addr().String())
	if st := ln.Stats(); st.Refused != 1 || st.InSetup != 0 {
		t.Fatalf("stats %+v", st)
	}
	mu.Lock()
	if len(reported) != 1 || !errors.Is(reported[0], ErrRefused) {
		t.Errorf("reported %v", reported)
	}
	admit = true
	mu.Unlock()
	connectAccepted(t, d, ln, "admitted client")
}

// TestListenerPerPeerEviction: a connection over MaxSetupPerPeer evicts
// the oldest connection of its address still sending no Request, so a
// client behind the address of a flood (a NAT, the same host) gets in; the
// evicted connection is reset, counted and reported, the others stay.
func TestListenerPerPeerEviction(t *testing.T) {
	var mu sync.Mutex
	var reported []error
	d, ln := listenFor(t, ListenConfig{MaxSetupPerPeer: 2, OnSetupError: func(_ net.Addr, err error) {
		mu.Lock()
		reported = append(reported, err)
		mu.Unlock()
	}})
	var conns []net.Conn
	for range 2 {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		conns = append(conns, c)
		waitInSetup(t, ln, len(conns)) // in this order: conns[0] is the oldest
	}
	connectAccepted(t, d, ln, "client over the per-peer bound")
	conns[0].SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := conns[0].Read(make([]byte, 1)); !errors.Is(err, syscall.ECONNRESET) {
		t.Errorf("oldest silent connection: %v, want a reset", err)
	}
	conns[1].SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	if _, err := conns[1].Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("newer silent connection: %v, want it still waiting in setup", err)
	}
	if st := ln.Stats(); st.Evicted != 1 || st.Overflow != 0 || st.InSetup != 1 {
		t.Errorf("stats %+v, want 1 evicted, none refused, 1 in setup", st)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(reported) != 1 || !errors.Is(reported[0], ErrSetupEvicted) {
		t.Errorf("reported %v, want one ErrSetupEvicted", reported)
	}
}

// TestListenerPerPeerBoundAllValid: when every connection of an address
// over MaxSetupPerPeer has sent a valid Request (waiting for Accept),
// nothing is evicted: the newest is reset and counted, and once the
// Requests are taken the address gets in again.
func TestListenerPerPeerBoundAllValid(t *testing.T) {
	d, ln := listenFor(t, ListenConfig{MaxSetupPerPeer: 2})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	connected := make(chan error, 2)
	for range 2 {
		cli := newSide(t, 64, QPAttr{})
		go func() { connected <- cli.qp.Connect(ctx, ln.Addr().String(), ConnParams{}) }()
	}
	for deadline := time.Now().Add(10 * time.Second); len(ln.ready) < 2; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d valid Requests waiting, want 2 (stats %+v)", len(ln.ready), ln.Stats())
		}
	}
	expectReset(t, ln.Addr().String())
	if st := ln.Stats(); st.Overflow != 1 || st.Evicted != 0 || st.InSetup != 2 {
		t.Fatalf("stats %+v, want 1 refused, none evicted, 2 in setup", st)
	}
	for range 2 {
		if err := acceptOne(ctx, d, ln); err != nil {
			t.Fatalf("accept: %v", err)
		}
		if err := <-connected; err != nil {
			t.Fatalf("connect: %v", err)
		}
	}
	waitInSetup(t, ln, 0)
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	waitInSetup(t, ln, 1)
}

// expectReset connects to addr and wants the connection reset, not
// served and not closed in order (the reset may already fail the dial).
func expectReset(t *testing.T, addr string) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err == nil {
		defer c.Close()
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, err = c.Read(make([]byte, 1))
	}
	if !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("connection: %v, want a reset", err)
	}
}

func waitInSetup(t *testing.T, ln *Listener, n int) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ln.Stats().InSetup != n; {
		if time.Now().After(deadline) {
			t.Fatalf("in setup %d, want %d", ln.Stats().InSetup, n)
		}
		time.Sleep(time.Millisecond)
	}
}
