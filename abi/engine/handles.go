package main

import (
	"sync"
	"sync/atomic"
)

// Handles: index in the low 32 bits, the slot's generation (never 0) in
// the high 32, so 0 is never a handle and a stale one names nothing. The
// table is a fixed array of lazily allocated chunks of atomic pointers:
// lookups take no lock; adding and removing take the table's mutex.
const (
	chunkBits = 10
	chunkSize = 1 << chunkBits
	maxChunks = 1 << 12 // 4 Mi live handles
)

type entry struct {
	gen uint32
	obj any
}

type chunk [chunkSize]atomic.Pointer[entry]

type handleTable struct {
	chunks [maxChunks]atomic.Pointer[chunk]
	mu     sync.Mutex
	gens   []uint32 // last generation of each slot ever used
	free   []uint32
}

var handles handleTable

// add names obj with a new handle; 0 when the table is full.
func (t *handleTable) add(obj any) uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	var idx uint32
	if n := len(t.free); n > 0 {
		idx = t.free[n-1]
		t.free = t.free[:n-1]
	} else {
		if len(t.gens) >= maxChunks*chunkSize {
			return 0
		}
		idx = uint32(len(t.gens))
		t.gens = append(t.gens, 0)
		if t.chunks[idx>>chunkBits].Load() == nil {
			t.chunks[idx>>chunkBits].Store(new(chunk))
		}
	}
	g := t.gens[idx] + 1
	if g == 0 {
		g = 1
	}
	t.gens[idx] = g
	t.chunks[idx>>chunkBits].Load()[idx&(chunkSize-1)].Store(&entry{gen: g, obj: obj})
	return uint64(g)<<32 | uint64(idx)
}

// get returns the object h names, or nil.
func (t *handleTable) get(h uint64) any {
	idx, g := uint32(h), uint32(h>>32)
	if idx>>chunkBits >= maxChunks {
		return nil
	}
	c := t.chunks[idx>>chunkBits].Load()
	if c == nil {
		return nil
	}
	e := c[idx&(chunkSize-1)].Load()
	if e == nil || e.gen != g {
		return nil
	}
	return e.obj
}

// remove forgets h; it reports whether h named something.
func (t *handleTable) remove(h uint64) bool {
	idx, g := uint32(h), uint32(h>>32)
	if idx>>chunkBits >= maxChunks {
		return false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	c := t.chunks[idx>>chunkBits].Load()
	if c == nil {
		return false
	}
	e := c[idx&(chunkSize-1)].Load()
	if e == nil || e.gen != g {
		return false
	}
	c[idx&(chunkSize-1)].Store(nil)
	t.free = append(t.free, idx)
	return true
}

func getT[T any](h uint64) *T {
	p, _ := handles.get(h).(*T)
	return p
}

// each calls f with every live object (for diagnostics).
func (t *handleTable) each(f func(any)) {
	t.mu.Lock()
	n := len(t.gens)
	t.mu.Unlock()
	for idx := 0; idx < n; idx++ {
		c := t.chunks[idx>>chunkBits].Load()
		if c == nil {
			continue
		}
		if e := c[idx&(chunkSize-1)].Load(); e != nil {
			f(e.obj)
		}
	}
}
