package verbs

import (
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"sync"
	"time"

	"xrnic/internal/engine"
	"xrnic/internal/rnic"
	"xrnic/mem"
	"xrnic/transport"
)

// Errors. Posting errors are sentinels (no formatting on the hot path).
var (
	ErrClosed       = rnic.ErrClosed
	ErrNotSupported = errors.New("verbs: not supported")
	ErrBadAttr      = rnic.ErrBadAttr
	ErrTooManyQPs   = rnic.ErrTooManyQPs
	// Deprecated: never returned; CQs grow as posts need them.
	ErrCQOverflow    = rnic.ErrCQOverflow
	ErrCQBusy        = rnic.ErrCQBusy
	ErrSRQBusy       = rnic.ErrSRQBusy
	ErrPDBusy        = errors.New("verbs: PD still has memory regions (deregister them first)")
	ErrQueueFull     = rnic.ErrQueueFull
	ErrCQFull        = rnic.ErrCQFull
	ErrInvalidWR     = rnic.ErrInvalidWR
	ErrTooLong       = rnic.ErrTooLong
	ErrState         = rnic.ErrState
	ErrWrongDevice   = rnic.ErrWrongDevice
	ErrNotConnected  = rnic.ErrNotConnected
	ErrAlreadyInUse  = rnic.ErrAlreadyInUse
	ErrNoAtomics     = rnic.ErrNoAtomics
	ErrRejected      = errors.New("verbs: connection rejected by the peer")
	ErrRefused       = engine.ErrRefused      // ListenConfig.Admit refused the peer
	ErrSetupFull     = engine.ErrSetupFull    // a ListenConfig bound was reached
	ErrSetupEvicted  = engine.ErrSetupEvicted // a newer connection from the same peer took the setup slot
	ErrNoMPAReply    = engine.ErrNoMPAReply   // Dial: the peer closed, sent no MPA Reply key, or was silent (not an iWARP endpoint?)
	ErrPeerClosed    = engine.ErrPeerClosed   // QP.Disconnected: the peer closed in order (a disconnect, not an error)
	ErrAccessLocalWr = errors.New("verbs: remote write and remote atomic access require AccessLocalWrite (as in ibv_reg_mr)")

	// Open errors of the "afxdp" transport (wrapped with the details and
	// what to do).
	ErrPrivileges  = errors.New("verbs: not permitted")
	ErrNoInterface = errors.New("verbs: no such network interface")
	ErrXDPAttach   = errors.New("verbs: XDP attach refused")
)

// DeviceConfig configures Open. Zero fields take the defaults shown.
type DeviceConfig struct {
	// Transport is the lower layer: "kernel" (default: kernel TCP sockets,
	// no privileges needed) or "afxdp" (kernel bypass: the user-space TCP
	// over AF_XDP sockets on XDP.Iface, with an XDP program steering our
	// flows to them; needs root, or CAP_NET_ADMIN, CAP_BPF, CAP_PERFMON and CAP_NET_RAW,
	// plus CAP_IPC_LOCK or a high RLIMIT_MEMLOCK).
	Transport string
	// XDP configures the "afxdp" transport (ignored by "kernel").
	XDP XDPConfig

	MaxQPs     int    // 1024
	MaxWR      int    // per queue, 4096
	MaxSGE     int    // per WR, 16
	MaxCQE     int    // per CQ, 4194304
	MaxMR      int    // 65536
	MaxORD     int    // outbound Reads+Atomics per QP, 128
	MaxIRD     int    // inbound Reads+Atomics per QP, 128
	MaxMsgSize uint32 // 1 GiB

	// ConnTimeout bounds each step of connection setup and the linger of
	// a close (10 s).
	ConnTimeout time.Duration
	// FPDUTimeout ends a QP whose peer sent part of an FPDU and then
	// nothing for this long (default 5 s; negative: never): Terminate LLP
	// 2/0/0x01, every WR flushed. No peer can pin a QP by stopping
	// mid-FPDU.
	FPDUTimeout time.Duration
	// RequestTimeout is the default of QPAttr.RequestTimeout (30 s;
	// negative: never).
	RequestTimeout time.Duration
	// NoInlineTx (kernel transport): never transmit in the goroutine that
	// posts or receives; every transmission wakes the QP's transmit
	// goroutine instead. For measurements: inline is faster on small hosts.
	NoInlineTx bool
	// RxSpin (kernel transport): how long a QP's reader keeps polling its
	// socket after the last data before it sleeps (default 0: never). A
	// spinning responder answers Reads and Atomics without being woken,
	// which on small or virtual hosts costs more than the round trip
	// itself; it keeps a core busy while requests come. At most
	// GOMAXPROCS-1 readers (at least one) spin at once.
	RxSpin time.Duration
}

// XDPConfig configures the "afxdp" transport. Only Iface is required.
//
// Open attaches the steering program to Iface and opens one AF_XDP socket
// per queue. Everything else on the interface stays the kernel's: its
// address, ARP, routes and every flow that is not ours (the program passes
// them). Close detaches the program; a program left attached by a crashed
// process is recognised and replaced at the next Open.
//
// The device's network namespace is that of the thread calling Open, and
// Listen and Dial of a kernel-transport device use the calling thread's
// namespace too: a program juggling namespaces locks its goroutine to a
// thread (runtime.LockOSThread) around these calls.
type XDPConfig struct {
	// Iface is the network device, e.g. "eth0" (`ip link` lists them).
	Iface string
	// Queues is the number of receive queues served, 0..Queues-1
	// (default 1). Connect uses queue 0; keep one combined channel
	// (`ethtool -L IF combined 1`) or steer the flows there.
	Queues int
	// Mode is the XDP attach mode: "auto" (default: native, falling back
	// to generic where the driver refuses, always generic on veth),
	// "native" or "generic".
	Mode string
	// Addr is our IPv4 address on Iface (default: its first one).
	Addr netip.Addr
	// MTU caps the interface's MTU for our segments (0: the interface's).
	MTU int
	// Logger receives the transport's control-path events: the attach
	// mode chosen, a stale attachment replaced (nil: slog.Default()).
	Logger *slog.Logger
	// Spin is how long a poll loop busy-polls after its last work before
	// it sleeps (default 50µs; negative: never). Spinning answers a peer
	// at once when a core is free; where the application's own threads
	// spin on every core (perftest's ib_write_lat spins on memory) it
	// takes their CPU instead: docs/PERFORMANCE.md has the measurements.
	Spin time.Duration
	// LockDir holds the per-interface owner locks (default /run/xrnic):
	// every xrnic process that may use the interface must use the same.
	LockDir string
}

// XDPAttributes describe the afxdp transport of an open device.
type XDPAttributes struct {
	Iface    string
	Ifindex  int
	Addr     netip.Addr
	MTU      int
	Queues   int
	Mode     string // "native" or "generic": what was attached
	Reason   string // why the mode differs from the one asked, if it does
	ZeroCopy bool   // AF_XDP zero-copy (else copy mode)
	Replaced string // a stale xrnic attachment found and replaced, if any
}

// Attributes describe a device (ibv_device_attr plus the iWARP specifics).
type Attributes struct {
	Transport string // "iWARP"
	LLP       string // the DeviceConfig.Transport in use: "kernel" or "afxdp"
	// XDP describes the afxdp transport (nil over "kernel").
	XDP     *XDPAttributes
	MPARev  uint8 // MPA revision Dial uses by default (2: RFC 6581)
	CRC     bool  // MPA CRC on by default (RFC 5044 §4.4)
	Markers bool  // MPA markers can be generated and accepted

	MaxQPs int
	MaxWR  int // per queue (max_qp_wr)
	MaxSGE int // per WR (max_sge)
	MaxCQE int // per CQ (max_cqe)
	MaxMR  int // (max_mr)
	// MaxMRSize is the largest region (max_mr_size): any byte slice, the
	// tagged offsets of a region spanning at most the 64-bit TO space.
	MaxMRSize  uint64
	MaxORD     int // per QP (max_qp_init_rd_atom)
	MaxIRD     int // per QP (max_qp_rd_atom)
	MaxMsgSize uint32

	// AtomicCap is the atomicity scope of RFC 7306 atomics on this device's
	// memory (atomic_cap). AtomicGlob: also atomic against CPU threads that
	// use sync/atomic on the same word; never against plain loads and
	// stores or RDMA Write/Read placement (see package xrnic/atomics).
	AtomicCap AtomicCap
	// MaskedAtomics: FetchAdd with an Add Mask and CmpSwap with Compare and
	// Swap Masks are supported (RFC 7306).
	MaskedAtomics bool
	// ImmediateData: RFC 7306 Immediate Data and Write with Immediate.
	ImmediateData bool
}

// Device is an RNIC (ibv_context). Open one with Open; Close destroys
// everything created from it.
type Device struct {
	p     provider
	attrs Attributes
	mu    sync.Mutex
	done  bool
}

// Open opens a device (ibv_open_device).
func Open(cfg DeviceConfig) (*Device, error) {
	var p provider
	var err error
	switch cfg.Transport {
	case "", "kernel":
		p, err = openKernel(cfg)
	case "afxdp":
		p, err = openAFXDP(cfg)
	default:
		return nil, fmt.Errorf("verbs: unknown transport %q (want \"kernel\" or \"afxdp\"): %w", cfg.Transport, ErrNotSupported)
	}
	if err != nil {
		return nil, err
	}
	return &Device{p: p, attrs: p.attributes()}, nil
}

// Attributes returns the device attributes (ibv_query_device).
func (d *Device) Attributes() Attributes { return d.attrs }

// Close destroys every QP, listener and CQ of the device; outstanding work
// requests complete flushed. Memory regions allocated with AllocMR are
// not unmapped: deregister them.
func (d *Device) Close() error {
	d.mu.Lock()
	if d.done {
		d.mu.Unlock()
		return nil
	}
	d.done = true
	d.mu.Unlock()
	return d.p.close()
}

// AllocPD allocates a protection domain (ibv_alloc_pd).
func (d *Device) AllocPD() (*PD, error) {
	id, err := d.p.allocPD()
	if err != nil {
		return nil, err
	}
	return &PD{dev: d, id: id}, nil
}

// PD is a protection domain: memory regions and QPs of one PD may be used
// together; an STag of another PD is refused.
type PD struct {
	dev *Device
	id  uint32
}

// Device returns the PD's device.
func (pd *PD) Device() *Device { return pd.dev }

// Dealloc frees the PD (ibv_dealloc_pd); its memory regions must have been
// deregistered.
func (pd *PD) Dealloc() error { return pd.dev.p.deallocPD(pd.id) }

// AllocOptions select how AllocMR backs its memory.
type AllocOptions struct {
	PageSize PageSize
	// NoFallback makes AllocMR fail (naming the fix) rather than fall back
	// to smaller pages.
	NoFallback bool
	// Prefault populates every page at allocation so the first messages
	// do not fault.
	Prefault bool
}

// AllocMR allocates size bytes of device memory (hugepage-backed when the
// system allows; see Backing and Warning) and registers them with the given
// access rights. The MR owns the memory: Dereg unmaps it, so no reference
// into MR.Bytes may be used afterwards.
func (pd *PD) AllocMR(size int, access Access, o AllocOptions) (*MR, error) {
	if err := checkAccess(access); err != nil {
		return nil, err
	}
	m, err := pd.dev.p.allocMR(pd.id, size, access, o)
	if err != nil {
		return nil, err
	}
	return newMR(pd, m, access), nil
}

// RegMR registers memory the caller owns (ibv_reg_mr). Lifetime rule: the
// RNIC reads and writes buf asynchronously, on the peer's behalf too, until
// Dereg returns; keep buf referenced (Go slices do not move, but the GC
// frees memory nobody references) and do not reuse it for anything else
// until then. Memory obtained elsewhere (mmap) must stay mapped as long.
func (pd *PD) RegMR(buf []byte, access Access) (*MR, error) {
	if err := checkAccess(access); err != nil {
		return nil, err
	}
	m, err := pd.dev.p.regMR(pd.id, buf, access, 0)
	if err != nil {
		return nil, err
	}
	return newMR(pd, m, access), nil
}

// RegMRForQP registers memory as RegMR does, with an STag that only qp's
// stream may use (RFC 5042 §5.1's per-stream scope): a peer on another QP
// of the PD is refused as if the STag did not exist.
func (pd *PD) RegMRForQP(buf []byte, access Access, qp *QP) (*MR, error) {
	if err := checkAccess(access); err != nil {
		return nil, err
	}
	if qp.pd != pd {
		return nil, ErrWrongDevice
	}
	m, err := pd.dev.p.regMR(pd.id, buf, access, qp.num)
	if err != nil {
		return nil, err
	}
	return newMR(pd, m, access), nil
}

// MemStats returns the device's access-check failure counters (by
// operation and reason, package mem) and the number of registered MRs.
func (d *Device) MemStats() (checks mem.CheckCounts, liveMRs int) { return d.p.memStats() }

// Transport returns the transport the device runs over (package
// xrnic/transport; *afxdp.Transport on the afxdp transport), for its
// statistics.
func (d *Device) Transport() transport.Transport { return d.p.transport() }

func checkAccess(a Access) error {
	if a&(AccessRemoteWrite|AccessRemoteAtomic) != 0 && a&AccessLocalWrite == 0 {
		return ErrAccessLocalWr
	}
	return nil
}

// MR is a registered memory region (ibv_mr). iWARP names it with one STag,
// used both as the local key of SGEs (lkey) and as the remote key the peer
// puts in RDMA Read/Write/Atomic requests (rkey).
type MR struct {
	pd     *PD
	m      mrImpl
	buf    []byte
	stag   uint32
	baseTO uint64
	access Access
}

func newMR(pd *PD, m mrImpl, a Access) *MR {
	return &MR{pd: pd, m: m, buf: m.bytes(), stag: m.stag(), baseTO: m.baseTO(), access: a}
}

// STag returns the steering tag (lkey and rkey).
func (mr *MR) STag() uint32 { return mr.stag }

// LKey returns the STag, by its libibverbs name for local use.
func (mr *MR) LKey() uint32 { return mr.stag }

// RKey returns the STag, by its libibverbs name for remote use.
func (mr *MR) RKey() uint32 { return mr.stag }

// Bytes returns the registered memory.
func (mr *MR) Bytes() []byte { return mr.buf }

// Len returns the registered length.
func (mr *MR) Len() int { return len(mr.buf) }

// BaseTO returns the tagged offset of the first byte: its address, or 0
// with AccessZeroBased.
func (mr *MR) BaseTO() uint64 { return mr.baseTO }

// TO returns the tagged offset of byte off, the remote address a peer
// uses.
func (mr *MR) TO(off int) uint64 { return mr.baseTO + uint64(off) }

// SGE returns a scatter/gather element for n bytes at byte off.
func (mr *MR) SGE(off, n int) SGE {
	return SGE{Addr: mr.baseTO + uint64(off), Length: uint32(n), LKey: mr.stag}
}

// Access returns the access rights.
func (mr *MR) Access() Access { return mr.access }

// PD returns the MR's protection domain.
func (mr *MR) PD() *PD { return mr.pd }

// Backing tells what memory backs the MR (BackingUser for RegMR).
func (mr *MR) Backing() Backing { return mr.m.backing() }

// Warning is empty when AllocMR got the page size it asked for; otherwise
// it says why it fell back and what fixes it.
func (mr *MR) Warning() string { return mr.m.warning() }

// Valid reports whether the STag is usable (not invalidated nor
// deregistered).
func (mr *MR) Valid() bool { return mr.m.valid() }

// Dereg deregisters the MR (ibv_dereg_mr). When it returns the RNIC no
// longer touches the memory; memory from AllocMR is unmapped.
func (mr *MR) Dereg() error { return mr.m.dereg() }
