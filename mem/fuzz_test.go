package mem

import (
	"math"
	"math/big"
	"testing"
)

var two64 = new(big.Int).Lsh(big.NewInt(1), 64)

// refCheck is an independent model of Check in arbitrary-precision
// arithmetic: it returns the expected reason (NumReasons for success) and
// the window offset.
func refCheck(mrs []*MR, stag uint32, pd PD, stream uint32, need Access, to, length uint64, op Op) (Reason, uint64) {
	var m *MR
	for _, x := range mrs {
		if x.stag == stag && x.Valid() {
			m = x
		}
	}
	switch {
	case m == nil:
		return ReasonInvalidSTag, 0
	case m.pd != pd || (m.stream != 0 && m.stream != stream):
		return ReasonNotAssociated, 0
	case m.access&need != need:
		return ReasonAccess, 0
	}
	bTO := new(big.Int).SetUint64(to)
	bLen := new(big.Int).SetUint64(length)
	end := new(big.Int).Add(bTO, bLen) // one past the last byte
	if length > 0 && end.Cmp(two64) > 0 {
		return ReasonTOWrap, 0
	}
	base := new(big.Int).SetUint64(m.baseTO)
	limit := new(big.Int).Add(base, big.NewInt(int64(len(m.buf))))
	if bTO.Cmp(base) < 0 || end.Cmp(limit) > 0 {
		return ReasonBounds, 0
	}
	off := new(big.Int).Sub(bTO, base).Uint64()
	addr := new(big.Int).Add(new(big.Int).SetUint64(m.addr), new(big.Int).SetUint64(off))
	if op == OpAtomic && new(big.Int).And(addr, big.NewInt(7)).Sign() != 0 {
		return ReasonMisaligned, 0
	}
	return NumReasons, off
}

// FuzzCheck: Check never panics, never returns a window outside the
// registered range, and agrees with refCheck.
func FuzzCheck(f *testing.F) {
	fx := newFixture(f)
	// A deregistered and an invalidated MR, so stale STags are in play.
	dead, _ := fx.t.Register(make([]byte, 64), MROptions{PD: fx.pdA, Access: RemoteRead})
	fx.t.Deregister(dead)
	inv, _ := fx.t.Register(make([]byte, 64), MROptions{PD: fx.pdA, Access: RemoteRead, TO: TOZeroBased})
	fx.t.Invalidate(inv.STag(), fx.pdA)
	mrs := append(append([]*MR{}, fx.all...), dead, inv)

	f.Add(uint8(0), uint32(0), uint8(0), uint32(0), uint8(RemoteWrite), uint64(0), uint64(1), uint8(OpWrite))
	f.Add(uint8(5), uint32(0), uint8(0), uint32(0), uint8(RemoteWrite), uint64(math.MaxUint64-95), uint64(96), uint8(OpWrite))
	f.Add(uint8(2), uint32(0), uint8(0), uint32(0), uint8(RemoteAtomic), uint64(5), uint64(8), uint8(OpAtomic))
	f.Add(uint8(1), uint32(0), uint8(0), uint32(0), uint8(RemoteAtomic), uint64(3), uint64(8), uint8(OpAtomic))
	f.Add(uint8(4), uint32(1), uint8(1), uint32(8), uint8(RemoteRead), uint64(0), uint64(1), uint8(OpReadSource))
	f.Add(uint8(200), uint32(0xdeadbeef), uint8(0), uint32(0), uint8(0), uint64(1), uint64(math.MaxUint64), uint8(OpReadResponse))
	f.Fuzz(func(t *testing.T, sel uint8, stagXor uint32, pdSel uint8, stream uint32, need uint8, to, length uint64, opb uint8) {
		var stag uint32
		var rel *MR
		if int(sel) < len(mrs) {
			rel = mrs[sel]
			stag = rel.stag ^ stagXor
		} else {
			stag = stagXor
		}
		// TOs relative to the chosen MR's base half of the time, so that
		// address-based regions are hit.
		if rel != nil && opb&0x80 != 0 {
			to += rel.baseTO
		}
		op := Op(opb&0x7f) % numCheckOps
		pd := fx.pdA
		switch pdSel % 4 {
		case 1:
			pd = fx.pdB
		case 2:
			pd = PD(pdSel)
		}
		acc := Access(need) & accessAll
		w, e := fx.t.Check(stag, pd, stream, acc, to, length, op)
		wantR, wantOff := refCheck(mrs, stag, pd, stream, acc, to, length, op)
		if wantR != NumReasons {
			if e != ErrorFor(op, wantR) || w != nil {
				t.Fatalf("got %v (window %v), want %v", e, w != nil, ErrorFor(op, wantR))
			}
			return
		}
		if e != nil {
			t.Fatalf("got %v, want success at offset %d", e, wantOff)
		}
		m := fx.t.Lookup(stag)
		if uint64(len(w)) != length || uint64(cap(w)) != length {
			t.Fatalf("window len %d cap %d, want %d", len(w), cap(w), length)
		}
		if length > 0 {
			if &w[0] != &m.buf[wantOff] || &w[len(w)-1] != &m.buf[wantOff+length-1] {
				t.Fatalf("window not at offset %d", wantOff)
			}
		}
	})
}
