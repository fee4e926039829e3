package main

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net/netip"
	"os"
	"runtime"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"xrnic/internal/testclean"
)

func TestMain(m *testing.M) {
	testclean.Prepare()
	os.Setenv("XRNIC_TRANSPORT", "kernel")
	os.Unsetenv("XRNIC_CONFIG")
	if e := openDevice(); e != 0 {
		fmt.Fprintln(os.Stderr, "open:", lastError())
		os.Exit(1)
	}
	code := m.Run()
	closeDevice()
	os.Exit(code)
}

// testChan is a channel with its fd.
type testChan struct {
	fd int
	h  uint64
}

func newChan(t *testing.T) *testChan {
	t.Helper()
	var fd int32
	var h uint64
	if e := createChan(&fd, &h); e != 0 {
		t.Fatalf("createChan: %d %s", e, lastError())
	}
	t.Cleanup(func() { destroyChan(h) })
	return &testChan{fd: int(fd), h: h}
}

// next waits for the fd (as a C application does), reads one count and
// takes one event.
func (c *testChan) next(t *testing.T) eventT {
	t.Helper()
	pfd := []unix.PollFd{{Fd: int32(c.fd), Events: unix.POLLIN}}
	for {
		n, err := unix.Poll(pfd, 20000)
		if err == unix.EINTR {
			continue
		}
		if err != nil || n == 0 {
			t.Fatalf("no event on fd %d (%v)", c.fd, err)
		}
		break
	}
	var b [8]byte
	if n, err := unix.Read(c.fd, b[:]); n != 8 || err != nil || binary.NativeEndian.Uint64(b[:]) != 1 {
		t.Fatalf("eventfd read: %d %v %x", n, err, b)
	}
	var ev eventT
	if e := chanGet(c.h, &ev); e != 0 {
		t.Fatalf("chanGet after a read: %d", e)
	}
	return ev
}

// empty checks that no event waits.
func (c *testChan) empty(t *testing.T) {
	t.Helper()
	pfd := []unix.PollFd{{Fd: int32(c.fd), Events: unix.POLLIN}}
	if n, _ := unix.Poll(pfd, 0); n != 0 {
		var ev eventT
		chanGet(c.h, &ev)
		t.Fatalf("unexpected event: kind %d code %d cookie %d", ev.Kind, ev.Code, ev.Cookie)
	}
	var ev eventT
	if e := chanGet(c.h, &ev); e != int(syscall.EAGAIN) {
		t.Fatalf("chanGet on an empty channel: %d", e)
	}
}

func (c *testChan) expectCM(t *testing.T, code uint32, cookie uint64) eventT {
	t.Helper()
	ev := c.next(t)
	if ev.Kind != xEvCM || ev.Code != code || ev.Cookie != cookie {
		t.Fatalf("event kind %d code %d status %d cookie %d; want CM %d cookie %d", ev.Kind, ev.Code, ev.Status, ev.Cookie, code, cookie)
	}
	return ev
}

// side is one end: PD, memory, CQs and a QP.
type side struct {
	pd, mr, scq, rcq, qp uint64
	stag, qpn            uint32
	buf                  []byte
	async                *testChan
	comp                 *testChan
}

func (s *side) addr(off int) uint64 { return uint64(uintptr(unsafe.Pointer(&s.buf[off]))) }
func (s *side) sge(off, n int) sgeT { return sgeT{Addr: s.addr(off), Length: uint32(n), LKey: s.stag} }

type sideOpts struct {
	inline uint32
	sq, rq uint32
	// srq, when set, is the SRQ the QP takes its receives from; if it
	// is 0, newSide creates one of depth rq on the side's PD first.
	srq *uint64
}

func newSide(t *testing.T, o sideOpts) *side {
	t.Helper()
	s := &side{buf: make([]byte, 1<<16), async: newChan(t), comp: newChan(t)}
	if o.sq == 0 {
		o.sq = 16
	}
	if o.rq == 0 {
		o.rq = 16
	}
	must(t, allocPD(&s.pd))
	must(t, regMR(s.pd, unsafe.Pointer(&s.buf[0]), uint64(len(s.buf)), s.addr(0),
		IBV_ACCESS_LOCAL_WRITE|IBV_ACCESS_REMOTE_WRITE|IBV_ACCESS_REMOTE_READ|IBV_ACCESS_REMOTE_ATOMIC, &s.mr, &s.stag))
	var d int32
	must(t, createCQ(int32(o.sq), 0, 0, &s.scq, &d))
	must(t, createCQ(int32(o.rq), s.comp.h, 77, &s.rcq, &d))
	in := qpInitT{SendCQ: s.scq, RecvCQ: s.rcq, MaxSendWR: o.sq, MaxRecvWR: o.rq, MaxSendSGE: 4, MaxRecvSGE: 4,
		MaxInlineData: o.inline, AsyncCh: s.async.h, Cookie: 99}
	var srq uint64 // created here
	if o.srq != nil {
		if *o.srq == 0 {
			si := srqInitT{MaxWR: o.rq, MaxSGE: 2, AsyncCh: s.async.h, Cookie: 55}
			must(t, createSRQ(s.pd, &si, o.srq))
			srq = *o.srq
		}
		in.SRQ = *o.srq
	}
	var qpn uint32
	must(t, createQP(s.pd, &in, &s.qp, &qpn))
	s.qpn = qpn
	if o.inline > 0 && in.MaxInlineData < o.inline {
		t.Fatalf("max_inline_data %d made, %d asked", in.MaxInlineData, o.inline)
	}
	t.Cleanup(func() {
		destroyQP(s.qp)
		if srq != 0 {
			destroySRQ(srq)
		}
		destroyCQ(s.scq)
		destroyCQ(s.rcq)
		deregMR(s.mr)
		deallocPD(s.pd)
		runtime.KeepAlive(s.buf)
	})
	return s
}

func must(t *testing.T, e int) {
	t.Helper()
	if e != 0 {
		t.Fatalf("errno %d: %s", e, lastError())
	}
}

func sockaddr(ap netip.AddrPort) *sockaddrStorage {
	var s sockaddrStorage
	putSockaddr(&s, ap)
	return &s
}

type pair struct {
	c, s             *side
	cch, sch         *testChan
	cid, sid, lid    uint64
	cookieC, cookieS uint64
}

// connect sets up a listener and a connection through the CM functions,
// checking each event.
func connect(t *testing.T, co, so sideOpts) *pair {
	t.Helper()
	p := &pair{cch: newChan(t), sch: newChan(t), cookieC: 2, cookieS: 3}
	const lcookie = 1
	must(t, createID(p.sch.h, lcookie, &p.lid))
	t.Cleanup(func() { destroyID(p.lid) })
	must(t, bindID(p.lid, unsafe.Pointer(sockaddr(netip.MustParseAddrPort("127.0.0.1:0")))))
	must(t, listenID(p.lid, 4))
	var la, pa sockaddrStorage
	must(t, addrsID(p.lid, &la, &pa))
	lap, _ := sockaddrIn(unsafe.Pointer(&la))
	if lap.Port() == 0 {
		t.Fatal("listening on port 0")
	}

	must(t, createID(p.cch.h, p.cookieC, &p.cid))
	t.Cleanup(func() { destroyID(p.cid) })
	var src sockaddrStorage
	must(t, resolveAddr(p.cid, nil, unsafe.Pointer(sockaddr(lap)), &src))
	p.cch.expectCM(t, RDMA_CM_EVENT_ADDR_RESOLVED, p.cookieC)
	if sap, ok := sockaddrIn(unsafe.Pointer(&src)); !ok || sap.Addr() != lap.Addr() {
		t.Fatalf("source address %v towards %v", sap, lap)
	}
	must(t, resolveRoute(p.cid))
	p.cch.expectCM(t, RDMA_CM_EVENT_ROUTE_RESOLVED, p.cookieC)

	p.c, p.s = newSide(t, co), newSide(t, so)
	must(t, connectID(p.cid, p.c.qp, &connParamT{PrivateData: unsafe.Pointer(&[]byte("hello")[0]), PrivateDataLen: 5,
		ResponderResources: 4, InitiatorDepth: 4}))
	req := p.sch.expectCM(t, RDMA_CM_EVENT_CONNECT_REQUEST, lcookie)
	if got := string(req.PrivateData[:req.PrivateDataLen]); got != "hello" {
		t.Fatalf("request private data %q", got)
	}
	if req.NewID == 0 || req.ResponderResources != 4 || req.InitiatorDepth != 4 {
		t.Fatalf("request: new id %d, IRD %d, ORD %d", req.NewID, req.ResponderResources, req.InitiatorDepth)
	}
	if peer, ok := sockaddrIn(unsafe.Pointer(&req.Peer)); !ok || peer.Addr() != lap.Addr() || peer.Port() == 0 {
		t.Fatalf("request peer %v", peer)
	}
	p.sid = req.NewID
	t.Cleanup(func() { destroyID(p.sid) })
	must(t, setCookie(p.sid, p.cookieS))
	reply := []byte("world!")
	must(t, acceptID(p.sid, p.s.qp, &connParamT{PrivateData: unsafe.Pointer(&reply[0]), PrivateDataLen: int32(len(reply)),
		ResponderResources: 4, InitiatorDepth: 4}))
	est := p.cch.expectCM(t, RDMA_CM_EVENT_ESTABLISHED, p.cookieC)
	if got := string(est.PrivateData[:est.PrivateDataLen]); got != "world!" {
		t.Fatalf("reply private data %q", got)
	}
	p.sch.expectCM(t, RDMA_CM_EVENT_ESTABLISHED, p.cookieS)
	var st int32
	must(t, qpState(p.c.qp, &st))
	if st != IBV_QPS_RTS {
		t.Fatalf("client QP state %d", st)
	}
	return p
}

// poll waits for n completions.
func poll(t *testing.T, cq uint64, n int) []wcT {
	t.Helper()
	out := make([]wcT, n)
	got := 0
	deadline := time.Now().Add(20 * time.Second)
	for got < n {
		k := pollCQ(cq, int32(n-got), &out[got])
		if k < 0 {
			t.Fatalf("pollCQ: %d", k)
		}
		got += k
		if k == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("%d of %d completions: %+v", got, n, out[:got])
			}
			runtime.Gosched()
		}
	}
	return out
}

func postS(t *testing.T, qp uint64, w sendWRT, sgl ...sgeT) {
	t.Helper()
	if len(sgl) > 0 {
		w.SgList, w.NumSGE = unsafe.Pointer(&sgl[0]), int32(len(sgl))
	}
	var n int32
	if e := postSend(qp, &w, 1, &n); e != 0 || n != 1 {
		t.Fatalf("postSend op %d: errno %d posted %d: %s", w.Opcode, e, n, lastError())
	}
}

func postR(t *testing.T, qp uint64, id uint64, sgl ...sgeT) {
	t.Helper()
	w := recvWRT{WRID: id}
	if len(sgl) > 0 {
		w.SgList, w.NumSGE = unsafe.Pointer(&sgl[0]), int32(len(sgl))
	}
	var n int32
	if e := postRecv(qp, &w, 1, &n); e != 0 || n != 1 {
		t.Fatalf("postRecv: errno %d posted %d: %s", e, n, lastError())
	}
}

func fill(b []byte, seed byte) {
	for i := range b {
		b[i] = seed + byte(i*13)
	}
}

func TestOps(t *testing.T) {
	p := connect(t, sideOpts{inline: 100}, sideOpts{})
	c, s := p.c, p.s

	// Send into two SGEs.
	fill(c.buf[:3000], 1)
	postR(t, s.qp, 10, s.sge(0, 1000), s.sge(4096, 4000))
	postS(t, c.qp, sendWRT{WRID: 1, Opcode: wrSend, Flags: sendSignaled}, c.sge(0, 3000))
	if wc := poll(t, c.scq, 1)[0]; wc.WRID != 1 || wc.Status != IBV_WC_SUCCESS || wc.Opcode != IBV_WC_SEND {
		t.Fatalf("send completion %+v", wc)
	}
	if wc := poll(t, s.rcq, 1)[0]; wc.WRID != 10 || wc.Status != IBV_WC_SUCCESS || wc.Opcode != IBV_WC_RECV || wc.ByteLen != 3000 || wc.WCFlags != 0 {
		t.Fatalf("recv completion %+v", wc)
	}
	if !bytes.Equal(s.buf[:1000], c.buf[:1000]) || !bytes.Equal(s.buf[4096:6096], c.buf[1000:3000]) {
		t.Fatal("send data")
	}

	// Write, then Read it back.
	fill(c.buf[:5000], 7)
	postS(t, c.qp, sendWRT{WRID: 2, Opcode: wrWrite, Flags: sendSignaled, RKey: s.stag, RemoteAddr: s.addr(8192)}, c.sge(0, 5000))
	if wc := poll(t, c.scq, 1)[0]; wc.WRID != 2 || wc.Status != IBV_WC_SUCCESS || wc.Opcode != IBV_WC_RDMA_WRITE {
		t.Fatalf("write completion %+v", wc)
	}
	postS(t, c.qp, sendWRT{WRID: 3, Opcode: wrRead, Flags: sendSignaled, RKey: s.stag, RemoteAddr: s.addr(8192)}, c.sge(20000, 5000))
	if wc := poll(t, c.scq, 1)[0]; wc.WRID != 3 || wc.Status != IBV_WC_SUCCESS || wc.Opcode != IBV_WC_RDMA_READ || wc.ByteLen != 5000 {
		t.Fatalf("read completion %+v", wc)
	}
	if !bytes.Equal(s.buf[8192:13192], c.buf[:5000]) || !bytes.Equal(c.buf[20000:25000], c.buf[:5000]) {
		t.Fatal("write/read data")
	}

	// Atomics, plain and masked.
	word := s.buf[32768:32776]
	binary.NativeEndian.PutUint64(word, 100)
	atomic := func(id uint64, w sendWRT) uint64 {
		t.Helper()
		w.WRID, w.Flags, w.RKey, w.RemoteAddr = id, sendSignaled, s.stag, s.addr(32768)
		postS(t, c.qp, w, c.sge(40000, 8))
		wc := poll(t, c.scq, 1)[0]
		want := uint32(IBV_WC_FETCH_ADD)
		if w.Opcode == wrCmpSwap {
			want = IBV_WC_COMP_SWAP
		}
		if wc.WRID != id || wc.Status != IBV_WC_SUCCESS || wc.Opcode != want || wc.ByteLen != 8 {
			t.Fatalf("atomic completion %+v", wc)
		}
		return binary.NativeEndian.Uint64(c.buf[40000:])
	}
	if orig := atomic(4, sendWRT{Opcode: wrFetchAdd, CompareAdd: 5}); orig != 100 || binary.NativeEndian.Uint64(word) != 105 {
		t.Fatalf("fetch-add: orig %d, now %d", orig, binary.NativeEndian.Uint64(word))
	}
	if orig := atomic(5, sendWRT{Opcode: wrCmpSwap, CompareAdd: 105, Swap: 7, CompareMask: ^uint64(0), SwapMask: ^uint64(0)}); orig != 105 || binary.NativeEndian.Uint64(word) != 7 {
		t.Fatalf("cmp-swap: orig %d, now %d", orig, binary.NativeEndian.Uint64(word))
	}
	if orig := atomic(6, sendWRT{Opcode: wrCmpSwap, CompareAdd: 99, Swap: 1, CompareMask: ^uint64(0), SwapMask: ^uint64(0)}); orig != 7 || binary.NativeEndian.Uint64(word) != 7 {
		t.Fatalf("failed cmp-swap: orig %d, now %d", orig, binary.NativeEndian.Uint64(word))
	}
	// Masked: two 32-bit counters in one word (the mask ends the carry
	// at bit 31), then a swap of the high half only.
	binary.NativeEndian.PutUint64(word, 0x00000001_ffffffff)
	if orig := atomic(7, sendWRT{Opcode: wrFetchAdd, CompareAdd: 0x00000001_00000001, AddMask: 1<<31 | 1<<63}); orig != 0x00000001_ffffffff ||
		binary.NativeEndian.Uint64(word) != 0x00000002_00000000 {
		t.Fatalf("masked fetch-add: orig %#x, now %#x", orig, binary.NativeEndian.Uint64(word))
	}
	if orig := atomic(8, sendWRT{Opcode: wrCmpSwap, CompareAdd: 0x00000002_12345678, CompareMask: 0xffffffff_00000000,
		Swap: 0xabcdef00_00000000, SwapMask: 0xffffffff_00000000}); orig != 0x00000002_00000000 ||
		binary.NativeEndian.Uint64(word) != 0xabcdef00_00000000 {
		t.Fatalf("masked cmp-swap: orig %#x, now %#x", orig, binary.NativeEndian.Uint64(word))
	}

	// Write with Immediate and Immediate Data alone into receives with
	// no SGE: the value is in the completion only, in network order.
	postR(t, s.qp, 20)
	postR(t, s.qp, 21)
	fill(c.buf[:777], 9)
	postS(t, c.qp, sendWRT{WRID: 9, Opcode: wrWriteWithImm, RKey: s.stag, RemoteAddr: s.addr(50000), Imm: 0x11223344}, c.sge(0, 777))
	postS(t, c.qp, sendWRT{WRID: 10, Opcode: wrImm, Flags: sendSignaled, Imm: 0xa0b0c0d0})
	rc := poll(t, s.rcq, 2)
	imm := func(w wcT) uint32 {
		var b [4]byte
		binary.NativeEndian.PutUint32(b[:], w.ImmData)
		return binary.BigEndian.Uint32(b[:])
	}
	if w := rc[0]; w.WRID != 20 || w.Status != IBV_WC_SUCCESS || w.Opcode != IBV_WC_RECV_RDMA_WITH_IMM || w.WCFlags != IBV_WC_WITH_IMM ||
		imm(w) != 0x11223344 || w.ByteLen != 777 {
		t.Fatalf("write-with-imm completion %+v", w)
	}
	if w := rc[1]; w.WRID != 21 || w.Status != IBV_WC_SUCCESS || w.Opcode != IBV_WC_RECV || w.WCFlags != IBV_WC_WITH_IMM ||
		imm(w) != 0xa0b0c0d0 || w.ByteLen != 0 {
		t.Fatalf("immediate completion %+v", w)
	}
	if !bytes.Equal(s.buf[50000:50777], c.buf[:777]) {
		t.Fatal("write-with-imm data")
	}
	if wc := poll(t, c.scq, 1)[0]; wc.WRID != 10 || wc.Status != IBV_WC_SUCCESS {
		t.Fatalf("immediate send completion %+v", wc)
	}

	// Inline: unregistered memory, copied at post time, more WRs than
	// the bounce ring has slots.
	var src [100]byte
	for i := 0; i < 40; i++ {
		for j := range src {
			src[j] = byte(i + j)
		}
		postR(t, s.qp, uint64(100+i), s.sge(1024*(i%16), 1024))
		w := sendWRT{WRID: uint64(100 + i), Opcode: wrSend, Flags: sendSignaled | sendInline}
		sg := []sgeT{{Addr: uint64(uintptr(unsafe.Pointer(&src[0]))), Length: 60}, {Addr: uint64(uintptr(unsafe.Pointer(&src[60]))), Length: 40}}
		postS(t, c.qp, w, sg...)
		src = [100]byte{} // the bytes were taken at post time
		if wc := poll(t, c.scq, 1)[0]; wc.Status != IBV_WC_SUCCESS {
			t.Fatalf("inline send %d: %+v", i, wc)
		}
		wc := poll(t, s.rcq, 1)[0]
		got := s.buf[1024*(i%16) : 1024*(i%16)+100]
		if wc.Status != IBV_WC_SUCCESS || wc.ByteLen != 100 {
			t.Fatalf("inline recv %d: %+v", i, wc)
		}
		for j := range got {
			if got[j] != byte(i+j) {
				t.Fatalf("inline send %d: byte %d is %d", i, j, got[j])
			}
		}
	}
	// Longer than max_inline_data: EINVAL.
	var big [200]byte
	w := sendWRT{Opcode: wrSend, Flags: sendInline, SgList: unsafe.Pointer(&sgeT{Addr: uint64(uintptr(unsafe.Pointer(&big[0]))), Length: 200}), NumSGE: 1}
	var n int32
	if e := postSend(c.qp, &w, 1, &n); e != int(syscall.EINVAL) || n != 0 {
		t.Fatalf("oversized inline: errno %d posted %d", e, n)
	}
	// A chain stops at the bad WR; posted says how many went.
	chain := []sendWRT{{WRID: 200, Opcode: wrImm}, {WRID: 201, Opcode: 99}, {WRID: 202, Opcode: wrImm}}
	postR(t, s.qp, 300)
	if e := postSend(c.qp, &chain[0], 3, &n); e != int(syscall.EINVAL) || n != 1 {
		t.Fatalf("chain with a bad opcode: errno %d posted %d", e, n)
	}
	if wc := poll(t, s.rcq, 1)[0]; wc.WRID != 300 || wc.Status != IBV_WC_SUCCESS {
		t.Fatalf("chain's first WR %+v", wc)
	}
	p.cch.empty(t)
	p.sch.empty(t)
	c.async.empty(t)
	s.async.empty(t)
}

func TestQueueFullIsENOMEM(t *testing.T) {
	p := connect(t, sideOpts{sq: 4}, sideOpts{rq: 4})
	// Signalled zero-length Writes: each holds a CQ entry until polled.
	w := sendWRT{Opcode: wrWrite, Flags: sendSignaled, RKey: p.s.stag, RemoteAddr: p.s.addr(0)}
	posted := 0
	for i := 0; i < 100; i++ {
		var n int32
		e := postSend(p.c.qp, &w, 1, &n)
		if e == int(syscall.ENOMEM) {
			break
		}
		if e != 0 {
			t.Fatalf("post %d: errno %d", i, e)
		}
		posted++
	}
	if posted == 100 {
		t.Fatal("a 4-deep SQ took 100 WRs without completions polled")
	}
	for i := 0; i < 4; i++ {
		postR(t, p.s.qp, uint64(i))
	}
	if e := postRecv(p.s.qp, &recvWRT{}, 1, nil); e != int(syscall.ENOMEM) {
		t.Fatalf("fifth receive on a 4-deep RQ: errno %d", e)
	}
}

func TestNotifyChannel(t *testing.T) {
	p := connect(t, sideOpts{}, sideOpts{})
	must(t, reqNotifyCQ(p.s.rcq, 1))
	postR(t, p.s.qp, 1, p.s.sge(0, 64))
	postR(t, p.s.qp, 2, p.s.sge(64, 64))
	postS(t, p.c.qp, sendWRT{WRID: 1, Opcode: wrSend}, p.c.sge(0, 10))
	poll(t, p.s.rcq, 1) // not solicited: no event
	postS(t, p.c.qp, sendWRT{WRID: 2, Opcode: wrSend, Flags: sendSolicited}, p.c.sge(0, 10))
	ev := p.s.comp.next(t)
	if ev.Kind != xEvComp || ev.Cookie != 77 {
		t.Fatalf("completion event kind %d cookie %d", ev.Kind, ev.Cookie)
	}
	if wc := poll(t, p.s.rcq, 1)[0]; wc.WRID != 2 {
		t.Fatalf("solicited recv %+v", wc)
	}
	p.s.comp.empty(t)
}

func TestBadRKeyAsyncAndDisconnect(t *testing.T) {
	p := connect(t, sideOpts{}, sideOpts{})
	c, s := p.c, p.s
	postR(t, s.qp, 1, s.sge(0, 64))
	// An RDMA Read of a bad STag: the responder terminates (RDMAP invalid
	// STag), the Read completes IBV_WC_REM_ACCESS_ERR, the rest flushes.
	postS(t, c.qp, sendWRT{WRID: 1, Opcode: wrRead, Flags: sendSignaled, RKey: s.stag + 0x100, RemoteAddr: s.addr(0)}, c.sge(0, 64))
	postS(t, c.qp, sendWRT{WRID: 2, Opcode: wrRead, Flags: sendSignaled, RKey: s.stag, RemoteAddr: s.addr(0)}, c.sge(0, 64))
	cs := poll(t, c.scq, 2)
	if cs[0].WRID != 1 || cs[0].Status != IBV_WC_REM_ACCESS_ERR || cs[0].VendorErr == 0 {
		t.Fatalf("read of a bad STag %+v", cs[0])
	}
	if cs[1].WRID != 2 || cs[1].Status != IBV_WC_WR_FLUSH_ERR {
		t.Fatalf("read after it %+v", cs[1])
	}
	// Posting in error completes flushed.
	postS(t, c.qp, sendWRT{WRID: 3, Opcode: wrWrite, RKey: s.stag, RemoteAddr: s.addr(0)}, c.sge(0, 64))
	if wc := poll(t, c.scq, 1)[0]; wc.WRID != 3 || wc.Status != IBV_WC_WR_FLUSH_ERR {
		t.Fatalf("write posted in error %+v", wc)
	}
	if wc := poll(t, s.rcq, 1)[0]; wc.WRID != 1 || wc.Status != IBV_WC_WR_FLUSH_ERR {
		t.Fatalf("responder's receive %+v", wc)
	}
	// The responder found the bad STag (a protection error) and sent the
	// Terminate; the requester got it.
	if ev := s.async.next(t); ev.Kind != xEvAsync || ev.Code != IBV_EVENT_QP_ACCESS_ERR || ev.Cookie != 99 {
		t.Fatalf("responder async event kind %d code %d cookie %d", ev.Kind, ev.Code, ev.Cookie)
	}
	if ev := c.async.next(t); ev.Kind != xEvAsync || (ev.Code != IBV_EVENT_QP_ACCESS_ERR && ev.Code != IBV_EVENT_QP_FATAL) {
		t.Fatalf("requester async event kind %d code %d", ev.Kind, ev.Code)
	}
	p.cch.expectCM(t, RDMA_CM_EVENT_DISCONNECTED, p.cookieC)
	p.sch.expectCM(t, RDMA_CM_EVENT_DISCONNECTED, p.cookieS)
	var st int32
	must(t, qpState(c.qp, &st))
	if st != IBV_QPS_ERR {
		t.Fatalf("requester QP state %d", st)
	}
	postR(t, s.qp, 5, s.sge(0, 8)) // receives are taken and flushed
	if wc := poll(t, s.rcq, 1)[0]; wc.WRID != 5 || wc.Status != IBV_WC_WR_FLUSH_ERR {
		t.Fatalf("receive posted in error %+v", wc)
	}
	must(t, disconnectID(p.cid))
	destroyQP(c.qp)
	destroyQP(s.qp)
	for _, ch := range []*testChan{p.cch, p.sch, c.async, s.async} {
		ch.empty(t)
	}
}

func TestOrderlyDisconnect(t *testing.T) {
	p := connect(t, sideOpts{}, sideOpts{})
	postR(t, p.s.qp, 1, p.s.sge(0, 8))
	must(t, disconnectID(p.cid))
	p.sch.expectCM(t, RDMA_CM_EVENT_DISCONNECTED, p.cookieS)
	p.cch.expectCM(t, RDMA_CM_EVENT_DISCONNECTED, p.cookieC)
	if wc := poll(t, p.s.rcq, 1)[0]; wc.WRID != 1 || wc.Status != IBV_WC_WR_FLUSH_ERR {
		t.Fatalf("receive after the disconnect %+v", wc)
	}
	must(t, disconnectID(p.sid))
	destroyQP(p.c.qp)
	destroyQP(p.s.qp)
	// An orderly close is no async error; DISCONNECTED came once.
	for _, ch := range []*testChan{p.cch, p.sch, p.c.async, p.s.async} {
		ch.empty(t)
	}
}

func TestRejectAndUnreachable(t *testing.T) {
	sch, cch := newChan(t), newChan(t)
	var lid, cid uint64
	must(t, createID(sch.h, 1, &lid))
	defer destroyID(lid)
	must(t, bindID(lid, unsafe.Pointer(sockaddr(netip.MustParseAddrPort("127.0.0.1:0")))))
	must(t, listenID(lid, 1))
	var la sockaddrStorage
	must(t, addrsID(lid, &la, nil))
	must(t, createID(cch.h, 2, &cid))
	defer destroyID(cid)
	must(t, resolveAddr(cid, nil, unsafe.Pointer(&la), nil))
	cch.expectCM(t, RDMA_CM_EVENT_ADDR_RESOLVED, 2)
	must(t, resolveRoute(cid))
	cch.expectCM(t, RDMA_CM_EVENT_ROUTE_RESOLVED, 2)
	c := newSide(t, sideOpts{})
	must(t, connectID(cid, c.qp, nil))
	req := sch.expectCM(t, RDMA_CM_EVENT_CONNECT_REQUEST, 1)
	no := []byte("busy")
	must(t, rejectID(req.NewID, unsafe.Pointer(&no[0]), 4))
	ev := cch.expectCM(t, RDMA_CM_EVENT_REJECTED, 2)
	if ev.Status != -int32(syscall.ECONNREFUSED) || string(ev.PrivateData[:ev.PrivateDataLen]) != "busy" {
		t.Fatalf("rejected: status %d private data %q", ev.Status, ev.PrivateData[:ev.PrivateDataLen])
	}
	must(t, destroyID(req.NewID))

	// Nobody listens on the port any more: REJECTED with -ECONNREFUSED,
	// as the kernel's rdma_cm reports a TCP reset on iWARP.
	must(t, destroyID(lid))
	var cid2 uint64
	must(t, createID(cch.h, 3, &cid2))
	defer destroyID(cid2)
	must(t, resolveAddr(cid2, nil, unsafe.Pointer(&la), nil))
	cch.expectCM(t, RDMA_CM_EVENT_ADDR_RESOLVED, 3)
	c2 := newSide(t, sideOpts{})
	must(t, connectID(cid2, c2.qp, nil))
	ev = cch.expectCM(t, RDMA_CM_EVENT_REJECTED, 3)
	if ev.Status != -int32(syscall.ECONNREFUSED) || ev.PrivateDataLen != 0 {
		t.Fatalf("refused: status %d, %d bytes of private data", ev.Status, ev.PrivateDataLen)
	}
	sch.empty(t)
	cch.empty(t)
}

func TestStaleHandles(t *testing.T) {
	var pd uint64
	must(t, allocPD(&pd))
	must(t, deallocPD(pd))
	if e := deallocPD(pd); e != int(syscall.EBADF) {
		t.Fatalf("second dealloc: %d", e)
	}
	var pd2 uint64
	must(t, allocPD(&pd2))
	defer deallocPD(pd2)
	if uint32(pd2) == uint32(pd) && pd2 == pd {
		t.Fatal("a reused slot gave the same handle")
	}
	if e := deallocPD(pd); e != int(syscall.EBADF) {
		t.Fatalf("stale handle after reuse: %d", e)
	}
	var cq uint64
	var d int32
	must(t, createCQ(8, 0, 0, &cq, &d))
	must(t, destroyCQ(cq))
	var wc [1]wcT
	if k := pollCQ(cq, 1, &wc[0]); k != -int(syscall.EBADF) {
		t.Fatalf("poll of a destroyed CQ: %d", k)
	}
	for _, h := range []uint64{0, 1, ^uint64(0), pd2 ^ 1<<40} {
		if e := postSend(h, &sendWRT{}, 1, nil); e != int(syscall.EBADF) {
			t.Fatalf("post on handle %#x: %d", h, e)
		}
		if e := reqNotifyCQ(h, 0); e != int(syscall.EBADF) {
			t.Fatalf("notify on handle %#x: %d", h, e)
		}
	}
	// A PD handle is not a CQ handle.
	if k := pollCQ(pd2, 1, &wc[0]); k != -int(syscall.EBADF) {
		t.Fatalf("poll of a PD handle: %d", k)
	}
	// Busy objects refuse to go.
	s := newSide(t, sideOpts{})
	if e := destroyCQ(s.scq); e != int(syscall.EBUSY) {
		t.Fatalf("destroy of a CQ in use: %d", e)
	}
	if e := deallocPD(s.pd); e != int(syscall.EBUSY) {
		t.Fatalf("dealloc of a PD in use: %d", e)
	}
}

func TestDeviceAttr(t *testing.T) {
	var a deviceAttr
	must(t, queryDevice(&a))
	if !bytes.HasPrefix(a.FwVer[:], []byte("xrnic ")) || a.Ifname[0] == 0 || a.MaxQPWR <= 0 || a.MaxInlineData != maxInline ||
		a.AtomicCap != IBV_ATOMIC_GLOB || a.ActiveMTU < IBV_MTU_256 || a.ActiveMTU > IBV_MTU_4096 || a.IfMTU <= 0 {
		t.Fatalf("attributes %+v", a)
	}
	for mtu, want := range map[int]int32{1500: IBV_MTU_1024, 9000: IBV_MTU_4096, 4096: IBV_MTU_2048, 576: IBV_MTU_512, 65536: IBV_MTU_4096, 1280: IBV_MTU_1024, 300: IBV_MTU_256} {
		if got := mtuEnum(mtu); got != want {
			t.Errorf("MTU %d: enum %d, want %d", mtu, got, want)
		}
	}
}

// qp_to_error flushes and ends the connection: DISCONNECTED on both
// sides, no async event (it was asked for). migrate_id moves the events.
func TestToErrorAndMigrate(t *testing.T) {
	p := connect(t, sideOpts{}, sideOpts{})
	other := newChan(t)
	must(t, migrateID(p.cid, other.h))
	postR(t, p.c.qp, 1, p.c.sge(0, 8))
	must(t, qpToError(p.c.qp))
	if wc := poll(t, p.c.rcq, 1)[0]; wc.WRID != 1 || wc.Status != IBV_WC_WR_FLUSH_ERR {
		t.Fatalf("receive after qp_to_error %+v", wc)
	}
	var st int32
	must(t, qpState(p.c.qp, &st))
	if st != IBV_QPS_ERR {
		t.Fatalf("state %d after qp_to_error", st)
	}
	other.expectCM(t, RDMA_CM_EVENT_DISCONNECTED, p.cookieC)
	p.sch.expectCM(t, RDMA_CM_EVENT_DISCONNECTED, p.cookieS)
	destroyQP(p.c.qp)
	destroyQP(p.s.qp)
	for _, ch := range []*testChan{p.cch, other, p.c.async, p.s.async} {
		ch.empty(t)
	}
}

// The responder may send first (ib_write_lat's server does): connect uses
// RFC 6581 peer-to-peer mode, in which the initiator's RTR opens the
// stream; plain MPA would hold the responder's FPDUs.
func TestResponderSendsFirst(t *testing.T) {
	p := connect(t, sideOpts{}, sideOpts{})
	fill(p.s.buf[:100], 5)
	postS(t, p.s.qp, sendWRT{WRID: 1, Opcode: wrWrite, Flags: sendSignaled, RKey: p.c.stag, RemoteAddr: p.c.addr(1000)}, p.s.sge(0, 100))
	postS(t, p.s.qp, sendWRT{WRID: 2, Opcode: wrRead, Flags: sendSignaled, RKey: p.c.stag, RemoteAddr: p.c.addr(1000)}, p.s.sge(200, 100))
	cs := poll(t, p.s.scq, 2)
	if cs[0].Status != IBV_WC_SUCCESS || cs[1].Status != IBV_WC_SUCCESS || !bytes.Equal(p.s.buf[200:300], p.s.buf[:100]) ||
		!bytes.Equal(p.c.buf[1000:1100], p.s.buf[:100]) {
		t.Fatalf("responder's first Write and Read: %+v", cs)
	}
}
