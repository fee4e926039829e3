package tcpstack

import (
	"errors"
	"math"
	"math/rand/v2"
	"syscall"
	"time"

	"xrnic/wire/eth"
	"xrnic/wire/ipv4"
	"xrnic/wire/tcp"
)

// Link is a batch-shaped Ethernet frame link (an AF_XDP queue, a TAP device,
// an in-memory wire). All methods are called by the stack's owner goroutine.
type Link interface {
	// RecvBatch moves up to len(frames) received Ethernet frames into frames
	// and returns how many it moved (0 when nothing is pending). The stack
	// owns each returned frame until it passes it to Release.
	RecvBatch(frames [][]byte) int
	// Release gives a frame obtained from RecvBatch back to the link.
	Release(frame []byte)
	// SendBatch transmits the frames in order and returns how many it took;
	// the rest count as dropped (TCP recovers). The link must be finished with
	// the frames when it returns: it copies them or has sent them.
	SendBatch(frames [][]byte) int
}

// Clock is the stack's time source: a monotonic time since an arbitrary
// epoch. Tests inject a virtual clock.
type Clock interface {
	Now() time.Duration
}

type sysClock struct{ start time.Time }

func (c sysClock) Now() time.Duration { return time.Since(c.start) }

// SystemClock returns a Clock reading the monotonic system clock.
func SystemClock() Clock { return sysClock{time.Now()} }

// errnoError is an error that also matches the errno a kernel socket
// gives for it (errors.Is(ErrRefused, syscall.ECONNREFUSED)), so callers
// treat both transports alike.
type errnoError struct {
	msg string
	no  syscall.Errno
}

func (e errnoError) Error() string        { return e.msg }
func (e errnoError) Is(target error) bool { return target == e.no }

// NoDeadline is what Poll returns when no timer is armed.
const NoDeadline = time.Duration(math.MaxInt64)

// Errors.
var (
	ErrClosed             = errors.New("tcpstack: connection closed")
	ErrReset        error = errnoError{"tcpstack: connection reset by peer", syscall.ECONNRESET}
	ErrRefused      error = errnoError{"tcpstack: connection refused", syscall.ECONNREFUSED}
	ErrTimeout      error = errnoError{"tcpstack: connection timed out", syscall.ETIMEDOUT}
	ErrAborted            = errors.New("tcpstack: connection aborted locally")
	ErrWouldBlock         = errors.New("tcpstack: no send buffer free; wait for Writable")
	ErrNotConnected       = errors.New("tcpstack: connection not established")
	ErrAddrInUse          = errors.New("tcpstack: address in use")
	ErrNoPorts            = errors.New("tcpstack: no ephemeral port free")
	ErrTooMany            = errors.New("tcpstack: connection limit reached")
	ErrNoRoute            = errors.New("tcpstack: no MAC address for the peer (set DialOptions.RemoteMAC or Config.Resolve)")
	ErrConfig             = errors.New("tcpstack: invalid configuration")
)

// Config configures a Stack. Zero fields take the documented defaults.
type Config struct {
	Link  Link    // required
	Clock Clock   // default SystemClock()
	MAC   eth.MAC // our MAC address
	Addr  [4]byte // our IPv4 address
	MTU   int     // IP MTU, default 1500

	// Resolve maps a peer address to its MAC for Dial when DialOptions has
	// none. Passive connections answer the source MAC of the SYN.
	Resolve func(ip [4]byte) (eth.MAC, bool)

	MaxConns     int // default 1024
	SendSegments int // send buffer per connection in segments, default 256
	RecvBuffer   int // receive window per connection in bytes, default 256 KiB
	RecvFrames   int // frames a connection may hold (in order + out of order), default 2*RecvBuffer/MSS
	MaxOOO       int // out-of-order frames per connection, default 64

	InitialRTO time.Duration // default 1s (RFC 6298 §2.1)
	MinRTO     time.Duration // default 200ms (Linux; RFC 6298 says 1s)
	MaxRTO     time.Duration // default 60s
	DelayedACK time.Duration // default 40ms
	TimeWait   time.Duration // 2*MSL, default 60s
	FinWait2   time.Duration // orphaned FIN-WAIT-2 timeout, default 60s
	MaxRetries int           // data retransmissions before giving up, default 15
	SynRetries int           // SYN retransmissions of Dial (and SYN-ACKs of a simultaneous open), default 6

	// SynAckRetries bounds the SYN-ACK retransmissions of a listener's
	// half-open (SYN-RECEIVED) connection, default 3: with InitialRTO 1s
	// the SYN-ACK goes out at 0, 1, 3 and 7 s and the entry is dropped at
	// 15 s, so a table filled by spoofed SYNs drains in seconds, not in
	// the two minutes of six retries (Linux's tcp_synack_retries is 5). A
	// real peer that lost them all retransmits its SYN.
	SynAckRetries int

	// DisableSYNCookies drops SYNs beyond a listener's MaxHalfOpen instead
	// of answering them with SYN cookies (cookie.go, RFC 4987 §3.6).
	DisableSYNCookies bool

	// AckEvery is how many data segments may arrive in order before an
	// ACK is sent at once (default 2: RFC 5681 §4.2, an ACK for at least
	// every second full-sized segment); fewer wait for DelayedACK or ride
	// on data. Larger values are stretch ACKs, as Linux sends behind GRO:
	// on a link where every frame costs a system call (AF_XDP in copy
	// mode) they save most of the ACK traffic of a bulk stream. The first
	// segments of a connection and those after out-of-order data are
	// still acknowledged every second one (quick ACKs), so a small
	// congestion window is never starved, and a sender whose peer uses
	// AckEvery n counts up to n segments per ACK in its window growth
	// (RFC 3465's L), so set the same value on both ends.
	AckEvery int

	DisableSACK        bool
	DisableTimestamps  bool
	DisableWindowScale bool

	// NewRenoRecovery recovers from loss with NewReno (RFC 6582), SACK
	// only choosing which hole to resend, even when SACK is in use; the
	// default with SACK is RFC 6675. For comparisons.
	NewRenoRecovery bool

	// AcceptPartialChecksum accepts TCP checksums that a veth peer with
	// offload left half-done (see package xrnic/wire/tcp).
	AcceptPartialChecksum bool

	// Seed seeds ISNs, ephemeral ports and timestamp offsets; 0 picks one.
	Seed uint64

	// Notify, if set, is called at the end of Poll for every connection with
	// new events, with the events that happened.
	Notify func(c *Conn, ev Event)

	// Tap, if set, sees every frame the stack accepts (after a partial
	// checksum has been completed) and every frame it transmits, for captures.
	Tap func(frame []byte, out bool)
}

// Event bits passed to Config.Notify.
type Event uint8

// Events.
const (
	EvEstablished Event = 1 << iota // handshake complete (Dial), or a listener has a conn to Accept
	EvReadable                      // new in-order data or end of stream
	EvWritable                      // send buffers were freed
	EvClosed                        // the connection ended (Conn.Err says why)
)

// Stats are plain per-stack counters, read by the owner.
type Stats struct {
	RxFrames, RxSegments, RxBadIP, RxBadChecksum, RxPartialChecksum uint64
	RxNoConn, RxDropped, RxOOO, RxDupData, RxPAWS, RxOutOfWindow    uint64
	RxChallengeACK, RxSynDropped                                    uint64

	// SYN cookies (cookie.go): SYN-ACKs sent with a cookie, final ACKs
	// whose cookie was valid, and ACKs without a connection that reached a
	// listener using cookies with an invalid or expired one (dropped). A
	// valid cookie while the accept queue is full counts in RxSynDropped.
	SynCookiesSent, SynCookiesValidated, SynCookiesRejected uint64
	// HalfOpen is the number of half-open connections of every listener
	// now (a gauge), HalfOpenPeak the most there ever were.
	HalfOpen, HalfOpenPeak uint64

	TxFrames, TxDropped, TxSegments, TxRetransmits, TxRST       uint64
	FastRetransmits, Timeouts, ZeroWindowProbes, TailLossProbes uint64
	RACKRecoveries                                              uint64 // recoveries started by the probe timer (RACK)

	// RTT is a histogram of the round-trip samples that feed the RTO
	// estimator (RFC 6298: timed segments or, with timestamps, echoed
	// TSvals at millisecond granularity).
	RTT RTTHistogram
}

// RTTBounds are the upper bounds of the RTT histogram's buckets.
var RTTBounds = [...]time.Duration{
	10 * time.Microsecond, 25 * time.Microsecond, 50 * time.Microsecond,
	100 * time.Microsecond, 250 * time.Microsecond, 500 * time.Microsecond,
	time.Millisecond, 2500 * time.Microsecond, 5 * time.Millisecond,
	10 * time.Millisecond, 25 * time.Millisecond, 50 * time.Millisecond,
	100 * time.Millisecond, 250 * time.Millisecond, 500 * time.Millisecond,
	time.Second,
}

// RTTHistogram counts RTT samples per bucket of RTTBounds; Counts[i] is the
// number of samples in (RTTBounds[i-1], RTTBounds[i]] (not cumulative) and
// the last element counts those above every bound.
type RTTHistogram struct {
	Counts [len(RTTBounds) + 1]uint64
	Count  uint64
	Sum    time.Duration
}

func (h *RTTHistogram) observe(r time.Duration) {
	i := 0
	for i < len(RTTBounds) && r > RTTBounds[i] {
		i++
	}
	h.Counts[i]++
	h.Count++
	h.Sum += r
}

// Add accumulates another histogram into h (to sum queues).
func (h *RTTHistogram) Add(o *RTTHistogram) {
	for i := range h.Counts {
		h.Counts[i] += o.Counts[i]
	}
	h.Count += o.Count
	h.Sum += o.Sum
}

type connKey struct {
	raddr        [4]byte
	rport, lport uint16
}

const (
	headroom  = eth.HeaderLen + ipv4.MinHeaderLen + tcp.MaxHeaderLen
	batchSize = 64
)

// Stack is one TCP/IPv4 endpoint over a Link. It is not safe for concurrent
// use: its owner goroutine calls every method.
type Stack struct {
	cfg   Config
	link  Link
	clock Clock
	now   time.Duration
	rng   *rand.Rand

	maxPayload int // MTU - 40: the largest segment payload without options
	frameSize  int // headroom + maxPayload

	conns     map[connKey]*Conn
	listeners map[uint16]*Listener
	nconns    int
	timers    timerHeap

	segFree      []*seg
	segAllocated int

	rxBatch   [][]byte
	txBatch   [][]byte
	txScratch [][]byte
	txOpts    tcp.Options
	rxOpts    tcp.Options
	ipID      uint16

	challengeAt time.Duration
	challengeN  int

	rcvWScale      uint8 // the window scale we offer
	cookieKeys     [2]cookieSecret
	cookieTSOffset uint32       // TSval offset of cookie SYN-ACKs and their connections
	cookieRand     func([]byte) // the secrets' source: crypto/rand (tests may replace it)

	dirty  []*Conn // need output
	events []*Conn // have events for Notify

	Stats Stats
}

// New returns a Stack for cfg.
func New(cfg Config) (*Stack, error) {
	if cfg.Link == nil {
		return nil, errors.Join(ErrConfig, errors.New("Link is nil"))
	}
	if cfg.Clock == nil {
		cfg.Clock = SystemClock()
	}
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	defd := func(v *time.Duration, d time.Duration) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&cfg.MTU, 1500)
	if cfg.MTU < 576 || cfg.MTU > 65535-headroom {
		return nil, errors.Join(ErrConfig, errors.New("MTU out of 576..65441"))
	}
	def(&cfg.MaxConns, 1024)
	def(&cfg.SendSegments, 256)
	def(&cfg.RecvBuffer, 256<<10)
	if cfg.RecvBuffer > 1<<30 {
		cfg.RecvBuffer = 1 << 30
	}
	def(&cfg.RecvFrames, 2*cfg.RecvBuffer/(cfg.MTU-52)+8)
	def(&cfg.MaxOOO, 64)
	defd(&cfg.InitialRTO, time.Second)
	defd(&cfg.MinRTO, 200*time.Millisecond)
	defd(&cfg.MaxRTO, 60*time.Second)
	defd(&cfg.DelayedACK, 40*time.Millisecond)
	def(&cfg.AckEvery, 2)
	defd(&cfg.TimeWait, 60*time.Second)
	defd(&cfg.FinWait2, 60*time.Second)
	def(&cfg.MaxRetries, 15)
	def(&cfg.SynRetries, 6)
	def(&cfg.SynAckRetries, 3)
	seed := cfg.Seed
	if seed == 0 {
		seed = rand.Uint64()
	}
	s := &Stack{
		cfg:        cfg,
		link:       cfg.Link,
		clock:      cfg.Clock,
		rng:        rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		maxPayload: cfg.MTU - ipv4.MinHeaderLen - tcp.MinHeaderLen,
		conns:      make(map[connKey]*Conn),
		listeners:  make(map[uint16]*Listener),
		rxBatch:    make([][]byte, batchSize),
		txBatch:    make([][]byte, 0, batchSize),
		txScratch:  make([][]byte, batchSize),
		dirty:      make([]*Conn, 0, 64),
		events:     make([]*Conn, 0, 64),
	}
	s.frameSize = headroom + s.maxPayload
	if !cfg.DisableWindowScale {
		for s.rcvWScale < 14 && cfg.RecvBuffer>>s.rcvWScale > 65535 {
			s.rcvWScale++
		}
	}
	s.cookieTSOffset = s.rng.Uint32()
	s.cookieRand = cryptoRand
	for i := range s.txScratch {
		s.txScratch[i] = make([]byte, s.frameSize)
	}
	s.now = s.clock.Now()
	return s, nil
}

// Now returns the stack's notion of the current time (the clock as of the
// last Poll or API call).
func (s *Stack) Now() time.Duration { return s.now }

// Addr returns the stack's IPv4 address.
func (s *Stack) Addr() [4]byte { return s.cfg.Addr }

// MAC returns the stack's MAC address.
func (s *Stack) MAC() eth.MAC { return s.cfg.MAC }

// NumConns returns the number of live connections (including TIME-WAIT).
func (s *Stack) NumConns() int { return s.nconns }

// SegmentsInUse returns the number of send segment buffers held by
// connections (for leak checks).
func (s *Stack) SegmentsInUse() int { return s.segAllocated - len(s.segFree) }

// Poll receives and processes every pending frame, fires expired timers,
// transmits what is due and delivers events. It returns the time (on the
// stack's Clock) of the next timer, or NoDeadline.
func (s *Stack) Poll() time.Duration {
	s.now = s.clock.Now()
	for {
		n := s.link.RecvBatch(s.rxBatch)
		for i := 0; i < n; i++ {
			f := s.rxBatch[i]
			s.rxBatch[i] = nil
			s.input(f)
		}
		s.flushDirty()
		s.flushTx()
		if n < len(s.rxBatch) {
			break
		}
	}
	s.runTimers()
	s.flushDirty()
	s.flushTx()
	s.deliverEvents()
	if len(s.dirty) > 0 { // Notify wrote something
		s.flushDirty()
		s.flushTx()
	}
	return s.timers.next()
}

// NextTimer returns the time (on the stack's Clock) of the earliest armed
// timer, or NoDeadline. Unlike Poll's result it includes what calls made
// after the Poll armed (a Flush that sent data arms the RTO).
func (s *Stack) NextTimer() time.Duration { return s.timers.next() }

// Flush transmits what connection calls queued (Poll does it too).
func (s *Stack) Flush() {
	s.now = s.clock.Now()
	s.flushDirty()
	s.flushTx()
}

func (s *Stack) deliverEvents() {
	for len(s.events) > 0 {
		c := s.events[0]
		copy(s.events, s.events[1:])
		s.events = s.events[:len(s.events)-1]
		ev := c.ev
		c.ev = 0
		c.inEvents = false
		if s.cfg.Notify != nil && ev != 0 {
			s.cfg.Notify(c, ev)
		}
	}
}

func (s *Stack) flushDirty() {
	for i := 0; i < len(s.dirty); i++ {
		c := s.dirty[i]
		c.inDirty = false
		c.output()
	}
	s.dirty = s.dirty[:0]
}

func (s *Stack) flushTx() {
	if len(s.txBatch) == 0 {
		return
	}
	if s.cfg.Tap != nil {
		for _, f := range s.txBatch {
			s.cfg.Tap(f, true)
		}
	}
	n := s.link.SendBatch(s.txBatch)
	s.Stats.TxFrames += uint64(n)
	s.Stats.TxDropped += uint64(len(s.txBatch) - n)
	clear(s.txBatch)
	s.txBatch = s.txBatch[:0]
}

// scratch returns a transmit frame buffer for the next batch slot.
func (s *Stack) scratch() []byte {
	if len(s.txBatch) == cap(s.txBatch) {
		s.flushTx()
	}
	return s.txScratch[len(s.txBatch)]
}

func (s *Stack) queueTx(f []byte) {
	if len(s.txBatch) == cap(s.txBatch) {
		s.flushTx()
	}
	s.txBatch = append(s.txBatch, f)
	s.Stats.TxSegments++
}

func (s *Stack) runTimers() {
	for {
		c := s.timers.peek()
		if c == nil || c.deadline > s.now {
			return
		}
		c.fireTimers()
		c.rearm()
	}
}

// input processes one received frame; it owns f.
func (s *Stack) input(f []byte) {
	s.Stats.RxFrames++
	ef, err := eth.Parse(f)
	if err != nil || ef.EtherType() != eth.TypeIPv4 || (ef.Dst() != s.cfg.MAC && ef.Dst() != eth.Broadcast) {
		s.link.Release(f)
		return
	}
	ip, err := ipv4.Parse(ef.Payload())
	if err != nil || ip.Protocol() != ipv4.ProtoTCP || ip.IsFragment() || ip.Dst() != s.cfg.Addr {
		s.Stats.RxBadIP++
		s.link.Release(f)
		return
	}
	th, err := tcp.Parse(ip.Payload())
	if err != nil {
		s.Stats.RxBadIP++
		s.link.Release(f)
		return
	}
	pseudo := ip.PseudoHeaderSum()
	if !th.ChecksumValid(pseudo) {
		if !s.cfg.AcceptPartialChecksum || !th.IsPartialChecksum(pseudo) {
			s.Stats.RxBadChecksum++
			s.link.Release(f)
			return
		}
		th.CompletePartialChecksum()
		s.Stats.RxPartialChecksum++
	}
	if tcp.ParseOptions(th.Options(), &s.rxOpts) != nil {
		s.Stats.RxBadIP++
		s.link.Release(f)
		return
	}
	if s.cfg.Tap != nil {
		s.cfg.Tap(f, false)
	}
	s.Stats.RxSegments++
	seg := inSeg{
		frame: f, hdr: th, seq: th.Seq(), ack: th.Ack(), flags: th.Flags(),
		wnd: th.Window(), data: th.Payload(), opts: &s.rxOpts,
		src: ip.Src(), srcMAC: ef.Src(),
	}
	key := connKey{raddr: ip.Src(), rport: th.SrcPort(), lport: th.DstPort()}
	if c := s.conns[key]; c != nil {
		if !c.input(&seg) {
			s.link.Release(f)
		}
		return
	}
	if l := s.listeners[key.lport]; l != nil {
		switch seg.flags & (tcp.FlagSYN | tcp.FlagACK | tcp.FlagRST) {
		case tcp.FlagSYN:
			l.onSYN(&seg, key)
			s.link.Release(f)
			return
		case tcp.FlagACK:
			if l.usesCookies() {
				if !l.onCookieACK(&seg, key) {
					s.link.Release(f)
				}
				return
			}
		}
	}
	s.Stats.RxNoConn++
	s.sendResetFor(&seg, key)
	s.link.Release(f)
}

// sendResetFor answers a segment that has no connection (RFC 9293 §3.10.7.1).
func (s *Stack) sendResetFor(seg *inSeg, key connKey) {
	if seg.flags&tcp.FlagRST != 0 {
		return
	}
	var seq, ack tcp.Seq
	flags := tcp.FlagRST
	if seg.flags&tcp.FlagACK != 0 {
		seq = seg.ack
	} else {
		ack = seg.seq.Add(uint32(seg.seqLen()))
		flags |= tcp.FlagACK
	}
	s.rawSend(key, seg.srcMAC, seq, ack, flags, 0)
}

// rawSend emits a header-only segment outside any connection.
func (s *Stack) rawSend(key connKey, dmac eth.MAC, seq, ack tcp.Seq, flags tcp.Flags, wnd uint16) {
	b := s.scratch()
	o := &s.txOpts
	*o = tcp.Options{}
	start := s.writeHeaders(b, headroom, 0, dmac, key, seq, ack, flags, wnd, o)
	s.queueTx(b[start:headroom])
	if flags&tcp.FlagRST != 0 {
		s.Stats.TxRST++
	}
}

// writeHeaders writes Ethernet, IPv4 and TCP headers into b so that they end
// at off, where n payload bytes already are, fills in the checksums and
// returns the frame's start offset.
func (s *Stack) writeHeaders(b []byte, off, n int, dmac eth.MAC, key connKey, seq, ack tcp.Seq, flags tcp.Flags, wnd uint16, o *tcp.Options) int {
	tl := tcp.MinHeaderLen + o.Len()
	start := off - tl - ipv4.MinHeaderLen - eth.HeaderLen
	eth.Put(b[start:], dmac, s.cfg.MAC, eth.TypeIPv4)
	s.ipID++
	ipf := ipv4.Fields{
		TotalLen: uint16(ipv4.MinHeaderLen + tl + n),
		ID:       s.ipID,
		Flags:    ipv4.FlagDF,
		TTL:      64,
		Protocol: ipv4.ProtoTCP,
		Src:      s.cfg.Addr,
		Dst:      key.raddr,
	}
	ipv4.Put(b[start+eth.HeaderLen:], &ipf)
	tf := tcp.Fields{SrcPort: key.lport, DstPort: key.rport, Seq: seq, Ack: ack, Flags: flags, Window: wnd}
	to := start + eth.HeaderLen + ipv4.MinHeaderLen
	tcp.Put(b[to:], &tf, o)
	th := tcp.Header(b[to : off+n])
	th.UpdateChecksum(tcp.PseudoHeaderSum(s.cfg.Addr, key.raddr, tl+n))
	return start
}

func (s *Stack) markDirty(c *Conn) {
	if !c.inDirty {
		c.inDirty = true
		s.dirty = append(s.dirty, c)
	}
}

func (s *Stack) addEvent(c *Conn, ev Event) {
	c.ev |= ev
	if !c.inEvents {
		c.inEvents = true
		s.events = append(s.events, c)
	}
}

// segment buffers

func (s *Stack) allocSeg() *seg {
	if n := len(s.segFree); n > 0 {
		sg := s.segFree[n-1]
		s.segFree = s.segFree[:n-1]
		return sg
	}
	s.segAllocated++
	return &seg{buf: make([]byte, s.frameSize)}
}

func (s *Stack) freeSeg(sg *seg) {
	if sg.buf == nil {
		return
	}
	*sg = seg{buf: sg.buf}
	s.segFree = append(s.segFree, sg)
}

// iss returns an initial sequence number.
func (s *Stack) iss() tcp.Seq { return tcp.Seq(s.rng.Uint32()) }
