package engine

import (
	"context"
	"errors"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"xrnic/wire/ddp"
	"xrnic/wire/mpa"
	"xrnic/wire/rdmap"
	"xrnic/wire/term"
)

// rawMPAResponder listens on loopback and runs fn on each connection (n counts
// them from 0) with the MPA Request it read; it returns the address and
// the number of connections accepted so far.
func rawMPAResponder(t *testing.T, fn func(n int, c net.Conn, req mpa.Frame)) (string, *atomic.Int32) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var count atomic.Int32
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			n := int(count.Add(1)) - 1
			go func() {
				defer c.Close()
				c.SetDeadline(time.Now().Add(5 * time.Second))
				req, err := readRawFrame(c, mpa.Request)
				if err != nil {
					t.Errorf("conn %d: request: %v", n, err)
					return
				}
				fn(n, c, req)
			}()
		}
	}()
	return ln.Addr().String(), &count
}

func readRawFrame(c net.Conn, kind mpa.Kind) (mpa.Frame, error) {
	hdr := make([]byte, mpa.FrameHeaderLen)
	if _, err := io.ReadFull(c, hdr); err != nil {
		return nil, err
	}
	rem, err := mpa.FrameRemaining(hdr, kind)
	if err != nil {
		return nil, err
	}
	f := append(hdr, make([]byte, rem)...)
	if _, err := io.ReadFull(c, f[mpa.FrameHeaderLen:]); err != nil {
		return nil, err
	}
	return mpa.ParseFrame(f, kind)
}

// writeReply sends a Reply; rev 2 carries e as its enhanced word.
func writeReply(t *testing.T, c net.Conn, rev uint8, reject bool, e mpa.Enhanced, pd []byte) {
	t.Helper()
	buf := make([]byte, mpa.MaxFrameLen)
	n, err := mpa.PutFrame(buf, mpa.Reply, mpa.FrameParams{C: true, R: reject, Rev: rev, HasEnhanced: rev == mpa.Rev2, Enhanced: e}, pd)
	if err != nil {
		t.Error(err)
		return
	}
	c.Write(buf[:n])
}

// readFPDUs reads until the initiator closes (or timeout) and returns the
// ULPDUs of what it sent (CRC on).
func readFPDUs(c net.Conn, timeout time.Duration) ([][]byte, error) {
	c.SetReadDeadline(time.Now().Add(timeout))
	b, err := io.ReadAll(c)
	d := mpa.NewDeframer(mpa.DeframerConfig{CRC: true})
	var out [][]byte
	for len(b) > 0 {
		u, k, derr := d.Next(b)
		if derr != nil {
			return out, derr
		}
		if k == 0 {
			break
		}
		b = b[k:]
		if u != nil {
			out = append(out, append([]byte(nil), u...))
		}
	}
	return out, err
}

// decodeTerminate decodes a Terminate ULPDU.
func decodeTerminate(u []byte) (term.Terminate, error) {
	seg, err := ddp.Parse(u)
	if err != nil {
		return term.Terminate{}, err
	}
	if seg.IsTagged() || rdmap.Control(seg.RsvdULP()).OpCode() != rdmap.OpTerminate || seg.Untagged().QN() != ddp.QNTerminate {
		return term.Terminate{}, errors.New("not a Terminate")
	}
	return term.Decode(seg.Payload())
}

// TestMPASetupTerminateInsufficientIRD: the responder's Reply asks for an
// ORD above what the initiator can take in; the initiator sends Terminate
// LLP/0/0x06 as a valid FPDU before it closes (RFC 6581 §9.1, §9.3).
func TestMPASetupTerminateInsufficientIRD(t *testing.T) {
	got := make(chan [][]byte, 1)
	addr, _ := rawMPAResponder(t, func(n int, c net.Conn, req mpa.Frame) {
		writeReply(t, c, mpa.Rev2, false, mpa.Enhanced{IRD: 4, ORD: 100}, nil)
		u, _ := readFPDUs(c, 3*time.Second)
		got <- u
	})
	c := newSide(t, 4096, QPAttr{MaxIRD: 2})
	err := c.qp.Connect(context.Background(), addr, ConnParams{})
	if !errors.Is(err, term.MPAInsufficientIRD) {
		t.Fatalf("connect: %v", err)
	}
	u := <-got
	if len(u) != 1 {
		t.Fatalf("got %d FPDUs, want one Terminate", len(u))
	}
	tm, err := decodeTerminate(u[0])
	if err != nil || tm.Err != term.MPAInsufficientIRD {
		t.Fatalf("terminate %+v %v", tm, err)
	}
}

// rfc5044Responder acts as an RFC 5044-only responder: a Rev 2 Request is
// one it cannot work with, which it answers per mode ("close": close at
// once; "reset": reset; "rev1": a Rev 1 Reply). A Rev 1 Request gets a
// Rev 1 Reply echoing its private data; then got receives what the
// initiator sends until it closes.
func rfc5044Responder(t *testing.T, mode string, got chan<- [][]byte) (string, *atomic.Int32) {
	return rawMPAResponder(t, func(n int, c net.Conn, req mpa.Frame) {
		if req.Rev() == mpa.Rev2 {
			switch mode {
			case "reset":
				c.(*net.TCPConn).SetLinger(0)
			case "rev1":
				writeReply(t, c, mpa.Rev1, false, mpa.Enhanced{}, nil)
				io.Copy(io.Discard, c)
			}
			return
		}
		if req.S() || req.Rev() != mpa.Rev1 {
			t.Errorf("retry: flags %#x rev %d, want a plain Rev 1 Request", req.Flags(), req.Rev())
		}
		writeReply(t, c, mpa.Rev1, false, mpa.Enhanced{}, req.PrivateData())
		u, _ := readFPDUs(c, 3*time.Second)
		got <- u
	})
}

// TestMPARevFallback: a responder that does not understand MPA revision 2
// (it closes, resets or answers in Rev 1) gets a new connection with a
// Rev 1 Request carrying the ULP's private data intact (RFC 6581 §10);
// with NoRevFallback the first failure is final.
func TestMPARevFallback(t *testing.T) {
	for _, mode := range []string{"close", "reset", "rev1"} {
		t.Run(mode, func(t *testing.T) {
			got := make(chan [][]byte, 1)
			addr, conns := rfc5044Responder(t, mode, got)
			c := newSide(t, 4096, QPAttr{})
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := c.qp.Connect(ctx, addr, ConnParams{PrivateData: []byte("hello")}); err != nil {
				t.Fatalf("connect: %v", err)
			}
			ci := c.qp.ConnInfo()
			if ci.Rev != mpa.Rev1 || !ci.RevFallback || string(ci.PeerPrivateData) != "hello" || ci.HasEnhanced || ci.PeerToPeer {
				t.Fatalf("conn info %+v", ci)
			}
			if n := conns.Load(); n != 2 {
				t.Fatalf("%d connections, want 2", n)
			}
			c.qp.Disconnect(ctx)
			if u := <-got; len(u) != 0 {
				t.Fatalf("client/server initiator sent %d FPDUs unasked", len(u))
			}
		})
		t.Run(mode+"/off", func(t *testing.T) {
			addr, conns := rfc5044Responder(t, mode, nil)
			c := newSide(t, 4096, QPAttr{})
			err := c.qp.Connect(context.Background(), addr, ConnParams{NoRevFallback: true})
			if err == nil {
				t.Fatal("connected")
			}
			if mode == "rev1" && !errors.Is(err, ErrRevMismatch) || mode != "rev1" && !errors.Is(err, ErrNoMPAReply) {
				t.Fatalf("err %v", err)
			}
			if n := conns.Load(); n != 1 {
				t.Fatalf("%d connections, want 1", n)
			}
		})
	}
}

// TestMPARevFallbackPeerToPeer: revision 1 has no RTR negotiation, so a
// peer-to-peer initiator that falls back sends the zero-length RDMA Write
// as its first FPDU unasked; one that does not offer the Write RTR does
// not fall back.
func TestMPARevFallbackPeerToPeer(t *testing.T) {
	got := make(chan [][]byte, 1)
	addr, _ := rfc5044Responder(t, "close", got)
	c := newSide(t, 4096, QPAttr{})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.qp.Connect(ctx, addr, ConnParams{PeerToPeer: true}); err != nil {
		t.Fatalf("connect: %v", err)
	}
	if ci := c.qp.ConnInfo(); ci.Rev != mpa.Rev1 || !ci.PeerToPeer || ci.RTR != mpa.RTRWrite {
		t.Fatalf("conn info %+v", ci)
	}
	time.Sleep(50 * time.Millisecond)
	c.qp.Disconnect(ctx)
	u := <-got
	if len(u) == 0 {
		t.Fatal("no RTR")
	}
	seg, err := ddp.Parse(u[0])
	if err != nil || !seg.IsTagged() || rdmap.Control(seg.RsvdULP()).OpCode() != rdmap.OpWrite || len(seg.Payload()) != 0 || !seg.Last() {
		t.Fatalf("first FPDU % x (%v), want a zero-length RDMA Write", u[0], err)
	}

	addr, conns := rfc5044Responder(t, "close", nil)
	c2 := newSide(t, 4096, QPAttr{})
	if err := c2.qp.Connect(ctx, addr, ConnParams{PeerToPeer: true, RTR: mpa.RTRSend | mpa.RTRRead}); !errors.Is(err, ErrNoMPAReply) {
		t.Fatalf("err %v", err)
	}
	if n := conns.Load(); n != 1 {
		t.Fatalf("%d connections, want 1", n)
	}
}

// TestMPASetupTerminateLocal: the QP is closed while the Reply is on its
// way; the initiator tells the responder with Terminate LLP/0/0x05 before
// it closes, instead of just dropping the connection.
func TestMPASetupTerminateLocal(t *testing.T) {
	got := make(chan [][]byte, 1)
	reqc := make(chan struct{})
	replyc := make(chan struct{})
	addr, _ := rawMPAResponder(t, func(n int, c net.Conn, req mpa.Frame) {
		close(reqc)
		<-replyc
		writeReply(t, c, mpa.Rev2, false, mpa.Enhanced{IRD: 4, ORD: 4}, nil)
		u, _ := readFPDUs(c, 3*time.Second)
		got <- u
	})
	c := newSide(t, 4096, QPAttr{})
	errc := make(chan error, 1)
	go func() { errc <- c.qp.Connect(context.Background(), addr, ConnParams{}) }()
	<-reqc
	c.qp.Close()
	close(replyc)
	if err := <-errc; !errors.Is(err, ErrClosed) {
		t.Fatalf("connect: %v", err)
	}
	u := <-got
	if len(u) != 1 {
		t.Fatalf("got %d FPDUs, want one Terminate", len(u))
	}
	if tm, err := decodeTerminate(u[0]); err != nil || tm.Err != term.MPALocalCatastrophic {
		t.Fatalf("terminate %+v %v", tm, err)
	}
}

// TestAcceptNoRTRRejects: a responder left with no RTR type to offer (Read
// only, with IRD 0) refuses a peer-to-peer Request with a reject Reply, so
// the initiator sees a rejection rather than a close it would take for an
// RFC 5044 peer (and retry in revision 1).
func TestAcceptNoRTRRejects(t *testing.T) {
	c, s := newSide(t, 4096, QPAttr{}), newSide(t, 4096, QPAttr{})
	ln, _ := s.dev.Listen("tcp", "127.0.0.1:0")
	defer ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	errc := acceptAsync(ctx, ln, s.qp, ConnParams{RTR: mpa.RTRRead, IRD: -1})
	err := c.qp.Connect(ctx, ln.Addr().String(), ConnParams{PeerToPeer: true})
	var re *RejectedError
	if !errors.As(err, &re) || !re.HasEnhanced || !re.PeerEnhanced.PeerToPeer {
		t.Fatalf("initiator: %v %+v", err, re)
	}
	if ci := c.qp.ConnInfo(); ci.RevFallback {
		t.Fatal("fell back")
	}
	if err := <-errc; !errors.Is(err, mpa.ErrNoRTRSupport) {
		t.Fatalf("responder: %v", err)
	}
}
