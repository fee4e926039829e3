package afxdp

import (
	"log/slog"
	"net/netip"
	"time"
)

// Config configures the transport on one interface (see the package
// documentation for how it shares the interface with the kernel).
type Config struct {
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
	// LockDir holds the per-interface owner locks (default
	// DefaultLockDir, /run/xrnic; see owner.go). Every process sharing
	// an interface must use the same directory.
	LockDir string
}

func (c *Config) setDefaults() {
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
	if c.LockDir == "" {
		c.LockDir = DefaultLockDir
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
