package afxdp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"runtime"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	xsk "xrnic/afxdp"
	"xrnic/bpf"
	"xrnic/transport"
	"xrnic/wire/eth"
)

// Transport is the afxdp transport: the XDP steering program on one
// interface, one AF_XDP socket, TCP stack and poll loop per queue, and
// the kernel-side reservations that let it coexist with the kernel's own
// traffic (config.go). Open one, hand it to the engine as its transport;
// the engine's Device closes it.
type Transport struct {
	cfg     Config
	ns      int // network namespace fd of Open's caller
	ifindex int
	mac     eth.MAC
	addr    [4]byte
	mtu     int
	nl      *netlink.Handle // rtnetlink, bound to ns (opened in setup)
	prog    *bpf.Program
	att     *bpf.Attachment
	progID  uint32 // the kernel id of prog (Healthy)
	umem    *xsk.UMEM
	loops   []*pollLoop
	lock    *ifaceLock // the interface's owner lock (owner.go)
	// replaced reports a stale attachment that was found and replaced.
	replaced string

	hmu    sync.Mutex // Healthy against teardown
	closed bool

	closeOnce sync.Once
	closeErr  error
}

var _ transport.Transport = (*Transport)(nil)

// Info describes an open afxdp transport.
type Info struct {
	Ifindex  int
	Addr     netip.Addr
	MAC      [6]byte
	MTU      int
	Mode     string // "native" or "generic"
	Reason   string
	ZeroCopy bool
	Queues   int
	Replaced string // a stale attachment found and replaced at Open ("" if none)
	// MultiBuffer: the sockets take multi-buffer frames (XDP_USE_SG), so
	// MTUs above a page's worth work.
	MultiBuffer bool
}

// Info returns the transport's parameters.
func (x *Transport) Info() Info {
	return Info{Ifindex: x.ifindex, Addr: netip.AddrFrom4(x.addr), MAC: x.mac, MTU: x.mtu, Mode: x.att.Mode.String(),
		Reason: x.att.Reason, ZeroCopy: x.loops[0].q.sock.ZeroCopy(), Queues: len(x.loops), Replaced: x.replaced,
		MultiBuffer: x.loops[0].q.link.sg}
}

// Name implements transport.Transport.
func (x *Transport) Name() string { return "afxdp" }

// Dial implements transport.Transport: a user-space TCP connection to addr
// (IPv4 host:port) on queue 0.
func (x *Transport) Dial(ctx context.Context, addr string) (transport.Conn, error) {
	c, err := x.dial(ctx, addr)
	if err != nil {
		return nil, err
	}
	return c, nil
}

// Listen implements transport.Transport: a listener on every queue's
// stack (network "tcp" or "tcp4").
func (x *Transport) Listen(network, addr string) (transport.Listener, error) {
	ln, err := x.listen(network, addr)
	if err != nil {
		return nil, err
	}
	return ln, nil
}

// Close stops the poll loops and removes the XDP program, its maps and
// the sockets from the kernel. It is safe to call more than once.
func (x *Transport) Close() error {
	x.closeOnce.Do(func() { x.closeErr = x.teardown() })
	return x.closeErr
}

// onThread runs f on a fresh OS thread in the namespace ns; the thread is
// discarded afterwards.
func onThread(ns int, f func() error) error {
	ch := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked
		if ns >= 0 && !inNetns(ns) {
			// setns needs CAP_SYS_ADMIN: only when the thread is elsewhere
			// (the documented capability set has no CAP_SYS_ADMIN).
			if err := unix.Setns(ns, unix.CLONE_NEWNET); err != nil {
				ch <- err
				return
			}
		}
		ch <- f()
	}()
	return <-ch
}

// Open sets the transport up on cfg.Iface in the network namespace of the
// calling thread. Errors are *OpError values naming the step that failed.
func Open(cfg Config) (*Transport, error) {
	cfg.setDefaults()
	if cfg.Iface == "" {
		return nil, &OpError{Op: OpInterface, Err: errors.New("Config.Iface is required")}
	}
	mode, err := bpf.ParseMode(cfg.Mode)
	if err != nil {
		return nil, &OpError{Op: OpInterface, Iface: cfg.Iface, Err: err}
	}
	ns, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &OpError{Op: OpInterface, Iface: cfg.Iface, Err: fmt.Errorf("network namespace: %w", err)}
	}
	x := &Transport{cfg: cfg, ns: ns}
	err = onThread(ns, func() error { return x.setup(mode) })
	if err != nil {
		x.teardown()
		return nil, err
	}
	for q := range cfg.Queues {
		l := x.loops[q]
		started := make(chan error, 1)
		l.running = true // teardown waits for it to end
		go l.run(started)
		if err := <-started; err != nil {
			x.teardown()
			return nil, &OpError{Op: OpPollLoop, Iface: cfg.Iface, Err: err}
		}
	}
	return x, nil
}

// setup runs on a thread in the device's namespace.
func (x *Transport) setup(mode bpf.Mode) error {
	cfg := &x.cfg
	fail := func(op string, err error) error { return &OpError{Op: op, Iface: cfg.Iface, Err: err} }
	ifi, err := net.InterfaceByName(cfg.Iface)
	if err != nil {
		return fail(OpInterface, err)
	}
	x.ifindex = ifi.Index
	if len(ifi.HardwareAddr) != 6 {
		return fail(OpInterface, errors.New("not an Ethernet device"))
	}
	copy(x.mac[:], ifi.HardwareAddr)
	if err := queueCheck(cfg.Iface, cfg.Queues); err != nil {
		return fail(OpQueues, err)
	}
	// The owner lock comes before anything changes on the interface: a
	// second process must leave the first one's attachment alone.
	if x.lock, err = lockIface(cfg.LockDir, cfg.Iface, x.ns, x.ifindex); err != nil {
		return fail(OpLock, err)
	}
	x.mtu = ifi.MTU
	if cfg.MTU > 0 && cfg.MTU < x.mtu {
		x.mtu = cfg.MTU
	}
	if cfg.Addr.IsValid() {
		if !cfg.Addr.Is4() {
			return fail(OpInterface, errors.New("Config.Addr: only IPv4 is supported"))
		}
		x.addr = cfg.Addr.As4()
	} else {
		addrs, err := ifi.Addrs()
		if err != nil {
			return fail(OpInterface, err)
		}
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil {
				copy(x.addr[:], n.IP.To4())
				break
			}
		}
		if x.addr == ([4]byte{}) {
			return fail(OpInterface, errors.New("the device has no IPv4 address (set Config.Addr)"))
		}
	}
	// The handle's socket is opened on this thread, so it stays in the
	// device's namespace whichever goroutine uses it later.
	if x.nl, err = netlink.NewHandle(unix.NETLINK_ROUTE); err != nil {
		return fail(OpNetlink, err)
	}
	if err := x.nl.SetSocketTimeout(5 * time.Second); err != nil {
		return fail(OpNetlink, err)
	}
	if err := x.replaceStale(); err != nil {
		return fail(OpStale, err)
	}
	if x.prog, err = bpf.Load(bpf.Options{MaxQueues: max(64, cfg.Queues)}); err != nil {
		if errors.Is(err, unix.EPERM) {
			err = fmt.Errorf("needs root, or CAP_BPF and CAP_NET_ADMIN: %w", err)
		}
		return fail(OpLoad, err)
	}
	if pi, err := x.prog.Prog().Info(); err == nil {
		if id, ok := pi.ID(); ok {
			x.progID = uint32(id)
		}
	}
	if x.att, err = x.prog.Attach(bpf.AttachOptions{Ifindex: x.ifindex, Mode: mode, Logger: cfg.Logger}); err != nil {
		return fail(OpAttach, err)
	}
	if x.umem, err = xsk.NewUMEM(xsk.UMEMOptions{Frames: cfg.Frames * cfg.Queues}); err != nil {
		return fail(OpUMEM, err)
	}
	for q := range cfg.Queues {
		s, err := x.umem.Open(x.ifindex, q, xsk.SocketOptions{Frames: cfg.Frames, MultiBuffer: x.mtu > singleBufferMTU})
		if err != nil {
			return fail(OpSocket, fmt.Errorf("queue %d: %w", q, err))
		}
		if x.mtu > singleBufferMTU && !s.MultiBuffer() {
			cfg.Logger.Warn("no multi-buffer AF_XDP sockets (XDP_USE_SG): MTU capped", "dev", cfg.Iface, "mtu", x.mtu, "cap", singleBufferMTU)
			x.mtu = singleBufferMTU
		}
		l, err := newPollLoop(x, q)
		if err != nil {
			s.Close()
			return fail(OpPollLoop, err)
		}
		x.loops = append(x.loops, l)
		if err := x.newQueue(l, s); err != nil {
			s.Close()
			return fail(OpPollLoop, err)
		}
		if err := x.prog.SetSocket(q, s.Fd()); err != nil {
			return fail(OpSocket, err)
		}
	}
	return nil
}

// replaceStale finds an XDP program already attached to the device. Ours
// is stale, its owner gone (we hold the interface's owner lock, which
// every live xrnic process on it holds), and is detached; anything else
// is an error.
func (x *Transport) replaceStale() error {
	ids, multi, err := attachedXDP(x.nl, x.ifindex)
	if err != nil {
		return fmt.Errorf("read the XDP attachment: %w", err)
	}
	if multi {
		// Programs in several modes, for which the kernel reports no
		// single id: it allows that only with an offloaded (HW) program,
		// and xrnic never attaches one.
		return fmt.Errorf("%w (offloaded, and one in another mode) is attached to %s; detach them first", ErrOtherProgram, x.cfg.Iface)
	}
	for _, id := range ids {
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
			return fmt.Errorf("%w (%q, id %d) is attached to %s; detach it first (ip link set dev %s xdp off)", ErrOtherProgram, pi.Name, id, x.cfg.Iface, x.cfg.Iface)
		}
		how, err := detachProgram(x.nl, x.ns, x.ifindex, id)
		if err != nil {
			return fmt.Errorf("detach a stale xrnic XDP program (id %d): %w", id, err)
		}
		x.replaced = fmt.Sprintf("program %d (%s)", id, how)
		x.cfg.Logger.Warn("replaced a stale xrnic XDP attachment", "dev", x.cfg.Iface, "prog", id, "how", how)
	}
	return nil
}

// xdpAttachedMulti is XDP_ATTACHED_MULTI (linux/if_link.h), which
// x/sys/unix lacks.
const xdpAttachedMulti = 4

// attachedXDP returns the program attached to ifindex (IFLA_XDP), if any,
// or that programs are attached in several modes (XDP_ATTACHED_MULTI).
func attachedXDP(nl *netlink.Handle, ifindex int) ([]uint32, bool, error) {
	l, err := nl.LinkByIndex(ifindex)
	if err != nil {
		return nil, false, err
	}
	xd := l.Attrs().Xdp
	switch {
	case xd == nil || !xd.Attached:
		return nil, false, nil
	case xd.AttachMode == xdpAttachedMulti:
		return nil, true, nil
	}
	return []uint32{xd.ProgId}, false, nil
}

// detachProgram removes program id from ifindex (in namespace ns):
// through its bpf_link if one holds it (a pinned link), else through
// netlink.
func detachProgram(nl *netlink.Handle, ns, ifindex int, id uint32) (string, error) {
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
	// The library has no Handle method for setting IFLA_XDP: the package
	// function opens a socket on the calling thread, so it runs on one in
	// the device's namespace.
	dev := &netlink.Device{LinkAttrs: netlink.LinkAttrs{Index: ifindex}}
	err := onThread(ns, func() error {
		for _, flags := range []int{unix.XDP_FLAGS_SKB_MODE, unix.XDP_FLAGS_DRV_MODE, unix.XDP_FLAGS_HW_MODE} {
			if err := netlink.LinkSetXdpFdWithFlags(dev, -1, flags); err != nil {
				errs = append(errs, err)
			}
		}
		return nil
	})
	if err != nil {
		errs = append(errs, err)
	}
	if ids, multi, err := attachedXDP(nl, ifindex); err == nil && len(ids) == 0 && !multi {
		return "netlink detach", nil
	}
	return "", errors.Join(errs...)
}

// teardown stops the loops and removes everything from the kernel. It
// runs also after a failed Open, in any state setup left: it waits only
// for loops whose goroutine was started, so it never blocks.
func (x *Transport) teardown() error {
	for _, l := range x.loops {
		l.stop()
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
	x.hmu.Lock()
	x.closed = true
	if x.nl != nil {
		x.nl.Close()
	}
	x.hmu.Unlock()
	if x.ns >= 0 {
		unix.Close(x.ns)
		x.ns = -1
	}
	// Last: the next owner finds the interface as we left it.
	x.lock.release()
	return errors.Join(errs...)
}

// inNetns reports whether the calling thread is already in the network
// namespace ns (an fd of one): the same device and inode.
func inNetns(ns int) bool {
	var want, have unix.Stat_t
	if unix.Fstat(ns, &want) != nil || unix.Stat("/proc/thread-self/ns/net", &have) != nil {
		return false
	}
	return want.Dev == have.Dev && want.Ino == have.Ino
}
