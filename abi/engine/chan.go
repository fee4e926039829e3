package main

import (
	"encoding/binary"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// maxQueued bounds a channel's queue. Events are bounded by the objects
// that make them (one armed notification per CQ, one async event per QP, a
// few rdma_cm events per id), so it is never reached in practice; if it
// is, the event is dropped and xrnic_last_error says so.
const maxQueued = 1 << 15

// channel is an eventfd in semaphore mode and the queue of events it
// counts: push queues, then adds 1; the C side reads 1 then takes 1.
type channel struct {
	mu      sync.Mutex
	fd      int
	q       []eventT // ring
	head, n int
	closed  bool
	dropped uint64
}

func createChan(fdOut *int32, hOut *uint64) int {
	fd, err := unix.Eventfd(0, unix.EFD_SEMAPHORE|unix.EFD_CLOEXEC)
	if err != nil {
		return fail(err.(syscall.Errno), "xrnic_chan_create: eventfd: %v (raise the open file limit, ulimit -n)", err)
	}
	c := &channel{fd: fd, q: make([]eventT, 4)}
	h := handles.add(c)
	if h == 0 {
		unix.Close(fd)
		return fail(syscall.ENOMEM, "xrnic_chan_create: too many objects")
	}
	*fdOut, *hOut = int32(fd), h
	return 0
}

func destroyChan(h uint64) int {
	c := getT[channel](h)
	if c == nil || !handles.remove(h) {
		return fail(syscall.EBADF, "xrnic_chan_destroy: no such channel")
	}
	c.close()
	return 0
}

func (c *channel) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.closed {
		c.closed = true
		unix.Close(c.fd) // under mu: no push writes to a reused fd number
		c.q = nil
	}
}

var one = func() (b [8]byte) { binary.NativeEndian.PutUint64(b[:], 1); return }()

// push queues ev and counts it on the fd; false if the channel is gone or
// full.
func (c *channel) push(ev *eventT) bool {
	if c == nil {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return false
	}
	if c.n == len(c.q) {
		if len(c.q) >= maxQueued {
			c.dropped++
			fail(syscall.EOVERFLOW, "xrnic: channel fd %d overflowed (%d events queued, %d dropped): read its events", c.fd, c.n, c.dropped)
			return false
		}
		nq := make([]eventT, 2*len(c.q))
		for i := 0; i < c.n; i++ {
			nq[i] = c.q[(c.head+i)%len(c.q)]
		}
		c.q, c.head = nq, 0
	}
	c.q[(c.head+c.n)%len(c.q)] = *ev
	c.n++
	for {
		_, err := unix.Write(c.fd, one[:])
		if err != unix.EINTR {
			break
		}
	}
	return true
}

func chanGet(h uint64, out *eventT) int {
	c := getT[channel](h)
	if c == nil {
		return fail(syscall.EBADF, "xrnic_chan_get: no such channel")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return fail(syscall.EBADF, "xrnic_chan_get: no such channel")
	}
	if c.n == 0 {
		return int(syscall.EAGAIN)
	}
	*out = c.q[c.head]
	c.q[c.head] = eventT{}
	c.head = (c.head + 1) % len(c.q)
	c.n--
	return 0
}
