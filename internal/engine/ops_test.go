package engine

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	"xrnic/atomics"
	"xrnic/mem"
	"xrnic/wire/mpa"
	"xrnic/wire/rdmap"
	"xrnic/wire/term"
)

// exercise runs one of each data operation over a connected pair.
func exercise(t *testing.T, c, s *side) {
	t.Helper()
	// Send (multi-segment) and Send with SE.
	n := 3*c.qp.conn.MULPDU + 17
	fill(c.buf[:n], 3)
	mustRecv(t, s.qp, RecvWR{ID: 1, SGL: []SGE{s.sge(0, n)}})
	mustRecv(t, s.qp, RecvWR{ID: 2, SGL: []SGE{s.sge(n, 100)}})
	mustPost(t, c.qp, SendWR{ID: 10, Op: OpSend, SGL: []SGE{c.sge(0, n)}})
	mustPost(t, c.qp, SendWR{ID: 11, Op: OpSend, Flags: FlagSignaled | FlagSolicited, SGL: []SGE{c.sge(0, 5)}})
	rc := poll(t, s.rcq, 2)
	if rc[0].ID != 1 || rc[0].ByteLen != uint32(n) || rc[1].ID != 2 || rc[1].ByteLen != 5 || rc[1].Flags&WCSolicited == 0 || rc[0].Flags&WCSolicited != 0 {
		t.Fatalf("recv completions %+v", rc)
	}
	if !bytes.Equal(s.buf[:n], c.buf[:n]) {
		t.Fatal("send payload mismatch")
	}
	if sc := poll(t, c.scq, 1); sc[0].ID != 11 { // 10 unsignalled
		t.Fatalf("send completions %+v", sc)
	}
	// Read from the responder, and an atomic.
	fill(s.buf[8192:8192+5000], 5)
	mustPost(t, c.qp, SendWR{ID: 12, Op: OpRead, Flags: FlagSignaled, SGL: []SGE{c.sge(20000, 5000)}, RemoteSTag: s.mr.STag(), RemoteTO: s.to(8192)})
	binary.NativeEndian.PutUint64(s.buf[40000:], 41)
	mustPost(t, c.qp, SendWR{ID: 13, Op: OpFetchAdd, Flags: FlagSignaled, SGL: []SGE{c.sge(30000, 8)}, RemoteSTag: s.mr.STag(), RemoteTO: s.to(40000), CompareAdd: 1})
	cs := poll(t, c.scq, 2)
	if cs[0].ID != 12 || cs[0].Status != StatusSuccess || cs[1].ID != 13 || cs[1].Status != StatusSuccess || cs[1].AtomicOrig != 41 {
		t.Fatalf("completions %+v", cs)
	}
	if !bytes.Equal(c.buf[20000:25000], s.buf[8192:8192+5000]) {
		t.Fatal("read mismatch")
	}
	if binary.NativeEndian.Uint64(c.buf[30000:]) != 41 || binary.NativeEndian.Uint64(s.buf[40000:]) != 42 {
		t.Fatal("atomic result")
	}
	// The responder sends too.
	mustRecv(t, c.qp, RecvWR{ID: 3, SGL: []SGE{c.sge(50000, 64)}})
	copy(s.buf[60000:], "pong")
	mustPost(t, s.qp, SendWR{ID: 14, Op: OpSend, Flags: FlagSignaled, SGL: []SGE{s.sge(60000, 4)}})
	if rc := poll(t, c.rcq, 1)[0]; rc.ByteLen != 4 || string(c.buf[50000:50004]) != "pong" {
		t.Fatalf("reverse send %+v", rc)
	}
	poll(t, s.scq, 1)
}

func TestConnectVariants(t *testing.T) {
	cases := []struct {
		name   string
		cp, sp ConnParams
		check  func(t *testing.T, ci, si ConnInfo)
	}{
		{"rev2 default", ConnParams{}, ConnParams{}, func(t *testing.T, ci, si ConnInfo) {
			if ci.Rev != 2 || !ci.CRC || !si.CRC || ci.MarkersTx || ci.MarkersRx {
				t.Errorf("info %+v", ci)
			}
		}},
		{"rev1", ConnParams{Rev: 1}, ConnParams{}, func(t *testing.T, ci, si ConnInfo) {
			if ci.Rev != 1 || si.Rev != 1 || si.HasEnhanced {
				t.Errorf("info %+v %+v", ci, si)
			}
		}},
		{"crc off both", ConnParams{NoCRC: true}, ConnParams{NoCRC: true}, func(t *testing.T, ci, si ConnInfo) {
			if ci.CRC || si.CRC {
				t.Error("CRC on")
			}
		}},
		{"crc off one side", ConnParams{NoCRC: true}, ConnParams{}, func(t *testing.T, ci, si ConnInfo) {
			if !ci.CRC || !si.CRC {
				t.Error("CRC off though the responder wants it")
			}
		}},
		{"markers both", ConnParams{Markers: true}, ConnParams{Markers: true}, func(t *testing.T, ci, si ConnInfo) {
			if !ci.MarkersTx || !ci.MarkersRx || !si.MarkersTx || !si.MarkersRx {
				t.Errorf("markers %+v", ci)
			}
		}},
		{"markers rev1 one way", ConnParams{Rev: 1, Markers: true}, ConnParams{}, func(t *testing.T, ci, si ConnInfo) {
			if ci.MarkersTx || !ci.MarkersRx || !si.MarkersTx || si.MarkersRx {
				t.Errorf("markers %+v %+v", ci, si)
			}
		}},
		{"p2p write rtr", ConnParams{PeerToPeer: true, RTR: mpa.RTRWrite}, ConnParams{}, func(t *testing.T, ci, si ConnInfo) {
			if !ci.PeerToPeer || ci.RTR != mpa.RTRWrite || !si.PeerToPeer {
				t.Errorf("rtr %+v", ci)
			}
		}},
		{"p2p read rtr", ConnParams{PeerToPeer: true, RTR: mpa.RTRRead}, ConnParams{}, func(t *testing.T, ci, si ConnInfo) {
			if ci.RTR != mpa.RTRRead {
				t.Errorf("rtr %v", ci.RTR)
			}
		}},
		{"p2p send rtr", ConnParams{PeerToPeer: true, RTR: mpa.RTRSend}, ConnParams{}, func(t *testing.T, ci, si ConnInfo) {
			if ci.RTR != mpa.RTRSend {
				t.Errorf("rtr %v", ci.RTR)
			}
		}},
		{"ird/ord", ConnParams{IRD: 3, ORD: 5}, ConnParams{IRD: 4, ORD: 7}, func(t *testing.T, ci, si ConnInfo) {
			// initiator ORD <= responder IRD, responder ORD <= initiator IRD
			if ci.ORD != 4 || si.IRD != 4 || si.ORD != 3 || ci.IRD != 3 {
				t.Errorf("ird/ord c=%d/%d s=%d/%d", ci.IRD, ci.ORD, si.IRD, si.ORD)
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, s := connectPair(t, 1<<20, QPAttr{}, tc.cp, tc.sp)
			tc.check(t, c.qp.ConnInfo(), s.qp.ConnInfo())
			exercise(t, c, s)
		})
	}
}

func TestReject(t *testing.T) {
	for _, rev := range []uint8{1, 2} {
		c, s := newSide(t, 4096, QPAttr{}), newSide(t, 4096, QPAttr{})
		ln, err := s.dev.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		go func() {
			req, err := ln.Accept(ctx)
			if err != nil {
				return
			}
			if string(req.PrivateData) != "hello" || req.Rev != rev {
				t.Errorf("request pd %q rev %d", req.PrivateData, req.Rev)
			}
			req.Reject([]byte("go away"))
		}()
		err = c.qp.Connect(ctx, ln.Addr().String(), ConnParams{Rev: rev, PrivateData: []byte("hello")})
		var re *RejectedError
		if !errors.Is(err, ErrRejected) || !errors.As(err, &re) || string(re.PrivateData) != "go away" {
			t.Fatalf("rev %d: err %v", rev, err)
		}
		if c.qp.State() != QPError {
			t.Errorf("state %v", c.qp.State())
		}
		cancel()
		ln.Close()
	}
}

func TestInsufficientIRD(t *testing.T) {
	c, s := newSide(t, 4096, QPAttr{MaxIRD: 2}), newSide(t, 4096, QPAttr{})
	ln, _ := s.dev.Listen("tcp", "127.0.0.1:0")
	defer ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	errc := acceptAsync(ctx, ln, s.qp, ConnParams{RequiredORD: 8})
	err := c.qp.Connect(ctx, ln.Addr().String(), ConnParams{})
	var re *RejectedError
	if !errors.As(err, &re) || !re.HasEnhanced || re.PeerEnhanced.ORD != 8 {
		t.Fatalf("initiator: %v %+v", err, re)
	}
	if err := <-errc; !errors.Is(err, term.MPAInsufficientIRD) {
		t.Fatalf("responder: %v", err)
	}
}

func TestAtomicsAgainstReference(t *testing.T) {
	c, s := connectPair(t, 1<<16, QPAttr{}, ConnParams{}, ConnParams{})
	seed := uint64(time.Now().UnixNano())
	r := rand.New(rand.NewPCG(seed, 7))
	word := 4096 + 8
	var ref uint64 = r.Uint64()
	binary.NativeEndian.PutUint64(s.buf[word:], ref)
	masks := []uint64{0, ^uint64(0), 0x8000000080000000, 0x8080808080808080, 0x0000800000008000}
	for i := 0; i < 400; i++ {
		wr := SendWR{ID: uint64(i), Flags: FlagSignaled, SGL: []SGE{c.sge(64, 8)}, RemoteSTag: s.mr.STag(), RemoteTO: s.to(word)}
		var want uint64
		if i%2 == 0 {
			wr.Op = OpFetchAdd
			wr.CompareAdd = r.Uint64() >> uint(r.IntN(64))
			wr.AddMask = masks[r.IntN(len(masks))]
			if r.IntN(4) == 0 {
				wr.AddMask = r.Uint64()
			}
			want = atomics.MaskedAdd(ref, wr.CompareAdd, wr.AddMask)
		} else {
			wr.Op = OpCmpSwap
			wr.CompareMask, wr.SwapMask = ^uint64(0), ^uint64(0)
			if r.IntN(2) == 0 {
				wr.CompareMask, wr.SwapMask = r.Uint64(), r.Uint64()
			}
			wr.CompareAdd = r.Uint64()
			if r.IntN(2) == 0 {
				wr.CompareAdd = ref ^ (r.Uint64() &^ wr.CompareMask) // masked match
			}
			wr.Swap = r.Uint64()
			want = ref
			if (wr.CompareAdd^ref)&wr.CompareMask == 0 {
				want = (ref &^ wr.SwapMask) | (wr.Swap & wr.SwapMask)
			}
		}
		mustPost(t, c.qp, wr)
		wc := poll(t, c.scq, 1)[0]
		if wc.Status != StatusSuccess || wc.AtomicOrig != ref || binary.NativeEndian.Uint64(c.buf[64:]) != ref {
			t.Fatalf("seed %d op %d %v: completion %+v want orig %#x", seed, i, wr.Op, wc, ref)
		}
		if got := binary.NativeEndian.Uint64(s.buf[word:]); got != want {
			t.Fatalf("seed %d op %d %+v: memory %#x want %#x", seed, i, wr, got, want)
		}
		ref = want
	}
	st := s.qp.Stats()
	if st.FetchAdds != 200 || st.CmpSwaps != 200 {
		t.Errorf("stats %d %d", st.FetchAdds, st.CmpSwaps)
	}
}

func TestReadsBeyondORD(t *testing.T) {
	c, s := connectPair(t, 1<<21, QPAttr{}, ConnParams{ORD: 2}, ConnParams{IRD: 2})
	if c.qp.ConnInfo().ORD != 2 {
		t.Fatalf("ORD %d", c.qp.ConnInfo().ORD)
	}
	fill(s.buf[:1<<19], 11)
	const k = 24
	for i := 0; i < k; i++ {
		size := 1000 + i*3000
		op := OpRead
		if i%5 == 4 {
			op = OpFetchAdd
		}
		wr := SendWR{ID: uint64(i), Op: op, Flags: FlagSignaled, SGL: []SGE{c.sge(i*72000, size)}, RemoteSTag: s.mr.STag(), RemoteTO: s.to(i * 1000)}
		if op == OpFetchAdd {
			wr.SGL = []SGE{c.sge(i*72000, 8)}
			wr.RemoteTO = s.to(1<<19 + 64)
			wr.CompareAdd = 1
		}
		mustPost(t, c.qp, wr)
	}
	cs := poll(t, c.scq, k)
	for i, wc := range cs {
		if wc.ID != uint64(i) || wc.Status != StatusSuccess {
			t.Fatalf("completion %d: %+v", i, wc)
		}
		if i%5 != 4 && !bytes.Equal(c.buf[i*72000:i*72000+1000+i*3000], s.buf[i*1000:i*1000+1000+i*3000]) {
			t.Fatalf("read %d content", i)
		}
	}
	if got := binary.NativeEndian.Uint64(s.buf[1<<19+64:]); got != k/5 {
		t.Fatalf("fetchadds %d", got)
	}
}

func TestImmediateAndWriteImm(t *testing.T) {
	c, s := connectPair(t, 1<<21, QPAttr{}, ConnParams{}, ConnParams{})
	for i := 0; i < 3; i++ {
		mustRecv(t, s.qp, RecvWR{ID: uint64(100 + i), SGL: []SGE{s.sge(i*16, 16)}})
	}
	n := 1 << 20
	fill(c.buf[:n], 42)
	mustPost(t, c.qp, SendWR{ID: 1, Op: OpImm, Imm: 0x0102030405060708})
	mustPost(t, c.qp, SendWR{ID: 2, Op: OpWriteWithImm, SGL: []SGE{c.sge(0, n)}, RemoteSTag: s.mr.STag(), RemoteTO: s.to(4096), Imm: 77})
	mustPost(t, c.qp, SendWR{ID: 3, Op: OpImm, Flags: FlagSignaled | FlagSolicited, Imm: 99})
	rc := poll(t, s.rcq, 1)
	if rc[0].Op != OpRecvImm || rc[0].Imm != 0x0102030405060708 || rc[0].Flags&WCWithImm == 0 || rc[0].ByteLen != 8 {
		t.Fatalf("imm %+v", rc[0])
	}
	if !bytes.Equal(s.buf[0:8], []byte{1, 2, 3, 4, 5, 6, 7, 8}) {
		t.Fatalf("imm data not placed: %x", s.buf[:8])
	}
	rc = poll(t, s.rcq, 1)
	// The Write must be placed when its Immediate completes.
	if rc[0].Op != OpRecvWriteImm || rc[0].Imm != 77 || rc[0].ByteLen != uint32(n) || !bytes.Equal(s.buf[4096:4096+n], c.buf[:n]) {
		t.Fatalf("write-imm %+v", rc[0])
	}
	rc = poll(t, s.rcq, 1)
	if rc[0].Op != OpRecvImm || rc[0].Imm != 99 || rc[0].Flags&WCSolicited == 0 {
		t.Fatalf("imm se %+v", rc[0])
	}
	poll(t, c.scq, 1)
}

// TestImmediateShortReceive: after an RDMA Write, Immediate Data into a
// receive of 1 to 7 bytes completes with the value and leaves the buffer
// alone (InfiniBand's Write with Immediate; qperf posts 1-byte receives);
// a lone Immediate Data into one is a local length error and a Terminate.
func TestImmediateShortReceive(t *testing.T) {
	c, s := connectPair(t, 1<<16, QPAttr{}, ConnParams{}, ConnParams{})
	fill(s.buf[:16], 9)
	want := append([]byte(nil), s.buf[:16]...)
	mustRecv(t, s.qp, RecvWR{ID: 1, SGL: []SGE{s.sge(0, 1)}})
	mustRecv(t, s.qp, RecvWR{ID: 2, SGL: []SGE{s.sge(8, 7)}})
	fill(c.buf[:100], 3)
	mustPost(t, c.qp, SendWR{ID: 1, Op: OpWriteWithImm, SGL: []SGE{c.sge(0, 100)}, RemoteSTag: s.mr.STag(), RemoteTO: s.to(4096), Imm: 0xfeed})
	rc := poll(t, s.rcq, 1)[0]
	if rc.ID != 1 || rc.Status != StatusSuccess || rc.Op != OpRecvWriteImm || rc.Imm != 0xfeed || rc.ByteLen != 100 {
		t.Fatalf("write-imm into 1 byte: %+v", rc)
	}
	if !bytes.Equal(s.buf[:16], want) || !bytes.Equal(s.buf[4096:4196], c.buf[:100]) {
		t.Fatalf("receive buffer touched or Write not placed: % x", s.buf[:16])
	}
	mustPost(t, c.qp, SendWR{ID: 2, Op: OpImm, Imm: 5})
	if rc := poll(t, s.rcq, 1)[0]; rc.ID != 2 || rc.Status != StatusLocLenErr {
		t.Fatalf("lone imm into 7 bytes: %+v", rc)
	}
	if !bytes.Equal(s.buf[:16], want) {
		t.Fatalf("receive buffer touched: % x", s.buf[:16])
	}
}

func TestSendInvalidateThenWrite(t *testing.T) {
	c, s := connectPair(t, 1<<16, QPAttr{}, ConnParams{}, ConnParams{})
	// A second MR on the server, bound to the stream, remotely invalidable.
	buf2 := make([]byte, 4096)
	mr2, err := s.dev.RegMR(buf2, mem.MROptions{PD: s.pd, Access: mem.LocalWrite | mem.RemoteWrite, Stream: s.qp.Num(), RemoteInvalidate: true})
	if err != nil {
		t.Fatal(err)
	}
	mustRecv(t, s.qp, RecvWR{ID: 1, SGL: []SGE{s.sge(0, 64)}})
	mustRecv(t, s.qp, RecvWR{ID: 2, SGL: []SGE{s.sge(64, 64)}})
	mustPost(t, c.qp, SendWR{ID: 1, Op: OpWrite, SGL: []SGE{c.sge(0, 100)}, RemoteSTag: mr2.STag(), RemoteTO: mr2.BaseTO()})
	mustPost(t, c.qp, SendWR{ID: 2, Op: OpSendWithInv, Flags: FlagSolicited, SGL: []SGE{c.sge(0, 10)}, InvalidateSTag: mr2.STag()})
	rc := poll(t, s.rcq, 1)[0]
	if rc.Flags&WCWithInv == 0 || rc.InvalidatedSTag != mr2.STag() || rc.Flags&WCSolicited == 0 {
		t.Fatalf("recv %+v", rc)
	}
	if mr2.Valid() {
		t.Fatal("STag still valid")
	}
	mustPost(t, c.qp, SendWR{ID: 3, Op: OpWrite, Flags: FlagSignaled, SGL: []SGE{c.sge(0, 100)}, RemoteSTag: mr2.STag(), RemoteTO: mr2.BaseTO()})
	mustPost(t, c.qp, SendWR{ID: 4, Op: OpRead, Flags: FlagSignaled, SGL: []SGE{c.sge(0, 100)}, RemoteSTag: s.mr.STag(), RemoteTO: s.to(0)})
	// The server terminates with DDP tagged invalid STag; its remaining
	// receive is flushed.
	if rc := poll(t, s.rcq, 1)[0]; rc.ID != 2 || rc.Status != StatusWRFlushErr {
		t.Fatalf("server flush %+v", rc)
	}
	cs := poll(t, c.scq, 2)
	if cs[0].ID != 3 || cs[1].ID != 4 || cs[1].Status == StatusSuccess {
		t.Fatalf("client completions %+v", cs)
	}
	deadline := time.Now().Add(5 * time.Second)
	for c.qp.PeerTerminate() == nil && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if pt := c.qp.PeerTerminate(); pt != term.DDPTaggedInvalidSTag {
		t.Fatalf("peer terminate %v", pt)
	}
	if s.qp.Err() != term.DDPTaggedInvalidSTag {
		t.Fatalf("server err %v", s.qp.Err())
	}
}

// TestAtomicResponseBytesCounted: the responder counts the 12 bytes of
// each Atomic Response it sends, as the requester counts them received
// (the tx counter was always 0).
func TestAtomicResponseBytesCounted(t *testing.T) {
	c, s := connectPair(t, 4096, QPAttr{}, ConnParams{}, ConnParams{})
	for i := range 3 {
		mustPost(t, c.qp, SendWR{ID: uint64(i), Op: OpFetchAdd, Flags: FlagSignaled, SGL: []SGE{c.sge(0, 8)}, RemoteSTag: s.mr.STag(), RemoteTO: s.to(64), CompareAdd: 1})
		poll(t, c.scq, 1)
	}
	tx, rx := s.qp.Stats().TxBytes[rdmap.OpAtomicResponse], c.qp.Stats().RxBytes[rdmap.OpAtomicResponse]
	if tx != 3*rdmap.AtomicResponseLen || rx != tx {
		t.Fatalf("Atomic Response bytes: responder sent %d, requester received %d; want %d each", tx, rx, 3*rdmap.AtomicResponseLen)
	}
}
