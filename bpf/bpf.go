//go:build linux

package bpf

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

// Options size the maps. Zero values take the defaults compiled into
// xdp.c: 64 queues, 1024 listen ports, 65536 flows.
type Options struct {
	MaxQueues int // XSKMAP entries: one per receive queue of the device
	MaxListen int
	MaxFlows  int
}

// Program is the loaded steering program with its maps. It is safe for
// concurrent use: map updates are single syscalls.
type Program struct {
	objs  xdpObjects
	frags bool
}

// Load loads the program and its maps into the kernel. It needs
// CAP_BPF/CAP_NET_ADMIN (or root).
func Load(o Options) (*Program, error) {
	spec, err := loadXdp()
	if err != nil {
		return nil, fmt.Errorf("bpf: %w", err)
	}
	set := func(name string, n int) {
		if n > 0 {
			spec.Maps[name].MaxEntries = uint32(n)
		}
	}
	set(xdpMapXsks, o.MaxQueues)
	set(xdpMapListenPorts, o.MaxListen)
	set(xdpMapFlows, o.MaxFlows)

	p := &Program{frags: true}
	err = spec.LoadAndAssign(&p.objs, nil)
	if err != nil && !errors.Is(err, unix.EPERM) {
		// Kernels before 5.18 refuse BPF_F_XDP_HAS_FRAGS; such a program
		// still works for single-buffer frames.
		ps := spec.Programs[xdpProgXrnicSteer]
		if ps.Flags&unix.BPF_F_XDP_HAS_FRAGS != 0 {
			ps.Flags &^= unix.BPF_F_XDP_HAS_FRAGS
			if err2 := spec.LoadAndAssign(&p.objs, nil); err2 == nil {
				p.frags, err = false, nil
			}
		}
	}
	if err != nil {
		if errors.Is(err, unix.EPERM) {
			return nil, fmt.Errorf("bpf: load xdp program: %w (needs root or CAP_BPF and CAP_NET_ADMIN; check RLIMIT_MEMLOCK on kernels before 5.11)", err)
		}
		return nil, fmt.Errorf("bpf: load xdp program: %w", err)
	}
	return p, nil
}

// Close unloads the program and its maps (attachments hold their own
// reference: close them too).
func (p *Program) Close() error { return p.objs.Close() }

// Frags reports whether the program was loaded as multi-buffer aware.
func (p *Program) Frags() bool { return p.frags }

// Prog returns the underlying program (for pinning or inspection).
func (p *Program) Prog() *ebpf.Program { return p.objs.XrnicSteer }

// AddListen steers frames to local TCP port port.
func (p *Program) AddListen(port uint16) error {
	if err := p.objs.ListenPorts.Put(be16(port), uint8(1)); err != nil {
		return fmt.Errorf("bpf: add listen port %d: %w", port, err)
	}
	return nil
}

// DeleteListen stops steering port. It wraps ebpf.ErrKeyNotExist if port
// was not steered.
func (p *Program) DeleteListen(port uint16) error {
	if err := p.objs.ListenPorts.Delete(be16(port)); err != nil {
		return fmt.Errorf("bpf: delete listen port %d: %w", port, err)
	}
	return nil
}

// Flow is a connected IPv4 TCP 4-tuple seen from this host.
type Flow struct {
	LocalIP    [4]byte
	RemoteIP   [4]byte
	LocalPort  uint16
	RemotePort uint16
}

func (f Flow) String() string {
	return fmt.Sprintf("%s:%d<-%s:%d", net.IP(f.LocalIP[:]), f.LocalPort, net.IP(f.RemoteIP[:]), f.RemotePort)
}

func (f Flow) key() xdpFlow4 {
	return xdpFlow4{
		LocalIp:    binary.NativeEndian.Uint32(f.LocalIP[:]),
		RemoteIp:   binary.NativeEndian.Uint32(f.RemoteIP[:]),
		LocalPort:  be16(f.LocalPort),
		RemotePort: be16(f.RemotePort),
	}
}

// AddFlow steers the segments of flow f.
func (p *Program) AddFlow(f Flow) error {
	if err := p.objs.Flows.Put(f.key(), uint8(1)); err != nil {
		return fmt.Errorf("bpf: add flow %v: %w", f, err)
	}
	return nil
}

// DeleteFlow stops steering f. It wraps ebpf.ErrKeyNotExist if f was not
// steered.
func (p *Program) DeleteFlow(f Flow) error {
	if err := p.objs.Flows.Delete(f.key()); err != nil {
		return fmt.Errorf("bpf: delete flow %v: %w", f, err)
	}
	return nil
}

// SetSocket makes fd, a bound AF_XDP socket, the target of frames steered
// on receive queue queue.
func (p *Program) SetSocket(queue int, fd int) error {
	if err := p.objs.Xsks.Put(uint32(queue), uint32(fd)); err != nil {
		return fmt.Errorf("bpf: set socket of queue %d: %w", queue, err)
	}
	return nil
}

// DeleteSocket removes the socket of queue; steered frames of that queue
// then go to the kernel and count as NoSocket.
func (p *Program) DeleteSocket(queue int) error {
	if err := p.objs.Xsks.Delete(uint32(queue)); err != nil {
		return fmt.Errorf("bpf: delete socket of queue %d: %w", queue, err)
	}
	return nil
}

// Counters are the program's verdict counters summed over all CPUs.
// Redirected+Passed+Malformed+NoSocket+FaultDropped is the number of frames
// the program saw; FaultCorrupted counts corrupted frames among them.
type Counters struct {
	Redirected     uint64
	Passed         uint64
	Malformed      uint64
	NoSocket       uint64
	FaultDropped   uint64
	FaultCorrupted uint64
}

// Total is the number of frames the program has seen.
func (c Counters) Total() uint64 {
	return c.Redirected + c.Passed + c.Malformed + c.NoSocket + c.FaultDropped
}

// Counters reads and sums the per-CPU counters (a scrape-time operation:
// one syscall, one small allocation).
func (p *Program) Counters() (Counters, error) {
	var per []xdpCounters
	if err := p.objs.Stats.Lookup(uint32(0), &per); err != nil {
		return Counters{}, fmt.Errorf("bpf: read counters: %w", err)
	}
	var c Counters
	for _, v := range per {
		c.Redirected += v.Redirected
		c.Passed += v.Passed
		c.Malformed += v.Malformed
		c.NoSocket += v.NoSocket
		c.FaultDropped += v.FaultDropped
		c.FaultCorrupted += v.FaultCorrupted
	}
	return c, nil
}

// Fault configures fault injection on steered frames in parts per million
// (1_000_000 = every frame). Drop is decided first; a frame that is not
// dropped is corrupted with probability CorruptPPM.
type Fault struct {
	DropPPM    uint32
	CorruptPPM uint32
}

// SetFault sets fault injection; Fault{} turns it off.
func (p *Program) SetFault(f Fault) error {
	if err := p.objs.Faults.Put(uint32(0), xdpFault{DropPpm: f.DropPPM, CorruptPpm: f.CorruptPPM}); err != nil {
		return fmt.Errorf("bpf: set fault injection: %w", err)
	}
	return nil
}

// Action is an XDP verdict.
type Action uint32

// XDP verdicts (enum xdp_action).
const (
	Aborted Action = iota
	Drop
	Pass
	TX
	Redirect
)

func (a Action) String() string {
	switch a {
	case Aborted:
		return "XDP_ABORTED"
	case Drop:
		return "XDP_DROP"
	case Pass:
		return "XDP_PASS"
	case TX:
		return "XDP_TX"
	case Redirect:
		return "XDP_REDIRECT"
	}
	return fmt.Sprintf("XDP_%d", uint32(a))
}

// Run runs the program once on frame with BPF_PROG_TEST_RUN (receive queue
// 0) and returns its verdict and the frame as the program left it (into out
// when it is large enough). Tests use it; it needs root.
func (p *Program) Run(frame, out []byte) (Action, []byte, error) {
	if cap(out) < len(frame) {
		out = make([]byte, len(frame))
	}
	out = out[:cap(out)]
	opts := ebpf.RunOptions{Data: frame, DataOut: out}
	ret, err := p.objs.XrnicSteer.Run(&opts)
	if err != nil {
		return 0, nil, fmt.Errorf("bpf: test run: %w", err)
	}
	return Action(ret), opts.DataOut, nil
}

// Mode is how the program is attached to a device.
type Mode uint8

// Attach modes.
const (
	ModeAuto    Mode = iota // native on physical NICs with driver support, generic on veth
	ModeNative              // driver (native) XDP; fails if the driver lacks it
	ModeGeneric             // generic (SKB) XDP; works on every device, slower
)

func (m Mode) String() string {
	switch m {
	case ModeAuto:
		return "auto"
	case ModeNative:
		return "native"
	case ModeGeneric:
		return "generic"
	}
	return fmt.Sprintf("Mode(%d)", uint8(m))
}

// ParseMode parses "auto", "native" or "generic" (for flags and config).
func ParseMode(s string) (Mode, error) {
	switch strings.ToLower(s) {
	case "auto", "":
		return ModeAuto, nil
	case "native", "driver", "drv":
		return ModeNative, nil
	case "generic", "skb":
		return ModeGeneric, nil
	}
	return 0, fmt.Errorf("bpf: unknown XDP mode %q (want auto, native or generic)", s)
}

// AttachOptions select the device and mode.
type AttachOptions struct {
	Ifindex int
	Mode    Mode
	// Logger receives the mode decision; nil means slog.Default().
	Logger *slog.Logger
}

// Attachment is the program attached to a device through a bpf_link. The
// program stays attached until Close (or until the process exits).
type Attachment struct {
	Mode    Mode   // ModeNative or ModeGeneric: what was attached
	Reason  string // why that mode
	Driver  string // the device's driver as ethtool reports it ("" if unknown)
	Ifindex int
	l       link.Link
}

// Close detaches the program.
func (a *Attachment) Close() error { return a.l.Close() }

// Attach attaches the program to a device in the mode o asks for.
func (p *Program) Attach(o AttachOptions) (*Attachment, error) {
	log := o.Logger
	if log == nil {
		log = slog.Default()
	}
	ifi, err := net.InterfaceByIndex(o.Ifindex)
	if err != nil {
		return nil, fmt.Errorf("bpf: attach: %w", err)
	}
	a := &Attachment{Ifindex: o.Ifindex, Driver: driverName(ifi.Name)}
	attach := func(m Mode) error {
		flags := link.XDPGenericMode
		if m == ModeNative {
			flags = link.XDPDriverMode
		}
		l, err := link.AttachXDP(link.XDPOptions{Program: p.objs.XrnicSteer, Interface: o.Ifindex, Flags: flags})
		if err != nil {
			return err
		}
		a.l, a.Mode = l, m
		return nil
	}
	switch o.Mode {
	case ModeNative, ModeGeneric:
		if err := attach(o.Mode); err != nil {
			return nil, fmt.Errorf("bpf: attach %s XDP to %s (driver %q): %w", o.Mode, ifi.Name, a.Driver, err)
		}
		a.Reason = "forced by configuration"
	case ModeAuto:
		if a.Driver == "veth" {
			if err := attach(ModeGeneric); err != nil {
				return nil, fmt.Errorf("bpf: attach generic XDP to %s: %w", ifi.Name, err)
			}
			a.Reason = "veth: native XDP slows the kernel's own TCP through the veth 4-5x, generic about 25% (set mode native to force)"
			break
		}
		nerr := attach(ModeNative)
		if nerr == nil {
			a.Reason = "driver supports native XDP"
			break
		}
		if err := attach(ModeGeneric); err != nil {
			return nil, fmt.Errorf("bpf: attach XDP to %s: native: %v; generic: %w", ifi.Name, nerr, err)
		}
		a.Reason = fmt.Sprintf("native XDP refused by driver %q (%v); generic is slower", a.Driver, nerr)
	default:
		return nil, fmt.Errorf("bpf: attach: unknown mode %v", o.Mode)
	}
	log.Info("xdp attached", "dev", ifi.Name, "driver", a.Driver, "mode", a.Mode.String(), "reason", a.Reason, "frags", p.frags)
	return a, nil
}

// driverName asks ethtool for the driver of a device in the current
// network namespace.
func driverName(ifname string) string {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return ""
	}
	defer unix.Close(fd)
	info, err := unix.IoctlGetEthtoolDrvinfo(fd, ifname)
	if err != nil {
		return ""
	}
	return unix.ByteSliceToString(info.Driver[:])
}

// be16 returns the uint16 whose in-memory bytes are v in network order.
func be16(v uint16) uint16 {
	var b [2]byte
	binary.BigEndian.PutUint16(b[:], v)
	return binary.NativeEndian.Uint16(b[:])
}
