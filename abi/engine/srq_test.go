package main

import (
	"syscall"
	"testing"
	"time"
	"unsafe"
)

func postSRQ(t *testing.T, srq uint64, id uint64, sgl ...sgeT) {
	t.Helper()
	w := recvWRT{WRID: id}
	if len(sgl) > 0 {
		w.SgList, w.NumSGE = unsafe.Pointer(&sgl[0]), int32(len(sgl))
	}
	var n int32
	if e := postSRQRecv(srq, &w, 1, &n); e != 0 || n != 1 {
		t.Fatalf("postSRQRecv: errno %d posted %d: %s", e, n, lastError())
	}
}

// TestSRQ: two connections whose server QPs share one SRQ. Each Send
// takes one receive, completes on its QP's receive CQ with its qp_num;
// the limit event reaches the async channel with the SRQ's cookie once;
// bad arguments and a busy destroy are refused.
func TestSRQ(t *testing.T) {
	var srq uint64
	p1 := connect(t, sideOpts{}, sideOpts{rq: 8, srq: &srq})
	p2 := connect(t, sideOpts{}, sideOpts{rq: 8, srq: &srq})
	s1, s2 := p1.s, p2.s
	if e := postRecv(s1.qp, &recvWRT{WRID: 1}, 1, nil); e != int(syscall.EINVAL) {
		t.Errorf("post_recv on a QP with an SRQ: %d, want EINVAL", e)
	}
	var attr srqAttrT
	must(t, querySRQ(srq, &attr))
	if attr.MaxWR != 8 || attr.MaxSGE != 2 || attr.SRQLimit != 0 {
		t.Errorf("query %+v", attr)
	}
	if e := modifySRQ(srq, &srqAttrT{MaxWR: 16}, srqMaxWR); e != int(syscall.EOPNOTSUPP) {
		t.Errorf("resize: %d, want EOPNOTSUPP", e)
	}
	if e := modifySRQ(srq, &srqAttrT{SRQLimit: 9}, srqLimit); e != int(syscall.EINVAL) {
		t.Errorf("limit above max_wr: %d, want EINVAL", e)
	}
	three := []sgeT{s1.sge(0, 1), s1.sge(1, 1), s1.sge(2, 1)}
	if e := postSRQRecv(srq, &recvWRT{SgList: unsafe.Pointer(&three[0]), NumSGE: 3}, 1, nil); e != int(syscall.EINVAL) {
		t.Errorf("3 SGEs on an SRQ of 2: %d, want EINVAL", e)
	}
	for id := range 4 {
		postSRQ(t, srq, uint64(id), s1.sge(id*64, 32), s1.sge(id*64+32, 32))
	}
	must(t, modifySRQ(srq, &srqAttrT{SRQLimit: 2}, srqLimit))
	must(t, querySRQ(srq, &attr))
	if attr.SRQLimit != 2 {
		t.Errorf("armed limit %d", attr.SRQLimit)
	}
	send := func(c *side, b byte) {
		t.Helper()
		c.buf[0] = b
		postS(t, c.qp, sendWRT{WRID: uint64(b), Opcode: wrSend, Flags: sendSignaled}, c.sge(0, 40))
		poll(t, c.scq, 1)
	}
	seen := map[uint64]bool{}
	for k, s := range []*side{s1, s2, s1} {
		c := p1.c
		if s == s2 {
			c = p2.c
		}
		send(c, byte(10+k))
		w := poll(t, s.rcq, 1)[0]
		if w.Status != IBV_WC_SUCCESS || w.Opcode != IBV_WC_RECV || w.ByteLen != 40 || w.QPNum != s.qpn || seen[w.WRID] ||
			s1.buf[w.WRID*64] != byte(10+k) {
			t.Fatalf("message %d: %+v (QP %d)", k, w, s.qpn)
		}
		seen[w.WRID] = true
	}
	// One left: below 2.
	ev := s1.async.next(t)
	if ev.Kind != xEvAsync || ev.Code != IBV_EVENT_SRQ_LIMIT_REACHED || ev.Cookie != 55 {
		t.Fatalf("async event %+v, want SRQ_LIMIT_REACHED for cookie 55", ev)
	}
	must(t, querySRQ(srq, &attr))
	if attr.SRQLimit != 0 {
		t.Errorf("limit %d after the event", attr.SRQLimit)
	}
	send(p2.c, 20)
	time.Sleep(10 * time.Millisecond)
	s1.async.empty(t)
	if e := destroySRQ(srq); e != int(syscall.EBUSY) {
		t.Errorf("destroy of an SRQ in use: %d, want EBUSY", e)
	}
	if e := deallocPD(s1.pd); e != int(syscall.EBUSY) {
		t.Errorf("dealloc of the SRQ's PD: %d, want EBUSY", e)
	}
	for _, h := range []uint64{0, 1, s1.qp} {
		if e := postSRQRecv(h, &recvWRT{}, 1, nil); e != int(syscall.EBADF) {
			t.Errorf("post_srq_recv on handle %#x: %d", h, e)
		}
		if e := querySRQ(h, &attr); e != int(syscall.EBADF) {
			t.Errorf("query_srq on handle %#x: %d", h, e)
		}
	}
	var bad uint64
	for _, si := range []srqInitT{{MaxWR: 0}, {MaxWR: 1 << 30}, {MaxWR: 4, MaxSGE: 1000}, {MaxWR: 4, SRQLimit: 5}, {MaxWR: 4, AsyncCh: 12345}} {
		if e := createSRQ(s1.pd, &si, &bad); e == 0 {
			t.Errorf("create_srq %+v succeeded", si)
		}
	}
}

// TestSRQAllocs: posting to an SRQ and the Send that takes the receive
// allocate nothing.
func TestSRQAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are not meaningful under the race detector")
	}
	var srq uint64
	p := connect(t, sideOpts{}, sideOpts{rq: 8, srq: &srq})
	c, s := p.c, p.s
	rsgl := []sgeT{s.sge(0, 128)}
	recv := recvWRT{WRID: 3, SgList: unsafe.Pointer(&rsgl[0]), NumSGE: 1}
	ssgl := []sgeT{c.sge(0, 64)}
	send := sendWRT{WRID: 1, Opcode: wrSend, Flags: sendSignaled, SgList: unsafe.Pointer(&ssgl[0]), NumSGE: 1}
	wc := make([]wcT, 4)
	var n int32
	spin := func(cq uint64) {
		for pollCQ(cq, int32(len(wc)), &wc[0]) == 0 {
			time.Sleep(time.Microsecond)
		}
		if wc[0].Status != IBV_WC_SUCCESS {
			t.Fatalf("completion %+v", wc[0])
		}
	}
	step := func() {
		if e := postSRQRecv(srq, &recv, 1, &n); e != 0 {
			t.Fatalf("post: %d", e)
		}
		if e := postSend(c.qp, &send, 1, &n); e != 0 {
			t.Fatalf("send: %d", e)
		}
		spin(c.scq)
		spin(s.rcq)
	}
	for range 10 {
		step()
	}
	if a := testing.AllocsPerRun(200, step); a != 0 {
		t.Errorf("%v allocations per SRQ receive", a)
	}
}
