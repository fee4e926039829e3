package datapath

import (
	"errors"
	"fmt"
	"os"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"xrnic/afxdp"
	"xrnic/bpf"
	"xrnic/tcpstack"
)

// Scrape-time accessors of the afxdp transport's counters, for the
// daemon's metrics. Each costs syscalls or a round trip to the poll loops:
// call them when metrics are scraped, not per packet.

// XDPSocketStats returns the XDP_STATISTICS (and wakeup counters) of each
// queue's AF_XDP socket, indexed by queue.
func (d *Device) XDPSocketStats() ([]afxdp.Stats, error) {
	x := d.xdp
	if x == nil {
		return nil, ErrNotSupported
	}
	out := make([]afxdp.Stats, len(x.loops))
	var errs []error
	for i, l := range x.loops {
		s, err := l.q.sock.Stats()
		if err != nil {
			errs = append(errs, fmt.Errorf("queue %d: %w", i, err))
			continue
		}
		out[i] = s
	}
	return out, errors.Join(errs...)
}

// TCPStats returns the user-space TCP's counters of each queue's stack,
// indexed by queue. They are read on the poll loops (the stacks are owned
// by them); a queue whose loop has stopped reports zeros and ErrClosed.
func (d *Device) TCPStats() ([]tcpstack.Stats, error) {
	x := d.xdp
	if x == nil {
		return nil, ErrNotSupported
	}
	out := make([]tcpstack.Stats, len(x.loops))
	var errs []error
	for i, l := range x.loops {
		q := l.q
		if err := l.do(func() { out[i] = q.stack.Stats }); err != nil {
			errs = append(errs, fmt.Errorf("queue %d: %w", i, err))
		}
	}
	return out, errors.Join(errs...)
}

// xdpCPUCounters is the per-CPU value of the steering program's "stats"
// map (struct counters in bpf/xdp.c).
type xdpCPUCounters struct {
	Redirected, Passed, Malformed, NoSocket, FaultDropped, FaultCorrupted uint64
}

// XDPCountersPerCPU returns the steering program's verdict counters per
// possible CPU (XDPCounters sums them). It finds the program's "stats"
// map through the kernel's program info, so it reads exactly what the
// attached program counts.
func (d *Device) XDPCountersPerCPU() ([]bpf.Counters, error) {
	x := d.xdp
	if x == nil {
		return nil, ErrNotSupported
	}
	m, err := x.statsMap()
	if err != nil {
		return nil, err
	}
	defer m.Close()
	var per []xdpCPUCounters
	if err := m.Lookup(uint32(0), &per); err != nil {
		return nil, fmt.Errorf("datapath: read the XDP program's counters: %w", err)
	}
	out := make([]bpf.Counters, len(per))
	for i, v := range per {
		out[i] = bpf.Counters{Redirected: v.Redirected, Passed: v.Passed, Malformed: v.Malformed,
			NoSocket: v.NoSocket, FaultDropped: v.FaultDropped, FaultCorrupted: v.FaultCorrupted}
	}
	return out, nil
}

// statsMap opens the steering program's "stats" map (the caller closes
// it).
func (x *xdpDevice) statsMap() (*ebpf.Map, error) {
	info, err := x.prog.Prog().Info()
	if err != nil {
		return nil, fmt.Errorf("datapath: XDP program info: %w", err)
	}
	ids, ok := info.MapIDs()
	if !ok {
		return nil, errors.New("datapath: the kernel does not report the XDP program's maps")
	}
	for _, id := range ids {
		m, err := ebpf.NewMapFromID(id)
		if err != nil {
			continue
		}
		mi, err := m.Info()
		if err == nil && mi.Name == "stats" && mi.Type == ebpf.PerCPUArray {
			return m, nil
		}
		m.Close()
	}
	return nil, errors.New("datapath: the XDP program has no per-CPU stats map")
}

// Privileges of the afxdp transport.

// Linux capability numbers (linux/capability.h) that x/sys/unix lacks on
// some architectures' generated files.
const (
	capNetAdmin = 12
	capNetRaw   = 13
	capIPCLock  = 14
	capSysAdmin = 21
	capBPF      = 39
)

// ErrXDPPrivileges is wrapped by XDPPrivileges when the process may not
// use the afxdp transport.
var ErrXDPPrivileges = errors.New("datapath: the afxdp transport needs root or CAP_NET_ADMIN, CAP_BPF and CAP_NET_RAW")

// XDPPrivileges reports whether this process may use the afxdp transport:
// nil for root (effective UID 0 with its capabilities) or a process that
// holds CAP_NET_ADMIN (attach XDP), CAP_BPF (load the program; CAP_SYS_ADMIN
// also does) and CAP_NET_RAW (AF_XDP sockets) in its effective set.
// Otherwise the error names what is missing and how to grant it.
func XDPPrivileges() error {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return fmt.Errorf("%w: cannot read the process's capabilities: %v", ErrXDPPrivileges, err)
	}
	has := func(c uint) bool { return data[c/32].Effective&(1<<(c%32)) != 0 }
	var missing []string
	if !has(capNetAdmin) {
		missing = append(missing, "CAP_NET_ADMIN")
	}
	if !has(capBPF) && !has(capSysAdmin) {
		missing = append(missing, "CAP_BPF")
	}
	if !has(capNetRaw) {
		missing = append(missing, "CAP_NET_RAW")
	}
	if len(missing) == 0 {
		return nil
	}
	who := "this process"
	if os.Geteuid() != 0 {
		who = "this process (not root)"
	}
	return fmt.Errorf("%w: %s lacks %v: run as root, or grant them (systemd: AmbientCapabilities=CAP_NET_ADMIN CAP_BPF CAP_NET_RAW CAP_IPC_LOCK; a binary: setcap cap_net_admin,cap_bpf,cap_net_raw,cap_ipc_lock+ep PATH), or use the kernel transport, which needs none",
		ErrXDPPrivileges, who, missing)
}

// xdpMemlockNeeded reports whether the AF_XDP UMEM of bytes would exceed
// RLIMIT_MEMLOCK (the kernel charges UMEM pages to it unless the process
// has CAP_IPC_LOCK).
func xdpMemlockNeeded(bytes uint64) error {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err == nil && data[capIPCLock/32].Effective&(1<<(capIPCLock%32)) != 0 {
		return nil
	}
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_MEMLOCK, &rl); err != nil || rl.Cur == unix.RLIM_INFINITY || rl.Cur >= bytes {
		return nil
	}
	return fmt.Errorf("%w: the AF_XDP memory (%d MiB) exceeds RLIMIT_MEMLOCK (%d KiB): grant CAP_IPC_LOCK, or raise the limit (ulimit -l unlimited; systemd: LimitMEMLOCK=infinity)",
		ErrXDPPrivileges, bytes>>20, rl.Cur>>10)
}

// XDPMemlock checks RLIMIT_MEMLOCK against the UMEM the afxdp transport
// maps for cfg (frames × queues × 4 KiB chunks).
func XDPMemlock(cfg XDPConfig) error {
	cfg.setDefaults()
	return xdpMemlockNeeded(uint64(cfg.Frames) * uint64(cfg.Queues) * 4096)
}
