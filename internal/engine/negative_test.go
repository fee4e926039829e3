package engine

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"xrnic/internal/engine/enginetest"
	"xrnic/mem"
	"xrnic/wire/ddp"
	"xrnic/wire/rdmap"
	"xrnic/wire/term"
)

// rawPair connects a raw peer (initiator) to an engine QP (responder) with
// two receives posted.
func rawPair(t *testing.T, o enginetest.Options) (*side, *enginetest.Peer) {
	t.Helper()
	s := newSide(t, 1<<16, QPAttr{})
	mustRecv(t, s.qp, RecvWR{ID: 1, SGL: []SGE{s.sge(0, 64)}})
	mustRecv(t, s.qp, RecvWR{ID: 2, SGL: []SGE{s.sge(64, 64)}})
	return s, acceptRaw(t, s, o)
}

// acceptRaw accepts a raw initiator peer (options o) onto s's QP.
func acceptRaw(t *testing.T, s *side, o enginetest.Options) *enginetest.Peer {
	t.Helper()
	ln, err := s.dev.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	errc := acceptAsync(ctx, ln, s.qp, ConnParams{})
	p, err := enginetest.Dial(ctx, ln.Addr().String(), o)
	if err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// wantTerminate builds the expected Terminate ULPDU independently: the
// untagged QN 2 MSN 1 header, the control word, and, when ddpHdr is given,
// the segment length and the offending DDP header.
func wantTerminate(layer, etype, code byte, seg []byte, hdrLen int) []byte {
	b := []byte{0x41, 0x47, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 1, 0, 0, 0, 0, layer<<4 | etype, code, 0, 0}
	if seg != nil {
		b[20] = 0xC0 // M, D
		b = binary.BigEndian.AppendUint16(b, uint16(len(seg)))
		b = append(b, seg[:hdrLen]...)
	}
	return b
}

func checkFlushed(t *testing.T, s *side) {
	t.Helper()
	rc := poll(t, s.rcq, 2)
	for _, c := range rc {
		if c.Status == StatusSuccess {
			t.Errorf("receive completed successfully after an error: %+v", c)
		}
	}
	if s.qp.State() != QPError {
		t.Errorf("state %v", s.qp.State())
	}
}

func TestNegativeRawPeer(t *testing.T) {
	cases := []struct {
		name string
		// build returns the segment to send and whether to corrupt the CRC
		build   func(s *side) ([]byte, bool)
		err     *term.Error
		hdrLen  int // 0: no DDP header expected
		counted bool
	}{
		{"bad CRC", func(s *side) ([]byte, bool) {
			b := make([]byte, 23)
			rdmap.PutSend(b, rdmap.OpSend, 0, 1, 0, true, 5)
			copy(b[18:], "hello")
			return b, true
		}, term.MPACRCError, 0, true},
		{"unknown opcode 0xC", func(s *side) ([]byte, bool) {
			b := make([]byte, 20)
			ddp.PutUntagged(b, true, 0x40|0xC, 0, 0, 1, 0)
			return b, false
		}, term.RDMAPUnexpectedOpCode, 18, true},
		{"misaligned atomic", func(s *side) ([]byte, bool) {
			b := make([]byte, 70)
			rdmap.PutAtomicRequest(b, 1, rdmap.AtomicParams{AOpCode: rdmap.AOpFetchAdd, RequestID: 0x11223344, STag: s.mr.STag(), TO: s.to(4100), AddSwap: 1, CompareMask: ^uint64(0)})
			return b, false
		}, term.RDMAPCatastrophicStream, 18, true},
		{"invalid STag write", func(s *side) ([]byte, bool) {
			b := make([]byte, 14+5)
			rdmap.PutWrite(b, s.mr.STag()^0x5A, s.to(0), true, 5)
			return b, false
		}, term.DDPTaggedInvalidSTag, 14, true},
		{"write out of bounds", func(s *side) ([]byte, bool) {
			b := make([]byte, 14+16)
			rdmap.PutWrite(b, s.mr.STag(), s.to(1<<16-8), true, 16)
			return b, false
		}, term.DDPTaggedBaseBounds, 14, true},
		{"send too long", func(s *side) ([]byte, bool) {
			b := make([]byte, 18+65)
			rdmap.PutSend(b, rdmap.OpSend, 0, 1, 0, true, 65)
			return b, false
		}, term.DDPUntaggedTooLong, 18, true},
		{"wrong MSN", func(s *side) ([]byte, bool) {
			b := make([]byte, 18+1)
			rdmap.PutSend(b, rdmap.OpSend, 0, 5, 0, true, 1)
			return b, false
		}, term.DDPUntaggedMSNRange, 18, true},
		{"immediate of 7 bytes", func(s *side) ([]byte, bool) {
			b := make([]byte, 18+7)
			ddp.PutUntagged(b, true, 0x48, 0, 0, 1, 0)
			return b, false
		}, term.RDMAPOperationUnspecified, 18, true},
		{"read of unregistered source", func(s *side) ([]byte, bool) {
			b := make([]byte, 46)
			rdmap.PutReadRequest(b, 1, rdmap.ReadParams{SinkSTag: 1, Size: 8, SrcSTag: s.mr.STag() ^ 1})
			return b, false
		}, term.RDMAPInvalidSTag, 18, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s, p := rawPair(t, enginetest.Options{})
			seg, badCRC := tc.build(s)
			fpdu := p.FPDU(seg)
			if badCRC {
				fpdu[len(fpdu)-1] ^= 0xFF
			}
			if err := p.WriteRaw(fpdu); err != nil {
				t.Fatal(err)
			}
			tm, ulpdu, err := p.ExpectTerminate(5 * time.Second)
			if err != nil {
				t.Fatalf("no Terminate: %v", err)
			}
			if tm.Err != tc.err {
				t.Fatalf("Terminate %v, want %v", tm, tc.err)
			}
			var want []byte
			if tc.hdrLen > 0 {
				want = wantTerminate(byte(tc.err.Layer), tc.err.EType, tc.err.Code, seg, tc.hdrLen)
				if tc.err == term.RDMAPInvalidSTag { // Read Request: RDMA header too
					want[20] |= 0x20
					want = append(want, seg[18:46]...)
				}
			} else {
				want = wantTerminate(byte(tc.err.Layer), tc.err.EType, tc.err.Code, nil, 0)
			}
			if !bytes.Equal(ulpdu, want) {
				t.Fatalf("Terminate bytes\n got %x\nwant %x", ulpdu, want)
			}
			if err := p.ExpectEOF(5 * time.Second); err != nil {
				t.Fatalf("stream not closed after the Terminate: %v", err)
			}
			checkFlushed(t, s)
			st := s.qp.Stats()
			if len(st.TermsSent) != 1 || st.TermsSent[0].Err != tc.err || st.TermsSent[0].Count != 1 {
				t.Errorf("TermsSent %+v", st.TermsSent)
			}
			if tc.err == term.RDMAPCatastrophicStream && binary.NativeEndian.Uint64(s.buf[4096:]) != 0 {
				t.Error("misaligned atomic touched memory")
			}
		})
	}
}

// TestPeerWithoutAtomics: a peer that answers atomics with Terminate
// RDMAP/0x2/0x06 (like siw) makes the probe report "not supported".
func TestProbeAtomics(t *testing.T) {
	c, s := connectPair(t, 4096, QPAttr{}, ConnParams{}, ConnParams{})
	res, err := c.qp.ProbeAtomics(context.Background(), s.mr.STag(), s.to(64))
	if res != ProbeSupported || err != nil {
		t.Fatalf("probe %v %v", res, err)
	}
	if c.scq.Len() != 0 {
		t.Fatal("probe produced a completion")
	}

	// A peer that knows no extensions (like siw): our QP is the responder
	// of a raw initiator that answers the Atomic Request with Terminate
	// RDMAP/0x2/0x06.
	s2, p := rawPair(t, enginetest.Options{})
	zw := make([]byte, 14)
	rdmap.PutWrite(zw, 1, 0, true, 0)
	if err := p.Send(zw); err != nil { // first FPDU: lets the responder send
		t.Fatal(err)
	}
	type result struct {
		r   ProbeResult
		err error
	}
	resc := make(chan result, 1)
	go func() {
		r, err := s2.qp.ProbeAtomics(context.Background(), 0x1234, 0)
		resc <- result{r, err}
	}()
	u, err := p.Next(5 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if rdmap.Control(u[1]).OpCode() != rdmap.OpAtomicRequest {
		t.Fatalf("probe sent %x", u)
	}
	h := rdmap.AtomicRequest(u[18:])
	if h.AOpCode() != rdmap.AOpFetchAdd || h.AddSwap() != 0 || h.CompareMask() != ^uint64(0) {
		t.Fatalf("probe request %x", u)
	}
	tb := make([]byte, 128)
	n, err := rdmap.PutTerminate(tb, term.RDMAPUnexpectedOpCode, u)
	if err != nil {
		t.Fatal(err)
	}
	p.Send(tb[:n])
	got := <-resc
	if got.r != ProbeNotSupported || got.err != ErrNoAtomics {
		t.Fatalf("probe %v %v", got.r, got.err)
	}
}

// ---------------------------------------------------------------------------
// The negative suite (issue 4): a raw TCP peer written here sends crafted
// frames for every error class to a listener of the engine; each case
// asserts the exact Terminate (or, for malformed MPA frames, a TCP close
// without Reply), that no registered byte changed, that the engine QP is in
// error with every posted WR completed exactly once, that the engine's
// Terminate counter moved, and that the same listener then serves a
// well-behaved engine connection (an RDMA Write and Read round trip). The
// expected Layer/EType/Code triples are written out from the RFC tables
// (RFC 5040 §7.2 Fig. 9, RFC 5041 §7.2, RFC 5044 §8, RFC 7306 §8;
// docs/spec/rdmap.md#errors, docs/spec/ddp.md#validation, docs/spec/mpa.md#errors,
// docs/spec/rfc7306.md#errors), not taken from package term.

// negServer is the engine side of the suite: one device, one listener and
// an accept loop that gives each connection a fresh QP configured by next.
type negServer struct {
	dev, cdev *Device
	ln        *Listener
	pd, pd2   mem.PD
	cpd       mem.PD

	main     *mem.MR // 64 KiB, every remote right, remote invalidation allowed
	ro       *mem.MR // remote read only
	wo       *mem.MR // remote write only (no remote read, no atomics)
	other    *mem.MR // every right, but in pd2
	bound    *mem.MR // every right, bound to a stream that is no QP of ours
	inval    *mem.MR // every right, invalidated by its owner
	noinv    *mem.MR // every right, remote invalidation not allowed
	big      *mem.MR // remote read, larger than TCP can buffer: keeps a Read Response in progress
	rt       *mem.MR // target of the round trips
	recv     *mem.MR // receive buffers of every accepted QP
	cmr      *mem.MR // the round-trip client's buffer
	all      []*mem.MR
	cbuf     []byte
	stopLoop context.CancelFunc
	loopDone chan struct{}

	mu    sync.Mutex
	next  srvCfg
	conns chan *srvConn
}

// srvCfg configures the next accepted QP.
type srvCfg struct {
	attr     QPAttr
	cp       ConnParams
	recvs    int  // receive WRs posted before Accept (64 bytes each)
	postSend bool // a signalled 8-byte Send posted before Accept: it cannot leave before the first FPDU
}

type srvConn struct {
	qp       *QP
	scq, rcq *CQ
	recvIDs  []uint64
	sendIDs  []uint64
	err      error
}

func (c *srvConn) close() {
	if c.qp != nil {
		c.qp.Close()
	}
	c.scq.Close()
	c.rcq.Close()
}

const (
	negBound     = 0xABCDE // the stream the bound MR belongs to (no QP has it)
	negSendID    = 100
	negRecvLen   = 64
	negRecvCount = 2
)

// bigReadLen is a Read size that the kernel cannot buffer between the two
// ends: the largest receive buffer plus the largest send buffer
// (net.ipv4.tcp_rmem and tcp_wmem maxima) plus 8 MiB. With only a locked
// small receive buffer at the peer, loopback TCP still buffered 16 MiB now
// and then.
func bigReadLen() int {
	n := 8 << 20
	for _, f := range []string{"/proc/sys/net/ipv4/tcp_rmem", "/proc/sys/net/ipv4/tcp_wmem"} {
		b, err := os.ReadFile(f)
		v := 0
		if err == nil {
			if fs := strings.Fields(string(b)); len(fs) == 3 {
				v, _ = strconv.Atoi(fs[2])
			}
		}
		if v <= 0 {
			v = 32 << 20
		}
		n += v
	}
	return min(n, 1<<30)
}

func newNegServer(t *testing.T) *negServer {
	t.Helper()
	s := &negServer{conns: make(chan *srvConn, 1), loopDone: make(chan struct{})}
	var err error
	if s.dev, err = Open(Config{ConnTimeout: 5 * time.Second}); err != nil {
		t.Fatal(err)
	}
	if s.cdev, err = Open(Config{ConnTimeout: 5 * time.Second}); err != nil {
		t.Fatal(err)
	}
	s.pd, s.pd2, s.cpd = s.dev.AllocPD(), s.dev.AllocPD(), s.cdev.AllocPD()
	const rw = mem.LocalWrite | mem.RemoteRead | mem.RemoteWrite | mem.RemoteAtomic
	reg := func(size int, seed byte, o mem.MROptions) *mem.MR {
		b := make([]byte, size)
		fill(b, seed)
		m, err := s.dev.RegMR(b, o)
		if err != nil {
			t.Fatal(err)
		}
		s.all = append(s.all, m)
		return m
	}
	s.main = reg(1<<16, 1, mem.MROptions{PD: s.pd, Access: rw, RemoteInvalidate: true})
	s.ro = reg(4096, 2, mem.MROptions{PD: s.pd, Access: mem.RemoteRead})
	s.wo = reg(4096, 3, mem.MROptions{PD: s.pd, Access: mem.LocalWrite | mem.RemoteWrite})
	s.other = reg(4096, 4, mem.MROptions{PD: s.pd2, Access: rw, RemoteInvalidate: true})
	s.bound = reg(4096, 5, mem.MROptions{PD: s.pd, Access: rw, Stream: negBound, RemoteInvalidate: true})
	s.inval = reg(4096, 6, mem.MROptions{PD: s.pd, Access: rw, RemoteInvalidate: true})
	s.noinv = reg(4096, 7, mem.MROptions{PD: s.pd, Access: rw})
	s.big = reg(bigReadLen(), 8, mem.MROptions{PD: s.pd, Access: mem.RemoteRead})
	s.rt = reg(4096, 9, mem.MROptions{PD: s.pd, Access: rw})
	s.recv = reg(4096, 10, mem.MROptions{PD: s.pd, Access: mem.LocalWrite})
	if err := s.dev.Table().Invalidate(s.inval.STag(), s.pd); err != nil {
		t.Fatal(err)
	}
	s.cbuf = make([]byte, 4096)
	if s.cmr, err = s.cdev.RegMR(s.cbuf, mem.MROptions{PD: s.cpd, Access: mem.LocalWrite}); err != nil {
		t.Fatal(err)
	}
	if s.ln, err = s.dev.Listen("tcp", "127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.stopLoop = cancel
	go s.acceptLoop(ctx)
	return s
}

func (s *negServer) close() {
	s.stopLoop()
	s.ln.Close()
	<-s.loopDone
	s.dev.Close()
	s.cdev.Close()
}

func (s *negServer) expect(c srvCfg) {
	s.mu.Lock()
	s.next = c
	s.mu.Unlock()
}

func (s *negServer) acceptLoop(ctx context.Context) {
	defer close(s.loopDone)
	for {
		req, err := s.ln.Accept(ctx)
		if err != nil {
			return
		}
		s.mu.Lock()
		cfg := s.next
		s.mu.Unlock()
		c := &srvConn{}
		c.scq, _ = s.dev.CreateCQ(64)
		c.rcq, _ = s.dev.CreateCQ(64)
		a := cfg.attr
		a.PD, a.SendCQ, a.RecvCQ, a.SQDepth, a.RQDepth = s.pd, c.scq, c.rcq, 16, 16
		if c.qp, c.err = s.dev.CreateQP(a); c.err == nil {
			for i := range cfg.recvs {
				wr := RecvWR{ID: uint64(i + 1), SGL: []SGE{{Addr: s.recv.BaseTO() + uint64(i*negRecvLen), Length: negRecvLen, LKey: s.recv.STag()}}}
				if c.err = c.qp.PostRecv(&wr); c.err != nil {
					break
				}
				c.recvIDs = append(c.recvIDs, wr.ID)
			}
		}
		if c.err == nil && cfg.postSend {
			wr := SendWR{ID: negSendID, Op: OpSend, Flags: FlagSignaled, SGL: []SGE{{Addr: s.main.BaseTO(), Length: 8, LKey: s.main.STag()}}}
			if c.err = c.qp.PostSend(&wr); c.err == nil {
				c.sendIDs = append(c.sendIDs, wr.ID)
			}
		}
		if c.err == nil {
			c.err = req.Accept(ctx, c.qp, cfg.cp)
		} else {
			req.Close()
		}
		select {
		case s.conns <- c:
		case <-ctx.Done():
			c.close()
			return
		}
	}
}

// accepted returns the QP the loop accepted for the connection just made.
func (s *negServer) accepted(t *testing.T) *srvConn {
	t.Helper()
	select {
	case c := <-s.conns:
		t.Cleanup(c.close)
		if c.err != nil {
			t.Fatalf("engine accept: %v", c.err)
		}
		return c
	case <-time.After(5 * time.Second):
		t.Fatal("the listener accepted nothing")
	}
	return nil
}

// sums checksums every registered region of the engine under test.
func (s *negServer) sums() []uint32 {
	out := make([]uint32, len(s.all))
	for i, m := range s.all {
		out[i] = crc32.ChecksumIEEE(m.Bytes())
	}
	return out
}

// roundTrip connects a well-behaved engine QP to the listener and does an
// RDMA Write of 64 bytes into rt followed by an RDMA Read of them back.
func (s *negServer) roundTrip(t *testing.T, seed byte) {
	t.Helper()
	s.expect(srvCfg{})
	scq, _ := s.cdev.CreateCQ(16)
	rcq, _ := s.cdev.CreateCQ(16)
	qp, err := s.cdev.CreateQP(QPAttr{PD: s.cpd, SendCQ: scq, RecvCQ: rcq, SQDepth: 8, RQDepth: 8})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { qp.Close(); scq.Close(); rcq.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := qp.Connect(ctx, s.ln.Addr().String(), ConnParams{}); err != nil {
		t.Fatalf("round trip: connect: %v", err)
	}
	srv := s.accepted(t)
	fill(s.cbuf[:64], seed)
	clear(s.cbuf[1024 : 1024+64])
	base := s.cmr.BaseTO()
	mustPost(t, qp, SendWR{ID: 1, Op: OpWrite, Flags: FlagSignaled, SGL: []SGE{{Addr: base, Length: 64, LKey: s.cmr.STag()}}, RemoteSTag: s.rt.STag(), RemoteTO: s.rt.BaseTO() + 128})
	mustPost(t, qp, SendWR{ID: 2, Op: OpRead, Flags: FlagSignaled, SGL: []SGE{{Addr: base + 1024, Length: 64, LKey: s.cmr.STag()}}, RemoteSTag: s.rt.STag(), RemoteTO: s.rt.BaseTO() + 128})
	for _, c := range poll(t, scq, 2) {
		if c.Status != StatusSuccess {
			t.Fatalf("round trip: %+v", c)
		}
	}
	if !bytes.Equal(s.cbuf[1024:1024+64], s.cbuf[:64]) {
		t.Fatalf("round trip read back %x, wrote %x", s.cbuf[1024:1024+64], s.cbuf[:64])
	}
	qp.Close()
	srv.close()
}

// settleGoroutines waits until the goroutine count is at most want and
// returns it.
func settleGoroutines(want int) int {
	n := runtime.NumGoroutine()
	for deadline := time.Now().Add(8 * time.Second); n > want && time.Now().Before(deadline); n = runtime.NumGoroutine() {
		time.Sleep(20 * time.Millisecond)
	}
	return n
}

// stableGoroutines waits until the count stops changing (goroutines of
// earlier tests lingering in a bounded close) and returns it.
func stableGoroutines() int {
	n, same := runtime.NumGoroutine(), 0
	for deadline := time.Now().Add(8 * time.Second); same < 10 && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
		if m := runtime.NumGoroutine(); m == n {
			same++
		} else {
			n, same = m, 0
		}
	}
	return n
}

// Terminate parts.
const (
	hdrNone     = 0
	hdrTagged   = 14 // M, D and the 14-byte tagged DDP header
	hdrUntagged = 18 // M, D and the 18-byte untagged DDP header
)

// expTerm is the Terminate a case expects.
type expTerm struct {
	layer, etype, code byte
	hdr                int  // terminated DDP header length (0: M = D = 0)
	rdma               bool // R: the 28-byte RDMA (Read Request) header follows
}

// bytes builds the expected Terminate ULPDU independently of package term:
// DDP untagged L, RDMAP Terminate (RV 1, opcode 0x7), QN 2, MSN 1, MO 0,
// then Layer|EType, Code, the M/D/R octet, and the optional parts copied
// from the offending segment seg.
func (e expTerm) bytes(seg []byte) []byte {
	b := []byte{0x41, 0x47, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 1, 0, 0, 0, 0, e.layer<<4 | e.etype, e.code, 0, 0}
	if e.hdr > 0 {
		b[20] = 0x80 | 0x40
		if e.rdma {
			b[20] |= 0x20
		}
		b = binary.BigEndian.AppendUint16(b, uint16(len(seg)))
		b = append(b, seg[:e.hdr]...)
		if e.rdma {
			b = append(b, seg[18:46]...)
		}
	}
	return b
}

func (e expTerm) String() string {
	return fmt.Sprintf("%d/0x%x/0x%02x hdr %d R %v", e.layer, e.etype, e.code, e.hdr, e.rdma)
}

// Segment builders (the crafted inputs). The payload bytes are a pattern,
// so a wrongly placed segment shows in the checksums.
func segSend(op rdmap.OpCode, inv, msn, mo uint32, last bool, n int) []byte {
	b := make([]byte, ddp.UntaggedHeaderLen+n)
	if _, err := rdmap.PutSend(b, op, inv, msn, mo, last, n); err != nil {
		panic(err)
	}
	fill(b[ddp.UntaggedHeaderLen:], 0xA0)
	return b
}

// syncRead sends a zero-length Read Request (QN 1 MSN msn) and waits for
// its Read Response: the engine handles segments in order, so everything
// sent before has been placed.
func syncRead(t *testing.T, p *enginetest.Peer, msn uint32) {
	t.Helper()
	if err := p.Send(segRead(msn, rdmap.ReadParams{SinkSTag: 0x77, SinkTO: 0x100})); err != nil {
		t.Fatal(err)
	}
	u, err := p.Next(5 * time.Second)
	if err != nil || u[1]&0xF != byte(rdmap.OpReadResponse) {
		t.Fatalf("zero-length Read Response: %x %v", u[:min(len(u), 14)], err)
	}
}

func segWrite(stag uint32, to uint64, n int) []byte {
	b := make([]byte, ddp.TaggedHeaderLen+n)
	if _, err := rdmap.PutWrite(b, stag, to, true, n); err != nil {
		panic(err)
	}
	fill(b[ddp.TaggedHeaderLen:], 0xB0)
	return b
}

func segRead(msn uint32, p rdmap.ReadParams) []byte {
	b := make([]byte, 46)
	if _, err := rdmap.PutReadRequest(b, msn, p); err != nil {
		panic(err)
	}
	return b
}

func segAtomic(msn uint32, p rdmap.AtomicParams) []byte {
	b := make([]byte, 70)
	if _, err := rdmap.PutAtomicRequest(b, msn, p); err != nil {
		panic(err)
	}
	return b
}

// segUntagged writes a raw untagged header (ctrl is the RDMAP control
// octet: RV<<6 | opcode) with n pattern bytes, for what the encoders refuse.
func segUntagged(ctrl byte, word, qn, msn, mo uint32, last bool, n int) []byte {
	b := make([]byte, ddp.UntaggedHeaderLen+n)
	if _, err := ddp.PutUntagged(b, last, ctrl, word, qn, msn, mo); err != nil {
		panic(err)
	}
	fill(b[ddp.UntaggedHeaderLen:], 0xC0)
	return b
}

func segTagged(ctrl byte, stag uint32, to uint64, n int) []byte {
	b := make([]byte, ddp.TaggedHeaderLen+n)
	if _, err := ddp.PutTagged(b, true, ctrl, stag, to); err != nil {
		panic(err)
	}
	fill(b[ddp.TaggedHeaderLen:], 0xD0)
	return b
}

// withDV sets the DDP version bits (the low two bits of the first octet).
func withDV(b []byte, dv byte) []byte { b[0] = b[0]&^3 | dv; return b }

// withRV sets the RDMAP version bits (the top two bits of the second octet).
func withRV(b []byte, rv byte) []byte { b[1] = b[1]&0x3F | rv<<6; return b }

func fetchAdd(stag uint32, to uint64) rdmap.AtomicParams {
	return rdmap.AtomicParams{AOpCode: rdmap.AOpFetchAdd, RequestID: 1, STag: stag, TO: to, AddSwap: 5, CompareMask: ^uint64(0)}
}

func cmpSwap(stag uint32, to uint64) rdmap.AtomicParams {
	return rdmap.AtomicParams{AOpCode: rdmap.AOpCmpSwap, RequestID: 1, STag: stag, TO: to, AddSwap: 9, AddSwapMask: ^uint64(0), Compare: 0, CompareMask: ^uint64(0)}
}

type negCase struct {
	name string
	cfg  *srvCfg // nil: 2 receives and a pending Send
	opts enginetest.Options
	// prelude runs after the connection is up and before the crafted
	// segment (its segments are valid).
	prelude func(t *testing.T, s *negServer, p *enginetest.Peer)
	// placed: the prelude places bytes, so memory is compared from after
	// it (the prelude must end with a round trip, see syncRead).
	placed bool
	seg    func(s *negServer) []byte
	badCRC bool
	want   expTerm
	// recvHead is the status of receive 1 when the error belongs to it
	// (0: flushed like the rest).
	recvHead Status
}

func negCases() []negCase {
	const anyTO = 0x1000
	inv := uint32(0xDEAD_BE00) // an STag no table slot has (index 0 is never handed out)
	mainTO := func(s *negServer, off uint64) uint64 { return s.main.BaseTO() + off }
	rd := func(src uint32, to uint64, size uint32) rdmap.ReadParams {
		return rdmap.ReadParams{SinkSTag: 0x77, SinkTO: 0x100, Size: size, SrcSTag: src, SrcTO: to}
	}
	// Layers and types (RFC 5040 §4.8): RDMAP 0 (1 protection, 2 operation),
	// DDP 1 (1 tagged, 2 untagged), LLP 2.
	cs := []negCase{
		// MPA (RFC 5044 §4.4, §8): CRC mismatch 2/0/0x02, no headers.
		{name: "bad CRC", seg: func(*negServer) []byte { return segSend(rdmap.OpSend, 0, 1, 0, true, 5) }, badCRC: true,
			want: expTerm{2, 0, 0x02, hdrNone, false}},
		{name: "bad CRC with markers", opts: enginetest.Options{Markers: true}, seg: func(*negServer) []byte { return segSend(rdmap.OpSend, 0, 1, 0, true, 600) }, badCRC: true,
			want: expTerm{2, 0, 0x02, hdrNone, false}},

		// DDP version (RFC 5041 §7.2: tagged 1/1/0x04, untagged 1/2/0x06).
		{name: "DDP version 0 untagged", seg: func(*negServer) []byte { return withDV(segSend(rdmap.OpSend, 0, 1, 0, true, 4), 0) },
			want: expTerm{1, 2, 0x06, hdrUntagged, false}},
		{name: "DDP version 2 untagged", seg: func(*negServer) []byte { return withDV(segSend(rdmap.OpSend, 0, 1, 0, true, 4), 2) },
			want: expTerm{1, 2, 0x06, hdrUntagged, false}},
		{name: "DDP version 0 tagged", seg: func(s *negServer) []byte { return withDV(segWrite(s.main.STag(), mainTO(s, 0), 8), 0) },
			want: expTerm{1, 1, 0x04, hdrTagged, false}},
		{name: "DDP version 2 tagged", seg: func(s *negServer) []byte { return withDV(segWrite(s.main.STag(), mainTO(s, 0), 8), 2) },
			want: expTerm{1, 1, 0x04, hdrTagged, false}},

		// RDMAP version (RFC 5040 §7.2: 0/2/0x05; Remote Operation: DDP header, no RDMA header).
		{name: "RDMAP version 0 Send", seg: func(*negServer) []byte { return withRV(segSend(rdmap.OpSend, 0, 1, 0, true, 4), 0) },
			want: expTerm{0, 2, 0x05, hdrUntagged, false}},
		{name: "RDMAP version 2 Send", seg: func(*negServer) []byte { return withRV(segSend(rdmap.OpSend, 0, 1, 0, true, 4), 2) },
			want: expTerm{0, 2, 0x05, hdrUntagged, false}},
		{name: "RDMAP version 0 Write", seg: func(s *negServer) []byte { return withRV(segWrite(s.main.STag(), mainTO(s, 0), 8), 0) },
			want: expTerm{0, 2, 0x05, hdrTagged, false}},
		{name: "RDMAP version 2 Read Request", seg: func(s *negServer) []byte { return withRV(segRead(1, rd(s.main.STag(), mainTO(s, 0), 8)), 2) },
			want: expTerm{0, 2, 0x05, hdrUntagged, false}},

		// Opcodes (RFC 5040 §4.1, §7.2: 0/2/0x06): reserved 0xC-0xF, and a
		// T bit that does not match the opcode.
		{name: "tagged opcode 0xD", seg: func(s *negServer) []byte { return segTagged(0x40|0xD, s.main.STag(), mainTO(s, 0), 8) },
			want: expTerm{0, 2, 0x06, hdrTagged, false}},
		{name: "Send with the T bit", seg: func(s *negServer) []byte {
			return segTagged(0x40|byte(rdmap.OpSend), s.main.STag(), mainTO(s, 0), 8)
		}, want: expTerm{0, 2, 0x06, hdrTagged, false}},
		{name: "untagged Write on QN 0", seg: func(*negServer) []byte { return segUntagged(0x40|byte(rdmap.OpWrite), 0, 0, 1, 0, true, 8) },
			want: expTerm{0, 2, 0x06, hdrUntagged, false}},
		{name: "untagged Read Response on QN 0", seg: func(*negServer) []byte {
			return segUntagged(0x40|byte(rdmap.OpReadResponse), 0, 0, 1, 0, true, 8)
		}, want: expTerm{0, 2, 0x06, hdrUntagged, false}},
		{name: "unsupported AOpCode 1", seg: func(s *negServer) []byte {
			p := fetchAdd(s.main.STag(), mainTO(s, 0))
			p.AOpCode = 1
			return segAtomic(1, p)
		}, want: expTerm{0, 2, 0x06, hdrUntagged, false}},

		// QN (RFC 5041 §7.2: 1/2/0x01).
		{name: "Send on QN 1", seg: func(*negServer) []byte { return segUntagged(0x40|byte(rdmap.OpSend), 0, 1, 1, 0, true, 4) },
			want: expTerm{1, 2, 0x01, hdrUntagged, false}},
		{name: "Send on QN 9", seg: func(*negServer) []byte { return segUntagged(0x40|byte(rdmap.OpSend), 0, 9, 1, 0, true, 4) },
			want: expTerm{1, 2, 0x01, hdrUntagged, false}},
		{name: "Read Request on QN 0", seg: func(s *negServer) []byte {
			b := segRead(1, rd(s.main.STag(), mainTO(s, 0), 8))
			ddp.Untagged(b).SetQN(0)
			return b
		}, want: expTerm{1, 2, 0x01, hdrUntagged, false}},
		{name: "Atomic Response on QN 0", seg: func(*negServer) []byte {
			b := make([]byte, 30)
			rdmap.PutAtomicResponse(b, 1, 1, 7)
			ddp.Untagged(b).SetQN(0)
			return b
		}, want: expTerm{1, 2, 0x01, hdrUntagged, false}},

		// MSN and MO (RFC 5041 §7.2: 1/2/0x03, 0x04).
		{name: "Send MSN 5", seg: func(*negServer) []byte { return segSend(rdmap.OpSend, 0, 5, 0, true, 4) },
			want: expTerm{1, 2, 0x03, hdrUntagged, false}},
		{name: "Send MSN 0", seg: func(*negServer) []byte { return segSend(rdmap.OpSend, 0, 0, 0, true, 4) },
			want: expTerm{1, 2, 0x03, hdrUntagged, false}},
		{name: "Read Request MSN 2", seg: func(s *negServer) []byte { return segRead(2, rd(s.main.STag(), mainTO(s, 0), 8)) },
			want: expTerm{1, 2, 0x03, hdrUntagged, false}},
		{name: "Atomic Request MSN 0", seg: func(s *negServer) []byte { return segAtomic(0, fetchAdd(s.main.STag(), mainTO(s, 0))) },
			want: expTerm{1, 2, 0x03, hdrUntagged, false}},
		{name: "Read Request MO 28", seg: func(s *negServer) []byte {
			b := segRead(1, rd(s.main.STag(), mainTO(s, 0), 8))
			ddp.Untagged(b).SetMO(28)
			return b
		}, want: expTerm{1, 2, 0x04, hdrUntagged, false}},
		{name: "Atomic Request MO 8", seg: func(s *negServer) []byte {
			b := segAtomic(1, fetchAdd(s.main.STag(), mainTO(s, 0)))
			ddp.Untagged(b).SetMO(8)
			return b
		}, want: expTerm{1, 2, 0x04, hdrUntagged, false}},
		{name: "Send MO beyond the buffer", seg: func(*negServer) []byte { return segSend(rdmap.OpSend, 0, 1, 100, false, 4) },
			want: expTerm{1, 2, 0x04, hdrUntagged, false}},
		// Untagged segments arrive in order: each MO is the bytes of the
		// message so far, or the receive would complete bytes that never
		// arrived. The receive is flushed, never completed.
		{name: "Send first segment MO 4", seg: func(*negServer) []byte { return segSend(rdmap.OpSend, 0, 1, 4, true, 4) },
			want: expTerm{1, 2, 0x04, hdrUntagged, false}},
		{name: "Send with a gap (MO 0 len 4, then MO 40)",
			prelude: func(t *testing.T, s *negServer, p *enginetest.Peer) {
				if err := p.Send(segSend(rdmap.OpSend, 0, 1, 0, false, 4)); err != nil {
					t.Fatal(err)
				}
				syncRead(t, p, 1)
			},
			placed: true,
			seg:    func(*negServer) []byte { return segSend(rdmap.OpSend, 0, 1, 40, true, 4) },
			want:   expTerm{1, 2, 0x04, hdrUntagged, false}},
		{name: "Send overlapping (MO 0 len 8, then MO 4)",
			prelude: func(t *testing.T, s *negServer, p *enginetest.Peer) {
				if err := p.Send(segSend(rdmap.OpSend, 0, 1, 0, false, 8)); err != nil {
					t.Fatal(err)
				}
				syncRead(t, p, 1)
			},
			placed: true,
			seg:    func(*negServer) []byte { return segSend(rdmap.OpSend, 0, 1, 4, true, 4) },
			want:   expTerm{1, 2, 0x04, hdrUntagged, false}},
		{name: "Immediate Data MO 8", seg: func(*negServer) []byte { return segUntagged(0x40|byte(rdmap.OpImmediate), 0, 0, 1, 8, true, 8) },
			want: expTerm{1, 2, 0x04, hdrUntagged, false}},
		{name: "Immediate Data without L", seg: func(*negServer) []byte { return segUntagged(0x40|byte(rdmap.OpImmediate), 0, 0, 1, 0, false, 8) },
			want: expTerm{0, 2, 0xFF, hdrUntagged, false}}, // malformed for rdmap.Classify already

		// Receive buffers (RFC 5041 §7.2: no buffer 1/2/0x02, too long 0x05).
		{name: "Send with no posted receive", cfg: &srvCfg{postSend: true}, seg: func(*negServer) []byte { return segSend(rdmap.OpSend, 0, 1, 0, true, 4) },
			want: expTerm{1, 2, 0x02, hdrUntagged, false}},
		{name: "zero-length Send with no posted receive", cfg: &srvCfg{postSend: true}, seg: func(*negServer) []byte { return segSend(rdmap.OpSendSE, 0, 1, 0, true, 0) },
			want: expTerm{1, 2, 0x02, hdrUntagged, false}},
		{name: "Immediate Data with no posted receive", cfg: &srvCfg{postSend: true}, seg: func(*negServer) []byte {
			b := make([]byte, 26)
			rdmap.PutImmediate(b, rdmap.OpImmediate, 1, [8]byte{1, 2, 3, 4, 5, 6, 7, 8})
			return b
		}, want: expTerm{1, 2, 0x02, hdrUntagged, false}},
		{name: "Send too long", seg: func(*negServer) []byte { return segSend(rdmap.OpSend, 0, 1, 0, true, negRecvLen+1) },
			want: expTerm{1, 2, 0x05, hdrUntagged, false}, recvHead: StatusLocLenErr},

		// Immediate Data must be 8 bytes (RFC 7306 §6.3; docs/spec/rfc7306.md#errors: 0/2/0xFF
		// when the receive buffer could hold it).
		{name: "Immediate Data of 7 bytes", seg: func(*negServer) []byte { return segUntagged(0x40|byte(rdmap.OpImmediate), 0, 0, 1, 0, true, 7) },
			want: expTerm{0, 2, 0xFF, hdrUntagged, false}},
		{name: "Immediate Data of 9 bytes", seg: func(*negServer) []byte { return segUntagged(0x40|byte(rdmap.OpImmediateSE), 0, 0, 1, 0, true, 9) },
			want: expTerm{0, 2, 0xFF, hdrUntagged, false}},
		{name: "Read Request of 27 bytes", seg: func(s *negServer) []byte { return segRead(1, rd(s.main.STag(), mainTO(s, 0), 8))[:45] },
			want: expTerm{0, 2, 0xFF, hdrUntagged, false}},

		// Tagged placement (RFC 5041 §7.2, DDP 1/1/...): invalid 0x00, bounds
		// 0x01, not associated 0x02, wrap 0x03; no access-rights code: 0x00
		// (siw's choice, docs/spec/interop.md#siw-ddp-codes).
		{name: "Write invalid STag", seg: func(*negServer) []byte { return segWrite(inv, anyTO, 8) },
			want: expTerm{1, 1, 0x00, hdrTagged, false}},
		{name: "Write invalidated STag", seg: func(s *negServer) []byte { return segWrite(s.inval.STag(), s.inval.BaseTO(), 8) },
			want: expTerm{1, 1, 0x00, hdrTagged, false}},
		{name: "Write stale STag key", seg: func(s *negServer) []byte { return segWrite(s.main.STag()^0x01, mainTO(s, 0), 8) },
			want: expTerm{1, 1, 0x00, hdrTagged, false}},
		{name: "Write PD mismatch", seg: func(s *negServer) []byte { return segWrite(s.other.STag(), s.other.BaseTO(), 8) },
			want: expTerm{1, 1, 0x02, hdrTagged, false}},
		{name: "Write to another stream's STag", seg: func(s *negServer) []byte { return segWrite(s.bound.STag(), s.bound.BaseTO(), 8) },
			want: expTerm{1, 1, 0x02, hdrTagged, false}},
		{name: "Write without remote write", seg: func(s *negServer) []byte { return segWrite(s.ro.STag(), s.ro.BaseTO(), 8) },
			want: expTerm{1, 1, 0x00, hdrTagged, false}},
		{name: "Write past the end", seg: func(s *negServer) []byte { return segWrite(s.main.STag(), mainTO(s, 1<<16-4), 8) },
			want: expTerm{1, 1, 0x01, hdrTagged, false}},
		{name: "Write below the base", seg: func(s *negServer) []byte { return segWrite(s.main.STag(), mainTO(s, 0)-1, 8) },
			want: expTerm{1, 1, 0x01, hdrTagged, false}},
		{name: "Write TO wrap", seg: func(s *negServer) []byte { return segWrite(s.main.STag(), ^uint64(0)-3, 8) },
			want: expTerm{1, 1, 0x03, hdrTagged, false}},
		{name: "Read Response without request", seg: func(s *negServer) []byte {
			b := make([]byte, 14+8)
			rdmap.PutReadResponse(b, s.main.STag(), mainTO(s, 0), true, 8)
			fill(b[14:], 0xE0)
			return b
		}, want: expTerm{1, 1, 0x00, hdrTagged, false}},

		// Read source (RFC 5040 §7.2, RDMAP 0/1/...: invalid 0x00, bounds
		// 0x01, access 0x02, not associated 0x03, wrap 0x04) with the RDMA
		// header (R).
		{name: "Read invalid source STag", seg: func(*negServer) []byte { return segRead(1, rd(inv, anyTO, 8)) },
			want: expTerm{0, 1, 0x00, hdrUntagged, true}},
		{name: "Read invalidated source", seg: func(s *negServer) []byte { return segRead(1, rd(s.inval.STag(), s.inval.BaseTO(), 8)) },
			want: expTerm{0, 1, 0x00, hdrUntagged, true}},
		{name: "Read PD mismatch", seg: func(s *negServer) []byte { return segRead(1, rd(s.other.STag(), s.other.BaseTO(), 8)) },
			want: expTerm{0, 1, 0x03, hdrUntagged, true}},
		{name: "Read another stream's STag", seg: func(s *negServer) []byte { return segRead(1, rd(s.bound.STag(), s.bound.BaseTO(), 8)) },
			want: expTerm{0, 1, 0x03, hdrUntagged, true}},
		{name: "Read without remote read", seg: func(s *negServer) []byte { return segRead(1, rd(s.wo.STag(), s.wo.BaseTO(), 8)) },
			want: expTerm{0, 1, 0x02, hdrUntagged, true}},
		{name: "Read past the end", seg: func(s *negServer) []byte { return segRead(1, rd(s.main.STag(), mainTO(s, 1<<16-4), 8)) },
			want: expTerm{0, 1, 0x01, hdrUntagged, true}},
		{name: "Read TO wrap", seg: func(s *negServer) []byte { return segRead(1, rd(s.main.STag(), ^uint64(0)-3, 8)) },
			want: expTerm{0, 1, 0x04, hdrUntagged, true}},

		// Atomic target (RFC 7306 §8; docs/spec/rfc7306.md#errors): the Read-source codes,
		// but R = 0; misaligned 0/2/0x07.
		{name: "FetchAdd invalid STag", seg: func(*negServer) []byte { return segAtomic(1, fetchAdd(inv, anyTO)) },
			want: expTerm{0, 1, 0x00, hdrUntagged, false}},
		{name: "CmpSwap invalidated STag", seg: func(s *negServer) []byte { return segAtomic(1, cmpSwap(s.inval.STag(), s.inval.BaseTO())) },
			want: expTerm{0, 1, 0x00, hdrUntagged, false}},
		{name: "FetchAdd PD mismatch", seg: func(s *negServer) []byte { return segAtomic(1, fetchAdd(s.other.STag(), s.other.BaseTO())) },
			want: expTerm{0, 1, 0x03, hdrUntagged, false}},
		{name: "CmpSwap without remote atomic", seg: func(s *negServer) []byte { return segAtomic(1, cmpSwap(s.wo.STag(), s.wo.BaseTO())) },
			want: expTerm{0, 1, 0x02, hdrUntagged, false}},
		{name: "FetchAdd past the end", seg: func(s *negServer) []byte { return segAtomic(1, fetchAdd(s.main.STag(), mainTO(s, 1<<16))) },
			want: expTerm{0, 1, 0x01, hdrUntagged, false}},
		{name: "FetchAdd TO wrap", seg: func(s *negServer) []byte { return segAtomic(1, fetchAdd(s.main.STag(), ^uint64(0)-3)) },
			want: expTerm{0, 1, 0x04, hdrUntagged, false}},
		{name: "FetchAdd misaligned", seg: func(s *negServer) []byte { return segAtomic(1, fetchAdd(s.main.STag(), mainTO(s, 4100))) },
			want: expTerm{0, 2, 0x07, hdrUntagged, false}},
		{name: "CmpSwap misaligned", seg: func(s *negServer) []byte { return segAtomic(1, cmpSwap(s.main.STag(), mainTO(s, 1))) },
			want: expTerm{0, 2, 0x07, hdrUntagged, false}},

		// Send with Invalidate (RFC 5040 §5.3, §7.2 code 0x09; mem's split:
		// a live STag of another PD or stream, or one without remote
		// invalidation, is a protection error 0/1/0x09; no such STag is an
		// operation error 0/2/0x09). Zero-length, so that nothing is placed.
		{name: "Send with Invalidate, other PD", seg: func(s *negServer) []byte { return segSend(rdmap.OpSendInvalidate, s.other.STag(), 1, 0, true, 0) },
			want: expTerm{0, 1, 0x09, hdrUntagged, false}},
		{name: "Send with Invalidate, other stream", seg: func(s *negServer) []byte { return segSend(rdmap.OpSendInvalidate, s.bound.STag(), 1, 0, true, 0) },
			want: expTerm{0, 1, 0x09, hdrUntagged, false}},
		{name: "Send SE with Invalidate, not allowed", seg: func(s *negServer) []byte {
			return segSend(rdmap.OpSendSEInvalidate, s.noinv.STag(), 1, 0, true, 0)
		}, want: expTerm{0, 1, 0x09, hdrUntagged, false}},
		{name: "Send with Invalidate, no such STag", seg: func(*negServer) []byte { return segSend(rdmap.OpSendInvalidate, inv, 1, 0, true, 0) },
			want: expTerm{0, 2, 0x09, hdrUntagged, false}},

		// IRD (RFC 5040 §6.1; docs/spec/rfc7306.md#ord-ird: 0/2/0x07, Remote Operation, R = 0).
		{name: "IRD 0 exceeded", cfg: &srvCfg{recvs: negRecvCount, postSend: true, cp: ConnParams{IRD: -1}},
			seg:  func(s *negServer) []byte { return segRead(1, rd(s.main.STag(), mainTO(s, 0), 8)) },
			want: expTerm{0, 2, 0x07, hdrUntagged, false}},
		{name: "IRD 1 exceeded", cfg: &srvCfg{recvs: negRecvCount, attr: QPAttr{MaxIRD: 1}}, opts: enginetest.Options{RcvBuf: 256 << 10},
			prelude: func(t *testing.T, s *negServer, p *enginetest.Peer) {
				// A Read the peer does not drain stays in progress: it is
				// larger than both socket buffers can hold (bigReadLen).
				if err := p.Send(segRead(1, rdmap.ReadParams{SinkSTag: 0x77, Size: uint32(s.big.Len()), SrcSTag: s.big.STag(), SrcTO: s.big.BaseTO()})); err != nil {
					t.Fatal(err)
				}
				u, err := p.Next(5 * time.Second)
				if err != nil || u[1]&0xF != byte(rdmap.OpReadResponse) {
					t.Fatalf("first Read Response segment: %x %v", u[:min(len(u), 14)], err)
				}
			},
			seg:  func(s *negServer) []byte { return segAtomic(2, fetchAdd(s.main.STag(), mainTO(s, 0))) },
			want: expTerm{0, 2, 0x07, hdrUntagged, false}},

		// Responses nobody asked for (RFC 7306 §5.2.2 item 7; docs/spec/rfc7306.md#errors:
		// no QN 3 buffer, 1/2/0x02).
		{name: "unsolicited Atomic Response", seg: func(*negServer) []byte {
			b := make([]byte, 30)
			rdmap.PutAtomicResponse(b, 1, 1, 0x1122334455667788)
			return b
		}, want: expTerm{1, 2, 0x02, hdrUntagged, false}},
	}
	for op := byte(0xC); op <= 0xF; op++ {
		cs = append(cs, negCase{name: fmt.Sprintf("opcode 0x%X", op),
			seg:  func(*negServer) []byte { return segUntagged(0x40|op, 0, 0, 1, 0, true, 8) },
			want: expTerm{0, 2, 0x06, hdrUntagged, false}})
	}
	return cs
}

func TestNegativeSuite(t *testing.T) {
	g0 := stableGoroutines()
	s := newNegServer(t)
	g1 := stableGoroutines()
	for i, tc := range negCases() {
		t.Run(tc.name, func(t *testing.T) {
			runNegCase(t, s, tc)
			s.roundTrip(t, byte(i))
		})
		if g := settleGoroutines(g1); g != g1 {
			t.Errorf("after %q: %d goroutines, %d before the case", tc.name, g, g1)
		}
	}
	t.Run("MPA frames", func(t *testing.T) { runFrameCases(t, s) })
	t.Run("zero-length accepted", func(t *testing.T) { runZeroLength(t, s) })
	s.close()
	if g := settleGoroutines(g0); g != g0 {
		buf := make([]byte, 1<<20)
		t.Errorf("goroutines: %d before the suite, %d after\n%s", g0, g, buf[:runtime.Stack(buf, true)])
	}
}

func runNegCase(t *testing.T, s *negServer, tc negCase) {
	cfg := srvCfg{recvs: negRecvCount, postSend: true}
	if tc.cfg != nil {
		cfg = *tc.cfg
	}
	if tc.prelude != nil {
		cfg.postSend = false // the prelude opens the responder's send side
	}
	s.expect(cfg)
	before := s.sums()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	p, err := enginetest.Dial(ctx, s.ln.Addr().String(), tc.opts)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c := s.accepted(t)
	if tc.prelude != nil {
		tc.prelude(t, s, p)
		if tc.placed {
			before = s.sums()
		}
	}
	seg := tc.seg(s)
	fpdu := p.FPDU(seg)
	if tc.badCRC {
		fpdu[len(fpdu)-1] ^= 0x5A
	}
	if err := p.WriteRaw(fpdu); err != nil {
		t.Fatal(err)
	}
	tm, got, err := p.ExpectTerminate(10 * time.Second)
	if err != nil {
		st := c.qp.Stats()
		buf := make([]byte, 1<<20)
		t.Fatalf("no Terminate: %v (QP %v, err %v, tx Read Response bytes %d msgs %d, atomics %d, terms %+v)\n%s", err, c.qp.State(), c.qp.Err(),
			st.TxBytes[rdmap.OpReadResponse], st.TxMsgs[rdmap.OpReadResponse], st.FetchAdds, st.TermsSent, buf[:runtime.Stack(buf, true)])
	}
	if want := tc.want.bytes(seg); !bytes.Equal(got, want) {
		t.Errorf("Terminate %v\n got %x\nwant %x (%v)", tm.Err, got, want, tc.want)
	}
	if err := p.ExpectEOF(5 * time.Second); err != nil {
		t.Errorf("stream not closed after the Terminate: %v", err)
	}

	// The QP: in error, the error recorded, every WR completed once.
	if st := c.qp.State(); st != QPError {
		t.Errorf("QP state %v", st)
	}
	if e := c.qp.Err(); e == nil || byte(e.Layer) != tc.want.layer || e.EType != tc.want.etype || e.Code != tc.want.code {
		t.Errorf("QP error %v, want %v", e, tc.want)
	}
	checkOnce(t, c.rcq, c.recvIDs, tc.recvHead)
	checkOnce(t, c.scq, c.sendIDs, 0)

	// The counters: exactly this Terminate sent, none received.
	st := c.qp.Stats()
	if len(st.TermsSent) != 1 || st.TermsSent[0].Count != 1 || st.TermsSent[0].Err == nil ||
		byte(st.TermsSent[0].Err.Layer) != tc.want.layer || st.TermsSent[0].Err.EType != tc.want.etype || st.TermsSent[0].Err.Code != tc.want.code {
		t.Errorf("TermsSent %+v, want one %v", st.TermsSent, tc.want)
	}
	if len(st.TermsRecv) != 0 {
		t.Errorf("TermsRecv %+v", st.TermsRecv)
	}
	if st.FetchAdds+st.CmpSwaps != 0 {
		t.Errorf("atomics executed: %d FetchAdd, %d CmpSwap", st.FetchAdds, st.CmpSwaps)
	}
	after := s.sums()
	for i := range before {
		if before[i] != after[i] {
			t.Errorf("MR %d (STag %#x) changed", i, s.all[i].STag())
		}
	}
}

// checkOnce polls the completions of the posted WRs ids: each exactly
// once, none successful, the first with head (0: flushed) and the rest
// flushed, and nothing more.
func checkOnce(t *testing.T, cq *CQ, ids []uint64, head Status) {
	t.Helper()
	seen := map[uint64]int{}
	for _, c := range poll(t, cq, len(ids)) {
		seen[c.ID]++
		want := StatusWRFlushErr
		if len(ids) > 0 && c.ID == ids[0] && head != 0 {
			want = head
		}
		if c.Status != want {
			t.Errorf("WR %d completed %v (%v), want %v", c.ID, c.Status, c.Err, want)
		}
	}
	for _, id := range ids {
		if seen[id] != 1 {
			t.Errorf("WR %d completed %d times", id, seen[id])
		}
	}
	time.Sleep(20 * time.Millisecond)
	if n := cq.Len(); n != 0 {
		t.Errorf("%d completions more than posted WRs", n)
	}
}

// runFrameCases: malformed MPA Requests. RFC 5044 §7.1.1/§7.1.2: a wrong
// key, a revision the responder cannot serve or a PD_Length above 512
// close TCP at once, without a Reply (RFC 6581 keeps this for Rev 2; its
// enhanced word counts inside the 512).
func runFrameCases(t *testing.T, s *negServer) {
	pd := func(n int) []byte { return bytes.Repeat([]byte{0x5A}, n) }
	rev2 := func(n int) []byte { // enhanced word IRD 16, ORD 16, then n bytes
		return append([]byte{0, 16, 0, 16}, pd(n)...)
	}
	cases := []struct {
		name  string
		frame []byte
	}{
		{"bad key", enginetest.RawFrame("MPA ID Req Framf", 0x40, 1, 0, nil)},
		{"Reply key in a Request", enginetest.RawFrame("MPA ID Rep Frame", 0x40, 1, 0, nil)},
		{"key all zero", enginetest.RawFrame("", 0x40, 1, 0, nil)},
		{"revision 0", enginetest.RawFrame("MPA ID Req Frame", 0x40, 0, 0, nil)},
		{"revision 3", enginetest.RawFrame("MPA ID Req Frame", 0x40, 3, 0, nil)},
		{"revision 255", enginetest.RawFrame("MPA ID Req Frame", 0x50, 255, 4, rev2(0))},
		{"private data 513 (Rev 1)", enginetest.RawFrame("MPA ID Req Frame", 0x40, 1, 513, pd(513))},
		{"PD_Length 0xFFFF (Rev 1)", enginetest.RawFrame("MPA ID Req Frame", 0x40, 1, 0xFFFF, pd(600))},
		{"private data 509+4 (Rev 2)", enginetest.RawFrame("MPA ID Req Frame", 0x50, 2, 513, rev2(509))},
		{"Rev 2 without the enhanced word", enginetest.RawFrame("MPA ID Req Frame", 0x50, 2, 2, pd(2))},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m0 := s.ln.Malformed()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			got, err := enginetest.ExpectDropped(ctx, s.ln.Addr().String(), tc.frame, 8*time.Second)
			if err != nil {
				t.Fatalf("not dropped: %v (got %q)", err, got)
			}
			for deadline := time.Now().Add(5 * time.Second); s.ln.Malformed() != m0+1; time.Sleep(5 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("Malformed %d, want %d", s.ln.Malformed(), m0+1)
				}
			}
			s.roundTrip(t, byte(0x80+i))
		})
	}
}

// runZeroLength: a zero-length Write to an invalid STag is accepted (RFC
// 5041 §5.2: zero-length tagged segments are not checked) and a
// zero-length Read with an invalid source STag is answered with a
// zero-length Read Response to the sink STag and TO (RFC 5040 §5.2: the
// source MUST NOT be validated).
func runZeroLength(t *testing.T, s *negServer) {
	s.expect(srvCfg{recvs: negRecvCount})
	before := s.sums()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	p, err := enginetest.Dial(ctx, s.ln.Addr().String(), enginetest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c := s.accepted(t)
	if err := p.Send(segWrite(0xDEAD_BE00, ^uint64(0), 0)); err != nil {
		t.Fatal(err)
	}
	if err := p.Send(segRead(1, rdmap.ReadParams{SinkSTag: 0x1234_5678, SinkTO: 0x0102_0304_0506_0708, Size: 0, SrcSTag: 0xDEAD_BE00, SrcTO: ^uint64(0)})); err != nil {
		t.Fatal(err)
	}
	u, err := p.Next(5 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	// Tagged, L, DV 1; RDMAP RV 1 opcode 0x2 (Read Response); sink STag; sink TO; no payload.
	want := []byte{0xC1, 0x42, 0x12, 0x34, 0x56, 0x78, 1, 2, 3, 4, 5, 6, 7, 8}
	if !bytes.Equal(u, want) {
		t.Fatalf("zero-length Read answered %x, want %x", u, want)
	}
	if st := c.qp.State(); st != QPRTS {
		t.Errorf("QP state %v", st)
	}
	st := c.qp.Stats()
	if len(st.TermsSent) != 0 || st.RxMsgs[rdmap.OpWrite] != 1 || st.RxMsgs[rdmap.OpReadRequest] != 1 || st.TxMsgs[rdmap.OpReadResponse] != 1 {
		t.Errorf("stats: terms %+v, rx Write %d, rx ReadRequest %d, tx ReadResponse %d", st.TermsSent,
			st.RxMsgs[rdmap.OpWrite], st.RxMsgs[rdmap.OpReadRequest], st.TxMsgs[rdmap.OpReadResponse])
	}
	if c.rcq.Len() != 0 || c.scq.Len() != 0 {
		t.Errorf("completions: %d receive, %d send", c.rcq.Len(), c.scq.Len())
	}
	after := s.sums()
	for i := range before {
		if before[i] != after[i] {
			t.Errorf("MR %d changed", i)
		}
	}
	p.Close()
	c.close()
	s.roundTrip(t, 0xFE)
}
