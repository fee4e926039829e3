package mem

import (
	"bytes"
	"errors"
	"math"
	"testing"

	"xrnic/wire/term"
)

// fixture is a small table with regions of every flavour.
type fixture struct {
	t            *Table
	pdA, pdB     PD
	zero         *MR // zero-based, 8-aligned base, all rights
	addr         *MR // address-based TO, 8-aligned base, all rights
	unaligned    *MR // zero-based, base address = 8k+3
	unalignedAdr *MR // address-based, base address = 8k+3
	stream       *MR // bound to stream 7
	high         *MR // explicit base TO 2^64-4096: ends exactly at 2^64
	readOnly     *MR // RemoteRead only
	writeOnly    *MR // LocalWrite|RemoteWrite
	localOnly    *MR // LocalWrite only
	all          []*MR
}

// aligned8 returns n bytes whose first byte is 8-aligned plus skew.
func aligned8(n, skew int) []byte {
	b := make([]byte, n+16)
	off := int((8 - addrOf(b)&7) & 7)
	return b[off+skew : off+skew+n]
}

func newFixture(tb testing.TB) *fixture {
	tb.Helper()
	t, err := NewTable(64)
	if err != nil {
		tb.Fatal(err)
	}
	f := &fixture{t: t, pdA: t.AllocPD(), pdB: t.AllocPD()}
	all := LocalWrite | RemoteRead | RemoteWrite | RemoteAtomic
	reg := func(buf []byte, o MROptions) *MR {
		tb.Helper()
		if o.PD == 0 {
			o.PD = f.pdA
		}
		m, err := t.Register(buf, o)
		if err != nil {
			tb.Fatalf("register %+v: %v", o, err)
		}
		for i := range buf {
			buf[i] = byte(i*7 + len(f.all))
		}
		f.all = append(f.all, m)
		return m
	}
	f.zero = reg(aligned8(4096, 0), MROptions{Access: all, TO: TOZeroBased})
	f.addr = reg(aligned8(4096, 0), MROptions{Access: all, TO: TOAddress})
	f.unaligned = reg(aligned8(256, 3), MROptions{Access: all, TO: TOZeroBased})
	f.unalignedAdr = reg(aligned8(256, 3), MROptions{Access: all, TO: TOAddress})
	f.stream = reg(aligned8(256, 0), MROptions{Access: all, TO: TOZeroBased, Stream: 7})
	f.high = reg(aligned8(4096, 0), MROptions{Access: all, TO: TOExplicit, BaseTO: math.MaxUint64 - 4095})
	f.readOnly = reg(aligned8(256, 0), MROptions{Access: RemoteRead, TO: TOZeroBased})
	f.writeOnly = reg(aligned8(256, 0), MROptions{Access: LocalWrite | RemoteWrite, TO: TOZeroBased})
	f.localOnly = reg(aligned8(256, 0), MROptions{Access: LocalWrite, TO: TOZeroBased})
	return f
}

func (f *fixture) snapshot() [][]byte {
	var s [][]byte
	for _, m := range f.all {
		s = append(s, bytes.Clone(m.buf))
	}
	return s
}

func (f *fixture) unchanged(t *testing.T, s [][]byte) {
	t.Helper()
	for i, m := range f.all {
		if !bytes.Equal(m.buf, s[i]) {
			t.Fatalf("memory of MR %d changed", i)
		}
	}
}

type checkCase struct {
	name   string
	mr     *MR    // target (nil: use stag)
	stag   uint32 // used when mr is nil, or xor-ed into mr's STag
	pd     PD     // 0: the fixture's pdA
	stream uint32
	need   Access
	to     uint64 // relative to mr's base TO when rel is set
	rel    bool
	length uint64
	op     Op
	want   Reason // NumReasons: success
	off    uint64 // expected window offset on success
}

const ok = NumReasons

func (f *fixture) cases() []checkCase {
	rw := RemoteWrite
	rr := RemoteRead
	ra := RemoteAtomic
	cs := []checkCase{
		// STag validity.
		{name: "unknown index", stag: 0x00ABCD00, need: rw, length: 1, op: OpWrite, want: ReasonInvalidSTag},
		{name: "wrong key", mr: f.zero, stag: 0x01, need: rw, length: 1, op: OpWrite, want: ReasonInvalidSTag},
		{name: "wrong key high bit", mr: f.zero, stag: 0x80, need: rr, length: 1, op: OpReadSource, want: ReasonInvalidSTag},
		{name: "same slot other index", mr: f.zero, stag: 64 << 8, need: rr, length: 1, op: OpReadSource, want: ReasonInvalidSTag},
		// Association.
		{name: "other PD", mr: f.zero, pd: f.pdB, need: rw, length: 1, op: OpWrite, want: ReasonNotAssociated},
		{name: "other PD read", mr: f.zero, pd: f.pdB, need: rr, length: 1, op: OpReadSource, want: ReasonNotAssociated},
		{name: "other stream", mr: f.stream, stream: 8, need: rw, length: 1, op: OpWrite, want: ReasonNotAssociated},
		{name: "other stream atomic", mr: f.stream, stream: 8, need: ra, length: 8, op: OpAtomic, want: ReasonNotAssociated},
		{name: "bound stream ok", mr: f.stream, stream: 7, need: rw, to: 16, length: 8, op: OpWrite, want: ok, off: 16},
		{name: "PD-wide any stream", mr: f.zero, stream: 12345, need: rw, length: 1, op: OpWrite, want: ok},
		// Access rights.
		{name: "write to read-only", mr: f.readOnly, need: rw, length: 1, op: OpWrite, want: ReasonAccess},
		{name: "read-response to read-only", mr: f.readOnly, need: rw, length: 1, op: OpReadResponse, want: ReasonAccess},
		{name: "read from write-only", mr: f.writeOnly, need: rr, length: 1, op: OpReadSource, want: ReasonAccess},
		{name: "atomic on write-only", mr: f.writeOnly, need: ra, length: 8, op: OpAtomic, want: ReasonAccess},
		{name: "atomic on read-only", mr: f.readOnly, need: ra, length: 8, op: OpAtomic, want: ReasonAccess},
		{name: "remote read on local-only", mr: f.localOnly, need: rr, length: 1, op: OpReadSource, want: ReasonAccess},
		{name: "remote write on local-only", mr: f.localOnly, need: rw, length: 1, op: OpWrite, want: ReasonAccess},
		{name: "need two rights, has one", mr: f.readOnly, need: rr | rw, length: 1, op: OpReadSource, want: ReasonAccess},
		{name: "read ok", mr: f.readOnly, need: rr, to: 100, length: 156, op: OpReadSource, want: ok, off: 100},
		// Bounds, zero-based.
		{name: "whole region", mr: f.zero, need: rw, length: 4096, op: OpWrite, want: ok},
		{name: "to+len exactly at end", mr: f.zero, need: rw, to: 4000, length: 96, op: OpWrite, want: ok, off: 4000},
		{name: "one past end", mr: f.zero, need: rw, to: 4000, length: 97, op: OpWrite, want: ReasonBounds},
		{name: "one past end read", mr: f.zero, need: rr, to: 4000, length: 97, op: OpReadSource, want: ReasonBounds},
		{name: "last byte", mr: f.zero, need: rw, to: 4095, length: 1, op: OpWrite, want: ok, off: 4095},
		{name: "to at end", mr: f.zero, need: rw, to: 4096, length: 1, op: OpWrite, want: ReasonBounds},
		{name: "to far", mr: f.zero, need: rw, to: 1 << 40, length: 1, op: OpWrite, want: ReasonBounds},
		{name: "length huge", mr: f.zero, need: rw, to: 0, length: 1 << 63, op: OpWrite, want: ReasonBounds},
		{name: "length max ends at 2^64-1", mr: f.zero, need: rw, to: 1, length: math.MaxUint64, op: OpWrite, want: ReasonBounds},
		{name: "length max no wrap at 0", mr: f.zero, need: rw, to: 0, length: math.MaxUint64, op: OpWrite, want: ReasonBounds},
		// Bounds, address-based.
		{name: "addr below base", mr: f.addr, rel: true, to: math.MaxUint64, need: rw, length: 1, op: OpWrite, want: ReasonBounds}, // base-1
		{name: "addr below base read", mr: f.addr, rel: true, to: math.MaxUint64, need: rr, length: 1, op: OpReadSource, want: ReasonBounds},
		{name: "addr at base", mr: f.addr, rel: true, to: 0, need: rw, length: 4096, op: OpWrite, want: ok},
		{name: "addr one past", mr: f.addr, rel: true, to: 1, need: rw, length: 4096, op: OpWrite, want: ReasonBounds},
		{name: "addr TO 0", mr: f.addr, to: 0, need: rw, length: 1, op: OpWrite, want: ReasonBounds},
		// TO wrap and offsets near 2^64.
		{name: "wrap", mr: f.zero, need: rw, to: math.MaxUint64, length: 2, op: OpWrite, want: ReasonTOWrap},
		{name: "wrap read", mr: f.zero, need: rr, to: math.MaxUint64 - 7, length: 16, op: OpReadSource, want: ReasonTOWrap},
		{name: "wrap max length", mr: f.zero, need: rw, to: 2, length: math.MaxUint64, op: OpWrite, want: ReasonTOWrap},
		{name: "wrap atomic", mr: f.zero, need: ra, to: math.MaxUint64 - 3, length: 8, op: OpAtomic, want: ReasonTOWrap},
		{name: "no wrap, past end", mr: f.zero, need: rw, to: math.MaxUint64, length: 1, op: OpWrite, want: ReasonBounds},
		{name: "high region ends at 2^64", mr: f.high, need: rw, to: math.MaxUint64 - 95, length: 96, op: OpWrite, want: ok, off: 4000},
		{name: "high region last byte", mr: f.high, need: rw, to: math.MaxUint64, length: 1, op: OpWrite, want: ok, off: 4095},
		{name: "high region wraps", mr: f.high, need: rw, to: math.MaxUint64 - 95, length: 97, op: OpWrite, want: ReasonTOWrap},
		{name: "high region wraps read", mr: f.high, need: rr, to: math.MaxUint64, length: 2, op: OpReadSource, want: ReasonTOWrap},
		{name: "high region below base", mr: f.high, need: rw, to: math.MaxUint64 - 4096, length: 1, op: OpWrite, want: ReasonBounds},
		{name: "high region whole", mr: f.high, need: rr, to: math.MaxUint64 - 4095, length: 4096, op: OpReadSource, want: ok},
		// Zero length (documented behaviour, the caller should not check).
		{name: "zero length at end", mr: f.zero, need: rw, to: 4096, length: 0, op: OpWrite, want: ok, off: 4096},
		{name: "zero length past end", mr: f.zero, need: rw, to: 4097, length: 0, op: OpWrite, want: ReasonBounds},
		{name: "zero length at 2^64-1", mr: f.high, need: rw, to: math.MaxUint64, length: 0, op: OpWrite, want: ok, off: 4095},
		// Atomics.
		{name: "atomic aligned", mr: f.zero, need: ra, to: 64, length: 8, op: OpAtomic, want: ok, off: 64},
		{name: "atomic last word", mr: f.zero, need: ra, to: 4088, length: 8, op: OpAtomic, want: ok, off: 4088},
		{name: "atomic past end", mr: f.zero, need: ra, to: 4096, length: 8, op: OpAtomic, want: ReasonBounds},
		{name: "atomic straddles end", mr: f.zero, need: ra, to: 4092, length: 8, op: OpAtomic, want: ReasonBounds},
		// base address 8k+3, zero-based: TO 5 resolves to an aligned address, TO 0 does not.
		{name: "unaligned base TO 5", mr: f.unaligned, need: ra, to: 5, length: 8, op: OpAtomic, want: ok, off: 5},
		{name: "unaligned base TO 0", mr: f.unaligned, need: ra, to: 0, length: 8, op: OpAtomic, want: ReasonMisaligned},
		{name: "unaligned base TO 8", mr: f.unaligned, need: ra, to: 8, length: 8, op: OpAtomic, want: ReasonMisaligned},
		{name: "unaligned base write TO 0 fine", mr: f.unaligned, need: rw, to: 0, length: 8, op: OpWrite, want: ok},
		{name: "high region atomic", mr: f.high, need: ra, to: math.MaxUint64 - 7, length: 8, op: OpAtomic, want: ok, off: 4088},
	}
	for mis := uint64(1); mis <= 7; mis++ {
		cs = append(cs,
			checkCase{name: "atomic zero-based misaligned", mr: f.zero, need: ra, to: 64 + mis, length: 8, op: OpAtomic, want: ReasonMisaligned},
			checkCase{name: "atomic address-based misaligned", mr: f.addr, rel: true, need: ra, to: 64 + mis, length: 8, op: OpAtomic, want: ReasonMisaligned},
			checkCase{name: "atomic explicit-TO misaligned", mr: f.high, rel: true, need: ra, to: 64 + mis, length: 8, op: OpAtomic, want: ReasonMisaligned},
			// address-based on a base at 8k+3: TO&7 == mis, resolved address aligned only when mis == 5.
			checkCase{name: "atomic unaligned address-based", mr: f.unalignedAdr, rel: true, need: ra, to: 8 + mis, length: 8, op: OpAtomic,
				want: map[bool]Reason{true: ok, false: ReasonMisaligned}[mis == 5], off: 8 + mis},
		)
	}
	return cs
}

func (f *fixture) run(c *checkCase) (stag uint32, to uint64, w []byte, e *term.Error) {
	stag = c.stag
	to = c.to
	if c.mr != nil {
		stag ^= c.mr.stag
		if c.rel {
			to += c.mr.baseTO
		}
	}
	pd := c.pd
	if pd == 0 {
		pd = f.pdA
	}
	w, e = f.t.Check(stag, pd, c.stream, c.need, to, c.length, c.op)
	return
}

func TestCheckTable(t *testing.T) {
	f := newFixture(t)
	before := f.snapshot()
	seen := map[*term.Error]bool{}
	var wantCounts [NumReasons]uint64
	for i := range f.cases() {
		c := f.cases()[i]
		_, _, w, e := f.run(&c)
		if c.want == ok {
			if e != nil {
				t.Errorf("%s: got %v, want success", c.name, e)
				continue
			}
			if uint64(len(w)) != c.length || uint64(cap(w)) != c.length {
				t.Errorf("%s: window len %d cap %d, want %d", c.name, len(w), cap(w), c.length)
				continue
			}
			if c.length > 0 && &w[0] != &c.mr.buf[c.off] {
				t.Errorf("%s: window does not start at offset %d", c.name, c.off)
			}
			if w == nil {
				t.Errorf("%s: nil window on success", c.name)
			}
			continue
		}
		want := ErrorFor(c.op, c.want)
		if e != want {
			t.Errorf("%s: got %v, want %v", c.name, e, want)
		}
		if w != nil {
			t.Errorf("%s: failing check returned a window", c.name)
		}
		seen[e] = true
		wantCounts[c.want]++
	}
	f.unchanged(t, before)
	for _, e := range []*term.Error{
		term.DDPTaggedInvalidSTag, term.DDPTaggedSTagNotAssociated, term.DDPTaggedBaseBounds, term.DDPTaggedTOWrap,
		term.RDMAPInvalidSTag, term.RDMAPSTagNotAssociated, term.RDMAPAccessRights, term.RDMAPBaseBounds, term.RDMAPTOWrap,
		term.RDMAPCatastrophicStream,
	} {
		if !seen[e] {
			t.Errorf("no case produced %v", e)
		}
	}
	cnt := f.t.Counts()
	for r := Reason(0); r < NumReasons; r++ {
		if got := cnt.Total(r); got != wantCounts[r] {
			t.Errorf("counter %v = %d, want %d", r, got, wantCounts[r])
		}
	}
}

// TestErrorMapping pins the Terminate triples of each (op, reason) to the
// RFC tables (docs/spec/rdmap.md#errors, docs/spec/ddp.md#validation,
// docs/spec/rfc7306.md#errors), written out as numbers.
func TestErrorMapping(t *testing.T) {
	type triple struct{ l, et, c uint8 }
	ddp := map[Reason]triple{
		ReasonInvalidSTag: {1, 1, 0x00}, ReasonNotAssociated: {1, 1, 0x02}, ReasonAccess: {1, 1, 0x00},
		ReasonTOWrap: {1, 1, 0x03}, ReasonBounds: {1, 1, 0x01},
	}
	rdmap := map[Reason]triple{
		ReasonInvalidSTag: {0, 1, 0x00}, ReasonNotAssociated: {0, 1, 0x03}, ReasonAccess: {0, 1, 0x02},
		ReasonTOWrap: {0, 1, 0x04}, ReasonBounds: {0, 1, 0x01}, ReasonMisaligned: {0, 2, 0x07},
	}
	for _, op := range []Op{OpWrite, OpReadResponse, OpReadSource, OpAtomic} {
		m := rdmap
		if op == OpWrite || op == OpReadResponse {
			m = ddp
		}
		for r, w := range m {
			e := ErrorFor(op, r)
			if uint8(e.Layer) != w.l || e.EType != w.et || e.Code != w.c {
				t.Errorf("%v/%v: got %v, want %d/%d/0x%02x", op, r, e, w.l, w.et, w.c)
			}
		}
	}
}

func TestCheckAfterInvalidateAndDeregister(t *testing.T) {
	f := newFixture(t)
	stag := f.zero.STag()
	if _, e := f.t.Check(stag, f.pdA, 0, RemoteWrite, 0, 8, OpWrite); e != nil {
		t.Fatal(e)
	}
	if err := f.t.Invalidate(stag, f.pdB); !errors.Is(err, ErrWrongPD) {
		t.Fatalf("invalidate from other PD: %v", err)
	}
	if err := f.t.Invalidate(stag^1, f.pdA); !errors.Is(err, ErrUnknownSTag) {
		t.Fatalf("invalidate wrong key: %v", err)
	}
	if err := f.t.Invalidate(stag, f.pdA); err != nil {
		t.Fatal(err)
	}
	if err := f.t.Invalidate(stag, f.pdA); err != nil {
		t.Fatalf("second invalidate: %v", err)
	}
	if f.zero.Valid() {
		t.Fatal("MR still valid")
	}
	for _, op := range []Op{OpWrite, OpReadResponse, OpReadSource, OpAtomic} {
		if w, e := f.t.Check(stag, f.pdA, 0, 0, 0, 8, op); e != ErrorFor(op, ReasonInvalidSTag) || w != nil {
			t.Errorf("%v after invalidate: %v", op, e)
		}
	}
	// Re-registration (fast-register pattern) revalidates under a new key.
	m2, err := f.t.Reregister(f.zero, nil, f.zero.Options())
	if err != nil {
		t.Fatal(err)
	}
	if m2.STag() == stag || m2.STag()>>8 != stag>>8 {
		t.Fatalf("rereg STag %08x from %08x: want same index, new key", m2.STag(), stag)
	}
	if _, e := f.t.Check(m2.STag(), f.pdA, 0, RemoteWrite, 0, 8, OpWrite); e != nil {
		t.Fatal(e)
	}
	if _, e := f.t.Check(stag, f.pdA, 0, RemoteWrite, 0, 8, OpWrite); e != term.DDPTaggedInvalidSTag {
		t.Fatalf("old STag after rereg: %v", e)
	}
	if err := f.t.Deregister(f.zero); !errors.Is(err, ErrStaleMR) {
		t.Fatalf("deregister replaced MR: %v", err)
	}
	if err := f.t.Deregister(m2); err != nil {
		t.Fatal(err)
	}
	if err := f.t.Deregister(m2); !errors.Is(err, ErrStaleMR) {
		t.Fatalf("double deregister: %v", err)
	}
	if w, e := f.t.Check(m2.STag(), f.pdA, 0, RemoteWrite, 0, 8, OpWrite); e != term.DDPTaggedInvalidSTag || w != nil {
		t.Fatalf("after deregister: %v", e)
	}
	if f.t.Lookup(m2.STag()) != nil {
		t.Fatal("lookup finds a deregistered MR")
	}
}

func TestRemoteInvalidate(t *testing.T) {
	tb, _ := NewTable(16)
	pdA, pdB := tb.AllocPD(), tb.AllocPD()
	buf := make([]byte, 64)
	acc := LocalWrite | RemoteWrite
	reg := func(o MROptions) *MR {
		m, err := tb.Register(buf, o)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	bound := reg(MROptions{PD: pdA, Access: acc, Stream: 3, RemoteInvalidate: true})
	wide := reg(MROptions{PD: pdA, Access: acc, RemoteInvalidate: true})
	noInv := reg(MROptions{PD: pdA, Access: acc, Stream: 3})
	cases := []struct {
		name   string
		stag   uint32
		pd     PD
		stream uint32
		want   *term.Error
	}{
		{"unknown", 0x00FFFF00, pdA, 3, term.RDMAPOperationNoInvalidate},
		{"stale key", bound.STag() ^ 0x10, pdA, 3, term.RDMAPOperationNoInvalidate},
		{"other PD", bound.STag(), pdB, 3, term.RDMAPProtectionNoInvalidate},
		{"other stream", bound.STag(), pdA, 4, term.RDMAPProtectionNoInvalidate},
		{"not permitted", noInv.STag(), pdA, 3, term.RDMAPProtectionNoInvalidate},
		{"bound ok", bound.STag(), pdA, 3, nil},
		{"again ok", bound.STag(), pdA, 3, nil},
		{"PD-wide ok", wide.STag(), pdA, 9, nil},
	}
	for _, c := range cases {
		if got := tb.RemoteInvalidate(c.stag, c.pd, c.stream); got != c.want {
			t.Errorf("%s: got %v, want %v", c.name, got, c.want)
		}
	}
	if noInv.Valid() == false {
		t.Error("refused remote invalidation invalidated the MR")
	}
	for _, m := range []*MR{bound, wide} {
		if _, e := tb.Check(m.STag(), pdA, 3, RemoteWrite, 0, 1, OpWrite); e != term.DDPTaggedInvalidSTag {
			t.Errorf("check after remote invalidate: %v", e)
		}
	}
	c := tb.Counts()
	if c.RemoteInvalidateFails(ReasonInvalidSTag) != 2 || c.RemoteInvalidateFails(ReasonNotAssociated) != 2 || c.RemoteInvalidateFails(ReasonAccess) != 1 {
		t.Errorf("invalidate counters %v", c.Fails[opInvalidate])
	}
	if err := tb.Deregister(bound); err != nil {
		t.Fatal(err)
	}
	if got := tb.RemoteInvalidate(bound.STag(), pdA, 3); got != term.RDMAPOperationNoInvalidate {
		t.Errorf("after deregister: %v", got)
	}
}

func TestRegisterValidation(t *testing.T) {
	tb, _ := NewTable(4)
	pd := tb.AllocPD()
	buf := make([]byte, 4096)
	cases := []struct {
		name string
		buf  []byte
		o    MROptions
		want error
	}{
		{"empty", buf[:0], MROptions{PD: pd}, ErrEmpty},
		{"nil", nil, MROptions{PD: pd}, ErrEmpty},
		{"bad PD", buf, MROptions{PD: pd + 1}, ErrBadPD},
		{"zero PD", buf, MROptions{}, ErrBadPD},
		{"remote write without local write", buf, MROptions{PD: pd, Access: RemoteWrite}, ErrAccessLocalWrite},
		{"remote atomic without local write", buf, MROptions{PD: pd, Access: RemoteAtomic | RemoteRead}, ErrAccessLocalWrite},
		{"unknown access bit", buf, MROptions{PD: pd, Access: 0x80}, ErrBadAccess},
		{"TO space overflow", buf, MROptions{PD: pd, TO: TOExplicit, BaseTO: math.MaxUint64 - 4094}, ErrTORange},
		{"TO space exactly", buf, MROptions{PD: pd, TO: TOExplicit, BaseTO: math.MaxUint64 - 4095}, nil},
		{"remote read alone", buf, MROptions{PD: pd, Access: RemoteRead}, nil},
		{"atomic with local write", buf, MROptions{PD: pd, Access: LocalWrite | RemoteAtomic}, nil},
	}
	for _, c := range cases {
		m, err := tb.Register(c.buf, c.o)
		if !errors.Is(err, c.want) || (err == nil) != (m != nil) {
			t.Errorf("%s: got %v, want %v", c.name, err, c.want)
		}
		if m != nil {
			if err := tb.FreePD(pd); !errors.Is(err, ErrPDBusy) {
				t.Errorf("FreePD with a live MR: %v", err)
			}
			tb.Deregister(m)
		}
	}
	if err := tb.FreePD(pd); err != nil {
		t.Fatal(err)
	}
	if err := tb.FreePD(pd); !errors.Is(err, ErrBadPD) {
		t.Fatalf("double FreePD: %v", err)
	}
	if _, err := NewTable(0); err == nil {
		t.Error("NewTable(0) succeeded")
	}
	if _, err := NewTable(MaxMRs + 1); err == nil {
		t.Error("NewTable(2^24+1) succeeded")
	}
	if tb2, _ := NewTable(5); tb2.Slots() != 8 {
		t.Errorf("NewTable(5).Slots() = %d", tb2.Slots())
	}
}

func TestSTagAllocation(t *testing.T) {
	buf := make([]byte, 64)
	// Random slots: an index says nothing about the next one (consecutive
	// indices would let a peer that knows one STag find its neighbours by
	// trying 255 keys), and the first index differs across tables.
	starts := map[uint32]bool{}
	for range 4 {
		tb, _ := NewTable(1024)
		pd := tb.AllocPD()
		var prev uint32
		near := 0
		for i := range 100 {
			m, err := tb.Register(buf, MROptions{PD: pd})
			if err != nil {
				t.Fatal(err)
			}
			idx := m.STag() >> 8
			if i == 0 {
				starts[idx] = true
			} else if d := (idx - prev) & 0x3FF; d <= 4 || d >= 0x3FF-4 {
				near++ // slots within 4 of the previous one: p = 8/1024 each
			}
			if idx == 0 {
				t.Fatal("index 0 handed out")
			}
			prev = idx
		}
		if near > 10 {
			t.Fatalf("%d of 99 indices within 4 slots of the previous one: allocation is not random", near)
		}
	}
	if len(starts) < 2 {
		t.Errorf("4 tables started at the same index %v: start not random", starts)
	}
	// A slot that is reused gets new high index bits each time: a revoked
	// STag does not come back with its index (one-slot table: every
	// registration reuses slot 0).
	{
		tb, _ := NewTable(1)
		pd := tb.AllocPD()
		seen := map[uint32]bool{}
		for i := 0; i < 1000; i++ {
			m, err := tb.Register(buf, MROptions{PD: pd})
			if err != nil {
				t.Fatal(err)
			}
			if idx := m.STag() >> 8; seen[idx] || idx == 0 {
				t.Fatalf("registration %d reuses index %#x", i, idx)
			}
			seen[m.STag()>>8] = true
			if err := tb.Deregister(m); err != nil {
				t.Fatal(err)
			}
		}
	}

	// Small table: live slots are skipped, a full table errors, no live STag reused.
	tb, _ := NewTable(4)
	pd := tb.AllocPD()
	live := map[uint32]*MR{}
	for range 4 {
		m, err := tb.Register(buf, MROptions{PD: pd})
		if err != nil {
			t.Fatal(err)
		}
		live[m.STag()] = m
	}
	if _, err := tb.Register(buf, MROptions{PD: pd}); !errors.Is(err, ErrTableFull) {
		t.Fatalf("5th register in a 4-slot table: %v", err)
	}
	rng := newTestRand(t)
	for range 2000 {
		// Free a random live MR, register a new one: it must take the freed
		// slot and never equal a live STag.
		var victim *MR
		k := rng.IntN(len(live))
		for _, m := range live {
			if k == 0 {
				victim = m
				break
			}
			k--
		}
		if err := tb.Deregister(victim); err != nil {
			t.Fatal(err)
		}
		delete(live, victim.STag())
		m, err := tb.Register(buf, MROptions{PD: pd})
		if err != nil {
			t.Fatal(err)
		}
		if _, dup := live[m.STag()]; dup {
			t.Fatalf("live STag %08x handed out again", m.STag())
		}
		if (m.STag()>>8)&3 != (victim.STag()>>8)&3 {
			t.Fatalf("new MR in slot %d, the only free slot was %d", (m.STag()>>8)&3, (victim.STag()>>8)&3)
		}
		if m.STag() == victim.STag() {
			t.Fatalf("slot reused with the same STag %08x", m.STag())
		}
		live[m.STag()] = m
	}
	if tb.Live() != 4 {
		t.Fatalf("Live() = %d", tb.Live())
	}

	// Re-registration always changes the key; keys spread over the byte.
	m := live[func() uint32 {
		for s := range live {
			return s
		}
		return 0
	}()]
	keys := map[uint8]bool{}
	for range 2000 {
		m2, err := tb.Reregister(m, nil, m.Options())
		if err != nil {
			t.Fatal(err)
		}
		if m2.STag() == m.STag() || m2.STag()>>8 != m.STag()>>8 {
			t.Fatalf("rereg %08x -> %08x", m.STag(), m2.STag())
		}
		if m.Valid() {
			t.Fatal("old MR still valid after rereg")
		}
		keys[uint8(m2.STag())] = true
		m = m2
	}
	if len(keys) < 200 {
		t.Errorf("only %d distinct keys in 2000 re-registrations", len(keys))
	}
	if _, err := tb.Reregister(m, nil, MROptions{PD: pd, Access: RemoteWrite}); !errors.Is(err, ErrAccessLocalWrite) {
		t.Errorf("rereg with bad access: %v", err)
	}
	if !m.Valid() {
		t.Error("failed rereg invalidated the MR")
	}
	// Rereg to a new range and rights.
	nb := make([]byte, 128)
	m3, err := tb.Reregister(m, nb, MROptions{PD: pd, Access: RemoteRead, TO: TOZeroBased})
	if err != nil {
		t.Fatal(err)
	}
	if w, e := tb.Check(m3.STag(), pd, 0, RemoteRead, 64, 64, OpReadSource); e != nil || &w[0] != &nb[64] {
		t.Fatalf("check rereg range: %v", e)
	}
}

func TestCheckAllocs(t *testing.T) {
	f := newFixture(t)
	stag := f.zero.STag()
	n := testing.AllocsPerRun(1000, func() {
		f.t.Check(stag, f.pdA, 0, RemoteWrite, 16, 64, OpWrite)
		f.t.Check(stag^1, f.pdA, 0, RemoteWrite, 16, 64, OpWrite)
		f.t.Check(stag, f.pdA, 0, RemoteWrite, 4095, 64, OpReadSource)
		f.t.RemoteInvalidate(stag^1, f.pdA, 0)
	})
	if n != 0 {
		t.Fatalf("Check allocates %v times per run", n)
	}
}

func BenchmarkCheckHit(b *testing.B) {
	f := newFixture(b)
	stag := f.zero.STag()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		w, e := f.t.Check(stag, f.pdA, 0, RemoteWrite, uint64(i&1023), 1024, OpWrite)
		if e != nil || len(w) != 1024 {
			b.Fatal(e)
		}
	}
}

func BenchmarkCheckHitAtomic(b *testing.B) {
	f := newFixture(b)
	stag := f.addr.STag()
	base := f.addr.BaseTO()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if _, e := f.t.Check(stag, f.pdA, 0, RemoteAtomic, base+uint64(i&511)*8, 8, OpAtomic); e != nil {
			b.Fatal(e)
		}
	}
}

func BenchmarkCheckMiss(b *testing.B) {
	f := newFixture(b)
	stag := f.zero.STag() ^ 0x5A
	b.ReportAllocs()
	for b.Loop() {
		if _, e := f.t.Check(stag, f.pdA, 0, RemoteWrite, 0, 64, OpWrite); e == nil {
			b.Fatal("hit")
		}
	}
}

func BenchmarkCheckHitParallel(b *testing.B) {
	f := newFixture(b)
	stag := f.zero.STag()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, e := f.t.Check(stag, f.pdA, 0, RemoteWrite, 64, 1024, OpWrite); e != nil {
				b.Fatal(e)
			}
		}
	})
}
