package engine

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"xrnic/wire/mpa"
	"xrnic/wire/term"
)

func TestMalformedRequestClosed(t *testing.T) {
	s := newSide(t, 4096, QPAttr{})
	ln, _ := s.dev.Listen("tcp", "127.0.0.1:0")
	defer ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	go ln.Accept(ctx)
	for _, bad := range [][]byte{
		[]byte("MPA ID Bad Frame\x40\x01\x00\x00"),                               // key
		[]byte("MPA ID Req Frame\x40\x07\x00\x00"),                               // rev
		append([]byte("MPA ID Req Frame\x40\x01\x02\x01"), make([]byte, 600)...), // PD_Length 513
	} {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		c.Write(bad)
		c.SetReadDeadline(time.Now().Add(2 * time.Second))
		if n, err := io.ReadAll(c); len(n) != 0 || err != nil && !errors.Is(err, syscall.ECONNRESET) {
			t.Errorf("%q: got %q, %v; want the connection closed without a reply", bad[:20], n, err)
		}
		c.Close()
	}
}

// fakeResponder answers a Request with the given reply bytes (or nothing).
func fakeResponder(t *testing.T, reply []byte) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		buf := make([]byte, 24)
		io.ReadFull(c, buf)
		if reply != nil {
			c.Write(reply)
		}
		io.Copy(io.Discard, c)
	}()
	return ln.Addr().String()
}

func TestInitiatorErrors(t *testing.T) {
	t.Run("bad reply key", func(t *testing.T) {
		c := newSide(t, 4096, QPAttr{})
		addr := fakeResponder(t, []byte("MPA ID Req Frame\x40\x02\x00\x00"))
		err := c.qp.Connect(context.Background(), addr, ConnParams{})
		if !errors.Is(err, mpa.ErrUnexpectedKey) || !errors.Is(err, term.MPAInvalidFrame) {
			t.Fatalf("err %v", err)
		}
	})
	t.Run("rev mismatch", func(t *testing.T) {
		c := newSide(t, 4096, QPAttr{})
		addr := fakeResponder(t, []byte("MPA ID Rep Frame\x40\x01\x00\x00"))
		if err := c.qp.Connect(context.Background(), addr, ConnParams{NoRevFallback: true}); !errors.Is(err, ErrRevMismatch) {
			t.Fatalf("err %v", err)
		}
	})
	t.Run("timeout", func(t *testing.T) {
		c := newSide(t, 4096, QPAttr{})
		addr := fakeResponder(t, nil)
		start := time.Now()
		err := c.qp.Connect(context.Background(), addr, ConnParams{Timeout: 200 * time.Millisecond})
		var ne net.Error
		if !errors.As(err, &ne) || !ne.Timeout() {
			t.Fatalf("err %v", err)
		}
		if time.Since(start) > 3*time.Second {
			t.Fatal("timeout not honoured")
		}
	})
	t.Run("context cancel", func(t *testing.T) {
		c := newSide(t, 4096, QPAttr{})
		addr := fakeResponder(t, nil)
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		if err := c.qp.Connect(ctx, addr, ConnParams{}); err == nil {
			t.Fatal("connected")
		}
	})
}

// TestNoMatchingRTR: the initiator offers only a Send RTR, the responder
// accepts only Write; the initiator sends Terminate LLP/0x07 and fails.
func TestNoMatchingRTR(t *testing.T) {
	c, s := newSide(t, 4096, QPAttr{}), newSide(t, 4096, QPAttr{})
	ln, _ := s.dev.Listen("tcp", "127.0.0.1:0")
	defer ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	go func() {
		req, err := ln.Accept(ctx)
		if err == nil {
			req.Accept(ctx, s.qp, ConnParams{RTR: mpa.RTRWrite})
		}
	}()
	err := c.qp.Connect(ctx, ln.Addr().String(), ConnParams{PeerToPeer: true, RTR: mpa.RTRSend})
	if !errors.Is(err, term.MPANoMatchingRTR) {
		t.Fatalf("initiator: %v", err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for s.qp.PeerTerminate() == nil && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if pt := s.qp.PeerTerminate(); pt != term.MPANoMatchingRTR {
		t.Fatalf("responder got %v", pt)
	}
}

// TestNoMPAReply: a peer that is not an iWARP endpoint (it closes at once,
// answers in another protocol, or says nothing) fails Connect with
// ErrNoMPAReply, within the setup step's timeout; an MPA peer's bad Reply
// does not.
func TestNoMPAReply(t *testing.T) {
	closing := func(t *testing.T) string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				c.Close()
			}
		}()
		return ln.Addr().String()
	}
	cases := []struct {
		name string
		addr func(t *testing.T) string
		want bool
	}{
		{"peer closes", closing, true},
		{"http answer", func(t *testing.T) string { return fakeResponder(t, []byte("HTTP/1.1 400 Bad Request\r\n\r\n")) }, true},
		{"silent", func(t *testing.T) string { return fakeResponder(t, nil) }, true},
		{"rev mismatch", func(t *testing.T) string { return fakeResponder(t, []byte("MPA ID Rep Frame\x40\x01\x00\x00")) }, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := newSide(t, 4096, QPAttr{})
			start := time.Now()
			err := c.qp.Connect(context.Background(), tc.addr(t), ConnParams{Timeout: 300 * time.Millisecond, NoRevFallback: true})
			if err == nil {
				t.Fatal("connected")
			}
			if got := errors.Is(err, ErrNoMPAReply); got != tc.want {
				t.Fatalf("errors.Is(%v, ErrNoMPAReply) = %v, want %v", err, got, tc.want)
			}
			if tc.want && !strings.Contains(err.Error(), "no MPA reply") {
				t.Fatalf("err %q does not say %q", err, "no MPA reply")
			}
			if time.Since(start) > 3*time.Second {
				t.Fatal("the setup timeout was not honoured")
			}
		})
	}
}
