package datapath

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"xrnic/afxdp"
	"xrnic/bpf"
	"xrnic/datapath/netlinkutil"
	"xrnic/tcpstack"
	"xrnic/wire/eth"
)

// Transports (Config.Transport).
const (
	TransportKernel = "kernel"
	TransportAFXDP  = "afxdp"
)

// ErrTransport is returned by Open for an unknown Config.Transport.
var ErrTransport = errors.New(`datapath: unknown transport (want "kernel" or "afxdp")`)

// XDPConfig configures the "afxdp" transport: the verbs API over the
// user-space TCP (tcpstack) over AF_XDP sockets (afxdp), with the XDP
// steering program (bpf) attached to Iface.
//
// # Coexistence with the kernel
//
// The interface stays the kernel's: its address, ARP, routes and every
// flow that is not ours. The steering program redirects only frames to our
// listen ports and our connections' 4-tuples; everything else (ARP
// included) is passed, so neighbours are learnt and answered by the
// kernel and we read them from its table over netlink (a missing entry is
// resolved by the kernel on our request: RTM_NEWNEIGH with NTF_USE starts
// ARP exactly as a packet to that address would). Routes and the MTU also
// come from netlink (the route's MTU metric, else the device's).
//
// The ports we use are reserved in the kernel by a kernel TCP socket bound
// (not listening) to our address and that port: the kernel then never
// gives the port to another socket, neither by bind nor as an ephemeral
// port, so no kernel connection can ever share a 4-tuple with one of ours.
// Dials get their local port this way too (bind to port 0 lets the kernel
// pick a free one). A bound socket does not stop the kernel from answering
// a SYN or segment for that port with a RST, so the reservation is not
// what prevents RSTs: the steering program is, because it redirects our
// frames before the kernel's TCP sees them. Flows are therefore inserted
// into the flow map before the SYN is sent (Connect) or right when a
// connection is accepted (its frames also match the listen port until
// then), and removed only when the user-space TCP has forgotten the
// connection (after TIME-WAIT), so stray segments of a closing connection
// are not answered by the kernel either. (ip_local_reserved_ports would
// only keep the kernel from picking the ports as ephemeral ones; it does
// not stop a bind.) Frames that do bypass the program (a socket missing
// from the XSKMAP: NoSocket) get the kernel's RST, which is the truthful
// answer then.
//
// At start, an XDP program already attached to Iface is inspected: if it
// is ours (named xrnic_steer, left by a crashed run: a pinned bpf_link or
// a netlink attachment survives its process) it is detached and replaced;
// any other program is an error. Close detaches the program and unloads
// its maps, also when connections are still open.
//
// # Queues
//
// Queue q (0 <= q < Queues) gets an AF_XDP socket, a TCP stack and a poll
// loop (poll.go). Connections stay on the queue where their frames arrive:
// Listen listens on every queue's stack, so a passive connection lives on
// the queue its SYN was received on (RSS keeps the rest of the flow
// there); Connect uses queue 0, which is only correct when the NIC
// delivers the flow's replies on queue 0 (one queue, or an ntuple rule).
type XDPConfig struct {
	Iface  string // network device (required)
	Queues int    // receive queues served, 0..Queues-1 (default 1)
	// Mode is the XDP attach mode: "auto" (default: native, generic on
	// veth), "native" or "generic".
	Mode string
	// Addr is our IPv4 address on Iface (default: its first IPv4
	// address).
	Addr netip.Addr
	// MTU caps the device's MTU (0: the device's).
	MTU int
	// Frames is the number of UMEM chunks per queue (default 6144: the
	// fill ring's 4096 plus 2048 for transmission).
	Frames int
	// Spin is how long a poll loop busy-polls after its last work before
	// it blocks (default 50µs; negative: never spins).
	Spin time.Duration
	// TCP tuning of the user-space stack (zero: tcpstack's defaults, and
	// 1 MiB receive buffers, 5 s TIME-WAIT).
	RecvBuffer int
	MinRTO     time.Duration
	TimeWait   time.Duration
	// LockThread locks each poll loop to its OS thread (it is always
	// locked when the device lives in another network namespace than
	// the process's initial one).
	LockThread bool
	// Logger receives control-path events (nil: slog.Default()).
	Logger *slog.Logger
}

func (c *XDPConfig) setDefaults() {
	if c.Queues <= 0 {
		c.Queues = 1
	}
	if c.Mode == "" {
		c.Mode = "auto"
	}
	if c.Frames <= 0 {
		c.Frames = 6144
	}
	if c.Spin == 0 {
		c.Spin = 50 * time.Microsecond
	}
	if c.RecvBuffer <= 0 {
		c.RecvBuffer = 1 << 20
	}
	if c.TimeWait <= 0 {
		c.TimeWait = 5 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// progName is the kernel name of the steering program (bpf/xdp.c).
const progName = "xrnic_steer"

// singleBufferMTU is the largest MTU served with single-buffer sockets: a
// frame and the kernel's XDP headroom and skb_shared_info fit one 4 KiB
// page (veth in generic mode), and a chunk. Larger MTUs (jumbo frames)
// use multi-buffer sockets (XDP_USE_SG), see xskLink.
const singleBufferMTU = 3498

// xdpAckEvery is the afxdp transport's tcpstack.Config.AckEvery.
const xdpAckEvery = 16

// txReserve is the number of chunks per queue kept for transmission.
const txReserve = 2048

// xdpDevice is the afxdp transport of a Device.
type xdpDevice struct {
	dev     *Device
	cfg     XDPConfig
	ns      int // network namespace fd of Open's caller
	ifindex int
	mac     eth.MAC
	addr    [4]byte
	mtu     int
	nl      *netlinkutil.Conn
	prog    *bpf.Program
	att     *bpf.Attachment
	umem    *afxdp.UMEM
	loops   []*pollLoop
	// Replaced reports a stale attachment that was found and replaced.
	replaced string

	closeOnce sync.Once
	closeErr  error
}

// XDPInfo describes a device's afxdp transport.
type XDPInfo struct {
	Ifindex  int
	Addr     netip.Addr
	MAC      [6]byte
	MTU      int
	Mode     string // "native" or "generic"
	Reason   string
	ZeroCopy bool
	Queues   int
	Replaced string // a stale attachment found and replaced at Open ("" if none)
}

// XDPInfo returns the afxdp transport's parameters (ok false over kernel
// TCP).
func (d *Device) XDPInfo() (XDPInfo, bool) {
	x := d.xdp
	if x == nil {
		return XDPInfo{}, false
	}
	return XDPInfo{Ifindex: x.ifindex, Addr: netip.AddrFrom4(x.addr), MAC: x.mac, MTU: x.mtu, Mode: x.att.Mode.String(),
		Reason: x.att.Reason, ZeroCopy: x.loops[0].q.sock.ZeroCopy(), Queues: len(x.loops), Replaced: x.replaced}, true
}

// XDPCounters returns the steering program's counters.
func (d *Device) XDPCounters() (bpf.Counters, error) {
	if d.xdp == nil {
		return bpf.Counters{}, ErrNotSupported
	}
	return d.xdp.prog.Counters()
}

// SetXDPFault sets fault injection on steered frames (tests).
func (d *Device) SetXDPFault(f bpf.Fault) error {
	if d.xdp == nil {
		return ErrNotSupported
	}
	return d.xdp.prog.SetFault(f)
}

// ErrNotSupported: the operation needs the afxdp transport.
var ErrNotSupported = errors.New("datapath: not supported by this device's transport")

// onThread runs f on a fresh OS thread in the namespace ns; the thread is
// discarded afterwards.
func onThread(ns int, f func() error) error {
	ch := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked
		if ns >= 0 {
			if err := unix.Setns(ns, unix.CLONE_NEWNET); err != nil {
				ch <- err
				return
			}
		}
		ch <- f()
	}()
	return <-ch
}

func openXDP(d *Device, cfg XDPConfig) (*xdpDevice, error) {
	cfg.setDefaults()
	if cfg.Iface == "" {
		return nil, errors.New("datapath: afxdp transport: XDPConfig.Iface is required")
	}
	mode, err := bpf.ParseMode(cfg.Mode)
	if err != nil {
		return nil, fmt.Errorf("datapath: afxdp transport: %w", err)
	}
	ns, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("datapath: afxdp transport: network namespace: %w", err)
	}
	x := &xdpDevice{dev: d, cfg: cfg, ns: ns}
	err = onThread(ns, func() error { return x.setup(mode) })
	if err != nil {
		x.teardown()
		return nil, fmt.Errorf("datapath: afxdp transport on %s: %w", cfg.Iface, err)
	}
	for q := range cfg.Queues {
		l := x.loops[q]
		started := make(chan error, 1)
		go l.run(started)
		if err := <-started; err != nil {
			x.teardown()
			return nil, fmt.Errorf("datapath: afxdp transport: poll loop: %w", err)
		}
	}
	return x, nil
}

// setup runs on a thread in the device's namespace.
func (x *xdpDevice) setup(mode bpf.Mode) error {
	cfg := &x.cfg
	ifi, err := net.InterfaceByName(cfg.Iface)
	if err != nil {
		return err
	}
	x.ifindex = ifi.Index
	if len(ifi.HardwareAddr) != 6 {
		return errors.New("not an Ethernet device")
	}
	copy(x.mac[:], ifi.HardwareAddr)
	x.mtu = ifi.MTU
	if cfg.MTU > 0 && cfg.MTU < x.mtu {
		x.mtu = cfg.MTU
	}
	if cfg.Addr.IsValid() {
		if !cfg.Addr.Is4() {
			return errors.New("XDPConfig.Addr: only IPv4 is supported")
		}
		x.addr = cfg.Addr.As4()
	} else {
		addrs, err := ifi.Addrs()
		if err != nil {
			return err
		}
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil {
				copy(x.addr[:], n.IP.To4())
				break
			}
		}
		if x.addr == ([4]byte{}) {
			return errors.New("the device has no IPv4 address (set XDPConfig.Addr)")
		}
	}
	if x.nl, err = netlinkutil.Open(); err != nil {
		return err
	}
	if err := x.replaceStale(); err != nil {
		return err
	}
	if x.prog, err = bpf.Load(bpf.Options{MaxQueues: max(64, cfg.Queues)}); err != nil {
		if errors.Is(err, unix.EPERM) {
			return fmt.Errorf("load the XDP program (needs root, or CAP_BPF and CAP_NET_ADMIN): %w", err)
		}
		return err
	}
	if x.att, err = x.prog.Attach(bpf.AttachOptions{Ifindex: x.ifindex, Mode: mode, Logger: cfg.Logger}); err != nil {
		return err
	}
	if x.umem, err = afxdp.NewUMEM(afxdp.UMEMOptions{Frames: cfg.Frames * cfg.Queues}); err != nil {
		return err
	}
	for q := range cfg.Queues {
		s, err := x.umem.Open(x.ifindex, q, afxdp.SocketOptions{Frames: cfg.Frames, MultiBuffer: x.mtu > singleBufferMTU})
		if err != nil {
			return fmt.Errorf("AF_XDP socket on queue %d: %w", q, err)
		}
		if x.mtu > singleBufferMTU && !s.MultiBuffer() {
			cfg.Logger.Warn("no multi-buffer AF_XDP sockets (XDP_USE_SG): MTU capped", "dev", cfg.Iface, "mtu", x.mtu, "cap", singleBufferMTU)
			x.mtu = singleBufferMTU
		}
		l, err := newPollLoop(x, q)
		if err != nil {
			s.Close()
			return err
		}
		x.loops = append(x.loops, l)
		if err := x.newQueue(l, s); err != nil {
			return err
		}
		if err := x.prog.SetSocket(q, s.Fd()); err != nil {
			return err
		}
	}
	return nil
}

// replaceStale finds an XDP program already attached to the device. Ours
// (left by a crashed run) is detached; anything else is an error.
func (x *xdpDevice) replaceStale() error {
	info, err := x.nl.LinkXDP(x.ifindex)
	if err != nil {
		return fmt.Errorf("read the XDP attachment: %w", err)
	}
	for _, id := range info.ProgIDs() {
		p, err := ebpf.NewProgramFromID(ebpf.ProgramID(id))
		if err != nil {
			return fmt.Errorf("inspect attached XDP program %d: %w", id, err)
		}
		pi, err := p.Info()
		p.Close()
		if err != nil {
			return fmt.Errorf("inspect attached XDP program %d: %w", id, err)
		}
		if pi.Name != progName {
			return fmt.Errorf("another XDP program (%q, id %d) is attached to %s; detach it first (ip link set dev %s xdp off)", pi.Name, id, x.cfg.Iface, x.cfg.Iface)
		}
		how, err := detachProgram(x.nl, x.ifindex, uint32(id))
		if err != nil {
			return fmt.Errorf("detach a stale xrnic XDP program (id %d): %w", id, err)
		}
		x.replaced = fmt.Sprintf("program %d (%s)", id, how)
		x.cfg.Logger.Warn("replaced a stale xrnic XDP attachment", "dev", x.cfg.Iface, "prog", id, "how", how)
	}
	return nil
}

// detachProgram removes program id from ifindex: through its bpf_link if
// one holds it (a pinned link), else through netlink.
func detachProgram(nl *netlinkutil.Conn, ifindex int, id uint32) (string, error) {
	it := new(link.Iterator)
	defer it.Close()
	for it.Next() {
		li, err := it.Link.Info()
		if err != nil || li.Type != link.XDPType || uint32(li.Program) != id {
			continue
		}
		if xi := li.XDP(); xi != nil && int(xi.Ifindex) != ifindex {
			continue
		}
		if raw, ok := it.Link.(interface{ Detach() error }); ok {
			if err := raw.Detach(); err == nil {
				return "bpf_link detached", nil
			}
		}
	}
	var errs []error
	for _, flags := range []uint32{unix.XDP_FLAGS_SKB_MODE, unix.XDP_FLAGS_DRV_MODE, unix.XDP_FLAGS_HW_MODE} {
		if err := nl.SetXDP(ifindex, -1, flags); err != nil {
			errs = append(errs, err)
		}
	}
	if st, err := nl.LinkXDP(ifindex); err == nil && len(st.ProgIDs()) == 0 {
		return "netlink detach", nil
	}
	return "", errors.Join(errs...)
}

func (x *xdpDevice) close() error {
	x.closeOnce.Do(func() { x.closeErr = x.teardown() })
	return x.closeErr
}

// teardown stops the loops and removes everything from the kernel.
func (x *xdpDevice) teardown() error {
	for _, l := range x.loops {
		if l.q != nil && l.q.started {
			l.stop()
		}
	}
	var errs []error
	for _, l := range x.loops {
		if l.q != nil {
			l.q.closeSockets()
		}
	}
	if x.att != nil {
		if err := x.att.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	if x.prog != nil {
		if err := x.prog.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	if x.umem != nil {
		x.umem.Close()
	}
	if x.nl != nil {
		x.nl.Close()
	}
	if x.ns >= 0 {
		unix.Close(x.ns)
		x.ns = -1
	}
	return errors.Join(errs...)
}

// xdpQueue is the state of one queue, owned by its poll loop.
type xdpQueue struct {
	x       *xdpDevice
	l       *pollLoop
	sock    *afxdp.Socket
	link    *xskLink
	stack   *tcpstack.Stack
	clock   tcpstack.Clock
	clk     *loopClock // clock, updated by the poll loop
	started bool
	next    time.Duration // the stack's next timer

	conns   map[*tcpstack.Conn]*xconn
	lns     map[uint16]*xdpListener
	events  []connEvent
	views   [][]byte
	closing []*xconn // closed by the QP, waiting for the stack to forget them
	sweepAt time.Duration
	dirty   bool

	stats queueStats
}

type queueStats struct {
	Sleeps, Iterations uint64
}

type connEvent struct {
	c  *tcpstack.Conn
	ev tcpstack.Event
}

func (x *xdpDevice) newQueue(l *pollLoop, s *afxdp.Socket) error {
	clk := newLoopClock()
	q := &xdpQueue{x: x, l: l, sock: s, clock: clk, clk: clk, conns: map[*tcpstack.Conn]*xconn{},
		lns: map[uint16]*xdpListener{}, views: make([][]byte, 0, 64), next: tcpstack.NoDeadline, sweepAt: tcpstack.NoDeadline}
	q.link = newXSKLink(s, x.umem.Bytes(), min(txReserve, x.cfg.Frames/3), x.mtu+eth.HeaderLen, x.umem.FrameSize())
	st, err := tcpstack.New(tcpstack.Config{
		Link: q.link, Clock: q.clock, MAC: x.mac, Addr: x.addr, MTU: x.mtu,
		RecvBuffer: x.cfg.RecvBuffer, MinRTO: x.cfg.MinRTO, TimeWait: x.cfg.TimeWait,
		// Stretch ACKs: every frame costs a sendto and the peer's kernel
		// receive path in copy mode (docs/PERFORMANCE.md); the delayed
		// ACK is short because a stretched tail waits for it.
		AckEvery: xdpAckEvery, DelayedACK: 2 * time.Millisecond,
		AcceptPartialChecksum: true,
		Notify: func(c *tcpstack.Conn, ev tcpstack.Event) {
			q.events = append(q.events, connEvent{c, ev})
		},
	})
	if err != nil {
		return err
	}
	q.stack = st
	l.q = q
	q.link.flush()
	q.started = true
	return nil
}

// timeoutMS is the poll(2) timeout until the next timer.
func (q *xdpQueue) timeoutMS() int {
	next := min(q.next, q.sweepAt)
	if next == tcpstack.NoDeadline {
		return -1
	}
	d := next - q.clock.Now()
	if d <= 0 {
		return 0
	}
	return int((d + time.Millisecond - 1) / time.Millisecond)
}

// pollStack runs the stack and handles its events; it reports whether
// anything happened.
func (q *xdpQueue) pollStack() bool {
	q.link.rxCount = 0
	q.next = q.stack.Poll()
	work := q.link.rxCount > 0 || len(q.events) > 0
	for i := range q.events {
		e := q.events[i]
		q.events[i] = connEvent{}
		x := q.conns[e.c]
		if x == nil {
			continue
		}
		if e.ev&tcpstack.EvEstablished != 0 && x.estab != nil {
			x.estab <- nil
			x.estab = nil
		}
		if e.ev&tcpstack.EvClosed != 0 && x.estab != nil {
			err := e.c.Err()
			if err == nil {
				err = tcpstack.ErrClosed
			}
			x.estab <- err
			x.estab = nil
		}
		if e.ev&tcpstack.EvWritable != 0 {
			x.writable()
		}
		if e.ev&(tcpstack.EvReadable|tcpstack.EvClosed) != 0 {
			x.deliver()
		}
	}
	q.events = q.events[:0]
	for _, ln := range q.lns {
		for ln.pendingOn(q) {
			c := ln.stacks[q].Accept()
			if c == nil {
				break
			}
			work = true
			ln.accepted(q, c)
		}
	}
	if len(q.closing) > 0 && q.clock.Now() >= q.sweepAt {
		q.sweep()
	}
	return work
}

// flush transmits what the iteration queued and refills the fill ring.
func (q *xdpQueue) flush() {
	if q.dirty {
		q.dirty = false
		q.stack.Flush()
	}
	q.link.flush()
}

// sweep removes the flows of closed connections the stack has forgotten.
func (q *xdpQueue) sweep() {
	j := 0
	for _, x := range q.closing {
		if x.c.State() == tcpstack.StateClosed {
			x.release()
			continue
		}
		q.closing[j] = x
		j++
	}
	clear(q.closing[j:])
	q.closing = q.closing[:j]
	q.sweepAt = tcpstack.NoDeadline
	if j > 0 {
		q.sweepAt = q.clock.Now() + 100*time.Millisecond
	}
}

func (q *xdpQueue) addClosing(x *xconn) {
	q.closing = append(q.closing, x)
	if q.sweepAt == tcpstack.NoDeadline {
		q.sweepAt = q.clock.Now() + 100*time.Millisecond
	}
}

// shutdown ends every connection and listener of the queue (the loop is
// stopping).
func (q *xdpQueue) shutdown() {
	for _, x := range q.conns {
		x.c.Abort()
		x.fail(ErrClosed)
		x.release()
	}
	for _, x := range q.closing {
		x.release()
	}
	q.closing = nil
	for _, ln := range q.lns {
		ln.stacks[q].Close()
	}
	q.stack.Flush()
}

func (q *xdpQueue) closeSockets() {
	if q.sock != nil {
		q.sock.Close()
		q.sock = nil
	}
}

// reservePort binds a kernel TCP socket to our address and port (0: a free
// one) without listening, so the kernel never uses the port itself. The
// socket is created on a thread in the device's namespace.
func (x *xdpDevice) reservePort(port uint16) (int, uint16, error) {
	fd := -1
	err := onThread(x.ns, func() (err error) {
		fd, err = unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		return err
	})
	if err != nil {
		return -1, 0, err
	}
	if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: x.addr, Port: int(port)}); err != nil {
		unix.Close(fd)
		if errors.Is(err, unix.EADDRINUSE) {
			return -1, 0, fmt.Errorf("port %d is in use by a kernel socket: %w", port, tcpstack.ErrAddrInUse)
		}
		return -1, 0, err
	}
	sa, err := unix.Getsockname(fd)
	if err != nil {
		unix.Close(fd)
		return -1, 0, err
	}
	return fd, uint16(sa.(*unix.SockaddrInet4).Port), nil
}

// resolve returns the MAC address frames to ip must carry: route lookup,
// then the kernel's neighbour table, asking the kernel to resolve a
// missing entry and waiting for it (bounded by ctx and 3 s).
func (x *xdpDevice) resolve(ctx context.Context, ip [4]byte) (eth.MAC, error) {
	rt, err := x.nl.RouteGet(ip)
	if err != nil {
		return eth.MAC{}, fmt.Errorf("route to %v: %w", netip.AddrFrom4(ip), err)
	}
	if rt.Ifindex != x.ifindex {
		return eth.MAC{}, fmt.Errorf("route to %v leaves through device %d, not %s", netip.AddrFrom4(ip), rt.Ifindex, x.cfg.Iface)
	}
	hop := rt.NextHop(ip)
	deadline := time.Now().Add(3 * time.Second)
	solicited := false
	for {
		n, err := x.nl.Neighbour(x.ifindex, hop)
		if err == nil && n.Usable() {
			return n.MAC, nil
		}
		if err != nil && !errors.Is(err, netlinkutil.ErrNotFound) {
			return eth.MAC{}, err
		}
		if !solicited || (err == nil && n.State&unix.NUD_FAILED != 0) {
			if err := x.nl.Solicit(x.ifindex, hop); err != nil {
				return eth.MAC{}, fmt.Errorf("resolve %v: %w", netip.AddrFrom4(hop), err)
			}
			solicited = true
		}
		if time.Now().After(deadline) {
			return eth.MAC{}, fmt.Errorf("resolve %v: no ARP answer: %w", netip.AddrFrom4(hop), tcpstack.ErrNoRoute)
		}
		select {
		case <-ctx.Done():
			return eth.MAC{}, ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}

func parseIPv4Port(addr string) ([4]byte, uint16, error) {
	host, ps, err := net.SplitHostPort(addr)
	if err != nil {
		return [4]byte{}, 0, err
	}
	port, err := strconv.ParseUint(ps, 10, 16)
	if err != nil {
		return [4]byte{}, 0, fmt.Errorf("port %q: %w", ps, err)
	}
	if host == "" {
		return [4]byte{}, uint16(port), nil
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return [4]byte{}, 0, err
	}
	if !a.Is4() && !a.Is4In6() {
		return [4]byte{}, 0, errors.New("the afxdp transport is IPv4 only")
	}
	return a.Unmap().As4(), uint16(port), nil
}

// dial opens a user-space TCP connection to addr on queue 0 and waits for
// the handshake.
func (x *xdpDevice) dial(ctx context.Context, addr string) (LLP, error) {
	ip, port, err := parseIPv4Port(addr)
	if err != nil {
		return nil, err
	}
	mac, err := x.resolve(ctx, ip)
	if err != nil {
		return nil, err
	}
	l := x.loops[0]
	var c *xconn
	var derr error
	estab := make(chan error, 1)
	if err := l.do(func() { c, derr = l.q.dial(ip, port, mac, estab) }); err != nil {
		return nil, err
	}
	if derr != nil {
		return nil, derr
	}
	select {
	case err := <-estab:
		if err != nil {
			c.Close()
			return nil, err
		}
		return c, nil
	case <-ctx.Done():
		c.Close()
		return nil, ctx.Err()
	}
}

func (q *xdpQueue) dial(ip [4]byte, port uint16, mac eth.MAC, estab chan error) (*xconn, error) {
	x := q.x
	fd, lport, err := x.reservePort(0)
	if err != nil {
		return nil, fmt.Errorf("reserve a local port: %w", err)
	}
	flow := bpf.Flow{LocalIP: x.addr, RemoteIP: ip, LocalPort: lport, RemotePort: port}
	if err := x.prog.AddFlow(flow); err != nil {
		unix.Close(fd)
		return nil, err
	}
	c, err := q.stack.Dial(ip, port, tcpstack.DialOptions{RemoteMAC: &mac, LocalPort: lport})
	if err != nil {
		x.prog.DeleteFlow(flow)
		unix.Close(fd)
		return nil, err
	}
	xc := q.newConn(c, flow, fd)
	xc.estab = estab
	return xc, nil
}

// xdpListener is a Listen on the afxdp transport: a listener on every
// queue's stack, the port in the listen map and reserved in the kernel.
type xdpListener struct {
	x      *xdpDevice
	port   uint16
	resv   int
	stacks map[*xdpQueue]*tcpstack.Listener
	ch     chan *xconn
	done   chan struct{}
	once   sync.Once
}

func (x *xdpDevice) listen(network, addr string) (*xdpListener, error) {
	if network != "tcp" && network != "tcp4" {
		return nil, fmt.Errorf("datapath: afxdp transport: listen on %q: IPv4 TCP only", network)
	}
	ip, port, err := parseIPv4Port(addr)
	if err != nil {
		return nil, err
	}
	if ip != ([4]byte{}) && ip != x.addr {
		return nil, fmt.Errorf("datapath: afxdp transport: listen on %v: not the device's address %v", netip.AddrFrom4(ip), netip.AddrFrom4(x.addr))
	}
	ln := &xdpListener{x: x, resv: -1, stacks: map[*xdpQueue]*tcpstack.Listener{}, ch: make(chan *xconn, 128), done: make(chan struct{})}
	var lerr error
	if err := x.loops[0].do(func() {
		ln.resv, ln.port, lerr = x.reservePort(port)
	}); err != nil {
		return nil, err
	}
	if lerr != nil {
		return nil, lerr
	}
	for _, l := range x.loops {
		q := l.q
		if err := l.do(func() {
			var s *tcpstack.Listener
			if s, lerr = q.stack.Listen(ln.port, tcpstack.ListenOptions{}); lerr == nil {
				ln.stacks[q] = s
				q.lns[ln.port] = ln
			}
		}); err != nil || lerr != nil {
			ln.close()
			return nil, errors.Join(err, lerr)
		}
	}
	if err := x.prog.AddListen(ln.port); err != nil {
		ln.close()
		return nil, err
	}
	return ln, nil
}

func (ln *xdpListener) addr() net.Addr {
	return &net.TCPAddr{IP: net.IP(ln.x.addr[:]), Port: int(ln.port)}
}

// pendingOn reports whether the listener has connections to accept on q.
func (ln *xdpListener) pendingOn(q *xdpQueue) bool {
	s := ln.stacks[q]
	return s != nil && s.Pending() > 0
}

// accepted registers a connection the stack of q accepted (on the loop).
func (ln *xdpListener) accepted(q *xdpQueue, c *tcpstack.Conn) {
	raddr, rport := c.RemoteAddr()
	flow := bpf.Flow{LocalIP: ln.x.addr, RemoteIP: raddr, LocalPort: ln.port, RemotePort: rport}
	if err := ln.x.prog.AddFlow(flow); err != nil {
		c.Abort()
		return
	}
	x := q.newConn(c, flow, -1)
	x.deliver() // data that came with or right after the handshake
	select {
	case ln.ch <- x:
	default: // backlog full
		x.closeOnLoop()
	}
}

func (ln *xdpListener) accept(ctx context.Context) (LLP, error) {
	select {
	case c := <-ln.ch:
		return c, nil
	case <-ln.done:
		return nil, net.ErrClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (ln *xdpListener) close() error {
	ln.once.Do(func() {
		close(ln.done)
		if ln.port != 0 {
			ln.x.prog.DeleteListen(ln.port)
		}
		for _, l := range ln.x.loops {
			q := l.q
			l.do(func() {
				if s := ln.stacks[q]; s != nil {
					s.Close()
					delete(ln.stacks, q)
				}
				if q.lns[ln.port] == ln {
					delete(q.lns, ln.port)
				}
			})
		}
		if ln.resv >= 0 {
			unix.Close(ln.resv)
		}
		for {
			select {
			case c := <-ln.ch:
				c.Close()
				continue
			default:
			}
			break
		}
	})
	return nil
}

// xconn is one user-space TCP connection as an LLP (and PushLLP, inline
// LLP). Its tcpstack.Conn belongs to the poll loop of its queue; the LLP
// methods called from other goroutines run there as commands.
type xconn struct {
	q    *xdpQueue
	c    *tcpstack.Conn
	flow bpf.Flow
	resv int // port reservation (dials), -1 if none
	kick atomic.Uint32

	// loop-owned
	estab    chan error
	rx       func([]byte) (int, error)
	qp       *QP
	pend     []byte // FPDUs accepted but not yet in segments
	finAfter bool   // CloseWrite once pend drained
	eofSent  bool
	closed   bool
	released bool
	mss      int
	txKickFn func()

	// handshake mode (before StartPush): bytes for Read
	rmu   sync.Mutex
	rbuf  []byte
	rerr  error
	rdl   time.Time
	rsig  chan struct{}
	rfull bool
}

const handshakeBuf = 1 << 20

func (q *xdpQueue) newConn(c *tcpstack.Conn, flow bpf.Flow, resv int) *xconn {
	x := &xconn{q: q, c: c, flow: flow, resv: resv, rsig: make(chan struct{}, 1)}
	q.conns[c] = x
	return x
}

// release drops the flow and the port reservation (on the loop, once the
// stack has forgotten the connection or the device closes).
func (x *xconn) release() {
	if x.released {
		return
	}
	x.released = true
	x.q.x.prog.DeleteFlow(x.flow)
	if x.resv >= 0 {
		unix.Close(x.resv)
		x.resv = -1
	}
	delete(x.q.conns, x.c)
}

// fail ends Read with err (handshake mode) and the QP's stream.
func (x *xconn) fail(err error) {
	x.rmu.Lock()
	if x.rerr == nil {
		x.rerr = err
	}
	x.rmu.Unlock()
	x.signal()
	if x.rx != nil && !x.eofSent {
		x.eofSent = true
		x.rx(nil)
	}
}

func (x *xconn) signal() {
	select {
	case x.rsig <- struct{}{}:
	default:
	}
}

// deliver hands the in-order payload to the QP (push mode) or to Read's
// buffer (handshake), on the loop.
func (x *xconn) deliver() {
	if x.closed {
		return
	}
	c := x.c
	if x.rx != nil {
		for {
			views := c.Views(x.q.views[:0])
			if len(views) == 0 {
				break
			}
			x.q.views = views[:0] // keep what append grew (no garbage per batch)
			total := 0
			for i, v := range views {
				if !x.eofSent {
					x.rx(v)
				}
				total += len(v)
				views[i] = nil
			}
			c.Release(total)
		}
	} else {
		x.rmu.Lock()
		for len(x.rbuf) < handshakeBuf {
			views := c.Views(x.q.views[:0])
			if len(views) == 0 {
				break
			}
			x.q.views = views[:0]
			total := 0
			for i, v := range views {
				k := min(len(v), handshakeBuf-len(x.rbuf))
				x.rbuf = append(x.rbuf, v[:k]...)
				total += k
				views[i] = nil
			}
			c.Release(total)
		}
		x.rfull = c.Buffered() > 0
		got := len(x.rbuf) > 0
		x.rmu.Unlock()
		if got {
			x.signal()
		}
		if x.rfull {
			return
		}
	}
	if c.EOF() {
		x.fail(io.EOF)
	} else if c.State() == tcpstack.StateClosed {
		err := c.Err()
		if err == nil {
			err = io.EOF
		}
		x.fail(err)
	}
}

// writable: the stack freed send buffers.
func (x *xconn) writable() {
	if len(x.pend) > 0 {
		x.flushPend()
	}
	if len(x.pend) == 0 {
		if x.finAfter {
			x.finAfter = false
			x.c.CloseWrite()
			x.q.dirty = true
		}
		if x.qp != nil {
			x.txStep()
		}
	}
}

// txStep runs the QP's transmit step with the room the send queue has.
func (x *xconn) txStep() {
	if x.qp == nil || x.closed {
		return
	}
	if len(x.pend) > 0 {
		x.flushPend()
		if len(x.pend) > 0 {
			return
		}
	}
	room := x.c.FreeSegments() * x.mss
	if room <= 0 {
		// Ask for EvWritable: the stack signals it only after a
		// Segment call found the queue full.
		x.c.Segment()
		return
	}
	x.qp.txStep(room, x.put)
	if len(x.pend) == 0 && x.c.FreeSegments() == 0 {
		// The step filled the send queue exactly (nothing overflowed into
		// pend, so no Segment call found it full): ask for EvWritable,
		// or what the QP still has to send waits for a kick that may
		// never come (every WR posted, the poster waiting for them).
		x.c.Segment()
	}
}

// fpduLen returns the wire length of the FPDU at the start of b (MPA
// header, ULPDU, pad, CRC; RFC 5044 §4.1), or 0 if b does not hold it all.
// With markers the length may be wrong; put then only loses alignment.
func fpduLen(b []byte) int {
	if len(b) < 2 {
		return 0
	}
	n := (2+int(binary.BigEndian.Uint16(b))+3)&^3 + 4
	if n > len(b) {
		return 0
	}
	return n
}

// put queues FPDUs for sending: whole FPDUs are packed into segment
// buffers (each segment starts with an FPDU, RFC 5044 §4.1); what finds no
// free segment waits in pend. It takes all of p.
func (x *xconn) put(p []byte) {
	x.q.dirty = true
	if len(x.pend) == 0 {
		p = x.fill(p)
	}
	if len(p) > 0 {
		x.pend = append(x.pend, p...)
	}
}

func (x *xconn) flushPend() {
	rest := x.fill(x.pend)
	n := copy(x.pend, rest)
	x.pend = x.pend[:n]
	x.q.dirty = true
}

// fill copies p into free segments and returns what did not fit.
func (x *xconn) fill(p []byte) []byte {
	for len(p) > 0 {
		seg, err := x.c.Segment()
		if err != nil {
			if errors.Is(err, tcpstack.ErrWouldBlock) {
				return p
			}
			return nil // connection gone: the QP learns it from rx
		}
		n := 0
		for n < len(p) {
			fl := fpduLen(p[n:])
			if fl == 0 || fl > len(seg) {
				if n > 0 {
					break
				}
				fl = min(len(seg), len(p)) // not an FPDU boundary we can see
			}
			if n+fl > len(seg) {
				break
			}
			n += fl
		}
		copy(seg, p[:n])
		if err := x.c.Commit(n); err != nil {
			return nil
		}
		p = p[n:]
	}
	return nil
}

// closeOnLoop closes the connection (FIN after queued data).
func (x *xconn) closeOnLoop() {
	if x.closed {
		return
	}
	if len(x.pend) > 0 {
		x.flushPend()
	}
	x.closed = true
	x.rx = nil
	x.qp = nil
	x.c.Close()
	x.q.dirty = true
	x.rmu.Lock()
	if x.rerr == nil {
		x.rerr = net.ErrClosed
	}
	x.rmu.Unlock()
	x.signal()
	x.q.addClosing(x)
}

// LLP methods (any goroutine).

func (x *xconn) Read(p []byte) (int, error) {
	for {
		x.rmu.Lock()
		if len(x.rbuf) > 0 {
			n := copy(p, x.rbuf)
			rest := copy(x.rbuf, x.rbuf[n:])
			x.rbuf = x.rbuf[:rest]
			refill := x.rfull && rest == 0
			x.rmu.Unlock()
			if refill {
				x.q.l.kick(x, kickRx)
			}
			return n, nil
		}
		err, dl := x.rerr, x.rdl
		x.rmu.Unlock()
		if err != nil {
			return 0, err
		}
		var tc <-chan time.Time
		if !dl.IsZero() {
			d := time.Until(dl)
			if d <= 0 {
				return 0, os.ErrDeadlineExceeded
			}
			t := time.NewTimer(d)
			defer t.Stop()
			tc = t.C
		}
		select {
		case <-x.rsig:
		case <-tc:
		case <-x.q.l.done:
			return 0, net.ErrClosed
		}
	}
}

func (x *xconn) Write(p []byte) (int, error) {
	var err error
	if lerr := x.q.l.do(func() {
		if x.closed || x.finAfter {
			err = net.ErrClosed
			return
		}
		if e := x.c.Err(); e != nil {
			err = e
			return
		}
		x.put(p)
		x.q.flush()
	}); lerr != nil {
		return 0, lerr
	}
	if err != nil {
		return 0, err
	}
	return len(p), nil
}

func (x *xconn) CloseWrite() error {
	return x.q.l.do(func() {
		if x.closed {
			return
		}
		if len(x.pend) > 0 {
			x.flushPend()
		}
		if len(x.pend) > 0 {
			x.finAfter = true
			return
		}
		x.c.CloseWrite()
		x.q.dirty = true
	})
}

func (x *xconn) Close() error {
	err := x.q.l.do(x.closeOnLoop)
	if errors.Is(err, ErrClosed) {
		return nil // the device closed: everything is gone already
	}
	return err
}

func (x *xconn) SetReadDeadline(t time.Time) error {
	x.rmu.Lock()
	x.rdl = t
	x.rmu.Unlock()
	x.signal()
	return nil
}

// SetWriteDeadline is accepted and ignored: Write never blocks (the loop
// takes the bytes at once).
func (x *xconn) SetWriteDeadline(t time.Time) error { return nil }

// EMSS is the connection's send MSS.
func (x *xconn) EMSS() int {
	var m int
	x.q.l.do(func() { m = x.c.MSS() })
	if m <= 0 {
		m = 1460
	}
	x.mss = m
	return m
}

// StartPush switches to push delivery: what Read left is handed to rx
// first.
func (x *xconn) StartPush(rx func(p []byte) (int, error)) {
	x.q.l.post(func() {
		if x.closed {
			rx(nil)
			return
		}
		x.rmu.Lock()
		left := x.rbuf
		x.rbuf = nil
		rerr := x.rerr
		x.rmu.Unlock()
		x.rx = rx
		if len(left) > 0 {
			rx(left)
		}
		if rerr != nil && !x.eofSent {
			x.eofSent = true
			rx(nil)
			return
		}
		x.deliver()
	})
}

func (x *xconn) startInline(qp *QP) func() {
	l := x.q.l
	x.txKickFn = func() { l.kick(x, kickTx) }
	l.post(func() {
		if x.mss <= 0 {
			x.mss = max(x.c.MSS(), 536)
		}
		x.qp = qp
		x.txStep() // a kick may have come before qp was set
	})
	return x.txKickFn
}
