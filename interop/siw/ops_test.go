package siw

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"xrnic/verbs"
)

// dialPeer starts the peer as a server and connects a new QP of h to it.
func dialPeer(ctx context.Context, t *testing.T, h *host, p verbs.ConnParam, peerArgs ...string) (*conn, *peerProc) {
	t.Helper()
	pp := startPeer(ctx, t, h.g, append([]string{"-s", "-p", fmt.Sprint(peerPort)}, peerArgs...)...)
	waitListening(ctx, t, h.g)
	c := h.newConn(64)
	if err := c.dial(ctx, p); err != nil {
		t.Fatalf("dial siw: %v (peer: %s)", err, pp.kill())
	}
	return c, pp
}

// acceptPeer starts the peer as a client of h and accepts its connection.
func acceptPeer(ctx context.Context, t *testing.T, h *host, p verbs.ConnParam, peerArgs ...string) (*conn, *peerProc) {
	t.Helper()
	ln := h.listen()
	port := netip.MustParseAddrPort(ln.Addr().String()).Port()
	pp := startPeer(ctx, t, h.g, append([]string{"-c", h.g.HostAddr.String(), "-p", fmt.Sprint(port)}, peerArgs...)...)
	c := h.newConn(64)
	// The peer's first message, "HELLO": we are the MPA responder and
	// may send only after it (RFC 5044 §7.1.2).
	hello := c.id()
	if err := c.qp.PostRecvBuf(hello, c.ctl.SGE(ctlSize, ctlSize)); err != nil {
		t.Fatal(err)
	}
	if err := c.accept(ctx, ln, p); err != nil {
		t.Fatalf("accept siw: %v (peer: %s)", err, pp.kill())
	}
	if wc, err := wait(ctx, c.rcq, hello); err != nil || wc.Status != verbs.StatusSuccess ||
		!strings.HasPrefix(string(c.ctl.Bytes()[ctlSize:ctlSize+int(wc.ByteLen)]), "HELLO") {
		t.Fatalf("the peer's HELLO: %+v %v (%s)", wc, err, c.why())
	}
	return c, pp
}

// connectPeer connects in the given direction: "dial" (xrnic initiates)
// or "accept" (siw initiates).
func connectPeer(ctx context.Context, t *testing.T, h *host, dir string, p verbs.ConnParam, peerArgs ...string) (*conn, *peerProc) {
	if dir == "dial" {
		return dialPeer(ctx, t, h, p, peerArgs...)
	}
	return acceptPeer(ctx, t, h, p, peerArgs...)
}

var directions = []string{"dial", "accept"}

// exercise runs every basic operation in both directions over c, data
// checked on both sides.
func exercise(ctx context.Context, t *testing.T, c *conn, sizes []int) {
	t.Helper()
	buf := c.mr.Bytes()
	for _, n := range sizes {
		// xrnic Writes into siw; the peer sums what landed.
		pattern(uint32(n), buf[:n])
		off := 4096 - n%4096
		if off+n > int(c.peer.rwLen) {
			off = 0
		}
		if err := c.qp.Write(ctx, c.mr.SGE(0, n), c.peer.rwKey, c.peer.rwAddr+uint64(off)); err != nil {
			t.Fatalf("write %d B to siw: %v", n, err)
		}
		if got := c.must(ctx, "SUM %d %d", off, n); got != sum(buf[:n]) {
			t.Fatalf("write %d B to siw: peer has %s, sent %s", n, got, sum(buf[:n]))
		}
		// xrnic Reads siw's read-only region (pattern seed 7).
		clear(buf[:n])
		if err := c.qp.Read(ctx, c.mr.SGE(0, n), c.peer.roKey, c.peer.roAddr); err != nil {
			t.Fatalf("read %d B from siw: %v", n, err)
		}
		want := make([]byte, n)
		pattern(7, want)
		if !bytes.Equal(buf[:n], want) {
			t.Fatalf("read %d B from siw: data differs", n)
		}
		// siw Writes into xrnic.
		c.must(ctx, "FILL 0 %d %d", n, n+1)
		pattern(uint32(n+1), want)
		clear(buf[:n])
		c.must(ctx, "WRITE 0 %d %d %d", n, c.mr.TO(0), c.mr.STag())
		if !bytes.Equal(buf[:n], want) {
			t.Fatalf("write %d B from siw: data differs", n)
		}
		// siw Reads from xrnic.
		pattern(uint32(n+2), buf[:n])
		if got := c.must(ctx, "READ 0 %d %d %d", n, c.mr.TO(0), c.mr.STag()); got != sum(buf[:n]) {
			t.Fatalf("read %d B by siw: peer read %s, have %s", n, got, sum(buf[:n]))
		}
		if n > 65536 {
			continue
		}
		// Sends both ways.
		pattern(uint32(n+3), buf[:n])
		if err := c.qp.PostSendBuf(c.id(), c.mr.SGE(0, n), 0); err != nil {
			t.Fatal(err)
		}
		if got := c.must(ctx, "LAST"); got != fmt.Sprintf("%d %s 0 0", n, sum(buf[:n])) {
			t.Fatalf("send %d B to siw: peer got %q, sent %s", n, got, sum(buf[:n]))
		}
		c.must(ctx, "FILL 0 %d %d", n, n+4)
		pattern(uint32(n+4), want)
		rid := c.id()
		if err := c.qp.PostRecvBuf(rid, c.mr.SGE(1<<20, 65536)); err != nil {
			t.Fatal(err)
		}
		if err := c.send(ctx, fmt.Sprintf("SEND 0 %d", n)); err != nil {
			t.Fatal(err)
		}
		wc, err := wait(ctx, c.rcq, rid)
		if err != nil || wc.Status != verbs.StatusSuccess || int(wc.ByteLen) != n {
			t.Fatalf("send %d B from siw: %+v %v", n, wc, err)
		}
		if !bytes.Equal(buf[1<<20:1<<20+n], want) {
			t.Fatalf("send %d B from siw: data differs", n)
		}
	}
}

// TestOps: every basic operation both ways, then an orderly close.
func TestOps(t *testing.T) {
	each(t, nil, func(ctx context.Context, t *testing.T, c *conn) bool {
		exercise(ctx, t, c, []int{1, 4097, 1 << 20})
		return true
	})
}
