// Package atomics executes the RFC 7306 atomic operations, FetchAdd and
// CmpSwap, both with their masks, on a 64-bit word of registered memory.
//
// # Operations (RFC 7306 §5.1.1, §5.1.2)
//
// FetchAdd reads the original value O, stores N = MaskedAdd(O, A, M) and
// returns O. A 1 bit in the Add Mask M marks the most significant bit of a
// field: the carry out of that bit is discarded instead of entering the next
// bit, so the word is split into independent modular counters. M = 0 is the
// ordinary 64-bit add of InfiniBand/verbs; M = all-ones gives N = O XOR A.
//
// CmpSwap matches iff ((C XOR O) AND CM) == 0; on a match it stores
// N = (O AND NOT SM) OR (S AND SM); it always returns O. CM = SM = all-ones
// is the plain InfiniBand compare-and-swap, CM = 0 always matches (masked
// unconditional swap) and SM = 0 never writes (an atomic 64-bit read).
//
// MaskedAdd and MaskedCmpSwap are the pure (non-atomic) functions. MaskedAdd
// is branch-free and O(1): with the field MSBs cleared in both operands no
// carry can leave a field (each field's low part sums to at most 2^w - 2), so
// one 64-bit add computes every field's low bits and, at each MSB position,
// the carry into that MSB; XOR-ing in O^A at the MSB positions completes the
// MSB sum bit, and the carry out of the MSB never exists:
//
//	N = ((O &^ M) + (A &^ M)) ^ ((O ^ A) & M)
//
// Bit 63 needs no special case: a carry out of it is lost to the 64-bit wrap
// whether or not M has bit 63 set. The tests check this against a bit-serial
// model transcribed from the RFC pseudocode on millions of random cases.
//
// # Atomic execution
//
// FetchAdd with mask 0 is one atomic.AddUint64: a single LOCK XADDQ on amd64
// (checked with go build -gcflags=-S; the subtraction that recovers O is a
// plain register op). Every other form is lock-free: a CompareAndSwap loop
// over sync/atomic. A CAS fails only because another write to the word
// succeeded, so some operation always makes progress.
//
// Linearization: every returned O is a value the word really held at one
// instant, and the operation takes effect at that instant.
//   - A successful CompareAndSwap(p, O, N) is the linearization point: at that
//     instant the whole word equalled O (ABA is harmless: the value, not its
//     history, is what the operation observes).
//   - An operation that does not write (CmpSwap mismatch, a match whose N
//     equals O, masked FetchAdd with A = 0) is an atomic read; its linearization
//     point is the atomic load that produced O, and the outcome (match or not)
//     is computed from that very O.
//   - Unmasked-compare CmpSwap (CM = all-ones) tries the CAS first, since on
//     a match O must equal C: success returns C. On failure it loads O; if
//     O != C the failed compare is linearized at that load. If O == C the word
//     changed back between the CAS and the load, and answering "no match"
//     with O == C would be a lie, so only then does it retry.
//   - Masked loops retry only when the CAS failed, i.e. the word changed
//     between the load and the CAS; the exact new O must be returned, so the
//     outcome is recomputed from a fresh load.
//
// # Atomicity scope
//
// The guarantee is "global" in verbs terms (IB_ATOMIC_GLOB, as opposed to
// IB_ATOMIC_HCA, which only promises atomicity among the adapter's own
// atomics). A FetchAdd or CmpSwap from this package is atomic with respect to:
//   - every other FetchAdd/CmpSwap of this package on the same word, whichever
//     QP, RDMAP stream or goroutine issues it (the MUST of RFC 7306 §5);
//   - local CPU threads of this process that access the same aligned word with
//     sync/atomic (Load, Store, Add, CompareAndSwap, Swap, And, Or) or, from
//     other languages sharing the memory, with LOCK-prefixed or equivalent
//     sequentially consistent 64-bit atomics.
//
// It is NOT atomic with respect to non-atomic accesses that overlap the word:
// RDMA Write or Read placement (a byte copy), Send placement, or plain CPU
// loads and stores. Such a mix may observe or produce torn values; RFC 7306
// §5 makes atomicity versus other accesses optional and advises ULPs not to
// mix atomic and non-atomic access to an atomic target. In Go a plain access
// racing with these functions is also a data race.
//
// # Registered memory
//
// FetchAddAt and CmpSwapAt operate on a byte slice of registered memory at an
// offset. They refuse, without touching memory, an offset whose 8 bytes do
// not fit (ErrOutOfRange, overflow-safe) and then one whose resolved address
// &mem[off] is not 8-byte aligned (ErrMisaligned): a region may start at any
// address, so checking off&7 alone is wrong (RFC 7306 §5.2.1;
// docs/spec/rfc7306.md#alignment).
// The engine maps ErrMisaligned to the Terminate RDMAP / Remote Operation /
// 0x07 of RFC 7306 §8.2 and ErrOutOfRange to a base-or-bounds violation.
// Values are in host byte order in memory; the engine converts the
// big-endian wire fields before calling and the returned O after.
//
// # Testing
//
// The tests compare against a bit-serial model of the RFC pseudocode and
// run concurrent mixes with plain sync/atomic users. Building them with
// -tags atomics_stress makes every retry loop yield between its load and
// its CompareAndSwap, which forces the interleavings that a loaded or
// small machine rarely produces (go test -race -tags atomics_stress).
package atomics
