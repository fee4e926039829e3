package verbs

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"xrnic/atomics"
	"xrnic/internal/engine"
)

func TestOpen(t *testing.T) {
	d := openDev(t)
	a := d.Attributes()
	if a.Transport != "iWARP" || a.LLP != "kernel" || a.MPARev != 2 || !a.CRC || a.AtomicCap != AtomicGlob ||
		!a.MaskedAtomics || !a.ImmediateData || a.MaxSGE <= 0 || a.MaxORD <= 0 || a.MaxIRD <= 0 || a.MaxWR <= 0 || a.MaxQPs <= 0 {
		t.Fatalf("attributes %+v", a)
	}
	if a.AtomicCap.String() != "IBV_ATOMIC_GLOB" {
		t.Errorf("AtomicCap %q", a.AtomicCap)
	}
	for _, tr := range []string{"afxdp", "dpdk"} {
		if _, err := Open(DeviceConfig{Transport: tr}); !errors.Is(err, ErrNotSupported) {
			t.Errorf("transport %q: %v", tr, err)
		}
	}
}

// TestSends covers Send, Send with SE, Send with Invalidate and Send with
// SE and Invalidate, with multi-SGE gather/scatter and the completion
// fields on both sides.
func TestSends(t *testing.T) {
	c, s := pair(t, 1<<20, QPAttr{SigAll: true})
	// Two MRs at the responder that the initiator will invalidate.
	inv := make([]*MR, 2)
	for i := range inv {
		var err error
		inv[i], err = s.pd.RegMR(make([]byte, 64), AccessLocalWrite|AccessRemoteWrite|AccessRemoteInvalidate)
		must(t, err)
	}
	n := 3*c.qp.ConnInfo().MULPDU + 11
	fill(c.mr.Bytes()[:n], 1)
	cases := []struct {
		name  string
		op    Opcode
		flags SendFlags
		inv   uint32
		se    bool
	}{
		{"Send", OpSend, 0, 0, false},
		{"SendSE", OpSend, FlagSolicited, 0, true},
		{"SendInv", OpSendWithInv, 0, inv[0].STag(), false},
		{"SendSEInv", OpSendWithInv, FlagSolicited, inv[1].STag(), true},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			clear(s.mr.Bytes())
			off := 1000 * i
			// scatter into two SGEs at the responder, gather from two at the initiator
			must(t, s.qp.PostRecv(&RecvWR{ID: uint64(100 + i), SGL: []SGE{s.mr.SGE(0, 100), s.mr.SGE(20000, n)}}))
			wr := SendWR{ID: uint64(i), Op: tc.op, Flags: tc.flags | FlagSignaled, InvalidateSTag: tc.inv,
				SGL: []SGE{c.mr.SGE(off, 50), c.mr.SGE(off+50, n-50)}}
			must(t, c.qp.PostSend(&wr))
			rc := poll(t, s.rcq, 1)[0]
			if rc.Status != StatusSuccess || rc.ID != uint64(100+i) || rc.Op != OpRecv || rc.ByteLen != uint32(n) || rc.QPNum != s.qp.Num() {
				t.Fatalf("recv completion %+v", rc)
			}
			if (rc.Flags&WCSolicited != 0) != tc.se {
				t.Errorf("solicited flag %v, want %v", rc.Flags, tc.se)
			}
			if tc.inv != 0 {
				if rc.Flags&WCWithInv == 0 || rc.InvalidatedSTag != tc.inv {
					t.Errorf("invalidate: %+v", rc)
				}
				if inv[i-2].Valid() {
					t.Error("STag still valid after Send with Invalidate")
				}
			} else if rc.Flags&WCWithInv != 0 {
				t.Errorf("unexpected WCWithInv: %+v", rc)
			}
			got := append(append([]byte{}, s.mr.Bytes()[:100]...), s.mr.Bytes()[20000:20000+n-100]...)
			if !bytes.Equal(got, c.mr.Bytes()[off:off+n]) {
				t.Fatal("payload mismatch")
			}
			sc := poll(t, c.scq, 1)[0]
			if sc.Status != StatusSuccess || sc.ID != uint64(i) || sc.Op != tc.op || sc.ByteLen != uint32(n) {
				t.Fatalf("send completion %+v", sc)
			}
		})
	}
	// The invalidated STags are refused now: a Read names the STag and
	// gets the peer's verdict.
	wr := SendWR{ID: 9, Op: OpRead, SGL: []SGE{c.mr.SGE(0, 8)}, RemoteSTag: inv[0].STag(), RemoteTO: inv[0].TO(0)}
	if _, err := c.qp.Exec(ctxT(t), &wr); err == nil {
		t.Fatal("read of an invalidated STag succeeded")
	} else if we := (*WCError)(nil); !errors.As(err, &we) || we.Status != StatusRemAccessErr || we.Err == nil {
		t.Fatalf("read of an invalidated STag: %v", err)
	}
}

// TestRDMA covers Write, Read, Immediate Data (with and without SE),
// Write with Immediate and local invalidation, with the helpers.
func TestRDMA(t *testing.T) {
	c, s := pair(t, 1<<20, QPAttr{})
	cb, sb := c.mr.Bytes(), s.mr.Bytes()
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range cb {
		cb[i] = byte(rng.Uint32())
	}

	// Write 200000 bytes, then Read them back to another place.
	const n = 200000
	must(t, c.qp.PostWrite(1, c.mr.SGE(0, n), s.mr.STag(), s.mr.TO(4096), 0))
	must(t, c.qp.PostRead(2, c.mr.SGE(500000, n), s.mr.STag(), s.mr.TO(4096), FlagSignaled))
	if wc := poll(t, c.scq, 1)[0]; wc.ID != 2 || wc.Op != OpRead || wc.Status != StatusSuccess || wc.ByteLen != n {
		t.Fatalf("read completion %+v (the unsignalled write must not complete)", wc)
	}
	if !bytes.Equal(sb[4096:4096+n], cb[:n]) || !bytes.Equal(cb[500000:500000+n], cb[:n]) {
		t.Fatal("write/read content mismatch")
	}

	// Immediate Data, with and without SE.
	for i, f := range []SendFlags{0, FlagSolicited} {
		imm := 0x0102030405060708 * uint64(i+1)
		must(t, s.qp.PostRecvBuf(uint64(10+i), s.mr.SGE(900000, 8)))
		must(t, c.qp.PostImm(uint64(20+i), imm, f|FlagSignaled))
		rc := poll(t, s.rcq, 1)[0]
		if rc.Op != OpRecvImm || rc.Flags&WCWithImm == 0 || rc.Imm != imm || rc.ID != uint64(10+i) || (rc.Flags&WCSolicited != 0) != (f != 0) {
			t.Fatalf("imm recv %+v", rc)
		}
		if sc := poll(t, c.scq, 1)[0]; sc.Op != OpImm || sc.Status != StatusSuccess {
			t.Fatalf("imm send %+v", sc)
		}
	}

	// Write with Immediate: the data is placed before the receive completes.
	must(t, s.qp.PostRecvBuf(30, s.mr.SGE(900000, 8)))
	must(t, c.qp.PostWriteImm(31, c.mr.SGE(100, 3000), s.mr.STag(), s.mr.TO(300000), 0xfeedface_cafef00d, FlagSignaled))
	rc := poll(t, s.rcq, 1)[0]
	if rc.Op != OpRecvWriteImm || rc.Imm != 0xfeedface_cafef00d || rc.Flags&WCWithImm == 0 || rc.ByteLen != 3000 || rc.ID != 30 {
		t.Fatalf("write-imm recv %+v", rc)
	}
	if !bytes.Equal(sb[300000:303000], cb[100:3100]) {
		t.Fatal("write-imm content")
	}
	if sc := poll(t, c.scq, 1)[0]; sc.Op != OpWriteWithImm || sc.ID != 31 || sc.ByteLen != 3000 {
		t.Fatalf("write-imm send %+v", sc)
	}

	// Local invalidate of a responder MR, then a Write to it fails.
	mr2, err := s.pd.RegMR(make([]byte, 4096), AccessLocalWrite|AccessRemoteWrite)
	must(t, err)
	must(t, s.qp.PostLocalInv(40, mr2.STag(), FlagSignaled))
	if sc := poll(t, s.scq, 1)[0]; sc.Op != OpLocalInv || sc.Status != StatusSuccess || sc.ID != 40 {
		t.Fatalf("local inv %+v", sc)
	}
	if mr2.Valid() {
		t.Fatal("MR valid after local invalidate")
	}
	// A Write completes locally; the peer's Terminate fails the Read
	// behind it (iWARP reports remote errors of Writes asynchronously).
	// (The Terminate may also arrive before the Write's local completion.)
	var we *WCError
	err = c.qp.Write(ctxT(t), c.mr.SGE(0, 16), mr2.STag(), mr2.TO(0))
	if err != nil && (!errors.As(err, &we) || we.Status != StatusRemAccessErr) {
		t.Fatalf("write to invalidated MR: %v", err)
	}
	err = c.qp.Read(ctxT(t), c.mr.SGE(0, 16), s.mr.STag(), s.mr.TO(0))
	if !errors.As(err, &we) || (we.Status != StatusRemAccessErr && we.Status != StatusWRFlushErr) {
		t.Fatalf("read after a write to an invalidated MR: %v", err)
	}
	if c.qp.Err() == nil {
		t.Error("QP error not reported")
	}
	if c.qp.State() != QPError {
		t.Fatalf("state %v", c.qp.State())
	}
	// Posting on a QP in error completes flushed.
	must(t, c.qp.PostWrite(50, c.mr.SGE(0, 8), s.mr.STag(), s.mr.TO(0), 0))
	if sc := poll(t, c.scq, 1)[0]; sc.Status != StatusWRFlushErr || sc.ID != 50 {
		t.Fatalf("flush %+v", sc)
	}
}

// TestAtomics checks FetchAdd and CmpSwap with random masks against the
// reference functions of package atomics: the original value in the local
// buffer and the completion, and the new remote value.
func TestAtomics(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 7))
	defer func() {
		if t.Failed() {
			t.Logf("seed %d", seed)
		}
	}()
	c, s := pair(t, 1<<16, QPAttr{})
	word := func() uint64 { return binary.NativeEndian.Uint64(s.mr.Bytes()[8:]) }
	masks := func() uint64 {
		switch rng.IntN(4) {
		case 0:
			return 0
		case 1:
			return ^uint64(0)
		}
		return rng.Uint64()
	}
	for i := range 300 {
		o := rng.Uint64()
		if rng.IntN(4) == 0 {
			o = 0x8000_8000_ffff_ffff
		}
		binary.NativeEndian.PutUint64(s.mr.Bytes()[8:], o)
		res := c.mr.SGE(64+8*(i%8), 8)
		var want uint64
		var wr SendWR
		if i%2 == 0 {
			a, m := rng.Uint64(), masks()
			want = atomics.MaskedAdd(o, a, m)
			wr = SendWR{ID: uint64(i), Op: OpFetchAdd, Flags: FlagSignaled, SGL: []SGE{res}, RemoteSTag: s.mr.STag(), RemoteTO: s.mr.TO(8), CompareAdd: a, AddMask: m}
		} else {
			cmp, cm, sw, sm := rng.Uint64(), masks(), rng.Uint64(), masks()
			if rng.IntN(2) == 0 {
				cmp = o ^ (rng.Uint64() &^ cm) // force a match
			}
			want, _ = atomics.MaskedCmpSwap(o, cmp, cm, sw, sm)
			wr = SendWR{ID: uint64(i), Op: OpCmpSwap, Flags: FlagSignaled, SGL: []SGE{res}, RemoteSTag: s.mr.STag(), RemoteTO: s.mr.TO(8),
				CompareAdd: cmp, CompareMask: cm, Swap: sw, SwapMask: sm}
		}
		must(t, c.qp.PostSend(&wr))
		wc := poll(t, c.scq, 1)[0]
		if wc.Status != StatusSuccess || wc.Op != wr.Op || wc.ByteLen != 8 || wc.AtomicOrig != o {
			t.Fatalf("%d %v: completion %+v, want orig %#x", i, wr.Op, wc, o)
		}
		if got := binary.NativeEndian.Uint64(c.mr.Bytes()[res.Addr-c.mr.BaseTO():]); got != o {
			t.Fatalf("%d: result buffer %#x want %#x", i, got, o)
		}
		if word() != want {
			t.Fatalf("%d %+v: remote %#x want %#x", i, wr, word(), want)
		}
	}
	// The synchronous helpers.
	binary.NativeEndian.PutUint64(s.mr.Bytes()[8:], 40)
	ctx := ctxT(t)
	if o, err := c.qp.FetchAdd(ctx, c.mr.SGE(0, 8), s.mr.STag(), s.mr.TO(8), 2, 0); err != nil || o != 40 || word() != 42 {
		t.Fatalf("FetchAdd %d %v -> %d", o, err, word())
	}
	if o, err := c.qp.CmpSwap(ctx, c.mr.SGE(0, 8), s.mr.STag(), s.mr.TO(8), 42, CmpSwapAll, 7, CmpSwapAll); err != nil || o != 42 || word() != 7 {
		t.Fatalf("CmpSwap %d %v -> %d", o, err, word())
	}
	if o, err := c.qp.CmpSwap(ctx, c.mr.SGE(0, 8), s.mr.STag(), s.mr.TO(8), 42, CmpSwapAll, 9, CmpSwapAll); err != nil || o != 7 || word() != 7 {
		t.Fatalf("CmpSwap mismatch %d %v -> %d", o, err, word())
	}
	// A misaligned target is a remote error.
	if _, err := c.qp.FetchAdd(ctx, c.mr.SGE(0, 8), s.mr.STag(), s.mr.TO(9), 1, 0); err == nil {
		t.Fatal("misaligned FetchAdd succeeded")
	} else if we := (*WCError)(nil); !errors.As(err, &we) || we.Status == StatusSuccess {
		t.Fatalf("misaligned: %v", err)
	}
}

// TestExecKeepsOtherCompletions: completions met by a synchronous helper
// are returned by the next Poll, in order.
func TestExecKeepsOtherCompletions(t *testing.T) {
	c, s := pair(t, 1<<16, QPAttr{})
	for i := range 3 {
		must(t, c.qp.PostWrite(uint64(i+1), c.mr.SGE(0, 100), s.mr.STag(), s.mr.TO(0), FlagSignaled))
	}
	if _, err := c.qp.FetchAdd(ctxT(t), c.mr.SGE(200, 8), s.mr.STag(), s.mr.TO(1024), 1, 0); err != nil {
		t.Fatal(err)
	}
	got := poll(t, c.scq, 3)
	for i, wc := range got {
		if wc.ID != uint64(i+1) || wc.Op != OpWrite {
			t.Fatalf("kept completions %+v", got)
		}
	}
	if n := c.scq.Poll(make([]Completion, 4)); n != 0 {
		t.Fatalf("%d extra completions", n)
	}
	// An Exec abandoned by its context: its completion is dropped.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := c.qp.Exec(ctx, &SendWR{Op: OpRead, SGL: []SGE{c.mr.SGE(0, 8)}, RemoteSTag: s.mr.STag(), RemoteTO: s.mr.TO(0)}); !errors.Is(err, context.Canceled) {
		// It may have completed before the context was looked at.
		if err != nil {
			t.Fatal(err)
		}
	}
	must(t, c.qp.PostWrite(77, c.mr.SGE(0, 8), s.mr.STag(), s.mr.TO(0), FlagSignaled))
	if wc := poll(t, c.scq, 1)[0]; wc.ID != 77 {
		t.Fatalf("got %+v, want the write (the Exec completion must be dropped)", wc)
	}
}

func TestInvalidWR(t *testing.T) {
	c, s := pair(t, 4096, QPAttr{MaxSGE: 2})
	bad := []SendWR{
		{Op: OpWrite, Flags: FlagSolicited, SGL: []SGE{c.mr.SGE(0, 8)}, RemoteSTag: s.mr.STag()},
		{Op: 0},
		{Op: OpRecv},
		{Op: OpSend, SGL: []SGE{c.mr.SGE(0, 1), c.mr.SGE(1, 1), c.mr.SGE(2, 1)}},
		{Op: OpFetchAdd, SGL: []SGE{c.mr.SGE(0, 4)}},
		{Op: OpSend, Flags: 0x80},
	}
	for i, wr := range bad {
		if err := c.qp.PostSend(&wr); !errors.Is(err, ErrInvalidWR) {
			t.Errorf("%d %+v: %v", i, wr, err)
		}
	}
	if err := c.qp.PostRecv(&RecvWR{SGL: make([]SGE, 3)}); !errors.Is(err, ErrInvalidWR) {
		t.Errorf("recv with 3 SGEs: %v", err)
	}
	if _, err := c.pd.RegMR(make([]byte, 8), AccessRemoteWrite); !errors.Is(err, ErrAccessLocalWr) {
		t.Errorf("RegMR remote write without local write: %v", err)
	}
	if err := c.pd.Dealloc(); !errors.Is(err, ErrPDBusy) {
		t.Errorf("Dealloc with MRs: %v", err)
	}
}

func TestAllocMR(t *testing.T) {
	c, s := pair(t, 4096, QPAttr{})
	mr, err := s.pd.AllocMR(3<<20, allAccess|AccessZeroBased, AllocOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("AllocMR: backing %v, %d bytes, warning %q", mr.Backing(), mr.Len(), mr.Warning())
	if mr.Backing() == BackingUser || mr.Len() < 3<<20 || mr.BaseTO() != 0 || mr.TO(5) != 5 {
		t.Fatalf("MR backing %v len %d base %d", mr.Backing(), mr.Len(), mr.BaseTO())
	}
	if mr.Backing() != BackingHugeTLB2M && mr.Warning() == "" {
		t.Error("fallback without a warning")
	}
	copy(c.mr.Bytes(), "hugepage")
	must(t, c.qp.Write(ctxT(t), c.mr.SGE(0, 8), mr.STag(), mr.TO(2<<20+1)))
	must(t, c.qp.Read(ctxT(t), c.mr.SGE(100, 8), mr.STag(), mr.TO(2<<20+1)))
	if string(c.mr.Bytes()[100:108]) != "hugepage" || string(mr.Bytes()[2<<20+1:][:8]) != "hugepage" {
		t.Fatal("content")
	}
	must(t, mr.Dereg())
	if mr.Valid() {
		t.Fatal("valid after Dereg")
	}
}

func TestStrings(t *testing.T) {
	for s := StatusSuccess; s <= StatusGeneralErr; s++ {
		if strings.HasPrefix(s.String(), "Status") {
			t.Errorf("status %d: %q", s, s)
		}
	}
	if StatusRemAccessErr.String() != "remote access error" || StatusWRFlushErr.String() != "Work Request Flushed Error" {
		t.Error("status strings differ from ibv_wc_status_str")
	}
	for o := OpSend; o <= OpRecvWriteImm; o++ {
		if strings.HasPrefix(o.String(), "Opcode") {
			t.Errorf("opcode %d unnamed", o)
		}
	}
	if got := (AccessLocalWrite | AccessRemoteAtomic).String(); got != "LocalWrite|RemoteAtomic" {
		t.Errorf("access %q", got)
	}
	// The engine's work requests and completions are these types (no
	// mapping to keep complete): this only compiles while they are.
	var wc []engine.Completion = make([]Completion, 1)
	var wr *engine.SendWR = &SendWR{}
	var st engine.Status = StatusRemAccessErr
	_, _, _ = wc, wr, st
}
