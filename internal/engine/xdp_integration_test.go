//go:build linux

package engine

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"xrnic/atomics"
	"xrnic/bpf"
	"xrnic/internal/netnstest"
	"xrnic/mem"
	"xrnic/transport/afxdp"
)

// Integration tests of the afxdp transport: two network namespaces joined
// by a veth pair (198.18.0.1 in A, 198.18.0.2 in B), no static neighbours
// (the transport resolves them through the kernel). They need root and
// AF_XDP; they skip otherwise.

const xdpNSPrefix = "xrnicdp-"

var (
	xdpIPA = netip.MustParseAddr("198.18.0.1")
	xdpIPB = netip.MustParseAddr("198.18.0.2")
)

type xdpEnv struct {
	nsA, nsB   string
	devA, devB string
}

// newXDPEnv makes the namespace pair. mtu 0 keeps 1500. limitGSO limits
// GSO to one MTU-sized segment (see the package doc of the afxdp
// transport: a single-buffer AF_XDP socket cannot take the 64 KiB GSO
// frames a veth peer's kernel TCP sends).
func newXDPEnv(t testing.TB, mtu int, limitGSO bool) *xdpEnv {
	t.Helper()
	netnstest.RequireRoot(t, true)
	p := netnstest.NewPair(t, netnstest.PairOptions{Prefix: xdpNSPrefix, DevA: "xdpa", DevB: "xdpb",
		AddrA: xdpIPA, AddrB: xdpIPB, MTU: mtu, LimitGSO: limitGSO})
	return &xdpEnv{nsA: p.NSA, nsB: p.NSB, devA: p.DevA, devB: p.DevB}
}

// The transports the tests open a device on.
const (
	trAFXDP  = "afxdp"
	trKernel = "kernel"
)

// in runs f on a thread in namespace ns.
func (e *xdpEnv) in(t testing.TB, ns string, f func() error) error {
	t.Helper()
	return netnstest.In(t, ns, f)
}

// xdpOf returns the afxdp transport of a device opened with trAFXDP.
func xdpOf(d *Device) *afxdp.Transport { return d.Transport().(*afxdp.Transport) }

// listenA listens on a device of namespace A (xdpIPA, any port); the
// listener closes when the test ends.
func (e *xdpEnv) listenA(t testing.TB, a *Device) *Listener {
	t.Helper()
	var ln *Listener
	if err := e.in(t, e.nsA, func() (err error) {
		ln, err = a.Listen("tcp", netip.AddrPortFrom(xdpIPA, 0).String())
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

func (e *xdpEnv) open(t testing.TB, ns, dev string, transport string) *Device {
	t.Helper()
	var d *Device
	err := e.in(t, ns, func() error {
		cfg := Config{ConnTimeout: 5 * time.Second}
		if transport == trAFXDP {
			tr, err := afxdp.Open(afxdp.Config{Iface: dev, MinRTO: 20 * time.Millisecond, Spin: testSpin(), Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				return err
			}
			cfg.Transport = tr
		}
		var err error
		d, err = Open(cfg)
		return err
	})
	if err != nil {
		t.Fatalf("open %s device on %s: %v", transport, dev, err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// newQPSide makes a QP with its own CQs and a registered buffer on d.
func newQPSide(t testing.TB, d *Device, bufLen int) *side {
	t.Helper()
	s := &side{dev: d, pd: d.AllocPD()}
	s.scq, _ = d.CreateCQ(128)
	s.rcq, _ = d.CreateCQ(128)
	var err error
	if s.qp, err = d.CreateQP(QPAttr{PD: s.pd, SendCQ: s.scq, RecvCQ: s.rcq, SQDepth: 128, RQDepth: 64}); err != nil {
		t.Fatal(err)
	}
	s.buf = make([]byte, bufLen)
	if s.mr, err = d.RegMR(s.buf, mem.MROptions{PD: s.pd, Access: mem.LocalWrite | mem.RemoteRead | mem.RemoteWrite | mem.RemoteAtomic}); err != nil {
		t.Fatal(err)
	}
	return s
}

// connectN connects n QP pairs: the client device dials from nsC, the
// server listens in nsS.
func (e *xdpEnv) connectN(t testing.TB, cli *Device, nsC string, srv *Device, nsS string, srvIP netip.Addr, n, bufLen int) (cs, ss []*side) {
	t.Helper()
	for range n {
		cs = append(cs, newQPSide(t, cli, bufLen))
		ss = append(ss, newQPSide(t, srv, bufLen))
	}
	e.connectSides(t, nsC, cs, nsS, srv, srvIP.String(), ss)
	return cs, ss
}

func waitCQ(cq *CQ, n int, timeout time.Duration) ([]Completion, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	out := make([]Completion, 0, n)
	wc := make([]Completion, 16)
	for len(out) < n {
		k := cq.Poll(wc[:min(len(wc), n-len(out))])
		if k == 0 {
			if err := cq.Wait(ctx); err != nil {
				return out, fmt.Errorf("waiting for %d completions, got %d: %+v", n, len(out), out)
			}
			continue
		}
		out = append(out, wc[:k]...)
	}
	for _, c := range out {
		if c.Status != StatusSuccess {
			return out, fmt.Errorf("completion %+v", c)
		}
	}
	return out, nil
}

// xdpExercise runs every operation from c to s with content checks.
func xdpExercise(c, s *side, seed byte, rounds int) error {
	const to = 20 * time.Second
	pat := func(b []byte, k byte) {
		for i := range b {
			b[i] = k + byte(i*7) + byte(i>>8)
		}
	}
	for r := range rounds {
		k := seed + byte(r*31)
		// Send -> Recv.
		if err := s.qp.PostRecv(&RecvWR{ID: 1, SGL: []SGE{s.sge(0, 4096)}}); err != nil {
			return err
		}
		pat(c.buf[:3000], k)
		if err := c.qp.PostSend(&SendWR{ID: 2, Op: OpSend, Flags: FlagSignaled, SGL: []SGE{c.sge(0, 3000)}}); err != nil {
			return err
		}
		if _, err := waitCQ(c.scq, 1, to); err != nil {
			return fmt.Errorf("send: %w", err)
		}
		rc, err := waitCQ(s.rcq, 1, to)
		if err != nil {
			return fmt.Errorf("recv: %w", err)
		}
		if rc[0].ByteLen != 3000 || !bytes.Equal(s.buf[:3000], c.buf[:3000]) {
			return fmt.Errorf("send content or length differs (%d)", rc[0].ByteLen)
		}
		// Write 200 KiB, then Read it back.
		const wl = 200 << 10
		pat(c.buf[64<<10:64<<10+wl], k+1)
		if err := c.qp.PostSend(&SendWR{ID: 3, Op: OpWrite, SGL: []SGE{c.sge(64<<10, wl)}, RemoteSTag: s.mr.STag(), RemoteTO: s.to(64 << 10)}); err != nil {
			return err
		}
		if err := c.qp.PostSend(&SendWR{ID: 4, Op: OpRead, Flags: FlagSignaled, SGL: []SGE{c.sge(512<<10, wl)}, RemoteSTag: s.mr.STag(), RemoteTO: s.to(64 << 10)}); err != nil {
			return err
		}
		if _, err := waitCQ(c.scq, 1, to); err != nil {
			return fmt.Errorf("write+read: %w", err)
		}
		// (Checked through the Read: s's memory is its loop's until a
		// completion of its own orders it for this goroutine.)
		if !bytes.Equal(c.buf[512<<10:512<<10+wl], c.buf[64<<10:64<<10+wl]) {
			return errors.New("write/read content differs")
		}
		// Write with Immediate Data.
		if err := s.qp.PostRecv(&RecvWR{ID: 5, SGL: []SGE{s.sge(8192, 8)}}); err != nil {
			return err
		}
		pat(c.buf[4096:5096], k+2)
		if err := c.qp.PostSend(&SendWR{ID: 6, Op: OpWriteWithImm, Flags: FlagSignaled, SGL: []SGE{c.sge(4096, 1000)}, RemoteSTag: s.mr.STag(), RemoteTO: s.to(300 << 10), Imm: 0xabc0 + uint64(r)}); err != nil {
			return err
		}
		if _, err := waitCQ(c.scq, 1, to); err != nil {
			return fmt.Errorf("write imm: %w", err)
		}
		rc, err = waitCQ(s.rcq, 1, to)
		if err != nil {
			return fmt.Errorf("write imm recv: %w", err)
		}
		if rc[0].Op != OpRecvWriteImm || rc[0].Imm != 0xabc0+uint64(r) || !bytes.Equal(s.buf[300<<10:300<<10+1000], c.buf[4096:5096]) {
			return fmt.Errorf("write imm: completion %+v or content differs", rc[0])
		}
		// FetchAdd then CmpSwap on a word of s.
		const w = 1 << 20
		// The target word is shared with the peer's poll loop: access
		// it atomically (the race detector cannot see the network).
		word, err := atomics.Word(s.buf, w)
		if err != nil {
			return err
		}
		atomic.StoreUint64(word, 100+uint64(r))
		if err := c.qp.PostSend(&SendWR{ID: 7, Op: OpFetchAdd, Flags: FlagSignaled, SGL: []SGE{c.sge(8, 8)}, RemoteSTag: s.mr.STag(), RemoteTO: s.to(w), CompareAdd: 5}); err != nil {
			return err
		}
		ac, err := waitCQ(c.scq, 1, to)
		if err != nil {
			return fmt.Errorf("fetchadd: %w", err)
		}
		if ac[0].AtomicOrig != 100+uint64(r) || binary.NativeEndian.Uint64(c.buf[8:]) != 100+uint64(r) {
			return fmt.Errorf("fetchadd: original %d", ac[0].AtomicOrig)
		}
		if err := c.qp.PostSend(&SendWR{ID: 8, Op: OpCmpSwap, Flags: FlagSignaled, SGL: []SGE{c.sge(16, 8)}, RemoteSTag: s.mr.STag(), RemoteTO: s.to(w),
			CompareAdd: 105 + uint64(r), Swap: 7, CompareMask: ^uint64(0), SwapMask: ^uint64(0)}); err != nil {
			return err
		}
		ac, err = waitCQ(c.scq, 1, to)
		if err != nil {
			return fmt.Errorf("cmpswap: %w", err)
		}
		if v := atomic.LoadUint64(word); ac[0].AtomicOrig != 105+uint64(r) || v != 7 {
			return fmt.Errorf("cmpswap: original %d, word %d", ac[0].AtomicOrig, v)
		}
	}
	return nil
}

// xdpExerciseAll runs exercise on every pair concurrently, in both directions.
func xdpExerciseAll(t *testing.T, cs, ss []*side, rounds int) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make([]error, 2*len(cs))
	for i := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[2*i] = xdpExercise(cs[i], ss[i], byte(i), rounds)
			if errs[2*i] == nil {
				errs[2*i+1] = xdpExercise(ss[i], cs[i], byte(i+100), rounds)
			}
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("QP pair %d direction %d: %v", i/2, i%2, err)
		}
	}
}

func TestIntegrationXDPToXDP(t *testing.T) {
	e := newXDPEnv(t, 0, false)
	a := e.open(t, e.nsA, e.devA, trAFXDP)
	b := e.open(t, e.nsB, e.devB, trAFXDP)
	info, _ := xdpOf(a).Info(), true
	t.Logf("A: %+v", info)
	cs, ss := e.connectN(t, b, e.nsB, a, e.nsA, xdpIPA, 8, 2<<20)
	xdpExerciseAll(t, cs, ss, 3)
	ctr, _ := xdpOf(a).Counters()
	if ctr.Redirected == 0 || ctr.Passed == 0 {
		t.Errorf("A's counters %+v: want redirected iWARP frames and passed ARP", ctr)
	}
	for i := range cs {
		cs[i].qp.Close()
		ss[i].qp.Close()
	}
}

func TestIntegrationXDPToKernel(t *testing.T) {
	e := newXDPEnv(t, 0, true)
	a := e.open(t, e.nsA, e.devA, trAFXDP)
	b := e.open(t, e.nsB, e.devB, trKernel)
	t.Run("afxdp-dials-kernel", func(t *testing.T) {
		cs, ss := e.connectN(t, a, e.nsA, b, e.nsB, xdpIPB, 4, 2<<20)
		xdpExerciseAll(t, cs, ss, 2)
	})
	t.Run("kernel-dials-afxdp", func(t *testing.T) {
		cs, ss := e.connectN(t, b, e.nsB, a, e.nsA, xdpIPA, 4, 2<<20)
		xdpExerciseAll(t, cs, ss, 2)
	})
}

// kernelEcho runs a kernel TCP echo across the pair (A listens) while the
// caller's iWARP traffic runs on the same interface.
func kernelEcho(t *testing.T, e *xdpEnv, size int) error {
	addr := netnstest.Serve(t, e.nsA, netip.AddrPortFrom(xdpIPA, 0).String(), true)
	msg := make([]byte, size)
	for i := range msg {
		msg[i] = byte(i * 13)
	}
	return e.in(t, e.nsB, func() error {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			return err
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(20 * time.Second))
		go c.Write(msg)
		back := make([]byte, len(msg))
		if _, err := io.ReadFull(c, back); err != nil {
			return err
		}
		if !bytes.Equal(back, msg) {
			return errors.New("kernel TCP echo differs")
		}
		return nil
	})
}

func TestIntegrationXDPKernelTCPCoexists(t *testing.T) {
	e := newXDPEnv(t, 0, false)
	a := e.open(t, e.nsA, e.devA, trAFXDP)
	b := e.open(t, e.nsB, e.devB, trAFXDP)
	cs, ss := e.connectN(t, b, e.nsB, a, e.nsA, xdpIPA, 4, 2<<20)
	done := make(chan error, 1)
	go func() {
		var err error
		for range 3 {
			if err = kernelEcho(t, e, 4<<20); err != nil {
				break
			}
		}
		done <- err
	}()
	xdpExerciseAll(t, cs, ss, 4)
	if err := <-done; err != nil {
		t.Fatalf("kernel TCP on the same interface while iWARP traffic ran: %v", err)
	}
}

func TestIntegrationXDPFaultDrop(t *testing.T) {
	e := newXDPEnv(t, 0, false)
	a := e.open(t, e.nsA, e.devA, trAFXDP)
	b := e.open(t, e.nsB, e.devB, trAFXDP)
	cs, ss := e.connectN(t, b, e.nsB, a, e.nsA, xdpIPA, 4, 2<<20)
	for _, d := range []*Device{a, b} {
		if err := xdpOf(d).SetFault(bpf.Fault{DropPPM: 10_000}); err != nil {
			t.Fatal(err)
		}
	}
	xdpExerciseAll(t, cs, ss, 3)
	ca, _ := xdpOf(a).Counters()
	cb, _ := xdpOf(b).Counters()
	if ca.FaultDropped+cb.FaultDropped == 0 {
		t.Errorf("no frame was dropped: A %+v B %+v", ca, cb)
	}
	t.Logf("dropped A %d of %d, B %d of %d", ca.FaultDropped, ca.Total(), cb.FaultDropped, cb.Total())
}

// xdpObjects returns the ids of the device's program and maps.
func xdpObjects(t *testing.T, d *Device) (ebpf.ProgramID, []ebpf.MapID) {
	info, err := xdpOf(d).Program().Prog().Info()
	if err != nil {
		t.Fatal(err)
	}
	id, _ := info.ID()
	maps, _ := info.MapIDs()
	return id, maps
}

func waitGone(t *testing.T, prog ebpf.ProgramID, maps []ebpf.MapID) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		left := []string{}
		if p, err := ebpf.NewProgramFromID(prog); err == nil {
			p.Close()
			left = append(left, fmt.Sprintf("program %d", prog))
		}
		for _, id := range maps {
			if m, err := ebpf.NewMapFromID(id); err == nil {
				m.Close()
				left = append(left, fmt.Sprintf("map %d", id))
			}
		}
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("still in the kernel after Close: %v", left)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func linkXDP(t *testing.T, e *xdpEnv, ns, dev string) netlink.LinkXdp {
	var x netlink.LinkXdp
	if err := e.in(t, ns, func() error {
		l, err := netlink.LinkByName(dev)
		if err == nil && l.Attrs().Xdp != nil {
			x = *l.Attrs().Xdp
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return x
}

// TestIntegrationXDPCleanup: Close with connections open leaves no XDP
// program, map or namespace behind; a stale attachment of ours is
// replaced at Open.
func TestIntegrationXDPCleanup(t *testing.T) {
	e := newXDPEnv(t, 0, false)
	// A stale attachment, as a crashed run that attached through netlink
	// leaves it: the program stays attached after its loader is gone.
	if err := e.in(t, e.nsA, func() error {
		p, err := bpf.Load(bpf.Options{})
		if err != nil {
			return err
		}
		defer p.Close()
		l, err := netlink.LinkByName(e.devA)
		if err != nil {
			return err
		}
		return netlink.LinkSetXdpFdWithFlags(l, p.Prog().FD(), unix.XDP_FLAGS_SKB_MODE)
	}); err != nil {
		t.Fatal(err)
	}
	if x := linkXDP(t, e, e.nsA, e.devA); x.ProgId == 0 {
		t.Fatalf("stale attachment not in place: %+v", x)
	}
	a := e.open(t, e.nsA, e.devA, trAFXDP)
	b := e.open(t, e.nsB, e.devB, trAFXDP)
	info, _ := xdpOf(a).Info(), true
	if info.Replaced == "" {
		t.Errorf("the stale attachment was not reported replaced: %+v", info)
	}
	cs, ss := e.connectN(t, b, e.nsB, a, e.nsA, xdpIPA, 2, 2<<20)
	xdpExerciseAll(t, cs, ss, 1)
	pa, ma := xdpObjects(t, a)
	pb, mb := xdpObjects(t, b)
	// Close with the connections still open.
	a.Close()
	b.Close()
	waitGone(t, pa, ma)
	waitGone(t, pb, mb)
	for _, x := range []struct{ ns, dev string }{{e.nsA, e.devA}, {e.nsB, e.devB}} {
		if st := linkXDP(t, e, x.ns, x.dev); st.Attached {
			t.Errorf("%s: XDP still attached after Close: %+v", x.dev, st)
		}
	}
	for _, ns := range []string{e.nsA, e.nsB} {
		netnstest.IP(t, "netns", "del", ns)
	}
	out, _ := exec.Command("ip", "netns", "list").Output()
	if strings.Contains(string(out), e.nsA) || strings.Contains(string(out), e.nsB) {
		t.Errorf("namespaces left: %s", out)
	}
}

// TestIntegrationXDPNeighbour: the kernel resolves a neighbour on request.
func TestIntegrationXDPNeighbour(t *testing.T) {
	e := newXDPEnv(t, 0, false)
	if err := e.in(t, e.nsA, func() error {
		ifi, err := net.InterfaceByName(e.devA)
		if err != nil {
			return err
		}
		ipB := net.IP(xdpIPB.AsSlice())
		neigh := func() (netlink.Neigh, error) {
			ns, err := netlink.NeighList(ifi.Index, netlink.FAMILY_V4)
			for _, n := range ns {
				if n.IP.Equal(ipB) {
					return n, nil
				}
			}
			if err == nil {
				err = os.ErrNotExist
			}
			return netlink.Neigh{}, err
		}
		if _, err := neigh(); !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("neighbour before: %v", err)
		}
		rts, err := netlink.RouteGet(ipB)
		if err != nil || len(rts) != 1 || rts[0].LinkIndex != ifi.Index || !rts[0].Src.Equal(xdpIPA.AsSlice()) {
			return fmt.Errorf("route %+v: %v", rts, err)
		}
		// What the transport does: RTM_NEWNEIGH with NTF_USE.
		if err := netlink.NeighSet(&netlink.Neigh{LinkIndex: ifi.Index, Family: netlink.FAMILY_V4, Flags: unix.NTF_USE, IP: ipB}); err != nil {
			return err
		}
		const usable = unix.NUD_REACHABLE | unix.NUD_STALE | unix.NUD_DELAY | unix.NUD_PROBE | unix.NUD_PERMANENT
		for range 200 {
			n, err := neigh()
			if err == nil && n.State&usable != 0 && len(n.HardwareAddr) == 6 {
				peer, _ := e.macOf(e.nsB, e.devB)
				if !bytes.Equal(n.HardwareAddr, peer) {
					return fmt.Errorf("resolved %v, peer has %v", n.HardwareAddr, peer)
				}
				return nil
			}
			time.Sleep(5 * time.Millisecond)
		}
		return errors.New("not resolved within 1s")
	}); err != nil {
		t.Fatal(err)
	}
}

func (e *xdpEnv) macOf(ns, dev string) (net.HardwareAddr, error) {
	out, err := exec.Command("ip", "-n", ns, "-br", "link", "show", dev).Output()
	if err != nil {
		return nil, err
	}
	f := strings.Fields(string(out))
	if len(f) < 3 {
		return nil, errors.New("ip link: " + string(out))
	}
	return net.ParseMAC(f[2])
}

var _ = runtime.NumCPU

// testSpin reads XRNIC_SPIN (a duration) for experiments with the poll
// loop's busy-poll time.
func testSpin() time.Duration {
	d, _ := time.ParseDuration(os.Getenv("XRNIC_SPIN"))
	return d
}
