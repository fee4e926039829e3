package tcpstack_test

import (
	"testing"
	"time"

	"xrnic/tcpstack"
	"xrnic/tcpstack/sim"
	"xrnic/wire/eth"
)

var (
	macA  = eth.MAC{2, 0, 0, 0, 0, 1}
	macB  = eth.MAC{2, 0, 0, 0, 0, 2}
	addrA = [4]byte{198, 18, 0, 1}
	addrB = [4]byte{198, 18, 0, 2}
)

// pair is two stacks over a clean in-memory link with an established
// connection A->B.
type pair struct {
	clock  *sim.Clock
	net    *sim.Net
	sa, sb *tcpstack.Stack
	a, b   *tcpstack.Conn
	views  [][]byte
}

// dialPair makes stack A on link 0 of net and B on link 1 (B listening
// on port 4791, 1 MiB receive buffers, seeds 1 and 2 unless cfg changes
// them), and has A dial B; the caller drives the handshake.
func dialPair(tb testing.TB, clock *sim.Clock, net *sim.Net, cfg func(i int, c *tcpstack.Config)) (sa, sb *tcpstack.Stack, a *tcpstack.Conn, l *tcpstack.Listener) {
	tb.Helper()
	stacks := [2]*tcpstack.Stack{}
	for i, side := range []struct {
		mac  eth.MAC
		addr [4]byte
	}{{macA, addrA}, {macB, addrB}} {
		c := tcpstack.Config{Link: net.Link(i), Clock: clock, MAC: side.mac, Addr: side.addr, Seed: uint64(i + 1), RecvBuffer: 1 << 20}
		if cfg != nil {
			cfg(i, &c)
		}
		s, err := tcpstack.New(c)
		if err != nil {
			tb.Fatal(err)
		}
		stacks[i] = s
	}
	sa, sb = stacks[0], stacks[1]
	l, err := sb.Listen(4791, tcpstack.ListenOptions{})
	if err != nil {
		tb.Fatal(err)
	}
	m := macB
	if a, err = sa.Dial(addrB, 4791, tcpstack.DialOptions{RemoteMAC: &m}); err != nil {
		tb.Fatal(err)
	}
	return sa, sb, a, l
}

func newPair(tb testing.TB, f sim.Faults) *pair {
	p := &pair{clock: &sim.Clock{}}
	p.net = sim.New(p.clock, 1, 1500, f)
	var l *tcpstack.Listener
	p.sa, p.sb, p.a, l = dialPair(tb, p.clock, p.net, nil)
	for i := 0; i < 100 && p.b == nil; i++ {
		p.step()
		p.b = l.Accept()
	}
	if p.b == nil || !p.a.Established() {
		tb.Fatal("handshake did not complete")
	}
	p.views = make([][]byte, 0, 1024)
	return p
}

// step advances to the next event and polls both stacks; B consumes
// everything it received.
func (p *pair) step() int {
	p.net.Deliver()
	da := p.sa.Poll()
	db := p.sb.Poll()
	n := 0
	if p.b != nil {
		p.views = p.b.Views(p.views[:0])
		for _, v := range p.views {
			n += len(v)
		}
		p.b.Release(n)
		p.sb.Flush()
	}
	next := min(da, db)
	if t, ok := p.net.Next(); ok {
		next = min(next, t)
	}
	if next != tcpstack.NoDeadline {
		p.clock.Set(next)
	}
	return n
}

// BenchmarkSegment moves one full iWARP-style segment from A to B per
// operation: Segment/Commit, transmit, receive, zero-copy view, release,
// ACK. allocs/op is allocations per segment.
func BenchmarkSegment(b *testing.B) {
	p := newPair(b, sim.Faults{})
	mss := p.a.MSS()
	b.SetBytes(int64(mss))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		buf, err := p.a.Segment()
		if err != nil {
			for err != nil {
				p.step()
				buf, err = p.a.Segment()
			}
		}
		buf[0] = byte(i)
		if err := p.a.Commit(mss); err != nil {
			b.Fatal(err)
		}
		if i%16 == 15 {
			for k := 0; k < 4; k++ {
				p.step()
			}
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "segments/s")
}

// BenchmarkBulk is byte-stream throughput between two stacks in one process
// (Write in 64 KiB chunks, zero-copy receive), with a 10 µs link delay.
func BenchmarkBulk(b *testing.B) {
	p := newPair(b, sim.Faults{Delay: 10 * time.Microsecond})
	chunk := make([]byte, 64<<10)
	b.SetBytes(int64(len(chunk)))
	b.ReportAllocs()
	b.ResetTimer()
	got := 0
	for i := 0; i < b.N; i++ {
		off := 0
		for off < len(chunk) {
			n, _ := p.a.Write(chunk[off:])
			off += n
			got += p.step()
		}
	}
	want := b.N * len(chunk)
	for i := 0; got < want && i < 1000000; i++ {
		got += p.step()
	}
	if got != want {
		b.Fatalf("received %d of %d", got, want)
	}
	b.ReportMetric(float64(b.N*len(chunk))/float64(p.a.MSS())/b.Elapsed().Seconds(), "segments/s")
}

// TestZeroAllocs asserts the steady-state send and receive paths allocate
// nothing per segment.
func TestZeroAllocs(t *testing.T) {
	p := newPair(t, sim.Faults{Delay: 10 * time.Microsecond})
	mss := p.a.MSS()
	run := func() {
		for k := 0; k < 8; k++ {
			if buf, err := p.a.Segment(); err == nil {
				buf[0] = 1
				p.a.Commit(mss)
			}
		}
		for k := 0; k < 8; k++ {
			p.step()
		}
	}
	for i := 0; i < 200; i++ { // warm up pools and queues
		run()
	}
	if n := testing.AllocsPerRun(500, run); n != 0 {
		t.Fatalf("%v allocations per 8 segments, want 0", n)
	}
}
