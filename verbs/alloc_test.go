package verbs

import (
	"context"
	"testing"
)

// TestAllocsPostPoll: posting (general and typed) and polling allocate
// nothing, conversions included.
func TestAllocsPostPoll(t *testing.T) {
	c, s := pair(t, 1<<16, QPAttr{SQDepth: 64, RQDepth: 64})
	wc := make([]Completion, 8)
	ctx := context.Background()
	drain := func(cq *CQ, n int) {
		for got := 0; got < n; {
			k := cq.Poll(wc)
			got += k
			if k == 0 {
				cq.Wait(ctx)
			}
		}
	}
	wr := SendWR{ID: 1, Op: OpWrite, Flags: FlagSignaled, SGL: []SGE{c.mr.SGE(0, 512)}, RemoteSTag: s.mr.STag(), RemoteTO: s.mr.TO(0)}
	rwr := RecvWR{ID: 2, SGL: []SGE{s.mr.SGE(4096, 64)}}
	cases := []struct {
		name string
		f    func()
	}{
		{"PostSend+Poll", func() {
			if err := c.qp.PostSend(&wr); err != nil {
				t.Fatal(err)
			}
			drain(c.scq, 1)
		}},
		{"PostWrite+Poll", func() {
			if err := c.qp.PostWrite(3, c.mr.SGE(0, 64), s.mr.STag(), s.mr.TO(128), FlagSignaled); err != nil {
				t.Fatal(err)
			}
			drain(c.scq, 1)
		}},
		{"PostFetchAdd+Poll", func() {
			if err := c.qp.PostFetchAdd(4, c.mr.SGE(8, 8), s.mr.STag(), s.mr.TO(64), 1, 0, FlagSignaled); err != nil {
				t.Fatal(err)
			}
			drain(c.scq, 1)
		}},
		{"PostRecv+PostSendBuf+Poll", func() {
			if err := s.qp.PostRecv(&rwr); err != nil {
				t.Fatal(err)
			}
			if err := c.qp.PostSendBuf(5, c.mr.SGE(0, 64), FlagSignaled); err != nil {
				t.Fatal(err)
			}
			drain(s.rcq, 1)
			drain(c.scq, 1)
		}},
		{"PostRecvBuf+PostImm+Poll", func() {
			if err := s.qp.PostRecvBuf(6, s.mr.SGE(8192, 8)); err != nil {
				t.Fatal(err)
			}
			if err := c.qp.PostImm(7, 42, FlagSignaled|FlagSolicited); err != nil {
				t.Fatal(err)
			}
			drain(s.rcq, 1)
			drain(c.scq, 1)
		}},
	}
	for _, tc := range cases {
		tc.f() // warm up
		if a := testing.AllocsPerRun(200, tc.f); a != 0 {
			t.Errorf("%s: %v allocations per run", tc.name, a)
		}
	}
}

func BenchmarkFetchAddLatency(b *testing.B) {
	c, s := pair(b, 1<<16, QPAttr{})
	wc := make([]Completion, 1)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if err := c.qp.PostFetchAdd(1, c.mr.SGE(0, 8), s.mr.STag(), s.mr.TO(8), 1, 0, FlagSignaled); err != nil {
			b.Fatal(err)
		}
		for c.scq.Poll(wc) == 0 {
			c.scq.Wait(ctx)
		}
	}
}

func BenchmarkWrite4KRate(b *testing.B) {
	c, s := pair(b, 1<<20, QPAttr{SQDepth: 64})
	wc := make([]Completion, 32)
	ctx := context.Background()
	b.SetBytes(4096)
	b.ReportAllocs()
	inflight, posted, done := 0, 0, 0
	b.ResetTimer()
	for done < b.N {
		for inflight < 32 && posted < b.N {
			if err := c.qp.PostWrite(1, c.mr.SGE(0, 4096), s.mr.STag(), s.mr.TO(4096*(posted%128)), FlagSignaled); err != nil {
				b.Fatal(err)
			}
			posted++
			inflight++
		}
		n := c.scq.Poll(wc)
		if n == 0 {
			c.scq.Wait(ctx)
		}
		inflight -= n
		done += n
	}
}
