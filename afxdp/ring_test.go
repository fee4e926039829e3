package afxdp

import (
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"unsafe"
)

// fakeRing is ring memory as the kernel lays it out (producer, consumer,
// flags words, then entries), in Go memory, with the kernel's side played
// by the test.
type fakeRing struct {
	hdr [4]uint32 // producer, consumer, flags, pad
}

func (f *fakeRing) ring(size uint32) ring {
	return newRing(unsafe.Pointer(&f.hdr[0]), 0, 4, 8, size)
}

func (f *fakeRing) prod() *uint32 { return &f.hdr[0] }
func (f *fakeRing) cons() *uint32 { return &f.hdr[1] }

// TestRingWrap drives a descriptor ring and an address ring through the
// 2^32 index wrap with random batch sizes on both sides and checks that
// every entry arrives once, in order, and that the rings never over- or
// underflow.
func TestRingWrap(t *testing.T) {
	seed := uint64(20261130)
	rng := rand.New(rand.NewPCG(seed, 1))
	for _, start := range []uint32{0, ^uint32(0) - 5, ^uint32(0) - 300} {
		const size = 64
		var f fakeRing
		f.hdr[0], f.hdr[1] = start, start
		// Our side produces (TX), the "kernel" consumes.
		tx := descRing{ring: f.ring(size), descs: make([]Desc, size)}
		// The "kernel" produces (RX) into a second ring, we consume.
		var g fakeRing
		g.hdr[0], g.hdr[1] = start, start
		rx := descRing{ring: g.ring(size), descs: make([]Desc, size)}

		var sent, kernelGot, kernelSent, got uint64
		batch := make([]Desc, size+8)
		for round := 0; round < 20000; round++ {
			// We produce a random batch.
			k := rng.IntN(len(batch))
			for i := range k {
				batch[i] = Desc{Addr: sent + uint64(i), Len: uint32(sent + uint64(i))}
			}
			n := tx.produce(batch[:k])
			if inFlight := sent + uint64(n) - kernelGot; inFlight > size {
				t.Fatalf("seed %d start %#x: %d entries in a ring of %d", seed, start, inFlight, size)
			}
			sent += uint64(n)
			// The kernel consumes a random number of what is there.
			p, c := atomic.LoadUint32(f.prod()), atomic.LoadUint32(f.cons())
			take := rng.IntN(int(p-c) + 1)
			for i := range take {
				d := tx.descs[(c+uint32(i))&(size-1)]
				if d.Addr != kernelGot {
					t.Fatalf("seed %d start %#x: kernel got %d, want %d", seed, start, d.Addr, kernelGot)
				}
				kernelGot++
			}
			atomic.StoreUint32(f.cons(), c+uint32(take))

			// The kernel produces into RX as far as there is room.
			p, c = atomic.LoadUint32(g.prod()), atomic.LoadUint32(g.cons())
			put := rng.IntN(int(size-(p-c)) + 1)
			for i := range put {
				rx.descs[(p+uint32(i))&(size-1)] = Desc{Addr: kernelSent}
				kernelSent++
			}
			atomic.StoreUint32(g.prod(), p+uint32(put))
			// We consume a random batch.
			k = rng.IntN(len(batch))
			n = rx.consume(batch[:k])
			for i := range n {
				if batch[i].Addr != got {
					t.Fatalf("seed %d start %#x: got %d, want %d", seed, start, batch[i].Addr, got)
				}
				got++
			}
		}
		if start != 0 && uint64(start)+sent < 1<<32 {
			t.Fatalf("start %#x: only %d entries, the indices did not wrap", start, sent)
		}
		if sent < 100000 || got < 100000 {
			t.Fatalf("too little traffic: sent %d got %d", sent, got)
		}
	}
}

func TestAddrRing(t *testing.T) {
	var f fakeRing
	f.hdr[0], f.hdr[1] = ^uint32(0)-2, ^uint32(0)-2
	r := addrRing{ring: f.ring(8), addrs: make([]uint64, 8)}
	in := []uint64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	if n := r.produce(in); n != 8 {
		t.Fatalf("produced %d into a ring of 8", n)
	}
	if n := r.produce(in[8:]); n != 0 {
		t.Fatalf("produced %d into a full ring", n)
	}
	// The kernel consumes 3.
	atomic.AddUint32(f.cons(), 3)
	if n := r.produce(in[8:]); n != 2 {
		t.Fatalf("produced %d after 3 were consumed, want 2", n)
	}
	if got, want := atomic.LoadUint32(f.prod()), uint32(7); got != want {
		t.Fatalf("producer %#x, want %#x", got, want)
	}
	// Read it back as a consumer ring over the same memory.
	c := addrRing{ring: f.ring(8), addrs: r.addrs}
	out := make([]uint64, 16)
	n := c.consume(out)
	if n != 7 {
		t.Fatalf("consumed %d, want 7", n)
	}
	for i, v := range out[:n] {
		if v != uint64(4+i) {
			t.Fatalf("out[%d] = %d, want %d", i, v, 4+i)
		}
	}
	if c.consume(out) != 0 {
		t.Fatal("consumed from an empty ring")
	}
}

func TestNeedWakeup(t *testing.T) {
	var f fakeRing
	r := f.ring(4)
	if r.needWakeup() {
		t.Fatal("flag clear but needWakeup")
	}
	atomic.StoreUint32(&f.hdr[2], ringNeedWakeup)
	if !r.needWakeup() {
		t.Fatal("flag set but not needWakeup")
	}
}

func TestDescMore(t *testing.T) {
	if (Desc{}).More() || !(Desc{Options: OptMore}).More() {
		t.Fatal("More")
	}
	if unsafe.Sizeof(Desc{}) != 16 {
		t.Fatal("Desc is not laid out as struct xdp_desc")
	}
}

func BenchmarkRingBatch(b *testing.B) {
	var f, g fakeRing
	const size = 2048
	tx := descRing{ring: f.ring(size), descs: make([]Desc, size)}
	rx := descRing{ring: g.ring(size), descs: make([]Desc, size)}
	batch := make([]Desc, 64)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i += len(batch) {
		tx.produce(batch)
		atomic.StoreUint32(f.cons(), atomic.LoadUint32(f.prod())) // kernel takes all
		atomic.StoreUint32(g.prod(), atomic.LoadUint32(g.prod())+uint32(len(batch)))
		rx.consume(batch)
	}
}
