package engine

import (
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"xrnic/atomics"
	"xrnic/mem"
	"xrnic/transport"
	"xrnic/transport/kernel"
	"xrnic/wire/mpa"
)

// Engine-only errors (the shared ones are package rnic's, wr.go).
var (
	ErrUnsupportedRv = errors.New("engine: unsupported MPA revision (0 = RDMA Consortium)")
)

// Config holds the device limits and connection defaults. Zero fields take
// the defaults shown.
type Config struct {
	MaxQPs     int    // 1024
	MaxWR      int    // per queue, 4096
	MaxSGE     int    // per WR, 16
	MaxCQE     int    // per CQ, 4194304 (a CQ's memory follows its use)
	MaxMR      int    // 65536 (STag table size)
	MaxORD     int    // outbound Reads+Atomics per QP, 128 (at most 0x3FFE)
	MaxIRD     int    // inbound Reads+Atomics per QP, 128 (at most 0x3FFE)
	MaxMsgSize uint32 // 1 GiB

	// ConnTimeout bounds each step of connection setup and the linger of
	// a close (10 s).
	ConnTimeout time.Duration

	// FPDUTimeout ends a QP whose peer has sent part of an FPDU and then
	// nothing for this long (5 s; negative: never): a Terminate (LLP,
	// 2/0/0x01, connection lost) and every WR flushed. Without it a peer
	// that announces an FPDU and stops holds the QP forever.
	FPDUTimeout time.Duration
	// RequestTimeout is the default of QPAttr.RequestTimeout: how long an
	// outstanding RDMA Read or Atomic may wait without any response
	// before it completes with StatusRetryExcErr and the QP goes to
	// error (30 s; negative: never), as an RC QP's timeout in libibverbs.
	RequestTimeout time.Duration

	// Transport is what Connect dials and Listen listens on; the device
	// owns it and closes it with itself. nil is kernel TCP sockets
	// (transport/kernel: no privileges); transport/afxdp is the
	// user-space TCP over AF_XDP sockets.
	Transport transport.Transport

	// NoInlineTx turns off inline transmission (txinline.go): every
	// transmission then wakes the QP's transmit goroutine. For measuring.
	NoInlineTx bool

	// RxSpin (kernel transport): once a QP's reader has read its socket
	// empty, it keeps polling it without blocking for this long after the
	// last data before it sleeps on the netpoller (0, the default: never).
	// A responder that never sleeps answers Reads and Atomics without the
	// wake-up of a sleeping thread, which on a small or virtual host
	// costs more than the TCP round trip; the price is a busy core while
	// requests keep coming. At most GOMAXPROCS-1 readers (at least one)
	// spin at a time on a device; the others sleep as usual.
	RxSpin time.Duration
}

func (c *Config) setDefaults() {
	def := func(p *int, v int) {
		if *p <= 0 {
			*p = v
		}
	}
	def(&c.MaxQPs, 1024)
	def(&c.MaxWR, 4096)
	def(&c.MaxSGE, 16)
	def(&c.MaxCQE, 1<<22)
	def(&c.MaxMR, 1<<16)
	def(&c.MaxORD, 128)
	def(&c.MaxIRD, 128)
	if c.MaxORD > int(mpa.MaxIRDORD) {
		c.MaxORD = int(mpa.MaxIRDORD)
	}
	if c.MaxIRD > int(mpa.MaxIRDORD) {
		c.MaxIRD = int(mpa.MaxIRDORD)
	}
	if c.MaxMsgSize == 0 {
		c.MaxMsgSize = 1 << 30
	}
	if c.ConnTimeout <= 0 {
		c.ConnTimeout = 10 * time.Second
	}
	if c.FPDUTimeout == 0 {
		c.FPDUTimeout = 5 * time.Second
	}
	if c.RequestTimeout == 0 {
		c.RequestTimeout = 30 * time.Second
	}
}

// Attributes describe a device (ibv_device_attr plus the iWARP specifics).
type Attributes struct {
	Transport  string // "iWARP"
	LLP        string // the transport's name: "kernel", "afxdp"
	MPARev     uint8  // default MPA revision of Connect (2: RFC 6581)
	CRC        bool   // CRC on by default (RFC 5044 §4.4)
	Markers    bool   // markers can be generated and accepted
	MaxQPs     int
	MaxWR      int
	MaxSGE     int
	MaxCQE     int
	MaxMR      int
	MaxORD     int
	MaxIRD     int
	MaxMsgSize uint32
	// AtomicScope is the atomicity guarantee of RFC 7306 atomics executed
	// on this device's memory (global: also against CPU atomics).
	AtomicScope atomics.Scope
	// MaskedAtomics: FetchAdd and CmpSwap with masks are supported.
	MaskedAtomics bool
}

// Device is a software RNIC: an STag table, protection domains, memory
// regions, CQs and QPs. Open one with Open.
type Device struct {
	cfg   Config
	table *mem.Table

	mu     sync.Mutex
	closed bool
	qps    map[uint32]*QP
	nextQP uint32
	cqs    map[*CQ]struct{}
	lns    map[*Listener]struct{}
	nsrqs  int // SRQs not closed (srq.go)

	tr transport.Transport

	wdStop, wdDone chan struct{} // the watchdog (watchdog.go)

	rxBufs *bufPool // kernel transport receive buffers, lent per drain (rx.go)
	txBufs *bufPool // framing buffers, lent per transmission (tx.go)

	rxSpinners    atomic.Int32 // readers spinning now (Config.RxSpin)
	rxSpinnersMax int32
}

// txBufMax is the longest transmit buffer a QP needs: txBufLen and one
// FPDU of the longest ULPDU, with markers, as QP.establish sizes it.
var txBufMax = txBufLen + mpa.NewFramer(mpa.FramerConfig{Markers: true, CRC: true}).WireLen(mpa.MaxULPDU) + 64

// Open returns a new device.
func Open(cfg Config) (*Device, error) {
	cfg.setDefaults()
	t, err := mem.NewTable(cfg.MaxMR)
	if err != nil {
		return nil, err
	}
	d := &Device{cfg: cfg, table: t, qps: map[uint32]*QP{}, cqs: map[*CQ]struct{}{}, lns: map[*Listener]struct{}{},
		rxBufs: newBufPool(rxBufLen, rxBufsKept), txBufs: newBufPool(txBufMax, txBufsKept),
		rxSpinnersMax: int32(max(1, runtime.GOMAXPROCS(0)-1))}
	d.tr = cfg.Transport
	if d.tr == nil {
		d.tr = kernel.New()
	}
	d.wdStop, d.wdDone = make(chan struct{}), make(chan struct{})
	go d.runWatchdog()
	return d, nil
}

// Attributes returns the device attributes.
func (d *Device) Attributes() Attributes {
	c := d.cfg
	return Attributes{
		Transport: "iWARP", LLP: d.tr.Name(), MPARev: mpa.Rev2, CRC: true, Markers: true,
		MaxQPs: c.MaxQPs, MaxWR: c.MaxWR, MaxSGE: c.MaxSGE, MaxCQE: c.MaxCQE, MaxMR: c.MaxMR,
		MaxORD: c.MaxORD, MaxIRD: c.MaxIRD, MaxMsgSize: c.MaxMsgSize,
		AtomicScope: atomics.Supported, MaskedAtomics: true,
	}
}

// Table returns the device's STag table (for the verbs layer and tests).
func (d *Device) Table() *mem.Table { return d.table }

// AllocPD allocates a protection domain.
func (d *Device) AllocPD() mem.PD { return d.table.AllocPD() }

// DeallocPD frees a protection domain that has no memory regions.
func (d *Device) DeallocPD(pd mem.PD) error { return d.table.FreePD(pd) }

// RegMR registers buf (memory from mem.Alloc or any []byte the caller keeps
// alive and does not move until DeregMR) and returns its MR; MR.STag() is
// both the local key of SGEs and the remote key.
func (d *Device) RegMR(buf []byte, o mem.MROptions) (*mem.MR, error) {
	return d.table.Register(buf, o)
}

// DeregMR deregisters an MR; when it returns, no QP touches the memory.
func (d *Device) DeregMR(m *mem.MR) error { return d.table.Deregister(m) }

// Close destroys every QP, listener and CQ of the device.
func (d *Device) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	qps := make([]*QP, 0, len(d.qps))
	for _, q := range d.qps {
		qps = append(qps, q)
	}
	lns := make([]*Listener, 0, len(d.lns))
	for l := range d.lns {
		lns = append(lns, l)
	}
	d.mu.Unlock()
	for _, l := range lns {
		l.Close()
	}
	for _, q := range qps {
		q.Close()
	}
	close(d.wdStop)
	<-d.wdDone
	return d.tr.Close()
}

// Transport returns the device's transport.
func (d *Device) Transport() transport.Transport { return d.tr }
