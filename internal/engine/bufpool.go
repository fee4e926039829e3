package engine

import "sync"

// bufPool lends the large working buffers of QPs (the kernel transport's
// receive buffer, the framing buffer of transmission) while they move data, so that an idle QP holds none:
// thousands of established, quiet connections cost their rings, not
// 256 KiB each. It keeps up to keep free buffers for the next borrower
// and allocates past them; what it does not keep the GC takes back.
// Buffers go out as they came back, not cleared: every borrower writes
// before it reads.
type bufPool struct {
	size int
	mu   sync.Mutex
	free [][]byte
}

func newBufPool(size, keep int) *bufPool {
	return &bufPool{size: size, free: make([][]byte, 0, keep)}
}

// get lends a buffer of n bytes (n <= size: the pool's; a longer one is
// made and not taken back).
func (p *bufPool) get(n int) []byte {
	if n > p.size {
		return make([]byte, n)
	}
	p.mu.Lock()
	if k := len(p.free); k > 0 {
		b := p.free[k-1]
		p.free[k-1] = nil
		p.free = p.free[:k-1]
		p.mu.Unlock()
		return b[:n]
	}
	p.mu.Unlock()
	return make([]byte, p.size)[:n]
}

func (p *bufPool) put(b []byte) {
	if cap(b) != p.size {
		return
	}
	p.mu.Lock()
	if len(p.free) < cap(p.free) {
		p.free = append(p.free, b[:p.size])
	}
	p.mu.Unlock()
}
