package atomics

import "sync/atomic"

// Scope is the atomicity guarantee an RNIC advertises in its device query
// (RFC 7306 §5; docs/spec/rfc7306.md#scope), mirroring verbs' ib_atomic_cap.
type Scope uint8

const (
	// ScopeNone: atomics are not supported (verbs IB_ATOMIC_NONE).
	ScopeNone Scope = iota
	// ScopeRNIC: atomic only among the RNIC's own atomics (IB_ATOMIC_HCA).
	ScopeRNIC
	// ScopeGlobal: also atomic with respect to local CPU threads that use
	// atomic instructions on the same aligned word (IB_ATOMIC_GLOB).
	ScopeGlobal
)

// Supported is the scope this package provides, masked forms included (verbs
// atomic_cap and masked_atomic_cap both report it).
const Supported = ScopeGlobal

func (s Scope) String() string {
	switch s {
	case ScopeNone:
		return "none"
	case ScopeRNIC:
		return "rnic"
	case ScopeGlobal:
		return "global"
	}
	return "invalid"
}

// MaskedAdd returns the RFC 7306 §5.1.1 masked sum of o and a: a 1 bit in m
// marks the most significant bit of a field, and the carry out of that bit
// is discarded. m == 0 is o + a; m == all-ones is o ^ a. Branch-free, O(1);
// see the package documentation for why it is exact.
func MaskedAdd(o, a, m uint64) uint64 {
	return ((o &^ m) + (a &^ m)) ^ ((o ^ a) & m)
}

// MaskedCmpSwap applies RFC 7306 §5.1.2 to the original value o: match
// reports ((c ^ o) & cm) == 0, and n is (o &^ sm) | (s & sm) on a match and
// o otherwise.
func MaskedCmpSwap(o, c, cm, s, sm uint64) (n uint64, match bool) {
	if (c^o)&cm != 0 {
		return o, false
	}
	return o&^sm | s&sm, true
}

// FetchAdd atomically replaces *p by MaskedAdd(*p, add, mask) and returns
// the original value. p must be 8-byte aligned.
//
// With mask == 0 it is exactly one atomic.AddUint64 (one LOCK XADDQ on
// amd64); otherwise a lock-free CompareAndSwap loop, and a masked add of 0
// is a plain atomic load (it never writes).
func FetchAdd(p *uint64, add, mask uint64) (orig uint64) {
	if mask == 0 {
		return atomic.AddUint64(p, add) - add
	}
	return fetchAddMasked(p, add, mask)
}

func fetchAddMasked(p *uint64, add, mask uint64) uint64 {
	if add == 0 {
		// Every field adds 0: N == O. An atomic read, linearized here.
		return atomic.LoadUint64(p)
	}
	for {
		o := atomic.LoadUint64(p)
		stressYield()
		// add != 0 means some field adds a non-zero value modulo its
		// width, so N != O and the write is needed.
		if atomic.CompareAndSwapUint64(p, o, MaskedAdd(o, add, mask)) {
			return o
		}
	}
}

// CmpSwap atomically performs the RFC 7306 §5.1.2 masked compare-and-swap
// on *p: it matches iff ((cmp ^ O) & cmpMask) == 0 and then stores
// (O &^ swapMask) | (swap & swapMask). It returns the original value O, which
// the word really held at the operation's linearization point, and whether
// the compare matched (on a match the word now holds the swapped value,
// which may equal O). p must be 8-byte aligned.
//
// cmpMask == all-ones costs one CompareAndSwap when it matches (plus one
// load when it does not); swapMask == 0 never writes; cmpMask == 0 always
// matches.
func CmpSwap(p *uint64, cmp, cmpMask, swap, swapMask uint64) (orig uint64, matched bool) {
	if cmpMask == ^uint64(0) {
		return cmpSwapExact(p, cmp, cmp&^swapMask|swap&swapMask)
	}
	return cmpSwapMasked(p, cmp, cmpMask, swap, swapMask)
}

// cmpSwapExact handles a full-word compare: a match implies O == cmp, so the
// new value n is known before touching memory.
func cmpSwapExact(p *uint64, cmp, n uint64) (uint64, bool) {
	if n == cmp {
		// A match would write back what is there: an atomic read.
		o := atomic.LoadUint64(p)
		return o, o == cmp
	}
	for {
		if atomic.CompareAndSwapUint64(p, cmp, n) {
			return cmp, true
		}
		stressYield()
		// The failed CAS saw *p != cmp but does not tell us the value.
		// The load gives O; if O != cmp the mismatch is linearized at the
		// load. If O == cmp the word came back to cmp in between, and a
		// "no match" answer with O == cmp would be inconsistent: retry.
		if o := atomic.LoadUint64(p); o != cmp {
			return o, false
		}
	}
}

func cmpSwapMasked(p *uint64, cmp, cmpMask, swap, swapMask uint64) (uint64, bool) {
	for {
		o := atomic.LoadUint64(p)
		if (cmp^o)&cmpMask != 0 {
			return o, false // no match: an atomic read at the load
		}
		n := o&^swapMask | swap&swapMask
		stressYield()
		if n == o || atomic.CompareAndSwapUint64(p, o, n) {
			return o, true
		}
		// The CAS failed: the word changed since the load. Recompute the
		// outcome from the new value.
	}
}
