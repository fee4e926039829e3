package verbs

import (
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"xrnic/wire/mpa"
)

// TestRejectCarriesIRDORD: a responder that needs more ORD than our IRD
// rejects with its needed ORD in the RFC 6581 word; Dial's *RejectedError
// hands it to the ULP (RFC 6581 §9.1).
func TestRejectCarriesIRDORD(t *testing.T) {
	c := newSide(t, nil, 64, QPAttr{MaxIRD: 2})
	s := newSide(t, nil, 64, QPAttr{})
	ln, err := s.dev.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	defer ln.Close()
	ctx := ctxT(t)
	errc := acceptAsync(ctx, ln, s.qp, ConnParam{RequiredORD: 8})
	err = c.qp.Dial(ctx, ln.Addr().String(), ConnParam{})
	var rej *RejectedError
	if !errors.As(err, &rej) || !errors.Is(err, ErrRejected) {
		t.Fatalf("dial: %v", err)
	}
	if !rej.HasPeerIRDORD || rej.PeerORD != 8 {
		t.Fatalf("rejected %+v, want the responder's ORD 8", rej)
	}
	if err := <-errc; err == nil {
		t.Fatal("accept succeeded")
	}
}

// rev1OnlyListener is an RFC 5044-only responder: it closes on a Rev 2
// Request and accepts a Rev 1 one. It counts the connections.
func rev1OnlyListener(t *testing.T) (string, chan int) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	t.Cleanup(func() { ln.Close() })
	conns := make(chan int, 8)
	go func() {
		for i := 0; ; i++ {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns <- i
			go func() {
				defer c.Close()
				c.SetDeadline(time.Now().Add(5 * time.Second))
				hdr := make([]byte, mpa.FrameHeaderLen)
				if _, err := io.ReadFull(c, hdr); err != nil {
					return
				}
				n, err := mpa.FrameRemaining(hdr, mpa.Request)
				if err != nil || hdr[17] != mpa.Rev1 {
					return // RFC 5044 §7.1.1: a revision it cannot work with closes
				}
				io.ReadFull(c, make([]byte, n))
				b := make([]byte, mpa.MaxFrameLen)
				k, _ := mpa.PutFrame(b, mpa.Reply, mpa.FrameParams{C: true, Rev: mpa.Rev1}, nil)
				c.Write(b[:k])
				io.Copy(io.Discard, c)
			}()
		}
	}()
	return ln.Addr().String(), conns
}

// TestDialRevFallback: Dial falls back to MPA revision 1 against an RFC
// 5044-only responder by default (RFC 6581 §10), and not with
// NoMPARevFallback.
func TestDialRevFallback(t *testing.T) {
	addr, conns := rev1OnlyListener(t)
	c := newSide(t, nil, 64, QPAttr{})
	ctx := ctxT(t)
	must(t, c.qp.Dial(ctx, addr, ConnParam{}))
	if ci := c.qp.ConnInfo(); ci.MPARev != 1 || !ci.MPARevFallback || ci.HasPeerIRDORD {
		t.Fatalf("conn info %+v", ci)
	}
	if n := len(conns); n != 2 {
		t.Fatalf("%d connections, want 2", n)
	}

	addr, conns = rev1OnlyListener(t)
	c2 := newSide(t, c.dev, 64, QPAttr{})
	if err := c2.qp.Dial(ctx, addr, ConnParam{NoMPARevFallback: true}); err == nil {
		t.Fatal("connected without the fallback")
	}
	if n := len(conns); n != 1 {
		t.Fatalf("%d connections, want 1", n)
	}
}
