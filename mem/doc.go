// Package mem is the registered memory of the xrnic RNIC engine: hugepage
// backed regions, protection domains, memory regions (MRs) with STags, and
// the single lookup-and-check function that every remote access goes
// through. The engine (internal/engine) and the public API (verbs/) build on it.
//
// # Regions
//
// [Alloc] maps anonymous (or memfd-backed, shareable) memory. The default is
// 2 MiB hugetlb pages (MAP_HUGETLB); 1 GiB pages on request. When the kernel
// cannot provide them, Alloc falls back along the chain
//
//	hugetlb-1G (if asked) -> hugetlb-2M -> THP (madvise) -> 4K
//
// (a 1 GiB request passes through 2 MiB hugetlb pages before THP, since
// those are still far better than THP for a pinned RDMA buffer). The
// [Region] reports what was obtained ([Backing], page size, rounded size)
// and, when it fell back, a warning that names the sysctl, sysfs file or
// kernel command line that fixes it. With AllocOptions.NoFallback the
// warning becomes the error. [Stats] returns process-wide per-backing byte
// and region counters for metrics.
//
// THP means that madvise(MADV_HUGEPAGE) was accepted on a 2 MiB aligned
// mapping (and, for memfd, that shmem THP is enabled); whether the kernel
// actually faults in huge pages is decided at fault time (AnonHugePages in
// /proc/self/smaps shows it).
//
// # STags and memory regions (RFC 5040 §3.2, §7.2, §8.1.1; RFC 5041 §8; RFC 5042)
//
// A [Table] is the per-device STag table. An STag is a 24-bit index followed
// by an 8-bit key (the layout linux drivers use). Each index is a random
// free slot (the low bits) under high bits that advance per slot from a
// random start, skipping index 0, so STag values are spread over the
// 32-bit space and one known STag reveals nothing about the others (RFC
// 5042 §6.2.1), while a slot's index changes on every reuse; the key is
// random and differs
// from the previous key of the same slot, so re-registering a slot
// ([Table.Reregister]) always yields a new STag and stale STags are refused.
// Each MR has a protection domain ([PD]), optional binding to one stream
// (QP id; 0 means PD-wide, RFC 5041 §8.2 requires both), access rights
// ([Access]) and a tagged-offset mode: zero-based (base TO 0),
// address-based (base TO = address of the first byte, the verbs default) or
// an explicit base TO.
//
// Access rights follow verbs: RemoteWrite and RemoteAtomic require
// LocalWrite at registration (the RNIC writes that memory on the peer's
// behalf; ibv_reg_mr(3) imposes the same rule). RemoteAtomic alone suffices
// for an atomic: RFC 5040 knows only read and write rights, and a dedicated
// atomic right is the safe check (docs/spec/rfc7306.md#access-rights); verbs
// has exactly that.
//
// # The check
//
// Sources: docs/spec/rdmap.md#stags, #operations and #errors,
// docs/spec/ddp.md#validation, docs/spec/rfc7306.md#alignment and #errors.
//
// [Table.Check] is lock-free and allocation-free and applies, in a fixed
// order and touching nothing before all pass:
//
//  1. STag valid: a live MR with that exact STag (index and key) that has not
//     been invalidated;
//  2. association: same PD as the QP, and the same stream if stream-bound;
//  3. access rights;
//  4. bounds: first TO wrap (the last byte TO+len-1 overflows 64 bits),
//     then TO >= base TO and TO+len <= base TO + size, written as
//     comparisons that cannot overflow;
//  5. for atomics, 8-byte alignment of the resolved address
//     (region address + TO - base TO), not merely of TO (RFC 7306 §5.2.1).
//
// The [Op] selects the Terminate code ([term.Error]) of a failure:
//
//	                 DDP tagged placement        RDMAP Read source / Atomic
//	                 (Write, Read Response)
//	invalid STag     DDP 1/0x00                  RDMAP 1/0x00
//	not associated   DDP 1/0x02                  RDMAP 1/0x03
//	access rights    DDP 1/0x00 (*)              RDMAP 1/0x02
//	base/bounds      DDP 1/0x01                  RDMAP 1/0x01
//	TO wrap          DDP 1/0x03                  RDMAP 1/0x04
//	misaligned       -                           RDMAP 2/0x07 (RFC 7306 §8.2)
//
// (*) DDP has no access-rights code; like siw we report the STag as invalid
// for this use.
//
// Zero-length tagged messages must not be checked at all (RFC 5041 §5.2,
// RFC 5040 §5.2 for zero-length Reads): the caller skips Check. If Check is
// called with length 0 anyway, it validates STag, association and rights and
// accepts any TO in [base, base+size], returning an empty window.
//
// # Invalidation
//
// [Table.Invalidate] is the local (owner) invalidation, [Table.RemoteInvalidate]
// serves Send with Invalidate (RFC 5040 §5.3). After either, Check refuses the
// STag; [Table.Deregister] frees the slot. A remote invalidation is refused
// with a Remote Protection error (RDMAP 1/0x09) when the STag is live but
// belongs to another PD, is bound to another stream, or was not registered
// with RemoteInvalidate; with a Remote Operation error (RDMAP 2/0x09) when
// there is no such STag (unknown index or stale key). This is the split siw
// makes (EACCES vs. other errors); RFC 5040 §7.2 lists code 0x09 under both
// types without saying which applies when. Invalidating an already
// invalidated STag is accepted (idempotent). RFC 5042 advises enabling
// remote invalidation only for STags that a single stream uses: bind such
// MRs to their stream.
//
// # Windows and quiescence
//
// Check returns the exact target window as a reslice of the registered
// bytes (capacity clipped to the window). Invalidation stops new Checks from
// succeeding, but a poll loop may still be copying into a window it obtained
// just before. Poll loops bracket their use of windows with [Reader.Enter]
// and [Reader.Exit] (two atomic adds per batch); [Table.Synchronize] waits
// until every reader that was inside a section has left it, and
// [Table.Deregister] calls it, so after Deregister returns the memory may be
// unmapped. RFC 5040 §8.1.1 requires that after revocation the RNIC no longer
// modifies the buffer: a local invalidation that must guarantee that calls
// Synchronize after Invalidate (remote invalidation runs inside the reader's
// own section and must not wait for itself).
package mem
