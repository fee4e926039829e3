package engine

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"

	"xrnic/transport"
)

// CQ is a completion queue: a ring of Completions. Every posted work
// request reserves one entry until its completion is polled (or, for an
// unsignalled success, until it completes), so a completion can never be
// lost. A reservation that finds the ring full doubles it, up to the
// device's MaxCQE, so the queues attached may exceed the CQ's depth as on
// hardware; only a CQ at MaxCQE refuses a post (ErrCQFull).
type CQ struct {
	dev *Device

	mu       sync.Mutex
	ring     []Completion // replaced by grow and Resize: read it under mu
	size     int          // the depth made or resized (the ring may be shorter until needed)
	head, n  int
	reserved int // entries promised to posted WRs (queued ones included)
	attached int // QPs completing here (Close refuses while any)
	armed    uint8
	closed   bool

	wake   chan struct{} // Wait
	events chan struct{} // armed notifications
	// pushes, when set, counts every completion queued: a poller that
	// compares it with what it has polled skips empty polls (the C ABI).
	pushes atomic.Pointer[PushCounter]
	// driven lists the connected QPs completing here whose stream a
	// poller may read itself (Drive): copied on change, under mu.
	driven atomic.Pointer[[]*QP]
	dnext  atomic.Uint32
}

// PushCounter is where a CQ counts the completions it queues
// (CountPushes), so that a poller in another language can tell an empty
// CQ without calling Poll, and sleep until the next completion: it adds
// itself to Waiters and futex-waits on Pushed's low 32 bits (the word
// at Pushed's address on a little-endian host); every push while
// Waiters is not zero wakes them. Its memory may be outside the Go heap.
type PushCounter struct {
	Pushed  atomic.Uint64
	Waiters atomic.Uint32
	_       uint32
}

// cqInitialRing bounds the ring a CQ starts with: a CQ asked for many
// entries (up to MaxCQE) takes their memory only as posts reserve them.
const cqInitialRing = 4096

const (
	armNone = iota
	armNext
	armSolicited
)

// CreateCQ creates a CQ with room for depth completions (and more as
// posts need it, up to MaxCQE). Its ring starts at most cqInitialRing
// long and grows as posts reserve entries.
func (d *Device) CreateCQ(depth int) (*CQ, error) {
	if depth <= 0 || depth > d.cfg.MaxCQE {
		return nil, ErrBadAttr
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, ErrClosed
	}
	cq := &CQ{dev: d, ring: make([]Completion, min(depth, cqInitialRing)), size: depth, wake: make(chan struct{}, 1), events: make(chan struct{}, 1)}
	d.cqs[cq] = struct{}{}
	return cq, nil
}

// CountPushes makes every completion queued from now on add 1 to
// p.Pushed and wake p's waiters (nil stops it).
func (cq *CQ) CountPushes(p *PushCounter) { cq.pushes.Store(p) }

// driveQPs bounds the QPs one Drive reads: on a CQ shared by many, each
// call takes the next few in turn.
const driveQPs = 4

// Drive reads the inbound streams of the kernel-TCP QPs that complete on
// this CQ, on the caller's goroutine, and handles what arrived: a poller
// that spins on an empty CQ calls it instead of waiting for the engine's
// readers to be woken (run to completion; transport.Driver). DriveNone:
// no such QP, or their readers are at work.
func (cq *CQ) Drive() transport.DriveResult {
	l := cq.driven.Load()
	if l == nil || len(*l) == 0 {
		return transport.DriveNone
	}
	qs := *l
	r := transport.DriveNone
	n := min(len(qs), driveQPs)
	at := int(cq.dnext.Add(uint32(n)))
	for i := range n {
		r = max(r, qs[(at+i)%len(qs)].driveRx())
	}
	return r
}

// Undrive implements transport.Driver: the readers never step aside, so
// there is nothing to give back.
func (cq *CQ) Undrive() {}

var _ transport.Driver = (*CQ)(nil)

func (cq *CQ) addDriven(qp *QP) {
	cq.mu.Lock()
	defer cq.mu.Unlock()
	var l []*QP
	if p := cq.driven.Load(); p != nil {
		if slices.Contains(*p, qp) {
			return // the QP's send and receive CQ are one
		}
		l = slices.Clone(*p)
	}
	l = append(l, qp)
	cq.driven.Store(&l)
}

func (cq *CQ) removeDriven(qp *QP) {
	cq.mu.Lock()
	defer cq.mu.Unlock()
	p := cq.driven.Load()
	if p == nil {
		return
	}
	if i := slices.Index(*p, qp); i >= 0 {
		l := slices.Delete(slices.Clone(*p), i, i+1)
		cq.driven.Store(&l)
	}
}

// Cap returns the CQ's capacity: what it was made or resized to, or more
// once posts made it grow.
func (cq *CQ) Cap() int {
	cq.mu.Lock()
	defer cq.mu.Unlock()
	return max(cq.size, len(cq.ring))
}

// Resize makes the CQ's ring hold n completions (ibv_resize_cq), keeping
// those queued in order, and returns the size made: n, or more when more
// entries are reserved by posted WRs (verbs allows a larger size). n
// below the completions queued, or outside 1..MaxCQE, is ErrBadAttr.
func (cq *CQ) Resize(n int) (int, error) {
	if n <= 0 || n > cq.dev.cfg.MaxCQE {
		return 0, ErrBadAttr
	}
	cq.mu.Lock()
	defer cq.mu.Unlock()
	if cq.closed {
		return 0, ErrClosed
	}
	if n < cq.n {
		return 0, ErrBadAttr
	}
	// Entries promised to outstanding WRs stay promised: the ring never
	// shrinks below them (it would grow back on the next post anyway).
	n = max(n, cq.reserved)
	cq.size = n
	if r := max(min(n, cqInitialRing), cq.reserved); r != len(cq.ring) {
		cq.setRingLocked(r)
	}
	return n, nil
}

// setRingLocked replaces the ring by one of n entries (n >=
// cq.reserved), the queued completions first, in order.
func (cq *CQ) setRingLocked(n int) {
	r := make([]Completion, n)
	k := copy(r, cq.ring[cq.head:min(cq.head+cq.n, len(cq.ring))])
	copy(r[k:cq.n], cq.ring)
	cq.ring, cq.head = r, 0
}

// growLocked doubles the ring, up to MaxCQE; false when it is there.
// It allocates, under mu, but only while the CQ's demand rises.
func (cq *CQ) growLocked() bool {
	n := min(2*len(cq.ring), cq.dev.cfg.MaxCQE)
	if n <= len(cq.ring) {
		return false
	}
	cq.setRingLocked(n)
	return true
}

// Len returns the number of completions waiting to be polled.
func (cq *CQ) Len() int {
	cq.mu.Lock()
	defer cq.mu.Unlock()
	return cq.n
}

// Poll moves up to len(wc) completions into wc and returns how many. It
// never blocks and never allocates.
func (cq *CQ) Poll(wc []Completion) int {
	cq.mu.Lock()
	k := 0
	for k < len(wc) && cq.n > 0 {
		wc[k] = cq.ring[cq.head]
		cq.ring[cq.head] = Completion{}
		cq.head++
		if cq.head == len(cq.ring) {
			cq.head = 0
		}
		cq.n--
		k++
	}
	cq.reserved -= k
	cq.mu.Unlock()
	return k
}

// Wait blocks until at least one completion is queued or ctx ends. It is
// meant for one waiting goroutine per CQ.
func (cq *CQ) Wait(ctx context.Context) error {
	for {
		cq.mu.Lock()
		n := cq.n
		cq.mu.Unlock()
		if n > 0 {
			return nil
		}
		select {
		case <-cq.wake:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Arm requests one notification on Events for the next completion, or
// with solicitedOnly for the next solicited receive completion or error
// (ibv_req_notify_cq).
func (cq *CQ) Arm(solicitedOnly bool) {
	cq.mu.Lock()
	if solicitedOnly {
		cq.armed = armSolicited
	} else {
		cq.armed = armNext
	}
	cq.mu.Unlock()
}

// Events returns the notification channel (capacity 1) that Arm arms.
func (cq *CQ) Events() <-chan struct{} { return cq.events }

// Close destroys the CQ; QPs using it must be closed first.
func (cq *CQ) Close() error {
	cq.mu.Lock()
	if cq.attached > 0 {
		cq.mu.Unlock()
		return ErrCQBusy
	}
	cq.closed = true
	cq.mu.Unlock()
	cq.dev.mu.Lock()
	delete(cq.dev.cqs, cq)
	cq.dev.mu.Unlock()
	return nil
}

// attach records a QP completing here; false if the CQ is closed. The
// QP's queues may exceed the ring: reserve grows it.
func (cq *CQ) attach() bool {
	cq.mu.Lock()
	defer cq.mu.Unlock()
	if cq.closed {
		return false
	}
	cq.attached++
	return true
}

func (cq *CQ) detach() {
	cq.mu.Lock()
	cq.attached--
	cq.mu.Unlock()
}

// reserve promises an entry to a WR being posted, growing a full ring;
// false only when the ring is full at MaxCQE.
func (cq *CQ) reserve() bool {
	cq.mu.Lock()
	ok := cq.reserved < len(cq.ring) || cq.growLocked()
	if ok {
		cq.reserved++
	}
	cq.mu.Unlock()
	return ok
}

// release gives back the entry of a WR that completes without a completion.
func (cq *CQ) release() {
	cq.mu.Lock()
	cq.reserved--
	cq.mu.Unlock()
}

// push queues a completion of a WR that reserved an entry; it cannot fail.
func (cq *CQ) push(c *Completion) {
	cq.mu.Lock()
	i := cq.head + cq.n
	if i >= len(cq.ring) {
		i -= len(cq.ring)
	}
	cq.ring[i] = *c
	cq.n++
	p := cq.pushes.Load()
	if p != nil {
		p.Pushed.Add(1)
	}
	notify := cq.armed == armNext || (cq.armed == armSolicited && (c.Flags&WCSolicited != 0 || c.Status != StatusSuccess))
	if notify {
		cq.armed = armNone
	}
	cq.mu.Unlock()
	// Pushed is added before Waiters is read, and a waiter adds itself
	// before it reads Pushed (both sequentially consistent), so one of
	// the two sees the other: no sleeper misses a push.
	if p != nil && p.Waiters.Load() != 0 {
		futexWake(&p.Pushed)
	}
	select {
	case cq.wake <- struct{}{}:
	default:
	}
	if notify {
		select {
		case cq.events <- struct{}{}:
		default:
		}
	}
}
