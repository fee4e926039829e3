package sim_test

import (
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"xrnic/tcpstack"
	"xrnic/tcpstack/sim"
	"xrnic/wire/eth"
	"xrnic/wire/ipv4"
	"xrnic/wire/tcp"
)

// What the harness hands the stack.
var (
	_ tcpstack.Link  = (*sim.Link)(nil)
	_ tcpstack.Clock = (*sim.Clock)(nil)
)

var (
	flagLong  = flag.Bool("long", false, "run many more simulation seeds (or set TCPSTACK_SEEDS)")
	flagSeed  = flag.Int64("seed", -1, "replay one simulation seed")
	flagSeeds = flag.Int("seeds", 0, "number of simulation seeds (default 1000, 20000 with -long)")
)

var (
	macA  = eth.MAC{2, 0, 0, 0, 0, 1}
	macB  = eth.MAC{2, 0, 0, 0, 0, 2}
	addrA = [4]byte{198, 18, 0, 1}
	addrB = [4]byte{198, 18, 0, 2}
)

// pattern is the content of stream s at offset i: position dependent, so
// loss, duplication or reordering of bytes shows.
func pattern(s uint64, i int) byte {
	x := uint64(i)*0x9e3779b97f4a7c15 + s
	x ^= x >> 29
	return byte(x ^ x>>17)
}

// endpoint is the application on one side.
type endpoint struct {
	name     string
	st       *tcpstack.Stack
	c        *tcpstack.Conn
	salt     uint64 // our send stream
	peerSalt uint64
	total    int  // bytes to send
	wrote    int  // bytes queued
	iwarp    bool // use Segment/Commit
	got      int  // bytes received
	eof      bool
	closed   bool
	closeWr  bool
	pauseTil time.Duration
	rng      *rand.Rand
	views    [][]byte
	err      error
}

func (e *endpoint) step(now time.Duration) {
	c := e.c
	if c == nil || e.closed || e.err != nil {
		return
	}
	// Send.
	for e.wrote < e.total && c.Established() {
		if e.iwarp {
			b, err := c.Segment()
			if err != nil {
				break
			}
			n := min(len(b), e.total-e.wrote)
			if r := e.rng.IntN(4); r == 0 { // not always full
				n = 1 + e.rng.IntN(n)
			}
			for i := 0; i < n; i++ {
				b[i] = pattern(e.salt, e.wrote+i)
			}
			if err := c.Commit(n); err != nil {
				e.err = fmt.Errorf("%s: commit: %w", e.name, err)
				return
			}
			e.wrote += n
			continue
		}
		n := min(1+e.rng.IntN(20000), e.total-e.wrote)
		var buf [20000]byte
		for i := 0; i < n; i++ {
			buf[i] = pattern(e.salt, e.wrote+i)
		}
		k, err := c.Write(buf[:n])
		e.wrote += k
		if err != nil {
			if !errors.Is(err, tcpstack.ErrWouldBlock) {
				e.err = fmt.Errorf("%s: write: %w", e.name, err)
			}
			break
		}
	}
	if e.wrote == e.total && !e.closeWr && c.Established() {
		e.closeWr = true
		if err := c.CloseWrite(); err != nil {
			e.err = fmt.Errorf("%s: closewrite: %w", e.name, err)
			return
		}
	}
	// Receive, sometimes slowly.
	if now >= e.pauseTil {
		e.views = c.Views(e.views[:0])
		rel := 0
		for _, v := range e.views {
			for i, b := range v {
				if want := pattern(e.peerSalt, e.got+i); b != want {
					e.err = fmt.Errorf("%s: byte %d is %#x, want %#x", e.name, e.got+i, b, want)
					return
				}
			}
			e.got += len(v)
			rel += len(v)
		}
		c.Release(rel)
		if e.rng.IntN(8) == 0 {
			e.pauseTil = now + time.Duration(1+e.rng.IntN(300))*time.Millisecond
		}
	}
	if c.EOF() {
		if c.Err() != nil {
			e.err = fmt.Errorf("%s: connection error: %w (state %v)", e.name, c.Err(), c.State())
			return
		}
		e.eof = true
	}
	if e.eof && e.closeWr && !e.closed {
		e.closed = true
		c.Close()
	}
}

type simResult struct {
	virt   time.Duration
	xfer   time.Duration // until both sides had all the data
	frames uint64
	// Sums over both stacks.
	retransmits, fastRetransmits, timeouts uint64
}

// runSeed runs one simulated transfer in both directions and checks it.
func runSeed(seed uint64, verbose bool) (simResult, error) { return runSeedWith(seed, verbose, false) }

// runSeedWith is runSeed, with NewReno instead of RFC 6675 loss recovery
// if newReno.
func runSeedWith(seed uint64, verbose, newReno bool) (simResult, error) {
	rng := rand.New(rand.NewPCG(seed, 42))
	var res simResult
	clock := &sim.Clock{}
	mtu := 1500
	if rng.IntN(4) == 0 {
		mtu = 576 + rng.IntN(1500-576)
	}
	f := sim.Faults{Delay: time.Duration(50+rng.IntN(20000)) * time.Microsecond}
	if rng.IntN(5) > 0 { // 1 in 5 seeds is a clean link
		f.Loss = rng.Float64() * 0.08
		f.Dup = rng.Float64() * 0.05
		f.Reorder = rng.Float64() * 0.2
		f.Jitter = time.Duration(1+rng.IntN(30)) * time.Millisecond
		f.Corrupt = rng.Float64() * 0.03
	}
	if rng.IntN(3) == 0 {
		f.Rate = float64(1+rng.IntN(100)) * 1e6
	}
	for i := rng.IntN(3); i > 0; i-- {
		at := time.Duration(rng.IntN(5000)) * time.Millisecond
		f.Down = append(f.Down, [2]time.Duration{at, at + time.Duration(100+rng.IntN(4000))*time.Millisecond})
	}
	net := sim.New(clock, seed, mtu, f)
	if verbose && os.Getenv("TCPSTACK_TRACE") != "" {
		net.Capture = func(t time.Duration, fr []byte) { fmt.Printf("%v %s\n", t, describe(fr)) }
	}
	mk := func(i int, mac eth.MAC, addr [4]byte) (*tcpstack.Stack, error) {
		cfg := tcpstack.Config{
			Link: net.Link(i), Clock: clock, MAC: mac, Addr: addr, MTU: mtu,
			Seed:               seed*2 + uint64(i) + 1,
			TimeWait:           time.Duration(60+rng.IntN(60)) * time.Second,
			SendSegments:       4 + rng.IntN(200),
			RecvBuffer:         4096 + rng.IntN(300<<10),
			DisableSACK:        rng.IntN(4) == 0,
			DisableTimestamps:  rng.IntN(4) == 0,
			DisableWindowScale: rng.IntN(4) == 0,
			MaxOOO:             1 + rng.IntN(64),
			NewRenoRecovery:    newReno,
		}
		return tcpstack.New(cfg)
	}
	sa, err := mk(0, macA, addrA)
	if err != nil {
		return res, err
	}
	sb, err := mk(1, macB, addrB)
	if err != nil {
		return res, err
	}
	size := func() int {
		switch rng.IntN(20) {
		case 0:
			return 0
		case 1:
			return 1 + rng.IntN(1<<20)
		default:
			return 1 + rng.IntN(100<<10)
		}
	}
	a := &endpoint{name: "A", st: sa, salt: seed ^ 0xa, peerSalt: seed ^ 0xb, total: size(), iwarp: rng.IntN(2) == 0, rng: rand.New(rand.NewPCG(seed, 1))}
	b := &endpoint{name: "B", st: sb, salt: seed ^ 0xb, peerSalt: seed ^ 0xa, total: size(), iwarp: rng.IntN(2) == 0, rng: rand.New(rand.NewPCG(seed, 2))}
	l, err := sb.Listen(5000, tcpstack.ListenOptions{Backlog: 1})
	if err != nil {
		return res, err
	}
	mb := macB
	a.c, err = sa.Dial(addrB, 5000, tcpstack.DialOptions{RemoteMAC: &mb})
	if err != nil {
		return res, err
	}
	const limit = 30 * time.Minute
	for iter := 0; ; iter++ {
		net.Deliver()
		da := sa.Poll()
		db := sb.Poll()
		if b.c == nil {
			if b.c = l.Accept(); b.c != nil {
				l.Close()
			}
		}
		now := clock.Now()
		a.step(now)
		b.step(now)
		for _, e := range []*endpoint{a, b} {
			if e.err != nil {
				if verbose {
					fmt.Printf("A %+v\nB %+v\n", sa.Stats, sb.Stats)
				}
				return res, e.err
			}
		}
		sa.Flush()
		sb.Flush()
		if res.xfer == 0 && a.got == b.total && b.got == a.total {
			res.xfer = clock.Now()
		}
		if a.closed && b.closed && sa.NumConns() == 0 && sb.NumConns() == 0 && net.InFlight() == 0 {
			break
		}
		if a.c.State() == tcpstack.StateClosed && a.c.Err() != nil {
			if verbose {
				fmt.Printf("A %+v\nB %+v\n", sa.Stats, sb.Stats)
			}
			return res, fmt.Errorf("A: %w", a.c.Err())
		}
		next := min(da, db, sa.Poll(), sb.Poll())
		if t, ok := net.Next(); ok {
			next = min(next, t)
		}
		for _, e := range []*endpoint{a, b} {
			if e.pauseTil > now {
				next = min(next, e.pauseTil)
			}
		}
		if net.Link(0).Pending() > 0 || net.Link(1).Pending() > 0 {
			next = now
		}
		if next == tcpstack.NoDeadline {
			return res, fmt.Errorf("deadlock at %v: A %v wrote %d/%d got %d, B %v wrote %d/%d got %d",
				now, a.c.State(), a.wrote, a.total, a.got, stateOf(b.c), b.wrote, b.total, b.got)
		}
		if next > limit {
			return res, fmt.Errorf("no progress by %v: A %v wrote %d/%d got %d/%d, B %v wrote %d/%d got %d/%d",
				limit, a.c.State(), a.wrote, a.total, a.got, b.total, stateOf(b.c), b.wrote, b.total, b.got, a.total)
		}
		clock.Set(next)
	}
	if a.got != b.total || b.got != a.total {
		return res, fmt.Errorf("short: A got %d of %d, B got %d of %d", a.got, b.total, b.got, a.total)
	}
	if n := sa.SegmentsInUse() + sb.SegmentsInUse(); n != 0 {
		return res, fmt.Errorf("%d send segments leaked", n)
	}
	if net.Outstanding() != 0 || net.Leaked() != 0 {
		return res, fmt.Errorf("frames leaked: %d lent, %d lost track of", net.Outstanding(), net.Leaked())
	}
	res.virt = clock.Now()
	res.frames = net.Sent
	res.retransmits = sa.Stats.TxRetransmits + sb.Stats.TxRetransmits
	res.fastRetransmits = sa.Stats.FastRetransmits + sb.Stats.FastRetransmits
	res.timeouts = sa.Stats.Timeouts + sb.Stats.Timeouts
	if verbose {
		fmt.Printf("seed %d: mtu %d faults %+v sizes %d/%d virt %v frames %d\nA %+v\nB %+v\n", seed, mtu, f, a.total, b.total, clock.Now(), net.Sent, sa.Stats, sb.Stats)
	}
	return res, nil
}

func stateOf(c *tcpstack.Conn) string {
	if c == nil {
		return "none"
	}
	return c.State().String()
}

func TestSimulation(t *testing.T) {
	g0 := runtime.NumGoroutine()
	if *flagSeed >= 0 {
		if _, err := runSeed(uint64(*flagSeed), true); err != nil {
			t.Fatalf("seed %d: %v", *flagSeed, err)
		}
		return
	}
	n := 1000
	if *flagLong {
		n = 20000
	}
	if v, err := strconv.Atoi(os.Getenv("TCPSTACK_SEEDS")); err == nil && v > 0 {
		n = v
	}
	if *flagSeeds > 0 {
		n = *flagSeeds
	}
	var next atomic.Int64
	var failed atomic.Int64
	var mu sync.Mutex
	var virt time.Duration
	var frames uint64
	var wg sync.WaitGroup
	for w := 0; w < runtime.GOMAXPROCS(0); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				s := next.Add(1) - 1
				if s >= int64(n) || failed.Load() > 10 {
					return
				}
				r, err := runSeed(uint64(s), false)
				if err != nil {
					failed.Add(1)
					t.Errorf("seed %d failed (replay: go test ./tcpstack/sim -run TestSimulation -seed %d): %v", s, s, err)
				}
				mu.Lock()
				virt += r.virt
				frames += r.frames
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	t.Logf("%d seeds, %v virtual time, %d frames", n, virt, frames)
	time.Sleep(10 * time.Millisecond)
	if g := runtime.NumGoroutine(); g > g0 {
		t.Errorf("goroutines: %d before, %d after", g0, g)
	}
}

func describe(fr []byte) string {
	ef, err := eth.Parse(fr)
	if err != nil {
		return "bad eth"
	}
	ip, err := ipv4.Parse(ef.Payload())
	if err != nil {
		return "bad ip"
	}
	th, err := tcp.Parse(ip.Payload())
	if err != nil {
		return "bad tcp"
	}
	ok := th.ChecksumValid(ip.PseudoHeaderSum())
	return fmt.Sprintf("%v:%d>%v:%d %v seq=%d ack=%d len=%d win=%d opt=%x csum=%v", ip.Src()[3], th.SrcPort(), ip.Dst()[3], th.DstPort(), th.Flags(), th.Seq(), th.Ack(), len(th.Payload()), th.Window(), th.Options(), ok)
}

// TestRecoveryComparison runs the same seeds with RFC 6675 (the default
// with SACK) and with NewReno loss recovery and logs the virtual time until
// both sides had all the data, and the retransmissions it took (go test -v). It
// checks correctness only; the numbers are for reading.
func TestRecoveryComparison(t *testing.T) {
	n := 300
	if *flagSeeds > 0 {
		n = *flagSeeds
	}
	for _, newReno := range []bool{false, true} {
		var sum simResult
		var worst time.Duration
		for s := 0; s < n; s++ {
			r, err := runSeedWith(uint64(s), false, newReno)
			if err != nil {
				t.Fatalf("seed %d (NewReno %v): %v", s, newReno, err)
			}
			sum.virt += r.virt
			sum.xfer += r.xfer
			sum.frames += r.frames
			sum.retransmits += r.retransmits
			sum.fastRetransmits += r.fastRetransmits
			sum.timeouts += r.timeouts
			worst = max(worst, r.xfer)
		}
		name := "RFC 6675"
		if newReno {
			name = "NewReno "
		}
		t.Logf("%s: %d seeds, transfer time %v (mean %v, worst %v), frames %d, retransmits %d, fast retransmits %d, RTO timeouts %d",
			name, n, sum.xfer.Round(time.Millisecond), (sum.xfer / time.Duration(n)).Round(time.Millisecond), worst.Round(time.Millisecond),
			sum.frames, sum.retransmits, sum.fastRetransmits, sum.timeouts)
	}
}
