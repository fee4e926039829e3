package siw

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"log/slog"
	"net/netip"
	"strings"
	"testing"
	"time"

	"xrnic/internal/netns"
	"xrnic/verbs"
)

// The host side of a case: an xrnic device in the guest's namespace with
// a QP per connection and registered memory, and the C peer in the guest
// (peer/peer.c) driven by commands sent over the connection.

const (
	bufSize  = 16<<20 + 4096 // the peer's rw/ro regions are 16 MiB
	ctlSize  = 4096
	peerPort = 7400
)

type transportKind string

const (
	kernelT transportKind = "kernel"
	afxdpT  transportKind = "afxdp"
)

var transports = []transportKind{kernelT, afxdpT}

// host is an xrnic device in the guest's namespace.
type host struct {
	t   *testing.T
	g   *Guest
	dev *verbs.Device
	pd  *verbs.PD
	tr  transportKind
}

func newHost(t *testing.T, g *Guest, tr transportKind) *host {
	t.Helper()
	cfg := verbs.DeviceConfig{Transport: string(tr), ConnTimeout: 20 * time.Second}
	if tr == afxdpT {
		cfg.XDP = verbs.XDPConfig{Iface: g.Tap, Logger: slog.New(slog.DiscardHandler)}
	}
	h := &host{t: t, g: g, tr: tr}
	if err := netns.Do(g.NS, func() (err error) {
		h.dev, err = verbs.Open(cfg)
		return err
	}); err != nil {
		t.Fatalf("open the %s device: %v", tr, err)
	}
	t.Cleanup(func() {
		h.dev.Close()
		if t.Failed() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if r, err := g.Sh(ctx, "dmesg | tail -25"); err == nil {
				t.Logf("guest dmesg:\n%s", r.Stdout)
			} else {
				t.Logf("guest agent: %v; what became of the guest (it is booted anew for the next case):\n%s", err, g.PostMortem())
			}
		}
	})
	var err error
	if h.pd, err = h.dev.AllocPD(); err != nil {
		t.Fatal(err)
	}
	return h
}

// peerInfo is the C peer's private data: its two regions.
type peerInfo struct {
	rwAddr, roAddr uint64
	rwLen, roLen   uint32
	rwKey, roKey   uint32
}

func parsePeerInfo(p []byte) (peerInfo, error) {
	if len(p) < 40 || string(p[:4]) != "XRPR" {
		return peerInfo{}, fmt.Errorf("peer private data %x: not the peer's", p)
	}
	be := binary.BigEndian
	return peerInfo{rwAddr: be.Uint64(p[8:]), rwLen: be.Uint32(p[16:]), rwKey: be.Uint32(p[20:]),
		roAddr: be.Uint64(p[24:]), roLen: be.Uint32(p[32:]), roKey: be.Uint32(p[36:])}, nil
}

// conn is one QP connected to the peer.
type conn struct {
	h        *host
	qp       *verbs.QP
	scq, rcq *verbs.CQ
	mr       *verbs.MR // rw: remote read and write
	ro       *verbs.MR // remote read only
	ctl      *verbs.MR // command and reply buffers
	peer     peerInfo
	nextID   uint64
	cmdFlags verbs.SendFlags // added to command Sends (FlagSolicited for a peer run with -S)
}

func (h *host) newConn(depth int) *conn { return h.newConnSize(depth, bufSize) }

// newConnSize is newConn with a registered buffer of size bytes.
func (h *host) newConnSize(depth, size int) *conn {
	h.t.Helper()
	c := &conn{h: h}
	var err error
	if c.scq, err = h.dev.CreateCQ(4 * depth); err != nil {
		h.t.Fatal(err)
	}
	if c.rcq, err = h.dev.CreateCQ(4 * depth); err != nil {
		h.t.Fatal(err)
	}
	if c.qp, err = h.pd.CreateQP(verbs.QPAttr{SendCQ: c.scq, RecvCQ: c.rcq, SQDepth: depth, RQDepth: depth, MaxORD: 16, MaxIRD: 16}); err != nil {
		h.t.Fatal(err)
	}
	acc := verbs.AccessLocalWrite | verbs.AccessRemoteRead | verbs.AccessRemoteWrite
	if c.mr, err = h.pd.RegMR(make([]byte, size), acc); err != nil {
		h.t.Fatal(err)
	}
	if c.ro, err = h.pd.RegMR(make([]byte, 1<<20), verbs.AccessRemoteRead); err != nil {
		h.t.Fatal(err)
	}
	if c.ctl, err = h.pd.RegMR(make([]byte, 2*ctlSize), verbs.AccessLocalWrite); err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { c.qp.Close() })
	return c
}

// dial connects c to the peer listening in the guest.
func (c *conn) dial(ctx context.Context, p verbs.ConnParam) error {
	addr := netip.AddrPortFrom(c.h.g.GuestAddr, peerPort).String()
	if err := netns.Do(c.h.g.NS, func() error { return c.qp.Dial(ctx, addr, p) }); err != nil {
		return err
	}
	return c.learn()
}

func (c *conn) learn() (err error) {
	c.peer, err = parsePeerInfo(c.qp.ConnInfo().PeerPrivateData)
	return err
}

// listen makes a listener for peers that connect to the host.
func (h *host) listen() *verbs.Listener {
	h.t.Helper()
	var ln *verbs.Listener
	if err := netns.Do(h.g.NS, func() (err error) {
		ln, err = h.dev.Listen("tcp", netip.AddrPortFrom(h.g.HostAddr, 0).String())
		return err
	}); err != nil {
		h.t.Fatalf("listen: %v", err)
	}
	h.t.Cleanup(func() { ln.Close() })
	return ln
}

// accept accepts one connection on ln into c.
func (c *conn) accept(ctx context.Context, ln *verbs.Listener, p verbs.ConnParam) error {
	req, err := ln.Accept(ctx)
	if err != nil {
		return err
	}
	if err := req.Accept(ctx, c.qp, p); err != nil {
		return err
	}
	return c.learn()
}

// wait polls cq for the completion of id (others are failures).
func wait(ctx context.Context, cq *verbs.CQ, id uint64) (verbs.Completion, error) {
	var wc [1]verbs.Completion
	for {
		if cq.Poll(wc[:]) == 1 {
			if wc[0].ID != id {
				return wc[0], fmt.Errorf("completion of %d while waiting for %d: %+v", wc[0].ID, id, wc[0])
			}
			return wc[0], nil
		}
		if err := cq.Wait(ctx); err != nil {
			return verbs.Completion{}, err
		}
	}
}

// why describes the QP's state for an error message.
func (c *conn) why() string {
	s := fmt.Sprintf("QP %v", c.qp.State())
	if err := c.qp.Err(); err != nil {
		s += fmt.Sprintf(", error %v", err)
	}
	if err := c.qp.Disconnected(); err != nil {
		s += fmt.Sprintf(", %v", err)
	}
	if pt := c.qp.PeerTerminate(); pt != nil {
		s += fmt.Sprintf(", peer's Terminate %v", pt)
	}
	return s
}

func (c *conn) id() uint64 { c.nextID++; return c.nextID }

// send sends a command to the peer without waiting for a reply.
func (c *conn) send(ctx context.Context, cmd string) error {
	sid := c.id()
	n := copy(c.ctl.Bytes()[:ctlSize], cmd)
	if err := c.qp.PostSendBuf(sid, c.ctl.SGE(0, n), verbs.FlagSignaled|c.cmdFlags); err != nil {
		return err
	}
	if wc, err := wait(ctx, c.scq, sid); err != nil || wc.Status != verbs.StatusSuccess {
		return fmt.Errorf("%q: send %v %v (%s)", cmd, wc.Status, err, c.why())
	}
	return nil
}

// do sends a command to the peer and returns its reply.
func (c *conn) do(ctx context.Context, format string, a ...any) (string, error) {
	cmd := fmt.Sprintf(format, a...)
	rid := c.id()
	if err := c.qp.PostRecvBuf(rid, c.ctl.SGE(ctlSize, ctlSize)); err != nil {
		return "", err
	}
	if err := c.send(ctx, cmd); err != nil {
		return "", err
	}
	wc, err := wait(ctx, c.rcq, rid)
	if err != nil || wc.Status != verbs.StatusSuccess {
		return "", fmt.Errorf("%q: reply %v %v (%s)", cmd, wc.Status, err, c.why())
	}
	return string(c.ctl.Bytes()[ctlSize : ctlSize+int(wc.ByteLen)]), nil
}

// must is do that fails the test unless the reply starts with "OK".
func (c *conn) must(ctx context.Context, format string, a ...any) string {
	c.h.t.Helper()
	r, err := c.do(ctx, format, a...)
	if err != nil {
		c.h.t.Fatal(err)
	}
	if !strings.HasPrefix(r, "OK") {
		c.h.t.Fatalf("%q: peer answered %q", fmt.Sprintf(format, a...), r)
	}
	return strings.TrimSpace(strings.TrimPrefix(r, "OK"))
}

// pattern is the peer's FILL pattern.
func pattern(seed uint32, b []byte) {
	for i := range b {
		b[i] = byte(seed + uint32(i) + uint32(i>>8) + uint32(i>>16))
	}
}

func sum(b []byte) string {
	h := fnv.New64a()
	h.Write(b)
	return fmt.Sprintf("%016x", h.Sum64())
}

// peerProc is the C peer running in the guest.
type peerProc struct {
	t *testing.T
	p *Proc
}

func startPeer(ctx context.Context, t *testing.T, g *Guest, args ...string) *peerProc {
	t.Helper()
	p, err := g.Start(ctx, Cmd{Args: append([]string{"xrnic-peer"}, args...), Timeout: 5 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	pp := &peerProc{t: t, p: p}
	t.Cleanup(func() {
		if pp.p != nil {
			kctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			r, _ := pp.p.Kill(kctx)
			t.Logf("peer (killed): %s", r)
		}
	})
	return pp
}

// kill ends the peer and returns what it printed.
func (pp *peerProc) kill() Result {
	if pp.p == nil {
		return Result{}
	}
	kctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, _ := pp.p.Kill(kctx)
	pp.p = nil
	return r
}

// end waits for the peer to exit and returns its output.
func (pp *peerProc) end(ctx context.Context) Result {
	pp.t.Helper()
	r, err := pp.p.Wait(ctx)
	pp.p = nil
	if err != nil {
		pp.t.Fatalf("peer: %v", err)
	}
	return r
}

// waitListening waits until the peer listens (rdma_listen on peerPort).
func waitListening(ctx context.Context, t *testing.T, g *Guest) {
	t.Helper()
	waitPort(ctx, t, g, peerPort)
}
