package main

import (
	"testing"
	"time"
	"unsafe"
)

// The hot paths allocate nothing: post (plain and inline), poll, notify.
func TestHotPathAllocs(t *testing.T) {
	if raceEnabled {
		// Not about the machine: make unit runs this test again without -race.
		t.Skip("allocation counts are not meaningful under the race detector")
	}
	p := connect(t, sideOpts{inline: 64, sq: 64}, sideOpts{rq: 64})
	c, s := p.c, p.s
	sgl := []sgeT{c.sge(0, 512), c.sge(1024, 512)}
	write := sendWRT{WRID: 1, Opcode: wrWrite, Flags: sendSignaled, SgList: unsafe.Pointer(&sgl[0]), NumSGE: 2,
		RKey: s.stag, RemoteAddr: s.addr(0)}
	var src [64]byte
	isge := []sgeT{{Addr: uint64(uintptr(unsafe.Pointer(&src[0]))), Length: 64}}
	inline := sendWRT{WRID: 2, Opcode: wrSend, Flags: sendSignaled | sendInline, SgList: unsafe.Pointer(&isge[0]), NumSGE: 1}
	rsgl := []sgeT{s.sge(4096, 128)}
	recv := recvWRT{WRID: 3, SgList: unsafe.Pointer(&rsgl[0]), NumSGE: 1}
	wc := make([]wcT, 4)
	var n int32
	spin := func(cq uint64, want int) {
		got := 0
		for got < want {
			k := pollCQ(cq, int32(len(wc)), &wc[0])
			if k < 0 {
				t.Fatalf("poll: %d", k)
			}
			for i := 0; i < k; i++ {
				if wc[i].Status != IBV_WC_SUCCESS {
					t.Fatalf("completion %+v", wc[i])
				}
			}
			got += k
			if k == 0 {
				// AllocsPerRun runs on one P: park, so the network
				// poller runs (a C poller spins on its own thread).
				time.Sleep(time.Microsecond)
			}
		}
	}
	// Warm up (first use of each path may grow engine buffers).
	for i := 0; i < 10; i++ {
		postR(t, s.qp, 3, rsgl...)
		postS(t, c.qp, write, sgl...)
		postS(t, c.qp, inline, isge...)
		spin(c.scq, 2)
		spin(s.rcq, 1)
	}
	cases := []struct {
		name string
		f    func()
	}{
		{"post_send", func() {
			if e := postSend(c.qp, &write, 1, &n); e != 0 {
				t.Fatalf("post: %d", e)
			}
			spin(c.scq, 1)
		}},
		{"post_send_inline+post_recv", func() {
			if e := postRecv(s.qp, &recv, 1, &n); e != 0 {
				t.Fatalf("post recv: %d", e)
			}
			if e := postSend(c.qp, &inline, 1, &n); e != 0 {
				t.Fatalf("post inline: %d", e)
			}
			spin(c.scq, 1)
			spin(s.rcq, 1)
		}},
		{"poll_empty+notify", func() {
			if k := pollCQ(c.scq, int32(len(wc)), &wc[0]); k != 0 {
				t.Fatalf("poll of an empty CQ: %d", k)
			}
			reqNotifyCQ(c.scq, 0)
		}},
	}
	for _, tc := range cases {
		t0 := time.Now()
		a := testing.AllocsPerRun(200, tc.f)
		t.Logf("%s: %v", tc.name, time.Since(t0))
		if a != 0 {
			t.Errorf("%s: %v allocations per run", tc.name, a)
		}
	}
}
