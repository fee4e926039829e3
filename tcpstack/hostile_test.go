package tcpstack_test

// Hostile TCP peers (issue 9, item 2, the TCP-level part): RFC 5961 blind
// reset and SYN attacks, a SYN flood against the bounded half-open table, a
// peer that holds a zero window forever, and tiny MSS values. The peer is a
// raw segment writer over an in-memory link with a virtual clock, so every
// case is deterministic and runs without privileges; the test black-boxes
// the stack (package tcpstack_test) and judges it only by the frames it
// sends and its public state.

import (
	"bytes"
	"errors"
	"fmt"
	"runtime"
	"testing"
	"time"

	"xrnic/tcpstack"
	"xrnic/tcpstack/sim"
	"xrnic/wire/eth"
	"xrnic/wire/ipv4"
	"xrnic/wire/tcp"
)

var (
	hsMAC  = eth.MAC{2, 0, 0, 0, 0xee, 1}
	hsAddr = [4]byte{198, 18, 7, 1}
	hsPeer = [4]byte{198, 18, 7, 2}
	hsPMAC = eth.MAC{2, 0, 0, 0, 0xee, 2}
)

const hsPort = 7306

// rawLink is the stack's Link: frames the test injects wait in rx; frames
// the stack sends are copied to tx for the test to read.
type rawLink struct {
	rx   [][]byte
	tx   [][]byte
	lent int
}

var _ tcpstack.Link = (*rawLink)(nil)

func (l *rawLink) RecvBatch(frames [][]byte) int {
	k := copy(frames, l.rx)
	l.rx = l.rx[k:]
	l.lent += k
	return k
}

func (l *rawLink) Release([]byte) { l.lent-- }

func (l *rawLink) SendBatch(frames [][]byte) int {
	for _, f := range frames {
		l.tx = append(l.tx, bytes.Clone(f))
	}
	return len(frames)
}

// seg is a parsed segment the stack sent.
type seg struct {
	src, dst   [4]byte
	sport      uint16
	dport      uint16
	seq, ack   tcp.Seq
	flags      tcp.Flags
	win        uint16
	opts       tcp.Options
	payload    []byte
	optLen     int
	ipTotalLen int
}

func parseSeg(tb testing.TB, f []byte) seg {
	tb.Helper()
	ef, err := eth.Parse(f)
	if err != nil {
		tb.Fatalf("stack sent a bad frame: %v", err)
	}
	ip, err := ipv4.Parse(ef.Payload())
	if err != nil {
		tb.Fatalf("stack sent a bad IPv4 packet: %v", err)
	}
	th, err := tcp.Parse(ip.Payload())
	if err != nil || !th.ChecksumValid(ip.PseudoHeaderSum()) {
		tb.Fatalf("stack sent a bad TCP segment: %v", err)
	}
	s := seg{src: ip.Src(), dst: ip.Dst(), sport: th.SrcPort(), dport: th.DstPort(), seq: th.Seq(), ack: th.Ack(),
		flags: th.Flags(), win: th.Window(), payload: th.Payload(), optLen: len(th.Options()), ipTotalLen: int(ip.TotalLen())}
	if err := tcp.ParseOptions(th.Options(), &s.opts); err != nil {
		tb.Fatalf("stack sent bad options: %v", err)
	}
	return s
}

// hostile is a stack with one raw peer (many source addresses and ports
// may be spoofed through it).
type hostile struct {
	t    *testing.T
	clk  *sim.Clock
	link *rawLink
	st   *tcpstack.Stack
	ln   *tcpstack.Listener
}

func newHostile(t *testing.T, cfg tcpstack.Config, lo tcpstack.ListenOptions) *hostile {
	t.Helper()
	h := &hostile{t: t, clk: &sim.Clock{}, link: &rawLink{}}
	h.clk.Set(time.Hour) // not at 0: nothing may treat time 0 specially
	cfg.Link, cfg.Clock, cfg.MAC, cfg.Addr, cfg.Seed = h.link, h.clk, hsMAC, hsAddr, 0x5eed
	st, err := tcpstack.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	h.st = st
	if h.ln, err = st.Listen(hsPort, lo); err != nil {
		t.Fatal(err)
	}
	return h
}

// inject queues a segment from src:sport to the listener's port.
func (h *hostile) inject(src [4]byte, sport uint16, f tcp.Fields, o *tcp.Options, payload []byte) {
	f.SrcPort = sport
	if f.DstPort == 0 {
		f.DstPort = hsPort
	}
	b := make([]byte, eth.HeaderLen+ipv4.MinHeaderLen+60+len(payload))
	eth.Put(b, hsMAC, hsPMAC, eth.TypeIPv4)
	th := b[eth.HeaderLen+ipv4.MinHeaderLen:]
	hl, err := tcp.Put(th, &f, o)
	if err != nil {
		h.t.Fatal(err)
	}
	copy(th[hl:], payload)
	sg := th[:hl+len(payload)]
	if _, err := ipv4.Put(b[eth.HeaderLen:], &ipv4.Fields{TotalLen: uint16(ipv4.MinHeaderLen + len(sg)), TTL: 64,
		Protocol: ipv4.ProtoTCP, Flags: ipv4.FlagDF, Src: src, Dst: hsAddr}); err != nil {
		h.t.Fatal(err)
	}
	tcp.Header(sg).UpdateChecksum(tcp.PseudoHeaderSum(src, hsAddr, len(sg)))
	h.link.rx = append(h.link.rx, b[:eth.HeaderLen+ipv4.MinHeaderLen+len(sg)])
}

// poll runs the stack once and returns what it sent.
func (h *hostile) poll() []seg {
	h.st.Poll()
	out := make([]seg, 0, len(h.link.tx))
	for _, f := range h.link.tx {
		out = append(out, parseSeg(h.t, f))
	}
	h.link.tx = h.link.tx[:0]
	return out
}

// advance moves the virtual clock to the stack's next deadline (but at
// most to limit) and polls; it returns what was sent and whether a
// deadline was reached before limit.
func (h *hostile) advance(limit time.Duration) ([]seg, bool) {
	next := h.st.Poll()
	if len(h.link.tx) > 0 {
		return h.poll(), true
	}
	if next == tcpstack.NoDeadline || next > limit {
		h.clk.Set(limit)
		return h.poll(), false
	}
	h.clk.Set(next)
	return h.poll(), true
}

// flow is one connection from the raw peer's point of view.
type flow struct {
	h      *hostile
	src    [4]byte
	sport  uint16
	iss    tcp.Seq // ours (the peer's)
	sndNxt tcp.Seq // peer's next sequence number
	rcvNxt tcp.Seq // next byte expected from the stack
	win    uint16
	ts     bool // timestamps negotiated: every segment carries them
	tsVal  uint32
	c      *tcpstack.Conn // the stack's side, once accepted
	got    []byte         // payload received from the stack
}

// opts returns the options of a non-SYN segment of the flow.
func (fl *flow) opts() *tcp.Options {
	if !fl.ts {
		return nil
	}
	fl.tsVal++
	return &tcp.Options{HasTimestamps: true, TSVal: fl.tsVal}
}

// open performs the handshake from the raw peer with the given SYN
// options and accepts the stack's side.
func (h *hostile) open(src [4]byte, sport uint16, o *tcp.Options) *flow {
	h.t.Helper()
	fl := &flow{h: h, src: src, sport: sport, iss: tcp.Seq(0x10000000 + uint32(sport)*7919), win: 65535}
	if o != nil && o.HasTimestamps {
		fl.ts, fl.tsVal = true, o.TSVal
	}
	h.inject(src, sport, tcp.Fields{Seq: fl.iss, Flags: tcp.FlagSYN, Window: fl.win}, o, nil)
	var sa *seg
	for _, s := range h.poll() {
		if s.flags&(tcp.FlagSYN|tcp.FlagACK) == tcp.FlagSYN|tcp.FlagACK && s.dport == sport {
			s := s
			sa = &s
		}
	}
	if sa == nil {
		h.t.Fatalf("no SYN-ACK for a SYN from port %d", sport)
	}
	if sa.ack != fl.iss.Add(1) {
		h.t.Fatalf("SYN-ACK acks %d, want %d", sa.ack, fl.iss.Add(1))
	}
	fl.sndNxt, fl.rcvNxt = fl.iss.Add(1), sa.seq.Add(1)
	fl.ack(fl.win)
	if out := h.poll(); len(out) != 0 {
		h.t.Fatalf("the stack answered the handshake's ACK with %d segments", len(out))
	}
	fl.c = h.ln.Accept()
	if fl.c == nil || fl.c.State() != tcpstack.StateEstablished {
		h.t.Fatal("no established connection to accept")
	}
	return fl
}

func (fl *flow) ack(win uint16) {
	fl.h.inject(fl.src, fl.sport, tcp.Fields{Seq: fl.sndNxt, Ack: fl.rcvNxt, Flags: tcp.FlagACK, Window: win}, fl.opts(), nil)
}

func (fl *flow) send(flags tcp.Flags, seq tcp.Seq, payload []byte) {
	fl.h.inject(fl.src, fl.sport, tcp.Fields{Seq: seq, Ack: fl.rcvNxt, Flags: flags, Window: fl.win}, fl.opts(), payload)
}

// take records the stack's segments of this flow: in-order payload is
// appended to got (and rcvNxt advances); it returns the segments.
func (fl *flow) take(out []seg) []seg {
	var mine []seg
	for _, s := range out {
		if s.dport != fl.sport || s.dst != fl.src {
			continue
		}
		mine = append(mine, s)
		if len(s.payload) > 0 && s.seq == fl.rcvNxt {
			fl.got = append(fl.got, s.payload...)
			fl.rcvNxt = fl.rcvNxt.Add(uint32(len(s.payload)))
		}
		if s.flags&tcp.FlagFIN != 0 && s.seq.Add(uint32(len(s.payload))) == fl.rcvNxt {
			fl.rcvNxt = fl.rcvNxt.Add(1)
		}
	}
	return mine
}

// works proves the connection still carries data both ways.
func (fl *flow) works(t *testing.T, tag byte) {
	t.Helper()
	h := fl.h
	msg := bytes.Repeat([]byte{tag}, 100)
	fl.send(tcp.FlagACK|tcp.FlagPSH, fl.sndNxt, msg)
	fl.sndNxt = fl.sndNxt.Add(uint32(len(msg)))
	fl.take(h.poll())
	buf := make([]byte, 200)
	n, err := fl.c.Read(buf)
	if err != nil || !bytes.Equal(buf[:n], msg) {
		t.Fatalf("stack read %d bytes (%v), want the peer's 100 bytes of %#x", n, err, tag)
	}
	before := len(fl.got)
	if _, err := fl.c.Write(bytes.Repeat([]byte{^tag}, 50)); err != nil {
		t.Fatalf("write: %v", err)
	}
	fl.take(h.poll())
	if len(fl.got)-before != 50 {
		t.Fatalf("peer received %d bytes, want 50 (state %v)", len(fl.got)-before, fl.c.State())
	}
	fl.ack(fl.win)
	fl.take(h.poll())
}

// TestHostileRST: RFC 5961 §3 and §4. A RST is accepted only at exactly
// RCV.NXT; one elsewhere in the window draws a challenge ACK and changes
// nothing; one outside the window is dropped silently; a SYN on a
// synchronized connection draws a challenge ACK. After each the attacked
// connection and a bystander still carry data.
func TestHostileRST(t *testing.T) {
	type result int
	const (
		reset result = iota
		challenge
		dupack // an ACK for an unacceptable segment (RFC 9293 §3.10.7.4), not counted as a challenge
		silent
	)
	cases := []struct {
		name  string
		flags tcp.Flags
		off   int64 // from RCV.NXT (the stack's view of the peer's next byte)
		want  result
	}{
		{"RST at RCV.NXT", tcp.FlagRST, 0, reset},
		{"RST|ACK at RCV.NXT", tcp.FlagRST | tcp.FlagACK, 0, reset},
		{"RST at RCV.NXT+1", tcp.FlagRST, 1, challenge},
		{"RST in window", tcp.FlagRST, 30000, challenge},
		{"RST at window's last byte", tcp.FlagRST, -1, challenge}, // -1: the last byte of the window, see below
		{"RST just past the window", tcp.FlagRST, -2, silent},
		{"RST far past the window", tcp.FlagRST, 1 << 30, silent},
		{"RST at RCV.NXT-1", tcp.FlagRST, -3, silent},
		{"RST half the space away", tcp.FlagRST, 1 << 31, silent},
		{"SYN at RCV.NXT", tcp.FlagSYN, 0, challenge},
		{"SYN in window", tcp.FlagSYN, 777, challenge},
		{"SYN out of window", tcp.FlagSYN, 1 << 30, dupack},
		{"SYN|ACK in window", tcp.FlagSYN | tcp.FlagACK, 5, challenge},
		// RST is checked before SYN (RFC 9293 §3.10.7.4 steps 2 and 4, as
		// Linux): exact, so it resets.
		{"SYN|RST at RCV.NXT", tcp.FlagSYN | tcp.FlagRST, 0, reset},
		{"SYN|RST in window", tcp.FlagSYN | tcp.FlagRST, 3, challenge},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHostile(t, tcpstack.Config{RecvBuffer: 64 << 10}, tcpstack.ListenOptions{})
			victim := h.open(hsPeer, 40001, &tcp.Options{HasMSS: true, MSS: 1460})
			bystander := h.open(hsPeer, 40002, &tcp.Options{HasMSS: true, MSS: 1460})
			victim.works(t, 1)
			// The stack's receive window as it last advertised it.
			win := victim.advertised(t)
			var seq tcp.Seq
			switch tc.off {
			case -1:
				seq = victim.sndNxt.Add(win - 1)
			case -2:
				seq = victim.sndNxt.Add(win)
			case -3:
				seq = victim.sndNxt.Sub(1)
			default:
				seq = victim.sndNxt.Add(uint32(tc.off))
			}
			ch := h.st.Stats.RxChallengeACK
			victim.send(tc.flags, seq, nil)
			out := victim.take(h.poll())
			switch tc.want {
			case reset:
				if victim.c.State() != tcpstack.StateClosed || !errors.Is(victim.c.Err(), tcpstack.ErrReset) {
					t.Fatalf("state %v err %v after an exact RST; want CLOSED, ErrReset", victim.c.State(), victim.c.Err())
				}
				if len(out) != 0 {
					t.Fatalf("the stack answered an accepted RST with %d segments", len(out))
				}
				victim.c.Close()
			case challenge, dupack:
				if len(out) != 1 || out[0].flags != tcp.FlagACK || out[0].seq != victim.rcvNxt || out[0].ack != victim.sndNxt || len(out[0].payload) != 0 {
					t.Fatalf("want one challenge ACK (seq %d ack %d), got %+v", victim.rcvNxt, victim.sndNxt, out)
				}
				if tc.want == challenge && h.st.Stats.RxChallengeACK != ch+1 {
					t.Fatalf("RxChallengeACK %d -> %d, want +1", ch, h.st.Stats.RxChallengeACK)
				}
			case silent:
				if len(out) != 0 {
					t.Fatalf("the stack answered an out-of-window segment with %+v", out)
				}
			}
			if tc.want != reset {
				if victim.c.State() != tcpstack.StateEstablished {
					t.Fatalf("victim is %v, want ESTABLISHED", victim.c.State())
				}
				victim.works(t, 2)
			}
			bystander.works(t, 3)
			if h.st.NumConns() != 2-btoi(tc.want == reset) {
				t.Fatalf("%d connections", h.st.NumConns())
			}
		})
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// advertised asks the stack for a pure ACK (a duplicate segment below
// RCV.NXT draws one, RFC 9293 §3.10.7.4) and returns the window it
// advertises (unscaled: the raw peer offered no window scaling).
func (fl *flow) advertised(t *testing.T) uint32 {
	t.Helper()
	fl.send(tcp.FlagACK, fl.sndNxt.Sub(1), []byte{0})
	out := fl.take(fl.h.poll())
	if len(out) != 1 || out[0].flags != tcp.FlagACK {
		t.Fatalf("want one ACK for an old duplicate, got %+v", out)
	}
	if out[0].ack != fl.sndNxt {
		t.Fatalf("ACK %d, want RCV.NXT %d", out[0].ack, fl.sndNxt)
	}
	return uint32(out[0].win)
}

// TestHostileChallengeACKLimit: a blind attacker firing in-window RSTs
// gets at most 1000 challenge ACKs per second back (RFC 5961 §7), the
// connection survives, and the count restarts the next second.
func TestHostileChallengeACKLimit(t *testing.T) {
	h := newHostile(t, tcpstack.Config{RecvBuffer: 64 << 10}, tcpstack.ListenOptions{})
	fl := h.open(hsPeer, 40001, &tcp.Options{HasMSS: true, MSS: 1460})
	acks := 0
	for i := 0; i < 5000; i++ {
		fl.send(tcp.FlagRST, fl.sndNxt.Add(uint32(1+i%60000)), nil)
		acks += len(fl.take(h.poll())) // one at a time: ACKs are not coalesced
		if i%100 == 99 {
			h.clk.Advance(time.Millisecond) // 5000 RSTs in 50 ms
		}
	}
	if acks != 1000 {
		t.Fatalf("%d challenge ACKs for 5000 in-window RSTs in 50 ms; want exactly the limit, 1000", acks)
	}
	h.clk.Advance(time.Second)
	fl.send(tcp.FlagRST, fl.sndNxt.Add(9), nil)
	if n := len(fl.take(h.poll())); n != 1 {
		t.Fatalf("%d challenge ACKs a second later, want 1", n)
	}
	if fl.c.State() != tcpstack.StateEstablished {
		t.Fatalf("state %v", fl.c.State())
	}
	fl.works(t, 9)
	t.Logf("5000 blind RSTs: %d challenge ACKs (limit 1000/s)", acks)
}

// TestHostileSYNFlood: 20,000 spoofed SYNs that never complete against a
// listener with MaxHalfOpen 32. The half-open table never exceeds 32 and
// every SYN beyond it is answered with a SYN cookie, keeping nothing; a
// legitimate client connects through a cookie in the middle of the flood
// and its connection carries data both ways; established connections keep
// working; the table's entries give up after SynAckRetries (default 3:
// gone 15 s after the flood) and the heap does not grow with the flood.
func TestHostileSYNFlood(t *testing.T) {
	const maxHalf, flood = 32, 20000
	h := newHostile(t, tcpstack.Config{}, tcpstack.ListenOptions{MaxHalfOpen: maxHalf, Backlog: 8})
	old := h.open(hsPeer, 40001, &tcp.Options{HasMSS: true, MSS: 1460})
	g0 := runtime.NumGoroutine()
	var ms0, ms1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms0)

	synAcks, rexmits, maxConns := 0, 0, 0
	var legit *flow
	start := h.clk.Now()
	count := func(out []seg) {
		for _, s := range out {
			if s.flags&tcp.FlagSYN != 0 {
				synAcks++
			}
		}
	}
	for i := 0; i < flood; i++ {
		src := [4]byte{203, 0, 113, byte(1 + i%200)} // spoofed TEST-NET-3 sources: never answer
		o := &tcp.Options{HasMSS: true, MSS: 1460, SACKPermitted: true, HasWindowScale: true, WindowScale: 7}
		if i%2 == 0 {
			o.HasTimestamps, o.TSVal = true, uint32(i)
		}
		h.inject(src, uint16(1024+i%60000), tcp.Fields{Seq: tcp.Seq(i * 7777), Flags: tcp.FlagSYN, Window: 65535}, o, nil)
		if i%256 == 255 {
			count(h.poll())
			maxConns = max(maxConns, h.st.NumConns())
			h.clk.Advance(time.Millisecond)
		}
		if i == flood/2 {
			count(h.poll())
			cookies := h.st.Stats.SynCookiesSent
			legit = h.openCookie(hsPeer, 50000, &tcp.Options{HasMSS: true, MSS: 1460, SACKPermitted: true,
				HasWindowScale: true, WindowScale: 7, HasTimestamps: true, TSVal: 99})
			if h.st.Stats.SynCookiesSent != cookies+1 || h.st.Stats.SynCookiesValidated != 1 {
				t.Fatalf("legitimate client during the flood: cookies sent %d -> %d, validated %d; want +1, 1",
					cookies, h.st.Stats.SynCookiesSent, h.st.Stats.SynCookiesValidated)
			}
			legit.works(t, 7)
		}
	}
	count(h.poll())
	maxConns = max(maxConns, h.st.NumConns())
	if maxConns > maxHalf+2 {
		t.Fatalf("%d connections during the flood; the half-open table is bounded by %d (+2 established)", maxConns, maxHalf)
	}
	st := h.st.Stats
	if st.HalfOpenPeak != maxHalf || st.HalfOpen != maxHalf {
		t.Fatalf("half-open %d, peak %d; want %d", st.HalfOpen, st.HalfOpenPeak, maxHalf)
	}
	if st.SynCookiesSent != flood-maxHalf+1 || st.RxSynDropped != 0 || synAcks != flood {
		t.Fatalf("cookies sent %d (want %d), SYNs dropped %d (want 0), SYN-ACKs %d (want one per SYN, %d)",
			st.SynCookiesSent, flood-maxHalf+1, st.RxSynDropped, synAcks, flood)
	}
	old.works(t, 4) // an established connection is unaffected
	legit.works(t, 8)

	// Let the half-open entries retry and expire.
	for h.st.NumConns() > 2 {
		out, ok := h.advance(start + 30*time.Minute)
		for _, s := range out {
			if s.flags&tcp.FlagSYN != 0 {
				rexmits++
			}
		}
		old.take(out)
		legit.take(out)
		if !ok {
			t.Fatalf("%d half-open connections left after 30 minutes", h.st.NumConns()-2)
		}
	}
	drained := h.clk.Now() - start
	// SYN-ACKs at 0, 1, 3 and 7 s (InitialRTO 1 s, doubling), given up at 15 s.
	if rexmits > maxHalf*3 || drained > 16*time.Second {
		t.Fatalf("%d SYN-ACK retransmissions (want at most %d), drained after %v (want 15 s)", rexmits, maxHalf*3, drained)
	}
	if h.st.Stats.HalfOpen != 0 {
		t.Fatalf("half-open gauge %d after the drain", h.st.Stats.HalfOpen)
	}
	if h.st.SegmentsInUse() != 0 || h.link.lent != 0 {
		t.Fatalf("segments in use %d, frames held %d after the flood", h.st.SegmentsInUse(), h.link.lent)
	}
	old.works(t, 5)
	legit.works(t, 9)
	cookies := h.st.Stats.SynCookiesSent
	after := h.open(hsPeer, 50001, &tcp.Options{HasMSS: true, MSS: 1460})
	after.works(t, 6)
	if h.st.Stats.SynCookiesSent != cookies {
		t.Fatal("a cookie was sent with the half-open table empty")
	}

	runtime.GC()
	runtime.ReadMemStats(&ms1)
	if g := runtime.NumGoroutine(); g > g0 {
		t.Fatalf("goroutines %d -> %d", g0, g)
	}
	grow := int64(ms1.HeapInuse) - int64(ms0.HeapInuse)
	t.Logf("flood of %d SYNs: max %d conns, %d SYN-ACKs (%d cookies) + %d retransmitted, drained after %v virtual; heap in use %+d KiB",
		flood, maxConns, synAcks, st.SynCookiesSent, rexmits, drained.Round(time.Second), grow>>10)
	// The flood costs the table and the retransmissions, not memory per
	// SYN: 20,000 SYNs of ~1 KiB would show as tens of MiB.
	if grow > 8<<20 {
		t.Fatalf("heap grew by %d KiB over the flood", grow>>10)
	}
}

// TestHostileZeroWindow: the peer takes some data, then advertises a zero
// window forever and answers every window probe with window 0. The stack
// probes with exponential backoff up to MaxRTO, keeps the connection, and
// never buffers more than its send queue (Write says ErrWouldBlock). When
// the application closes, the FIN cannot be sent; the connection still
// ends within a bounded time. A second variant has the peer fall silent
// (probes unanswered): the connection times out like a lost peer.
func TestHostileZeroWindow(t *testing.T) {
	for _, answer := range []bool{true, false} {
		t.Run(fmt.Sprintf("answers_probes=%v", answer), func(t *testing.T) {
			const sendSegs = 16
			h := newHostile(t, tcpstack.Config{SendSegments: sendSegs, MaxRTO: 60 * time.Second}, tcpstack.ListenOptions{})
			fl := h.open(hsPeer, 40001, &tcp.Options{HasMSS: true, MSS: 1000})
			other := h.open(hsPeer, 40002, &tcp.Options{HasMSS: true, MSS: 1000})
			// The peer takes 2000 bytes and shuts its window.
			fl.c.Write(bytes.Repeat([]byte{7}, 2000))
			fl.take(h.poll())
			if len(fl.got) != 2000 {
				t.Fatalf("peer got %d bytes", len(fl.got))
			}
			fl.ack(0)
			fl.take(h.poll())
			// The application writes far more than fits.
			total := 0
			for i := 0; i < 100; i++ {
				n, err := fl.c.Write(make([]byte, 4096))
				total += n
				if err != nil {
					if !errors.Is(err, tcpstack.ErrWouldBlock) {
						t.Fatal(err)
					}
					break
				}
			}
			if total > sendSegs*1000 || h.st.SegmentsInUse() > 2*sendSegs {
				t.Fatalf("took %d bytes, %d segments in use, for a send queue of %d segments", total, h.st.SegmentsInUse(), sendSegs)
			}
			// Run an hour of virtual time.
			start := h.clk.Now()
			var probes []time.Duration
			for h.clk.Now() < start+time.Hour {
				out, ok := h.advance(start + time.Hour)
				for _, s := range fl.take(out) {
					if len(s.payload) > 1 {
						t.Fatalf("%d bytes sent into a zero window", len(s.payload))
					}
					if s.flags&tcp.FlagRST != 0 {
						if answer {
							t.Fatalf("connection reset although the peer answers every probe (after %v)", h.clk.Now()-start)
						}
						continue
					}
					probes = append(probes, h.clk.Now())
					if answer {
						fl.ack(0)
					}
				}
				if !ok {
					break
				}
				if !answer && fl.c.State() == tcpstack.StateClosed {
					break
				}
			}
			if !answer {
				if fl.c.State() != tcpstack.StateClosed || !errors.Is(fl.c.Err(), tcpstack.ErrTimeout) {
					t.Fatalf("unanswered probes for %v (%d probes): state %v err %v; want CLOSED by timeout",
						h.clk.Now()-start, len(probes), fl.c.State(), fl.c.Err())
				}
				t.Logf("silent peer: %d unanswered probes, closed after %v", len(probes), (h.clk.Now() - start).Round(time.Second))
				fl.c.Close()
				other.works(t, 1)
				return
			}
			if fl.c.State() != tcpstack.StateEstablished {
				t.Fatalf("state %v after an hour of zero window", fl.c.State())
			}
			// Backoff: intervals double up to MaxRTO; an hour holds only
			// about 60 probes at the cap.
			if len(probes) < 10 || len(probes) > 80 {
				t.Fatalf("%d probes in an hour", len(probes))
			}
			for i := 2; i < len(probes); i++ {
				prev, cur := probes[i-1]-probes[i-2], probes[i]-probes[i-1]
				if cur < prev || cur > 60*time.Second {
					t.Fatalf("probe intervals %v then %v: want non-decreasing, at most MaxRTO", prev, cur)
				}
			}
			if probes[len(probes)-1]-probes[len(probes)-2] != 60*time.Second {
				t.Fatalf("last interval %v, want MaxRTO", probes[len(probes)-1]-probes[len(probes)-2])
			}
			if h.link.lent != 0 {
				t.Fatalf("%d frames held", h.link.lent)
			}
			other.works(t, 2)

			// The application gives up; the peer keeps its window shut and
			// keeps answering. The connection must end in bounded time.
			fl.c.Close()
			closed := h.clk.Now()
			for fl.c.State() != tcpstack.StateClosed {
				out, ok := h.advance(closed + 2*time.Hour)
				for _, s := range fl.take(out) {
					if s.flags&tcp.FlagRST == 0 {
						fl.ack(0)
					}
				}
				if !ok {
					break
				}
			}
			if fl.c.State() != tcpstack.StateClosed {
				t.Fatalf("closed by the application but still %v after 2 hours of zero window (%d probes)",
					fl.c.State(), h.st.Stats.ZeroWindowProbes)
			}
			t.Logf("zero window: %d probes in the first hour, last interval %v; after Close ended in %v (%v)",
				len(probes), probes[len(probes)-1]-probes[len(probes)-2], (h.clk.Now() - closed).Round(time.Second), fl.c.Err())
			if h.st.NumConns() != 1 || h.st.SegmentsInUse() != 0 {
				t.Fatalf("%d connections, %d segments in use after the close", h.st.NumConns(), h.st.SegmentsInUse())
			}
			other.works(t, 3)
		})
	}
}

// TestHostileTinyMSS: a peer advertising MSS 1..64 (with and without
// timestamps). The stack clamps its send MSS to a floor of 64 payload bytes
// rather than refusing the connection or sending one-byte segments (Linux
// clamps to 48 by tcp_min_snd_mss); at and above the floor no segment
// exceeds the peer's MSS (payload plus options, RFC 6691). The stream
// arrives intact, in a bounded number of segments.
//
// For iWARP (RFC 5044 §5.1) MULPDU never goes below 128, so an FPDU is at
// least 134 bytes and cannot be aligned to segments of such a peer: the
// afxdp transport splits FPDUs across segments (transport/afxdp/conn.go place), and
// MPA receivers deframe the byte stream regardless of segment boundaries,
// so only the alignment optimisation is lost. A peer has to advertise an
// MSS of at least 134 (146 with timestamps) for aligned FPDUs.
func TestHostileTinyMSS(t *testing.T) {
	const floor = 64
	for _, ts := range []bool{false, true} {
		for _, mss := range []uint16{1, 2, 8, 40, 52, 63, 64, 65, 76, 88, 134, 146, 536} {
			t.Run(fmt.Sprintf("mss=%d,ts=%v", mss, ts), func(t *testing.T) {
				h := newHostile(t, tcpstack.Config{}, tcpstack.ListenOptions{})
				o := &tcp.Options{HasMSS: true, MSS: mss}
				if ts {
					o.HasTimestamps, o.TSVal = true, 1
				}
				fl := h.open(hsPeer, 40001, o)
				optLen := 0
				if ts {
					optLen = 12
				}
				want := max(int(mss)-optLen, floor)
				if got := fl.c.MSS(); got != want {
					t.Fatalf("MSS() = %d, want %d", got, want)
				}
				if b, err := fl.c.Segment(); err != nil || len(b) != want {
					t.Fatalf("Segment() gives %d bytes (%v), want %d", len(b), err, want)
				}
				const total = 20000
				data := make([]byte, total)
				for i := range data {
					data[i] = byte(i*131 + i>>8)
				}
				wrote, segs := 0, 0
				for len(fl.got) < total {
					if wrote < total {
						n, err := fl.c.Write(data[wrote:])
						wrote += n
						if err != nil && !errors.Is(err, tcpstack.ErrWouldBlock) {
							t.Fatal(err)
						}
					}
					out := fl.take(h.poll())
					if len(out) == 0 {
						if _, ok := h.advance(h.clk.Now() + time.Second); !ok {
							t.Fatalf("stalled at %d of %d bytes", len(fl.got), total)
						}
						continue
					}
					for _, s := range out {
						if len(s.payload) == 0 {
							continue
						}
						segs++
						if len(s.payload) > want {
							t.Fatalf("a %d-byte segment for send MSS %d", len(s.payload), want)
						}
						if int(mss) >= floor+optLen && len(s.payload)+s.optLen > int(mss) {
							t.Fatalf("segment of %d bytes + %d option bytes exceeds the peer's MSS %d", len(s.payload), s.optLen, mss)
						}
					}
					fl.ack(65535)
				}
				if !bytes.Equal(fl.got, data) {
					t.Fatal("stream corrupted")
				}
				if maxSegs := (total+want-1)/want + 2; segs > maxSegs {
					t.Fatalf("%d data segments for %d bytes at MSS %d, want at most %d", segs, total, want, maxSegs)
				}
			})
		}
	}
}
