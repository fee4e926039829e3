//go:build linux

package verbs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"xrnic/atomics"
	"xrnic/internal/netnstest"
	"xrnic/internal/require"
	"xrnic/transport"
	"xrnic/transport/afxdp"
)

// Integration tests of the "afxdp" transport through the verbs API: two
// network namespaces joined by a veth pair (198.18.1.1 in A, 198.18.1.2 in
// B). They need root, iproute2 and AF_XDP sockets, and skip otherwise
// (fail under CI=true: package require).

const nsPrefix = "xrnicvb-"

var (
	ipA = netip.MustParseAddr("198.18.1.1")
	ipB = netip.MustParseAddr("198.18.1.2")
)

type nsEnv struct {
	nsA, nsB   string
	devA, devB string
}

// newNSEnv makes the namespace pair, GSO limited to one MTU-sized segment:
// a single-buffer AF_XDP socket cannot take the 64 KiB GSO frames a kernel
// TCP peer would send over veth.
func newNSEnv(t testing.TB) *nsEnv {
	t.Helper()
	netnstest.RequireRoot(t, true)
	p := netnstest.NewPair(t, netnstest.PairOptions{Prefix: nsPrefix, DevA: "vba", DevB: "vbb",
		AddrA: ipA, AddrB: ipB, LimitGSO: true})
	return &nsEnv{nsA: p.NSA, nsB: p.NSB, devA: p.DevA, devB: p.DevB}
}

func openIn(t testing.TB, ns string, cfg DeviceConfig) *Device {
	t.Helper()
	var d *Device
	if err := netnstest.In(t, ns, func() (err error) {
		d, err = Open(cfg)
		return err
	}); err != nil {
		t.Fatalf("open %s device in %s: %v", cfg.Transport, ns, err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

func afxdpConfig(iface string) DeviceConfig {
	return DeviceConfig{Transport: "afxdp", ConnTimeout: 5 * time.Second, XDP: XDPConfig{Iface: iface, Logger: slog.New(slog.DiscardHandler)}}
}

// connectNS connects c (dialing from nsC) to s (listening on srvIP in nsS).
func connectNS(t testing.TB, c *side, nsC string, s *side, nsS string, srvIP netip.Addr) {
	t.Helper()
	var ln *Listener
	if err := netnstest.In(t, nsS, func() (err error) {
		ln, err = s.dev.Listen("tcp", netip.AddrPortFrom(srvIP, 0).String())
		return err
	}); err != nil {
		t.Fatalf("listen: %v", err)
	}
	defer ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	errc := acceptAsync(ctx, ln, s.qp, ConnParam{})
	if err := netnstest.In(t, nsC, func() error { return c.qp.Dial(ctx, ln.Addr().String(), ConnParam{}) }); err != nil {
		t.Fatalf("dial: %v", err)
	}
	if err := <-errc; err != nil {
		t.Fatalf("accept: %v", err)
	}
}

// exercise runs every verbs operation from c to s and checks the data,
// the completions and the remote memory.
func exercise(t *testing.T, c, s *side) {
	t.Helper()
	ctx := ctxT(t)
	cb, sb := c.mr.Bytes(), s.mr.Bytes()
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range cb {
		cb[i] = byte(rng.Uint32())
	}

	// Send into a posted receive.
	n := 3*c.qp.ConnInfo().MULPDU + 17
	must(t, s.qp.PostRecvBuf(1, s.mr.SGE(0, n)))
	must(t, c.qp.PostSendBuf(2, c.mr.SGE(0, n), FlagSignaled))
	if rc := poll(t, s.rcq, 1)[0]; rc.Status != StatusSuccess || rc.Op != OpRecv || rc.ByteLen != uint32(n) || rc.ID != 1 {
		t.Fatalf("send: receive completion %+v", rc)
	}
	if sc := poll(t, c.scq, 1)[0]; sc.Status != StatusSuccess || sc.Op != OpSend || sc.ID != 2 {
		t.Fatalf("send: completion %+v", sc)
	}
	if !bytes.Equal(sb[:n], cb[:n]) {
		t.Fatal("send: content differs")
	}

	// A 1 MiB Write, read back into another place.
	const big = 1 << 20
	must(t, c.qp.Write(ctx, c.mr.SGE(0, big), s.mr.STag(), s.mr.TO(big)))
	must(t, c.qp.Read(ctx, c.mr.SGE(big, big), s.mr.STag(), s.mr.TO(big)))
	// (Checked through the Read: s's memory belongs to its receive path
	// until a completion of its own orders it for this goroutine.)
	if !bytes.Equal(cb[big:2*big], cb[:big]) {
		t.Fatal("write/read: content differs")
	}

	// Immediate Data and Write with Immediate.
	must(t, s.qp.PostRecvBuf(3, s.mr.SGE(2*big, 8)))
	must(t, c.qp.PostImm(4, 0x0102030405060708, FlagSignaled))
	if rc := poll(t, s.rcq, 1)[0]; rc.Op != OpRecvImm || rc.Imm != 0x0102030405060708 || rc.ID != 3 {
		t.Fatalf("immediate: receive %+v", rc)
	}
	poll(t, c.scq, 1)
	must(t, s.qp.PostRecvBuf(5, s.mr.SGE(2*big, 8)))
	must(t, c.qp.PostWriteImm(6, c.mr.SGE(100, 3000), s.mr.STag(), s.mr.TO(2*big+64), 0xfeedface_cafef00d, FlagSignaled))
	if rc := poll(t, s.rcq, 1)[0]; rc.Op != OpRecvWriteImm || rc.Imm != 0xfeedface_cafef00d || rc.ByteLen != 3000 {
		t.Fatalf("write with immediate: receive %+v", rc)
	}
	poll(t, c.scq, 1)
	if !bytes.Equal(sb[2*big+64:2*big+3064], cb[100:3100]) {
		t.Fatal("write with immediate: content differs")
	}

	// RFC 7306 atomics on an aligned word.
	// The target word is shared with the peer's receive path: access it
	// atomically (the race detector cannot see the network).
	w := 2*big + 4096
	word, err := atomics.Word(sb, uint64(w))
	must(t, err)
	atomic.StoreUint64(word, 40)
	if o, err := c.qp.FetchAdd(ctx, c.mr.SGE(0, 8), s.mr.STag(), s.mr.TO(w), 2, 0); err != nil || o != 40 {
		t.Fatalf("FetchAdd: %d %v", o, err)
	}
	if o, err := c.qp.CmpSwap(ctx, c.mr.SGE(0, 8), s.mr.STag(), s.mr.TO(w), 42, CmpSwapAll, 7, CmpSwapAll); err != nil || o != 42 {
		t.Fatalf("CmpSwap: %d %v", o, err)
	}
	if v := atomic.LoadUint64(word); v != 7 {
		t.Fatalf("remote word %d, want 7", v)
	}
	// A misaligned atomic is a remote error that ends the stream with a
	// Terminate both sides see.
	_, err = c.qp.FetchAdd(ctx, c.mr.SGE(0, 8), s.mr.STag(), s.mr.TO(w+1), 1, 0)
	var we *WCError
	if !errors.As(err, &we) || we.Status != StatusRemOpErr && we.Status != StatusRemAccessErr && we.Status != StatusRemInvReqErr {
		t.Fatalf("misaligned FetchAdd: %v", err)
	}
	if v := atomic.LoadUint64(word); v != 7 {
		t.Fatalf("misaligned FetchAdd touched memory: %d", v)
	}
}

func sideWith(t *testing.T, d *Device) *side {
	return newSide(t, d, 3<<20, QPAttr{})
}

func TestIntegrationAFXDPToAFXDP(t *testing.T) {
	e := newNSEnv(t)
	a := openIn(t, e.nsA, afxdpConfig(e.devA))
	b := openIn(t, e.nsB, afxdpConfig(e.devB))
	for _, d := range []*Device{a, b} {
		at := d.Attributes()
		if at.LLP != "afxdp" || at.XDP == nil || at.XDP.Queues != 1 || at.XDP.Mode != "generic" || !at.XDP.Addr.IsValid() {
			t.Fatalf("attributes %+v xdp %+v", at, at.XDP)
		}
	}
	if got := a.Attributes().XDP.Addr; got != ipA {
		t.Errorf("address %v, want %v (the interface's)", got, ipA)
	}
	c, s := sideWith(t, a), sideWith(t, b)
	connectNS(t, c, e.nsA, s, e.nsB, ipB)
	exercise(t, c, s)
}

func TestIntegrationAFXDPKernel(t *testing.T) {
	e := newNSEnv(t)
	a := openIn(t, e.nsA, afxdpConfig(e.devA))
	b := openIn(t, e.nsB, DeviceConfig{ConnTimeout: 5 * time.Second})
	if b.Attributes().LLP != "kernel" || b.Attributes().XDP != nil {
		t.Fatalf("kernel attributes %+v", b.Attributes())
	}
	t.Run("afxdp-dials-kernel", func(t *testing.T) {
		c, s := sideWith(t, a), sideWith(t, b)
		connectNS(t, c, e.nsA, s, e.nsB, ipB)
		exercise(t, c, s)
	})
	t.Run("kernel-dials-afxdp", func(t *testing.T) {
		c, s := sideWith(t, b), sideWith(t, a)
		connectNS(t, c, e.nsB, s, e.nsA, ipA)
		exercise(t, c, s)
	})
}

// TestIntegrationAFXDPOpenErrors: what users get wrong is reported with
// the verbs error to match and a hint.
func TestIntegrationAFXDPOpenErrors(t *testing.T) {
	e := newNSEnv(t)
	// A bridge has no driver XDP support: native attach is refused.
	netnstest.IP(t, "-n", e.nsA, "link", "add", "dum0", "type", "bridge")
	netnstest.IP(t, "-n", e.nsA, "addr", "add", "198.18.2.1/24", "dev", "dum0")
	netnstest.IP(t, "-n", e.nsA, "link", "set", "dum0", "up")
	cases := []struct {
		name string
		cfg  DeviceConfig
		want error
		hint string
	}{
		{"no interface given", DeviceConfig{Transport: "afxdp"}, ErrNotSupported, "XDP.Iface"},
		{"unknown interface", afxdpConfig("nosuchif0"), ErrNoInterface, "ip link"},
		{"bad mode", DeviceConfig{Transport: "afxdp", XDP: XDPConfig{Iface: e.devA, Mode: "turbo"}}, ErrBadAttr, "auto, native or generic"},
		{"native XDP on a bridge", DeviceConfig{Transport: "afxdp", XDP: XDPConfig{Iface: "dum0", Mode: "native"}}, ErrXDPAttach, "generic"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := netnstest.In(t, e.nsA, func() error {
				d, err := Open(tc.cfg)
				if err == nil {
					d.Close()
				}
				return err
			})
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.hint) {
				t.Fatalf("got %v, want %v mentioning %q", err, tc.want, tc.hint)
			}
			t.Log(err)
		})
	}
	// The interfaces are left clean after the failures.
	out, _ := exec.Command("ip", "-n", e.nsA, "link", "show").CombinedOutput()
	if strings.Contains(string(out), "xdp") {
		t.Fatalf("XDP left attached:\n%s", out)
	}
}

// TestAFXDPNeedsPrivileges runs itself without capabilities (setpriv
// clears the bounding set, so even UID 0 has none) and expects
// ErrPrivileges naming the capabilities.
func TestAFXDPNeedsPrivileges(t *testing.T) {
	if os.Getenv("XRNIC_VERBS_NOCAPS") == "1" {
		_, err := Open(DeviceConfig{Transport: "afxdp", XDP: XDPConfig{Iface: "lo"}})
		if !errors.Is(err, ErrPrivileges) || !strings.Contains(err.Error(), "CAP_NET_ADMIN") || !strings.Contains(err.Error(), "root") {
			t.Fatalf("without capabilities: %v", err)
		}
		t.Log(err)
		return
	}
	if os.Geteuid() != 0 {
		// Unprivileged already: the same check in this process.
		_, err := Open(DeviceConfig{Transport: "afxdp", XDP: XDPConfig{Iface: "lo"}})
		if !errors.Is(err, ErrPrivileges) {
			t.Fatalf("unprivileged: %v", err)
		}
		return
	}
	setpriv := require.Tool(t, "setpriv", "util-linux")
	cmd := exec.Command(setpriv, "--inh-caps=-all", "--bounding-set=-all", os.Args[0], "-test.run=^TestAFXDPNeedsPrivileges$", "-test.v")
	cmd.Env = append(os.Environ(), "XRNIC_VERBS_NOCAPS=1")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS") {
		t.Fatalf("child without capabilities: %v\n%s", err, out)
	}
	t.Logf("child:\n%s", out)
}

// TestIntegrationAFXDPDriven runs a ping-pong of Sends between two afxdp
// devices whose consumers spin on their CQs and drive the transport
// (transport.Driver, what the C ABI's ibv_poll_cq does): every message
// arrives intact, the poll loops hand their queues over to the drivers,
// and after Undrive the loops serve the QPs again on their own.
func TestIntegrationAFXDPDriven(t *testing.T) {
	e := newNSEnv(t)
	a := openIn(t, e.nsA, afxdpConfig(e.devA))
	b := openIn(t, e.nsB, afxdpConfig(e.devB))
	c, s := sideWith(t, a), sideWith(t, b)
	connectNS(t, c, e.nsA, s, e.nsB, ipB)
	da, ok := a.Transport().(transport.Driver)
	db, ok2 := b.Transport().(transport.Driver)
	if !ok || !ok2 {
		t.Fatal("the afxdp transport is not a transport.Driver")
	}
	const rounds, size = 2000, 64
	cb, sb := c.mr.Bytes(), s.mr.Bytes()
	// spinPoll polls cq for one completion, driving d on every empty poll.
	spinPoll := func(d transport.Driver, cq *CQ) (Completion, error) {
		var wc [1]Completion
		deadline := time.Now().Add(10 * time.Second)
		for i := 0; ; i++ {
			if cq.Poll(wc[:]) == 1 {
				return wc[0], nil
			}
			if d.Drive() == transport.DriveNone {
				runtime.Gosched() // the loop polls: let it run
			}
			if i%1024 == 0 && time.Now().After(deadline) {
				return Completion{}, errors.New("no completion in 10 s")
			}
		}
	}
	errc := make(chan error, 1)
	go func() { // the server echoes each message back
		errc <- func() error {
			if err := s.qp.PostRecvBuf(0, s.mr.SGE(0, size)); err != nil {
				return err
			}
			errc <- nil // the first receive is posted
			for i := range rounds {
				wc, err := spinPoll(db, s.rcq)
				if err != nil || wc.Status != StatusSuccess || wc.ByteLen != size {
					return fmt.Errorf("server round %d: %+v %v", i, wc, err)
				}
				copy(sb[size:2*size], sb[:size])
				// The next receive before the echo: the client sends
				// again as soon as the echo lands (iWARP has no RNR retry).
				if i+1 < rounds {
					if err := s.qp.PostRecvBuf(uint64(i+1), s.mr.SGE(0, size)); err != nil {
						return err
					}
				}
				if err := s.qp.PostSendBuf(uint64(i), s.mr.SGE(size, size), FlagSignaled); err != nil {
					return err
				}
				db.Drive()
				if wc, err := spinPoll(db, s.scq); err != nil || wc.Status != StatusSuccess {
					return fmt.Errorf("server send %d: %+v %v", i, wc, err)
				}
			}
			return nil
		}()
	}()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	for i := range rounds {
		must(t, c.qp.PostRecvBuf(uint64(i), c.mr.SGE(2*size, size)))
		for j := range size {
			cb[j] = byte(i + j)
		}
		must(t, c.qp.PostSendBuf(uint64(i), c.mr.SGE(0, size), FlagSignaled))
		da.Drive()
		if wc, err := spinPoll(da, c.scq); err != nil || wc.Status != StatusSuccess {
			t.Fatalf("client send %d: %+v %v", i, wc, err)
		}
		if wc, err := spinPoll(da, c.rcq); err != nil || wc.Status != StatusSuccess || wc.ByteLen != size {
			t.Fatalf("client round %d: %+v %v (client QP: %v, %v; server QP: %v, %v)", i, wc, err,
				c.qp.Err(), c.qp.Disconnected(), s.qp.Err(), s.qp.Disconnected())
		}
		if !bytes.Equal(cb[2*size:3*size], cb[:size]) {
			t.Fatalf("round %d: the echo differs", i)
		}
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	// The cost of a drive that runs a step and finds nothing (what an
	// empty ibv_poll_cq adds on afxdp once the loop has handed over),
	// logged for docs/VERBS-ABI.md.
	var steps, knocks int
	start := time.Now()
	for range 100000 {
		if da.Drive() == transport.DriveNone {
			knocks++
		} else {
			steps++
		}
	}
	t.Logf("after the ping-pong: %d idle drives ran a step, %d only knocked: %v per drive", steps, knocks, time.Since(start)/100000)
	for _, x := range []*Device{a, b} {
		st, err := x.Transport().(interface {
			LoopStats() ([]afxdp.LoopStats, error)
		}).LoopStats()
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: %+v", x.Attributes().XDP.Iface, st[0])
		if st[0].Drives == 0 || st[0].Handovers == 0 {
			t.Errorf("%s: drives %d, hand-overs %d: the loop never left the queue to its driver", x.Attributes().XDP.Iface, st[0].Drives, st[0].Handovers)
		}
	}
	// Nobody drives now: the loops must serve the QPs again.
	da.Undrive()
	db.Undrive()
	exercise(t, c, s)
}
