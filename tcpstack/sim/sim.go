// Package sim is an in-memory network for testing tcpstack: a virtual Clock
// and a Net joining two Links with seeded faults (loss, duplication,
// reordering, delay, bit corruption, link flaps). Everything is
// deterministic for a given seed and runs without goroutines: the test
// drives time with Clock.Set and Net.Deliver.
//
// Frames live in a pool owned by the Net; SendBatch copies into pool frames
// (so the stack may reuse its buffers at once), RecvBatch lends pool frames
// to the stack and Release returns them. Net.Outstanding counts frames lent
// and not returned, for leak checks. In steady state nothing allocates.
package sim

import (
	"math/rand/v2"
	"time"
)

// Clock is a virtual clock; it implements tcpstack.Clock.
type Clock struct{ t time.Duration }

// Now returns the virtual time.
func (c *Clock) Now() time.Duration { return c.t }

// Set moves the clock to t (never backwards).
func (c *Clock) Set(t time.Duration) {
	if t > c.t {
		c.t = t
	}
}

// Advance moves the clock forward by d.
func (c *Clock) Advance(d time.Duration) { c.t += d }

// Faults describe what the Net does to frames. Probabilities are per frame.
type Faults struct {
	Loss    float64
	Dup     float64
	Reorder float64       // probability a frame is delayed by up to Jitter extra
	Jitter  time.Duration // extra delay of reordered frames
	Corrupt float64       // probability one random bit after the Ethernet header is flipped
	Delay   time.Duration // one-way propagation delay
	// Rate limits each direction to bytes per second (0 = unlimited): the
	// serialisation delay of each frame queues behind the previous one.
	Rate float64
	// Down lists intervals during which the link drops everything.
	Down [][2]time.Duration
}

type pkt struct {
	at    time.Duration
	n     uint64 // tie-break: send order
	to    int
	frame []byte
}

// Net joins two Links.
type Net struct {
	Clock  *Clock
	Faults Faults
	// Capture, if set, sees every frame as it is delivered (after faults).
	Capture func(t time.Duration, frame []byte)
	// Drop, if set, sees every frame end from sends and loses it when it
	// returns true: a chosen loss (the tail of a burst, a final ACK) for
	// tests that need one exactly.
	Drop func(from int, frame []byte) bool

	rng       *rand.Rand
	links     [2]*Link
	q         []pkt // min-heap by (at, n)
	n         uint64
	free      [][]byte
	frameSize int
	allocated int
	lent      int
	busyUntil [2]time.Duration

	// Counters.
	Sent, Delivered, Lost, Duplicated, Corrupted, Reordered uint64
}

// New returns a Net with a frame size large enough for mtu-sized IP packets.
func New(clock *Clock, seed uint64, mtu int, f Faults) *Net {
	n := &Net{Clock: clock, Faults: f, rng: rand.New(rand.NewPCG(seed, 0xda7a)), frameSize: mtu + 18}
	n.links[0] = &Link{net: n, side: 0}
	n.links[1] = &Link{net: n, side: 1}
	return n
}

// Link returns end i (0 or 1).
func (n *Net) Link(i int) *Link { return n.links[i] }

// Outstanding returns the number of frames lent to stacks and not released.
func (n *Net) Outstanding() int { return n.lent }

// InFlight returns the number of frames on the wire or waiting in receive
// queues.
func (n *Net) InFlight() int { return len(n.q) + n.links[0].Pending() + n.links[1].Pending() }

// Leaked returns the number of pool frames neither free, lent, queued nor
// in flight (0 unless frames were lost track of).
func (n *Net) Leaked() int { return n.allocated - len(n.free) - n.lent - n.InFlight() }

func (n *Net) get() []byte {
	if k := len(n.free); k > 0 {
		f := n.free[k-1]
		n.free = n.free[:k-1]
		return f
	}
	n.allocated++
	return make([]byte, n.frameSize)
}

func (n *Net) put(f []byte) { n.free = append(n.free, f[:cap(f)]) }

func (n *Net) down(t time.Duration) bool {
	for _, d := range n.Faults.Down {
		if t >= d[0] && t < d[1] {
			return true
		}
	}
	return false
}

// Next returns the delivery time of the earliest frame on the wire and
// whether there is one.
func (n *Net) Next() (time.Duration, bool) {
	if len(n.q) == 0 {
		return 0, false
	}
	return n.q[0].at, true
}

// Deliver moves every frame due by the clock's time into its receiver's
// queue.
func (n *Net) Deliver() {
	now := n.Clock.Now()
	for len(n.q) > 0 && n.q[0].at <= now {
		p := n.pop()
		if n.down(p.at) {
			n.Lost++
			n.put(p.frame)
			continue
		}
		if n.Capture != nil {
			n.Capture(p.at, p.frame)
		}
		n.Delivered++
		l := n.links[p.to]
		l.rx = append(l.rx, p.frame)
	}
}

func (n *Net) send(from int, b []byte) {
	f := &n.Faults
	n.Sent++
	now := n.Clock.Now()
	if n.down(now) || (f.Loss > 0 && n.rng.Float64() < f.Loss) || (n.Drop != nil && n.Drop(from, b)) {
		n.Lost++
		return
	}
	copies := 1
	if f.Dup > 0 && n.rng.Float64() < f.Dup {
		copies = 2
		n.Duplicated++
	}
	at := now + f.Delay
	if f.Rate > 0 {
		start := max(now, n.busyUntil[from])
		n.busyUntil[from] = start + time.Duration(float64(len(b))/f.Rate*float64(time.Second))
		at = n.busyUntil[from] + f.Delay
	}
	for i := 0; i < copies; i++ {
		fr := n.get()[:len(b)]
		copy(fr, b)
		if f.Corrupt > 0 && n.rng.Float64() < f.Corrupt {
			// Not in the Ethernet header: a real link's FCS would catch
			// that, and nothing above re-checks MAC addresses.
			if len(fr) > 14 {
				bit := 14*8 + n.rng.IntN((len(fr)-14)*8)
				fr[bit/8] ^= 1 << (bit % 8)
			}
			n.Corrupted++
		}
		t := at
		if f.Reorder > 0 && f.Jitter > 0 && n.rng.Float64() < f.Reorder {
			t += time.Duration(n.rng.Int64N(int64(f.Jitter)))
			n.Reordered++
		}
		n.push(pkt{at: t, to: 1 - from, frame: fr})
	}
}

func (n *Net) less(i, j int) bool {
	a, b := &n.q[i], &n.q[j]
	return a.at < b.at || (a.at == b.at && a.n < b.n)
}

func (n *Net) push(p pkt) {
	n.n++
	p.n = n.n
	n.q = append(n.q, p)
	i := len(n.q) - 1
	for i > 0 {
		par := (i - 1) / 2
		if !n.less(i, par) {
			break
		}
		n.q[i], n.q[par] = n.q[par], n.q[i]
		i = par
	}
}

func (n *Net) pop() pkt {
	p := n.q[0]
	last := len(n.q) - 1
	n.q[0] = n.q[last]
	n.q[last] = pkt{}
	n.q = n.q[:last]
	i := 0
	for {
		l := 2*i + 1
		if l >= len(n.q) {
			break
		}
		m := l
		if r := l + 1; r < len(n.q) && n.less(r, l) {
			m = r
		}
		if !n.less(m, i) {
			break
		}
		n.q[i], n.q[m] = n.q[m], n.q[i]
		i = m
	}
	return p
}

// Link is one end of a Net; it implements tcpstack.Link.
type Link struct {
	net  *Net
	side int
	rx   [][]byte
	rxHd int
}

// RecvBatch lends up to len(frames) delivered frames.
func (l *Link) RecvBatch(frames [][]byte) int {
	k := copy(frames, l.rx[l.rxHd:])
	l.rxHd += k
	if l.rxHd == len(l.rx) {
		clear(l.rx)
		l.rx = l.rx[:0]
		l.rxHd = 0
	}
	l.net.lent += k
	return k
}

// Release returns a lent frame to the pool.
func (l *Link) Release(f []byte) {
	l.net.lent--
	l.net.put(f)
}

// SendBatch copies the frames onto the wire.
func (l *Link) SendBatch(frames [][]byte) int {
	for _, f := range frames {
		l.net.send(l.side, f)
	}
	return len(frames)
}

// Pending returns the number of delivered frames waiting for RecvBatch.
func (l *Link) Pending() int { return len(l.rx) - l.rxHd }
