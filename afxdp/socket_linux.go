//go:build linux

package afxdp

import (
	"errors"
	"fmt"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// BindMode selects zero-copy or copy mode.
type BindMode uint8

// Bind modes.
const (
	BindAuto     BindMode = iota // zero-copy where the driver supports it, else copy
	BindZeroCopy                 // fail unless the driver supports zero-copy
	BindCopy                     // always copy (works on every device)
)

var _ fmt.Stringer = BindMode(0)

func (m BindMode) String() string {
	switch m {
	case BindAuto:
		return "auto"
	case BindZeroCopy:
		return "zero-copy"
	case BindCopy:
		return "copy"
	}
	return fmt.Sprintf("BindMode(%d)", uint8(m))
}

// SocketOptions configure one socket.
type SocketOptions struct {
	// Ring sizes, powers of two; 0 means 2048 (RX, TX) and twice that for
	// the fill and completion rings, so they can hold every frame.
	RXSize, TXSize, FillSize, CompletionSize int
	// Frames is how many UMEM chunks the socket owns (default FillSize +
	// TXSize, capped by what the UMEM has left).
	Frames int
	// Mode applies to the first socket of a kernel UMEM; sockets sharing
	// it inherit its mode.
	Mode BindMode
	// MultiBuffer asks for XDP_USE_SG (packets spanning several chunks,
	// for MTUs beyond a chunk). Kernels or drivers without it fall back to
	// single-buffer; Socket.MultiBuffer reports the outcome.
	MultiBuffer bool
	// NoNeedWakeup disables XDP_USE_NEED_WAKEUP: the kernel then polls the
	// rings itself and every TX batch costs a sendto.
	NoNeedWakeup bool
}

// Socket is an AF_XDP socket bound to one queue of one device. It is owned
// by one goroutine (the poll loop of that queue): its methods are not safe
// for concurrent use, except Stats, Fd and the read-only accessors.
type Socket struct {
	fd      int
	umem    *UMEM
	ifindex int
	queue   int
	state   bindState
	shared  bool // bound with XDP_SHARED_UMEM

	fill, comp addrRing
	rx, tx     descRing
	maps       [][]byte // the four mmapped rings

	owned []uint64 // chunks given at Open, returned at Close
	free  []uint64 // chunks we hold (stack)

	pollfd [1]unix.PollFd

	rxKicks, txKicks, txBusy, kickErrors atomic.Uint64
	closed                               bool
}

// Open creates an AF_XDP socket on queue of the device ifindex (in the
// caller's network namespace) using chunks of u. The first socket
// registers the UMEM with the kernel; later ones share it
// (XDP_SHARED_UMEM), each with its own fill and completion rings.
// Insert Fd into the steering program's XSKMAP to receive.
func (u *UMEM) Open(ifindex, queue int, o SocketOptions) (*Socket, error) {
	if o.RXSize == 0 {
		o.RXSize = 2048
	}
	if o.TXSize == 0 {
		o.TXSize = 2048
	}
	if o.FillSize == 0 {
		o.FillSize = 2 * o.RXSize
	}
	if o.CompletionSize == 0 {
		o.CompletionSize = 2 * o.TXSize
	}
	for _, n := range []int{o.RXSize, o.TXSize, o.FillSize, o.CompletionSize} {
		if n <= 0 || n&(n-1) != 0 {
			return nil, fmt.Errorf("afxdp: ring size %d is not a power of two", n)
		}
	}
	if o.Frames == 0 {
		o.Frames = o.FillSize + o.TXSize
	}

	u.mu.Lock()
	defer u.mu.Unlock()
	if u.closed {
		return nil, ErrClosed
	}
	for _, x := range u.sockets {
		if x.ifindex == ifindex && x.queue == queue {
			return nil, ErrQueueInUse
		}
	}
	frames, err := u.takeFrames(o.Frames)
	if err != nil {
		return nil, err
	}
	s, err := u.open(ifindex, queue, o)
	if err != nil {
		u.free = append(u.free, frames...)
		return nil, err
	}
	s.owned = frames
	s.free = make([]uint64, len(frames))
	copy(s.free, frames)
	u.sockets = append(u.sockets, s)
	return s, nil
}

func (u *UMEM) open(ifindex, queue int, o SocketOptions) (*Socket, error) {
	if len(u.sockets) > 0 {
		// Share the kernel UMEM of a live socket; flags are inherited.
		s, err := u.openOne(ifindex, queue, o, unix.XDP_SHARED_UMEM, u.sockets[0].fd)
		if err != nil {
			return nil, fmt.Errorf("afxdp: bind shared UMEM socket to ifindex %d queue %d: %w", ifindex, queue, err)
		}
		s.shared = true
		s.state = u.bind
		s.state.zeroCopy = s.zeroCopyOption()
		return s, nil
	}
	var modes []uint16
	switch o.Mode {
	case BindAuto:
		modes = []uint16{unix.XDP_ZEROCOPY, unix.XDP_COPY}
	case BindZeroCopy:
		modes = []uint16{unix.XDP_ZEROCOPY}
	case BindCopy:
		modes = []uint16{unix.XDP_COPY}
	default:
		return nil, fmt.Errorf("afxdp: unknown bind mode %v", o.Mode)
	}
	sgs := []bool{false}
	if o.MultiBuffer {
		sgs = []bool{true, false}
	}
	// A queue whose last socket was just closed (its process exited) stays
	// bound until the kernel's deferred release of that socket's buffer
	// pool: EBUSY for a moment. Retry for up to busyWait before failing.
	deadline := time.Now().Add(busyWait)
	for {
		s, err := u.bindModes(ifindex, queue, o, modes, sgs)
		if err == nil || !errors.Is(err, unix.EBUSY) || time.Now().After(deadline) {
			return s, err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// busyWait bounds bindModes' retries on EBUSY (see open).
const busyWait = 3 * time.Second

// bindModes binds a new socket with the first of the modes (and
// multi-buffer settings) the device accepts.
func (u *UMEM) bindModes(ifindex, queue int, o SocketOptions, modes []uint16, sgs []bool) (*Socket, error) {
	var errs []error
	for _, mode := range modes {
		for _, sg := range sgs {
			flags := mode
			if !o.NoNeedWakeup {
				flags |= unix.XDP_USE_NEED_WAKEUP
			}
			if sg {
				flags |= unix.XDP_USE_SG
			}
			s, err := u.openOne(ifindex, queue, o, flags, 0)
			if err == nil {
				s.state = bindState{zeroCopy: s.zeroCopyOption(), sg: sg, needWakeup: !o.NoNeedWakeup}
				u.bind = s.state
				return s, nil
			}
			errs = append(errs, fmt.Errorf("flags %#x: %w", flags, err))
		}
	}
	err := errors.Join(errs...)
	if errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) || errors.Is(err, unix.EAFNOSUPPORT) {
		return nil, fmt.Errorf("afxdp: AF_XDP socket on ifindex %d queue %d needs root or CAP_NET_RAW and CAP_NET_ADMIN and a kernel with CONFIG_XDP_SOCKETS: %w", ifindex, queue, err)
	}
	return nil, fmt.Errorf("afxdp: bind ifindex %d queue %d (mode %v): %w", ifindex, queue, o.Mode, err)
}

// openOne creates, configures and binds one socket; on failure it leaves
// nothing behind.
func (u *UMEM) openOne(ifindex, queue int, o SocketOptions, flags uint16, sharedFd int) (_ *Socket, err error) {
	fd, err := unix.Socket(unix.AF_XDP, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("socket(AF_XDP): %w", err)
	}
	s := &Socket{fd: fd, umem: u, ifindex: ifindex, queue: queue}
	s.pollfd[0].Fd = int32(fd)
	defer func() {
		if err != nil {
			s.unmap()
			unix.Close(fd)
		}
	}()
	if flags&unix.XDP_SHARED_UMEM == 0 {
		reg := unix.XDPUmemReg{
			Addr:     uint64(uintptr(unsafe.Pointer(&u.buf[0]))),
			Len:      uint64(len(u.buf)),
			Size:     uint32(u.frameSize),
			Headroom: u.headroom,
		}
		if err := setsockopt(fd, unix.XDP_UMEM_REG, unsafe.Pointer(&reg), unsafe.Sizeof(reg)); err != nil {
			return nil, fmt.Errorf("register UMEM: %w", err)
		}
	}
	for _, r := range []struct{ opt, n int }{
		{unix.XDP_UMEM_FILL_RING, o.FillSize},
		{unix.XDP_UMEM_COMPLETION_RING, o.CompletionSize},
		{unix.XDP_RX_RING, o.RXSize},
		{unix.XDP_TX_RING, o.TXSize},
	} {
		if err := unix.SetsockoptInt(fd, unix.SOL_XDP, r.opt, r.n); err != nil {
			return nil, fmt.Errorf("ring size option %d = %d: %w", r.opt, r.n, err)
		}
	}
	var off unix.XDPMmapOffsets
	if _, err := getsockopt(fd, unix.XDP_MMAP_OFFSETS, unsafe.Pointer(&off), unsafe.Sizeof(off)); err != nil {
		return nil, fmt.Errorf("get mmap offsets: %w", err)
	}
	mapRing := func(pgoff int64, ro unix.XDPRingOffset, n int, entry uintptr) (unsafe.Pointer, ring, error) {
		m, err := unix.Mmap(fd, pgoff, int(ro.Desc)+n*int(entry), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
		if err != nil {
			return nil, ring{}, fmt.Errorf("mmap ring at %#x: %w", pgoff, err)
		}
		s.maps = append(s.maps, m)
		base := unsafe.Pointer(&m[0])
		return unsafe.Add(base, ro.Desc), newRing(base, uintptr(ro.Producer), uintptr(ro.Consumer), uintptr(ro.Flags), uint32(n)), nil
	}
	p, r, err := mapRing(unix.XDP_UMEM_PGOFF_FILL_RING, off.Fr, o.FillSize, 8)
	if err != nil {
		return nil, err
	}
	s.fill = addrRing{ring: r, addrs: unsafe.Slice((*uint64)(p), o.FillSize)}
	if p, r, err = mapRing(unix.XDP_UMEM_PGOFF_COMPLETION_RING, off.Cr, o.CompletionSize, 8); err != nil {
		return nil, err
	}
	s.comp = addrRing{ring: r, addrs: unsafe.Slice((*uint64)(p), o.CompletionSize)}
	if p, r, err = mapRing(unix.XDP_PGOFF_RX_RING, off.Rx, o.RXSize, unsafe.Sizeof(Desc{})); err != nil {
		return nil, err
	}
	s.rx = descRing{ring: r, descs: unsafe.Slice((*Desc)(p), o.RXSize)}
	if p, r, err = mapRing(unix.XDP_PGOFF_TX_RING, off.Tx, o.TXSize, unsafe.Sizeof(Desc{})); err != nil {
		return nil, err
	}
	s.tx = descRing{ring: r, descs: unsafe.Slice((*Desc)(p), o.TXSize)}

	sa := unix.SockaddrXDP{Flags: flags, Ifindex: uint32(ifindex), QueueID: uint32(queue), SharedUmemFD: uint32(sharedFd)}
	if err := unix.Bind(fd, &sa); err != nil {
		return nil, fmt.Errorf("bind: %w", err)
	}
	return s, nil
}

func (s *Socket) zeroCopyOption() bool {
	var opts uint32
	if _, err := getsockopt(s.fd, unix.XDP_OPTIONS, unsafe.Pointer(&opts), unsafe.Sizeof(opts)); err != nil {
		return false
	}
	return opts&unix.XDP_OPTIONS_ZEROCOPY != 0
}

func (s *Socket) unmap() {
	for _, m := range s.maps {
		unix.Munmap(m)
	}
	s.maps = nil
}

// Close closes the socket and returns its chunks to the UMEM. Frames the
// caller still holds from Receive or Alloc become invalid.
func (s *Socket) Close() error {
	if s.closed {
		return nil
	}
	s.closed = true
	s.unmap()
	err := unix.Close(s.fd)
	if err2 := s.umem.release(s); err == nil {
		err = err2
	}
	return err
}

// Fd is the socket's descriptor, for the XSKMAP (bpf.Program.SetSocket).
func (s *Socket) Fd() int { return s.fd }

// Queue returns the device queue the socket is bound to.
func (s *Socket) Queue() int { return s.queue }

// ZeroCopy reports whether the socket is bound in zero-copy mode (else
// the kernel copies frames between its buffers and the UMEM).
func (s *Socket) ZeroCopy() bool { return s.state.zeroCopy }

// MultiBuffer reports whether packets may span several descriptors
// (XDP_USE_SG was accepted).
func (s *Socket) MultiBuffer() bool { return s.state.sg }

// SharedUMEM reports whether the socket shares the kernel UMEM of another
// socket.
func (s *Socket) SharedUMEM() bool { return s.shared }

// Frame returns the bytes a descriptor refers to, within the UMEM. The
// slice is valid while the caller owns the frame.
func (s *Socket) Frame(d Desc) []byte {
	return s.umem.buf[d.Addr : d.Addr+uint64(d.Len) : d.Addr+uint64(d.Len)]
}

// TXRoom returns how many descriptors the TX ring can take now (a
// multi-buffer packet must go on it whole).
func (s *Socket) TXRoom() int { return int(s.tx.free(s.tx.size)) }

// FreeFrames returns how many chunks the socket holds in its pool.
func (s *Socket) FreeFrames() int { return len(s.free) }

// Receive takes up to len(out) descriptors from the RX ring. The caller
// owns their frames until it gives them back with Free. A multi-buffer
// packet is a run of descriptors with More set, ended by one without it; a
// run may continue in the next batch.
func (s *Socket) Receive(out []Desc) int { return s.rx.consume(out) }

// Free returns the frames of descs to the socket's pool.
func (s *Socket) Free(descs []Desc) {
	mask := ^(s.umem.frameSize - 1)
	for _, d := range descs {
		s.free = append(s.free, d.Addr&mask)
	}
}

// Refill moves up to limit frames from the pool to the fill ring, where the
// kernel takes them for received frames, and wakes the kernel if it asks
// for it. It returns the number moved. Keep frames in the pool for
// transmission: Refill(s.FreeFrames()) gives the kernel all of them.
func (s *Socket) Refill(limit int) int {
	k := max(0, min(limit, len(s.free)))
	n := int(min(uint32(k), s.fill.free(uint32(k))))
	if n > 0 {
		s.fill.produce(s.free[len(s.free)-n:])
		s.free = s.free[:len(s.free)-n]
	}
	if s.state.needWakeup && s.fill.needWakeup() {
		s.rxKicks.Add(1)
		if e := kickRX(s.fd); e != 0 && e != unix.EAGAIN {
			s.kickErrors.Add(1)
		}
	}
	return n
}

// Alloc fills out with up to len(out) free frames for transmission: each
// descriptor spans the whole usable chunk (after the headroom). Write the
// packet into Frame(d), set d.Len, and pass the descriptors to Transmit.
func (s *Socket) Alloc(out []Desc) int {
	n := min(len(out), len(s.free))
	room := uint32(s.umem.frameSize) - s.umem.headroom
	for i := range n {
		out[i] = Desc{Addr: s.free[len(s.free)-1-i] + uint64(s.umem.headroom), Len: room}
	}
	s.free = s.free[:len(s.free)-n]
	return n
}

// Transmit puts up to len(descs) descriptors on the TX ring, wakes the
// kernel when it asks for it, and returns how many were queued; the rest
// stay with the caller (retry after Complete). The frames belong to the
// kernel until Complete returns them to the pool.
func (s *Socket) Transmit(descs []Desc) int {
	n := s.tx.produce(descs)
	if n > 0 && (!s.state.needWakeup || s.tx.needWakeup()) {
		s.Kick()
	}
	return n
}

// Kick makes the kernel process the TX ring now (a sendto). Transmit does
// it when needed; a poll loop calls it to retry after a busy kernel.
//
// In copy mode one sendto moves at most 32 descriptors (the kernel's
// TX_BATCH_SIZE) and fails with EAGAIN when more are queued, so Kick
// repeats while the kernel keeps consuming: a batch of 64 frames would
// otherwise wait half for the next kick (or for a poll of the socket).
func (s *Socket) Kick() {
	for range maxKicks {
		s.txKicks.Add(1)
		switch e := kickTX(s.fd); e {
		case 0:
			return
		case unix.EAGAIN:
			// The batch limit, a full completion ring, or a busy
			// driver (veth stops its queue while the peer's ring is
			// full): go on only while the kernel made progress and
			// entries are left.
			before := s.tx.cachedCons
			s.tx.cachedCons = atomic.LoadUint32(s.tx.consumer)
			if s.tx.cachedCons == s.tx.cachedProd {
				return
			}
			if s.tx.cachedCons == before {
				s.txBusy.Add(1)
				return
			}
		case unix.EBUSY, unix.ENOBUFS:
			// Busy or out of buffers: frames stay queued for the next kick.
			s.txBusy.Add(1)
			return
		default:
			s.kickErrors.Add(1)
			return
		}
	}
}

// TXQueued returns how many descriptors on the TX ring the kernel has not
// taken yet: after a kick found it busy they wait for the next one, which
// the owner must issue (nothing else will while it has no new frames).
func (s *Socket) TXQueued() int {
	s.tx.cachedCons = atomic.LoadUint32(s.tx.consumer)
	return int(s.tx.cachedProd - s.tx.cachedCons)
}

// Retry kicks the kernel again when descriptors are still on the TX ring
// and the kernel asks for a wakeup, and returns how many are left. Call it
// once per poll-loop iteration: after a kick found the kernel or driver
// busy, only another kick moves those frames.
func (s *Socket) Retry() int {
	n := s.TXQueued()
	if n > 0 && (!s.state.needWakeup || s.tx.needWakeup()) {
		s.Kick()
		n = s.TXQueued()
	}
	return n
}

// maxKicks bounds the sendto calls of one Kick (32 frames each in copy
// mode: the TX ring's 2048 by default).
const maxKicks = 64

// Complete moves transmitted frames from the completion ring back to the
// pool and returns how many.
func (s *Socket) Complete() int {
	n := s.comp.consume(s.free[len(s.free):cap(s.free)])
	s.free = s.free[:len(s.free)+n]
	return n
}

// Poll waits up to timeoutMS milliseconds (-1: forever) for received
// frames and reports whether the RX ring has some.
func (s *Socket) Poll(timeoutMS int) (bool, error) {
	return pollIn(&s.pollfd, timeoutMS)
}

// Stats are the kernel's XDP_STATISTICS of the socket and our own wakeup
// counters.
type Stats struct {
	RXDropped            uint64 // dropped for other reasons than a full ring
	RXInvalidDescs       uint64
	TXInvalidDescs       uint64
	RXRingFull           uint64 // dropped because the RX ring was full
	RXFillRingEmptyDescs uint64 // times the fill ring was empty
	TXRingEmptyDescs     uint64
	RXKicks              uint64 // recvfrom wakeups for the fill ring
	TXKicks              uint64 // sendto wakeups for the TX ring
	TXBusy               uint64 // wakeups that left frames on the TX ring (a busy kernel or driver)
	KickErrors           uint64 // wakeups that failed for other reasons than a busy kernel
}

// Stats reads the statistics (a syscall: scrape time, not per packet).
func (s *Socket) Stats() (Stats, error) {
	var k unix.XDPStatistics
	if _, err := getsockopt(s.fd, unix.XDP_STATISTICS, unsafe.Pointer(&k), unsafe.Sizeof(k)); err != nil {
		return Stats{}, fmt.Errorf("afxdp: XDP_STATISTICS: %w", err)
	}
	return Stats{
		RXDropped:            k.Rx_dropped,
		RXInvalidDescs:       k.Rx_invalid_descs,
		TXInvalidDescs:       k.Tx_invalid_descs,
		RXRingFull:           k.Rx_ring_full,
		RXFillRingEmptyDescs: k.Rx_fill_ring_empty_descs,
		TXRingEmptyDescs:     k.Tx_ring_empty_descs,
		RXKicks:              s.rxKicks.Load(),
		TXKicks:              s.txKicks.Load(),
		TXBusy:               s.txBusy.Load(),
		KickErrors:           s.kickErrors.Load(),
	}, nil
}
