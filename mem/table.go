package mem

import (
	crand "crypto/rand"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"xrnic/wire/term"
)

// PD is a protection domain. The zero PD is never handed out.
type PD uint32

// Access is a set of memory access rights.
type Access uint8

// Access rights (the verbs flags).
const (
	LocalWrite   Access = 1 << iota // the local RNIC may write (receive buffers, Read sinks)
	RemoteRead                      // RDMA Read source
	RemoteWrite                     // RDMA Write / Read Response sink target
	RemoteAtomic                    // RFC 7306 atomic target
	accessAll    = LocalWrite | RemoteRead | RemoteWrite | RemoteAtomic
)

func (a Access) String() string {
	if a == 0 {
		return "none"
	}
	var parts []string
	for _, f := range []struct {
		a Access
		s string
	}{{LocalWrite, "local-write"}, {RemoteRead, "remote-read"}, {RemoteWrite, "remote-write"}, {RemoteAtomic, "remote-atomic"}} {
		if a&f.a != 0 {
			parts = append(parts, f.s)
		}
	}
	if a&^accessAll != 0 {
		parts = append(parts, fmt.Sprintf("0x%x", uint8(a&^accessAll)))
	}
	return strings.Join(parts, "|")
}

// TOMode selects how tagged offsets map to the registered bytes.
type TOMode uint8

const (
	// TOAddress: the base TO is the virtual address of the first byte (the
	// verbs default for ibv_reg_mr).
	TOAddress TOMode = iota
	// TOZeroBased: the base TO is 0.
	TOZeroBased
	// TOExplicit: the base TO is MROptions.BaseTO (ibv_reg_mr_iova style).
	TOExplicit
)

// MROptions describe a registration.
type MROptions struct {
	PD     PD
	Access Access
	// Stream binds the STag to one stream (QP id); 0 makes it usable on any
	// stream of the PD (RFC 5041 §8.2).
	Stream uint32
	TO     TOMode
	BaseTO uint64 // used with TOExplicit
	// RemoteInvalidate permits Send with Invalidate to invalidate the STag.
	RemoteInvalidate bool
}

// Errors of the control path (registration, invalidation by the owner).
var (
	ErrTableFull        = errors.New("mem: STag table full (raise maxMRs of the device)")
	ErrBadPD            = errors.New("mem: unknown protection domain")
	ErrPDBusy           = errors.New("mem: protection domain still has memory regions")
	ErrEmpty            = errors.New("mem: cannot register an empty range")
	ErrAccessLocalWrite = errors.New("mem: remote write and remote atomic access require local write access (as in verbs)")
	ErrBadAccess        = errors.New("mem: unknown access flags")
	ErrTORange          = errors.New("mem: base TO + length exceeds the 64-bit tagged offset space")
	ErrUnknownSTag      = errors.New("mem: no such STag")
	ErrWrongPD          = errors.New("mem: STag belongs to another protection domain")
	ErrStaleMR          = errors.New("mem: memory region was deregistered or re-registered")
)

// MR is a registered memory region. Its fields are immutable; only its
// validity changes (invalidation). Re-registration creates a new MR.
type MR struct {
	stag      uint32
	pd        PD
	stream    uint32
	access    Access
	remoteInv bool
	mode      TOMode
	baseTO    uint64
	addr      uint64 // address of buf[0], for the atomic alignment check
	size      uint64
	buf       []byte
	invalid   atomic.Bool
	dead      atomic.Bool // deregistered or replaced
}

// STag returns the steering tag (index<<8 | key).
func (m *MR) STag() uint32 { return m.stag }

// PD returns the protection domain.
func (m *MR) PD() PD { return m.pd }

// Access returns the access rights.
func (m *MR) Access() Access { return m.access }

// Stream returns the bound stream, 0 when PD-wide.
func (m *MR) Stream() uint32 { return m.stream }

// BaseTO returns the tagged offset of the first byte.
func (m *MR) BaseTO() uint64 { return m.baseTO }

// Len returns the registered length in bytes.
func (m *MR) Len() int { return len(m.buf) }

// Bytes returns the registered bytes (for local use by the owner).
func (m *MR) Bytes() []byte { return m.buf }

// Valid reports whether the STag is usable (not invalidated, not
// deregistered or re-registered).
func (m *MR) Valid() bool { return !m.invalid.Load() && !m.dead.Load() }

// Options returns the options the MR was registered with (BaseTO set to the
// effective base TO whatever the mode).
func (m *MR) Options() MROptions {
	return MROptions{PD: m.pd, Access: m.access, Stream: m.stream, TO: m.mode, BaseTO: m.baseTO, RemoteInvalidate: m.remoteInv}
}

// Table is a device's STag table and protection domain allocator.
type Table struct {
	slots []atomic.Pointer[MR]
	mask  uint32

	mu      sync.Mutex
	rng     *rand.Rand
	gen     []uint32 // per slot: the high index bits (above the slot bits) it hands out next
	lastKey []uint8  // previous key per slot
	live    int
	nextPD  PD
	pds     map[PD]int // live PDs -> number of MRs

	readers atomic.Pointer[[]*Reader]

	fails [numOps][NumReasons]atomic.Uint64
}

// MaxMRs is the largest table: the 24-bit STag index space.
const MaxMRs = 1 << 24

// NewTable returns a table for at most maxMRs live regions; the slot count
// is maxMRs rounded up to a power of two (at most 2^24).
func NewTable(maxMRs int) (*Table, error) {
	if maxMRs < 1 || maxMRs > MaxMRs {
		return nil, fmt.Errorf("mem: table size %d out of range [1, %d]", maxMRs, MaxMRs)
	}
	n := 1
	for n < maxMRs {
		n <<= 1
	}
	var seed [32]byte
	crand.Read(seed[:])
	t := &Table{
		slots:   make([]atomic.Pointer[MR], n),
		mask:    uint32(n - 1),
		rng:     rand.New(rand.NewChaCha8(seed)),
		gen:     make([]uint32, n),
		lastKey: make([]uint8, n),
		pds:     make(map[PD]int),
	}
	for i := range t.gen {
		t.gen[i] = t.rng.Uint32()
	}
	t.nextPD = PD(t.rng.Uint32()>>8) + 1 // random start, not predictable either
	empty := []*Reader{}
	t.readers.Store(&empty)
	return t, nil
}

// Slots returns the number of slots (a power of two).
func (t *Table) Slots() int { return len(t.slots) }

// Live returns the number of registered regions.
func (t *Table) Live() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.live
}

// AllocPD returns a new protection domain.
func (t *Table) AllocPD() PD {
	t.mu.Lock()
	defer t.mu.Unlock()
	for {
		pd := t.nextPD
		t.nextPD++
		if _, used := t.pds[pd]; pd != 0 && !used {
			t.pds[pd] = 0
			return pd
		}
	}
}

// FreePD releases a protection domain that has no regions left.
func (t *Table) FreePD(pd PD) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	n, ok := t.pds[pd]
	switch {
	case !ok:
		return ErrBadPD
	case n > 0:
		return fmt.Errorf("%w (%d left)", ErrPDBusy, n)
	}
	delete(t.pds, pd)
	return nil
}

func (t *Table) validate(buf []byte, o *MROptions) (baseTO uint64, err error) {
	if len(buf) == 0 {
		return 0, ErrEmpty
	}
	if o.Access&^accessAll != 0 {
		return 0, ErrBadAccess
	}
	if o.Access&(RemoteWrite|RemoteAtomic) != 0 && o.Access&LocalWrite == 0 {
		return 0, fmt.Errorf("%w: asked for %v", ErrAccessLocalWrite, o.Access)
	}
	if _, ok := t.pds[o.PD]; !ok {
		return 0, fmt.Errorf("%w %d", ErrBadPD, o.PD)
	}
	switch o.TO {
	case TOAddress:
		baseTO = addrOf(buf)
	case TOZeroBased:
		baseTO = 0
	case TOExplicit:
		baseTO = o.BaseTO
	default:
		return 0, fmt.Errorf("mem: unknown TO mode %d", o.TO)
	}
	if uint64(len(buf))-1 > math.MaxUint64-baseTO {
		return 0, fmt.Errorf("%w: base 0x%x, length %d", ErrTORange, baseTO, len(buf))
	}
	return baseTO, nil
}

func (t *Table) newMR(stag uint32, buf []byte, o *MROptions, baseTO uint64) *MR {
	return &MR{
		stag: stag, pd: o.PD, stream: o.Stream, access: o.Access, remoteInv: o.RemoteInvalidate,
		mode: o.TO, baseTO: baseTO, addr: addrOf(buf), size: uint64(len(buf)), buf: buf[:len(buf):len(buf)],
	}
}

// newKey returns a random key different from the slot's previous one.
func (t *Table) newKey(slot uint32) uint8 {
	k := uint8(t.rng.UintN(255)) // 0..254
	if k >= t.lastKey[slot] {
		k++ // skip the previous key: uniform over the other 255 values
	}
	t.lastKey[slot] = k
	return k
}

// newIndex picks the 24-bit index of a new STag: a random free slot (so
// an index says nothing about the others: a peer that knows one STag
// learns no neighbour from it, RFC 5042 §6.2.1), with high bits (above
// the slot bits) that advance per slot from a random start (so an STag
// that was revoked does not come back with the same index until its slot
// has been reused 2^(24-slot bits) times). Index 0 is skipped (STag 0 is
// special to many stacks). The caller holds mu and has checked that a
// slot is free.
func (t *Table) newIndex() uint32 {
	for tries := 0; ; tries++ {
		slot := t.rng.Uint32() & t.mask
		if tries >= 32 { // a dense table: take the next free slot
			for t.slots[slot].Load() != nil {
				slot = (slot + 1) & t.mask
			}
		}
		if t.slots[slot].Load() != nil {
			continue
		}
		high := uint32(0)
		if bits := 24 - popcount(t.mask); bits > 0 {
			high = t.gen[slot] & (1<<bits - 1)
			t.gen[slot]++
			high <<= popcount(t.mask)
		}
		if idx := high | slot; idx != 0 {
			return idx
		}
	}
}

func popcount(m uint32) int {
	n := 0
	for ; m != 0; m &= m - 1 {
		n++
	}
	return n
}

// Register enables an STag for buf, which must stay mapped until the MR is
// deregistered (a Region's bytes, or any memory the device owns).
func (t *Table) Register(buf []byte, o MROptions) (*MR, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	baseTO, err := t.validate(buf, &o)
	if err != nil {
		return nil, err
	}
	if t.live == len(t.slots) {
		return nil, ErrTableFull
	}
	idx := t.newIndex()
	slot := idx & t.mask
	mr := t.newMR(idx<<8|uint32(t.newKey(slot)), buf, &o, baseTO)
	t.slots[slot].Store(mr)
	t.live++
	t.pds[o.PD]++
	return mr, nil
}

// Reregister replaces old by a new registration in the same slot with a new
// key (so a new STag) and the given options; buf nil keeps the old range.
// It also revalidates an invalidated region (the fast-register pattern).
// The old STag is refused from then on.
func (t *Table) Reregister(old *MR, buf []byte, o MROptions) (*MR, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	slot := (old.stag >> 8) & t.mask
	if t.slots[slot].Load() != old {
		return nil, ErrStaleMR
	}
	if buf == nil {
		buf = old.buf
	}
	baseTO, err := t.validate(buf, &o)
	if err != nil {
		return nil, err
	}
	mr := t.newMR(old.stag&^0xFF|uint32(t.newKey(slot)), buf, &o, baseTO)
	old.dead.Store(true)
	t.slots[slot].Store(mr)
	t.pds[old.pd]--
	t.pds[o.PD]++
	return mr, nil
}

// Deregister frees the region's slot and waits (Synchronize) until no poll
// loop can still hold a window into it. It must not be called between
// Reader.Enter and Reader.Exit.
func (t *Table) Deregister(m *MR) error {
	t.mu.Lock()
	slot := (m.stag >> 8) & t.mask
	if !t.slots[slot].CompareAndSwap(m, nil) {
		t.mu.Unlock()
		return ErrStaleMR
	}
	m.dead.Store(true)
	m.invalid.Store(true)
	t.live--
	t.pds[m.pd]--
	t.mu.Unlock()
	t.Synchronize()
	return nil
}

func (t *Table) lookup(stag uint32) *MR {
	m := t.slots[(stag>>8)&t.mask].Load()
	if m == nil || m.stag != stag {
		return nil
	}
	return m
}

// Lookup returns the live MR with this exact STag (valid or invalidated),
// or nil.
func (t *Table) Lookup(stag uint32) *MR { return t.lookup(stag) }

// Invalidate is the owner's local invalidation (a Local Invalidate work
// request of a QP in pd). Afterwards Check refuses the STag; call
// Synchronize to also wait for windows already handed out. Invalidating an
// invalidated STag succeeds.
func (t *Table) Invalidate(stag uint32, pd PD) error {
	m := t.lookup(stag)
	if m == nil {
		return ErrUnknownSTag
	}
	if m.pd != pd {
		return ErrWrongPD
	}
	m.invalid.Store(true)
	return nil
}

// RemoteInvalidate serves the Invalidate STag of a Send with Invalidate
// received on stream (a QP of pd). It returns nil or the Terminate error:
// RDMAPOperationNoInvalidate when there is no such STag, and
// RDMAPProtectionNoInvalidate when the STag exists but is not associated with
// the stream or does not permit remote invalidation (see the package doc).
func (t *Table) RemoteInvalidate(stag uint32, pd PD, stream uint32) *term.Error {
	m := t.lookup(stag)
	if m == nil || m.dead.Load() {
		t.fails[opInvalidate][ReasonInvalidSTag].Add(1)
		return term.RDMAPOperationNoInvalidate
	}
	if m.pd != pd || (m.stream != 0 && m.stream != stream) {
		t.fails[opInvalidate][ReasonNotAssociated].Add(1)
		return term.RDMAPProtectionNoInvalidate
	}
	if !m.remoteInv {
		t.fails[opInvalidate][ReasonAccess].Add(1)
		return term.RDMAPProtectionNoInvalidate
	}
	m.invalid.Store(true)
	return nil
}

// Reader marks the sections in which one poll loop uses windows returned
// by Check. Enter and Exit cost one atomic add each; call them once per
// batch, not per packet. A Reader is used by one goroutine.
type Reader struct {
	seq atomic.Uint64 // odd while inside a section
	t   *Table
	_   [48]byte // keep readers of different loops on different cache lines
}

// NewReader registers a poll loop's reader.
func (t *Table) NewReader() *Reader {
	r := &Reader{t: t}
	t.mu.Lock()
	defer t.mu.Unlock()
	old := *t.readers.Load()
	n := append(append(make([]*Reader, 0, len(old)+1), old...), r)
	t.readers.Store(&n)
	return r
}

// Close unregisters the reader; it must be outside a section.
func (r *Reader) Close() {
	t := r.t
	t.mu.Lock()
	defer t.mu.Unlock()
	old := *t.readers.Load()
	n := make([]*Reader, 0, len(old))
	for _, x := range old {
		if x != r {
			n = append(n, x)
		}
	}
	t.readers.Store(&n)
}

// Enter starts a section: windows obtained from Check stay safe to use
// until Exit.
func (r *Reader) Enter() { r.seq.Add(1) }

// Exit ends the section.
func (r *Reader) Exit() { r.seq.Add(1) }

// Synchronize waits until every reader that was inside a section when it
// was called has left that section. Calling it from inside a section of the
// same goroutine deadlocks.
func (t *Table) Synchronize() {
	rs := *t.readers.Load()
	for _, r := range rs {
		s := r.seq.Load()
		if s&1 == 0 {
			continue
		}
		for i := 0; r.seq.Load() == s; i++ {
			if i < 100 {
				runtime.Gosched()
			} else {
				time.Sleep(50 * time.Microsecond)
			}
		}
	}
}
