package engine

import "testing"

// TestBufPool: a borrowed buffer has the length asked for, comes back
// for the next borrower (not a new one), the pool keeps no more than its
// bound, and buffers it did not make, or longer requests, stay outside.
func TestBufPool(t *testing.T) {
	p := newBufPool(1024, 2)
	a := p.get(700)
	if len(a) != 700 || cap(a) != 1024 {
		t.Fatalf("get(700): len %d cap %d", len(a), cap(a))
	}
	a[0] = 42
	p.put(a)
	b := p.get(1000)
	if len(b) != 1000 || &b[0] != &a[0] {
		t.Fatalf("get(1000) after a put: len %d, same buffer %v", len(b), &b[0] == &a[0])
	}
	c, d, e := p.get(1024), p.get(10), p.get(10)
	p.put(b)
	p.put(c)
	p.put(d) // over the bound of 2: dropped
	if len(p.free) != 2 {
		t.Fatalf("%d free buffers kept, want 2", len(p.free))
	}
	if long := p.get(2048); len(long) != 2048 {
		t.Fatalf("get(2048): len %d", len(long))
	} else {
		p.put(long)
	}
	p.put(make([]byte, 512))
	if len(p.free) != 2 {
		t.Fatalf("foreign buffers taken in: %d free", len(p.free))
	}
	_ = e
	if a := testing.AllocsPerRun(100, func() { p.put(p.get(100)) }); a != 0 {
		t.Fatalf("%v allocations per get and put", a)
	}
}
