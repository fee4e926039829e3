package afxdp

import (
	"sync/atomic"
	"unsafe"
)

// Desc is an RX or TX descriptor, laid out as struct xdp_desc: the UMEM
// address of the data, its length, and option bits (OptMore).
type Desc struct {
	Addr    uint64
	Len     uint32
	Options uint32
}

// OptMore (XDP_PKT_CONTD) in Desc.Options marks a fragment of a
// multi-buffer packet that is continued by the next descriptor.
const OptMore = 0x1

// More reports whether another descriptor of the same packet follows.
func (d Desc) More() bool { return d.Options&OptMore != 0 }

// ringNeedWakeup (XDP_RING_NEED_WAKEUP) in a ring's flags word asks the
// application for a syscall to make the kernel process the ring.
const ringNeedWakeup = 0x1

// ring is the index state of one single-producer single-consumer ring
// shared with the kernel. The side we own keeps cached copies of both
// indices: the other side's index is loaded atomically only when the cached
// copy says the ring is full (producer) or empty (consumer), and our own
// index is published with one atomic store per batch. Indices are free
// running uint32 values; slot = index & mask, and all differences are
// computed modulo 2^32, so wrapping the index space is harmless.
type ring struct {
	producer   *uint32
	consumer   *uint32
	flags      *uint32
	mask       uint32
	size       uint32
	cachedProd uint32
	cachedCons uint32
}

func newRing(base unsafe.Pointer, prodOff, consOff, flagsOff uintptr, size uint32) ring {
	r := ring{
		producer: (*uint32)(unsafe.Add(base, prodOff)),
		consumer: (*uint32)(unsafe.Add(base, consOff)),
		flags:    (*uint32)(unsafe.Add(base, flagsOff)),
		mask:     size - 1,
		size:     size,
	}
	r.cachedProd = atomic.LoadUint32(r.producer)
	r.cachedCons = atomic.LoadUint32(r.consumer)
	return r
}

// free returns how many slots a producer may fill, refreshing the cached
// consumer index only when fewer than want are known to be free.
func (r *ring) free(want uint32) uint32 {
	n := r.size - (r.cachedProd - r.cachedCons)
	if n >= want {
		return n
	}
	r.cachedCons = atomic.LoadUint32(r.consumer)
	return r.size - (r.cachedProd - r.cachedCons)
}

// submit publishes n entries written at cachedProd.
func (r *ring) submit(n uint32) {
	r.cachedProd += n
	atomic.StoreUint32(r.producer, r.cachedProd)
}

// avail returns how many entries a consumer may read, refreshing the cached
// producer index only when fewer than want are known to be there.
func (r *ring) avail(want uint32) uint32 {
	n := r.cachedProd - r.cachedCons
	if n >= want {
		return n
	}
	r.cachedProd = atomic.LoadUint32(r.producer)
	return r.cachedProd - r.cachedCons
}

// release hands n consumed entries back to the producer.
func (r *ring) release(n uint32) {
	r.cachedCons += n
	atomic.StoreUint32(r.consumer, r.cachedCons)
}

// needWakeup reports the kernel's XDP_RING_NEED_WAKEUP flag.
func (r *ring) needWakeup() bool {
	return atomic.LoadUint32(r.flags)&ringNeedWakeup != 0
}

// addrRing is a fill or completion ring: UMEM addresses.
type addrRing struct {
	ring
	addrs []uint64
}

// descRing is an RX or TX ring: descriptors.
type descRing struct {
	ring
	descs []Desc
}

// produce copies up to len(addrs) addresses into the ring and publishes
// them; it returns how many were taken.
func (r *addrRing) produce(addrs []uint64) int {
	n := min(uint32(len(addrs)), r.free(uint32(len(addrs))))
	if n == 0 {
		return 0
	}
	idx := r.cachedProd
	for i := range n {
		r.addrs[(idx+i)&r.mask] = addrs[i]
	}
	r.submit(n)
	return int(n)
}

// consume moves up to len(out) addresses out of the ring.
func (r *addrRing) consume(out []uint64) int {
	n := min(uint32(len(out)), r.avail(uint32(len(out))))
	if n == 0 {
		return 0
	}
	idx := r.cachedCons
	for i := range n {
		out[i] = r.addrs[(idx+i)&r.mask]
	}
	r.release(n)
	return int(n)
}

// produce copies up to len(descs) descriptors into the ring.
func (r *descRing) produce(descs []Desc) int {
	n := min(uint32(len(descs)), r.free(uint32(len(descs))))
	if n == 0 {
		return 0
	}
	idx := r.cachedProd
	for i := range n {
		r.descs[(idx+i)&r.mask] = descs[i]
	}
	r.submit(n)
	return int(n)
}

// consume moves up to len(out) descriptors out of the ring.
func (r *descRing) consume(out []Desc) int {
	n := min(uint32(len(out)), r.avail(uint32(len(out))))
	if n == 0 {
		return 0
	}
	idx := r.cachedCons
	for i := range n {
		out[i] = r.descs[(idx+i)&r.mask]
	}
	r.release(n)
	return int(n)
}
