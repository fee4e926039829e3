package tcpstack

import (
	"math/rand/v2"
	"testing"
	"time"

	"xrnic/tcpstack/sim"
	"xrnic/wire/tcp"
)

// detRand returns a deterministic secret source for tests.
func detRand(seed uint64) func([]byte) {
	r := rand.New(rand.NewPCG(seed, 0xc00c1e))
	return func(b []byte) {
		for i := range b {
			b[i] = byte(r.Uint32())
		}
	}
}

// TestSipHash24Vectors: the reference test vectors of SipHash-2-4 (key
// 00 01 .. 0f, message 00 01 .. n-1) for the whole-word lengths.
func TestSipHash24Vectors(t *testing.T) {
	const k0, k1 = 0x0706050403020100, 0x0f0e0d0c0b0a0908
	want := map[int]uint64{0: 0x726fdb47dd0e0e31, 8: 0x93f5f5799a932462, 16: 0x3f2acc7f57c29bdb, 24: 0xb8ad50c6f649af94}
	for n, v := range want {
		m := make([]uint64, n/8)
		for i := range m {
			for j := 0; j < 8; j++ {
				m[i] |= uint64(8*i+j) << (8 * j)
			}
		}
		if got := sipHash24(k0, k1, m); got != v {
			t.Errorf("SipHash-2-4 of %d bytes = %#x, want %#x", n, got, v)
		}
	}
}

func newCookieStack(t testing.TB, cfg Config) *Stack {
	t.Helper()
	cfg.Link, cfg.Clock = &nullLink{}, &sim.Clock{}
	cfg.Addr = [4]byte{198, 18, 9, 1}
	cfg.Seed = 7
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	s.cookieRand = detRand(1)
	return s
}

type nullLink struct{}

func (nullLink) RecvBatch([][]byte) int { return 0 }
func (nullLink) Release([]byte)         {}
func (l nullLink) SendBatch(f [][]byte) int {
	return len(f)
}

// TestCookieRoundTrip: for every MSS table entry (and values between
// entries) and every combination of window scale, SACK-permitted and
// timestamps, a cookie made from a SYN decodes, at any time in its two
// periods, to the SYN's options: the MSS rounded down to the table, and
// window scale and SACK only with timestamps (the table written out here,
// not taken from the code).
func TestCookieRoundTrip(t *testing.T) {
	table := []uint16{64, 536, 1220, 1360, 1400, 1440, 1460, 8960}
	type mssCase struct{ sent, want uint16 }
	var msss []mssCase
	for i, m := range table {
		msss = append(msss, mssCase{m, m})
		if i+1 < len(table) {
			msss = append(msss, mssCase{table[i+1] - 1, m})
		}
	}
	msss = append(msss, mssCase{1, 64}, mssCase{63, 64}, mssCase{65535, 8960}, mssCase{0, 536} /* no MSS option: 536 */)
	s := newCookieStack(t, Config{})
	key := connKey{raddr: [4]byte{198, 19, 1, 2}, rport: 40000, lport: 7306}
	n := 0
	for _, mc := range msss {
		for _, ts := range []bool{false, true} {
			for ws := -1; ws <= 15; ws++ { // -1: no option; 15: above the RFC 7323 limit
				for _, sack := range []bool{false, true} {
					o := tcp.Options{HasMSS: mc.sent != 0, MSS: mc.sent, SACKPermitted: sack, HasTimestamps: ts, TSVal: 12345}
					if ws >= 0 {
						o.HasWindowScale, o.WindowScale = true, uint8(ws)
					}
					isn := tcp.Seq(0x9e3779b9 * uint32(n+1))
					base := time.Duration(n%5) * 50 * time.Second
					s.now = base
					p := s.cookieSynOptions(&o)
					iss := s.cookieMake(key, isn, base, p)
					var tsv uint32
					if p.ts {
						tsv = s.cookieTSVal(p.opts)
						if int32(tsv-(uint32(base/time.Millisecond)+s.cookieTSOffset)) > 0 {
							t.Fatalf("cookie TSval %d is ahead of the clock", tsv)
						}
					}
					periodEnd := (base/cookiePeriod + 2) * cookiePeriod
					for _, at := range []time.Duration{base, base + time.Second, periodEnd - time.Millisecond} {
						got, ok := s.cookieCheck(key, isn.Add(1), iss.Add(1), ts, tsv, at)
						if !ok {
							t.Fatalf("mss %d ts %v ws %d sack %v: made at %v, rejected at %v", mc.sent, ts, ws, sack, base, at)
						}
						d := got.options(777)
						wantWS, wantSACK := ts && ws >= 0, ts && sack
						if !d.HasMSS || d.MSS != mc.want || d.HasTimestamps != ts || d.HasWindowScale != wantWS || d.SACKPermitted != wantSACK ||
							(wantWS && d.WindowScale != uint8(min(ws, 14))) || (ts && d.TSVal != 777) {
							t.Fatalf("mss %d ts %v ws %d sack %v: decoded %+v; want MSS %d, ws %v (%d), sack %v",
								mc.sent, ts, ws, sack, d, mc.want, wantWS, min(ws, 14), wantSACK)
						}
					}
					if _, ok := s.cookieCheck(key, isn.Add(1), iss.Add(1), ts, tsv, periodEnd); ok {
						t.Fatalf("a cookie made at %v accepted at %v (after two periods)", base, periodEnd)
					}
					n++
				}
			}
		}
	}
	t.Logf("%d cookies round-tripped", n)
}

// TestCookieRejected: a cookie altered in any bit, echoed on another
// 4-tuple or with another peer ISN, with altered or dropped timestamp
// bits, or too late is rejected; so is an ACK of a stack with other
// secrets; random ACK numbers essentially never pass.
func TestCookieRejected(t *testing.T) {
	s := newCookieStack(t, Config{})
	key := connKey{raddr: [4]byte{198, 18, 200, 9}, rport: 51000, lport: 7306}
	o := tcp.Options{HasMSS: true, MSS: 1460, HasWindowScale: true, WindowScale: 7, SACKPermitted: true, HasTimestamps: true, TSVal: 1}
	const isn = tcp.Seq(0x01020304)
	now := 10*cookiePeriod + 3*time.Second
	s.now = now
	p := s.cookieSynOptions(&o)
	iss := s.cookieMake(key, isn, now, p)
	tsv := s.cookieTSVal(p.opts)
	check := func(k connKey, seq, ack tcp.Seq, ts bool, ecr uint32, at time.Duration) bool {
		_, ok := s.cookieCheck(k, seq, ack, ts, ecr, at)
		return ok
	}
	if !check(key, isn+1, iss+1, true, tsv, now) {
		t.Fatal("the genuine cookie is rejected")
	}
	for b := 0; b < 32; b++ {
		if check(key, isn+1, (iss^tcp.Seq(1)<<b)+1, true, tsv, now) {
			t.Errorf("cookie with bit %d flipped accepted", b)
		}
	}
	for b := 0; b < 6; b++ {
		if check(key, isn+1, iss+1, true, tsv^1<<b, now) {
			t.Errorf("TSecr with option bit %d flipped accepted", b)
		}
	}
	if check(key, isn+1, iss+1, false, 0, now) {
		t.Error("cookie accepted without the timestamps it was made with")
	}
	if check(key, isn+2, iss+1, true, tsv, now) {
		t.Error("cookie accepted for another peer ISN")
	}
	for _, k := range []connKey{
		{raddr: [4]byte{198, 18, 200, 8}, rport: key.rport, lport: key.lport},
		{raddr: key.raddr, rport: key.rport + 1, lport: key.lport},
		{raddr: key.raddr, rport: key.rport, lport: key.lport + 1},
	} {
		if check(k, isn+1, iss+1, true, tsv, now) {
			t.Errorf("cookie accepted on %v", k)
		}
	}
	// Expiry: made in period 10, valid in 10 and 11, not in 12 (nor
	// before it was made).
	if !check(key, isn+1, iss+1, true, tsv, 12*cookiePeriod-time.Millisecond) {
		t.Error("cookie rejected at the end of the next period")
	}
	if check(key, isn+1, iss+1, true, tsv, 12*cookiePeriod) {
		t.Error("cookie accepted in the second period after")
	}
	// A new cookie in period 12 rotates the secret of slot 0 (period 10's).
	s.now = 12 * cookiePeriod
	s.cookieMake(key, isn, s.now, p)
	if check(key, isn+1, iss+1, true, tsv, 12*cookiePeriod) || check(key, isn+1, iss+1, true, tsv, 11*cookiePeriod) {
		t.Error("cookie of period 10 accepted after its secret rotated")
	}
	if s.cookieKeys[0].period != 12 || s.cookieKeys[1].valid {
		t.Errorf("secrets %+v", s.cookieKeys)
	}
	// Another stack (other secrets) does not take our cookies.
	s2 := newCookieStack(t, Config{})
	s2.cookieRand = detRand(2)
	s2.now = now
	s2.cookieMake(key, isn, now, p)
	if _, ok := s2.cookieCheck(key, isn+1, iss+1, true, tsv, now); ok {
		t.Error("another stack's secret accepted the cookie")
	}
	// Random guesses: 2^20 ACK numbers with the right tuple and ISN.
	s.now = now
	s.cookieKeys = [2]cookieSecret{}
	s.cookieMake(key, isn, now, p)
	seed := uint64(time.Now().UnixNano())
	r := rand.New(rand.NewPCG(seed, 1))
	hits := 0
	for i := 0; i < 1<<20; i++ {
		if check(key, isn+1, tcp.Seq(r.Uint32()), true, r.Uint32(), now) {
			hits++
		}
	}
	// Expected 2^20 / 2^28 per MSS index and option guess: 1 in 256.
	if hits > 2 {
		t.Errorf("%d of 2^20 random ACKs passed (seed %d)", hits, seed)
	}
	t.Logf("random ACK numbers: %d of 2^20 passed (seed %d)", hits, seed)
}

// TestCookieMSSIndex checks the table lookup at and around every entry.
func TestCookieMSSIndex(t *testing.T) {
	cases := []struct {
		mss  uint16
		want uint8
	}{{0, 0}, {63, 0}, {64, 0}, {535, 0}, {536, 1}, {1219, 1}, {1220, 2}, {1359, 2}, {1360, 3}, {1400, 4}, {1439, 4},
		{1440, 5}, {1459, 5}, {1460, 6}, {8959, 6}, {8960, 7}, {65535, 7}}
	for _, c := range cases {
		if got := cookieMSSIndex(c.mss); got != c.want {
			t.Errorf("cookieMSSIndex(%d) = %d, want %d", c.mss, got, c.want)
		}
	}
}

// BenchmarkCookie is the cost of making and checking one cookie.
func BenchmarkCookie(b *testing.B) {
	s := newCookieStack(b, Config{})
	key := connKey{raddr: [4]byte{198, 18, 1, 1}, rport: 1, lport: 2}
	o := tcp.Options{HasMSS: true, MSS: 1460, HasTimestamps: true}
	p := s.cookieSynOptions(&o)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		iss := s.cookieMake(key, tcp.Seq(i), 0, p)
		if _, ok := s.cookieCheck(key, tcp.Seq(i+1), iss+1, true, uint32(p.opts), 0); !ok {
			b.Fatal("rejected")
		}
	}
}

// FuzzSYNCookie: any SYN's cookie round-trips within its periods, a cookie
// altered in its hash bits never passes, and checking arbitrary ACKs never
// misbehaves.
func FuzzSYNCookie(f *testing.F) {
	f.Add(uint32(0xc6120102), uint16(40000), uint16(7306), uint32(1), uint16(1460), uint8(7), uint8(0xff), uint32(5), uint32(0), uint32(0x1234))
	f.Add(uint32(0), uint16(0), uint16(0), uint32(0xffffffff), uint16(0), uint8(0), uint8(0), uint32(0), uint32(1), uint32(0))
	f.Fuzz(func(t *testing.T, raddr uint32, rport, lport uint16, isn uint32, mss uint16, ws, flags uint8, ms, flip, ack uint32) {
		s := newCookieStack(t, Config{DisableSACK: flags&16 != 0, DisableTimestamps: flags&32 != 0, DisableWindowScale: flags&64 != 0})
		key := connKey{raddr: [4]byte{byte(raddr >> 24), byte(raddr >> 16), byte(raddr >> 8), byte(raddr)}, rport: rport, lport: lport}
		o := tcp.Options{HasMSS: flags&1 != 0, MSS: mss, HasWindowScale: flags&2 != 0, WindowScale: ws, SACKPermitted: flags&4 != 0, HasTimestamps: flags&8 != 0, TSVal: ack}
		now := time.Duration(ms) * time.Millisecond
		s.now = now
		p := s.cookieSynOptions(&o)
		iss := s.cookieMake(key, tcp.Seq(isn), now, p)
		var tsv uint32
		if p.ts {
			tsv = s.cookieTSVal(p.opts)
		}
		later := now + time.Duration(flip%uint32(cookiePeriod/time.Millisecond))*time.Millisecond
		got, ok := s.cookieCheck(key, tcp.Seq(isn+1), iss+1, p.ts, tsv, later)
		if !ok || got != p {
			t.Fatalf("round trip: %+v -> %+v %v", p, got, ok)
		}
		if x := flip & cookieMACMask; x != 0 {
			if _, ok := s.cookieCheck(key, tcp.Seq(isn+1), (iss^tcp.Seq(x))+1, p.ts, tsv, now); ok {
				t.Fatalf("cookie with hash bits %#x flipped accepted", x)
			}
		}
		if q, ok := s.cookieCheck(key, tcp.Seq(isn), tcp.Seq(ack), flags&128 != 0, flip, now); ok {
			if d := q.options(0); d.MSS == 0 || d.WindowScale > 14 {
				t.Fatalf("accepted garbage decodes to %+v", d)
			}
		}
	})
}

// TestCookieTSValMonotonic: the cookie TSval never runs ahead of what the
// connection sends next, for every option value.
func TestCookieTSValMonotonic(t *testing.T) {
	s := newCookieStack(t, Config{})
	for _, off := range []uint32{0, 1, 63, 64, 0xffffffc0, 0xffffffff} {
		s.cookieTSOffset = off
		for ms := 0; ms < 200; ms += 7 {
			s.now = time.Duration(ms) * time.Millisecond
			now := uint32(ms) + off
			for opts := uint8(0); opts <= cookieOptMask; opts++ {
				v := s.cookieTSVal(opts)
				if v&cookieOptMask != uint32(opts) || int32(now-v) < 0 || now-v > cookieOptMask {
					t.Fatalf("offset %#x at %d ms: TSval %#x for bits %#x", off, ms, v, opts)
				}
			}
		}
	}
}

// synLink hands the stack one prebuilt SYN per RecvBatch and drops what the
// stack sends, allocating nothing.
type synLink struct {
	frame []byte
	n     int
	sent  int
}

func (l *synLink) RecvBatch(frames [][]byte) int {
	if l.n == 0 {
		return 0
	}
	l.n--
	frames[0] = l.frame
	return 1
}
func (l *synLink) Release([]byte)           {}
func (l *synLink) SendBatch(f [][]byte) int { l.sent += len(f); return len(f) }

// TestCookieZeroAllocs: with the half-open table full, answering a SYN
// with a cookie keeps no state and allocates nothing.
func TestCookieZeroAllocs(t *testing.T) {
	lk := &synLink{}
	clk := &sim.Clock{}
	mac := [6]byte{2, 0, 0, 0, 0, 1}
	s, err := New(Config{Link: lk, Clock: clk, MAC: mac, Addr: [4]byte{198, 18, 9, 1}, Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Listen(7306, ListenOptions{MaxHalfOpen: 1}); err != nil {
		t.Fatal(err)
	}
	src := [4]byte{198, 19, 0, 1}
	lk.frame = make([]byte, 14+20+40)
	copy(lk.frame, mac[:])
	lk.frame[12], lk.frame[13] = 0x08, 0x00
	th := lk.frame[34:]
	hl, err := tcp.Put(th, &tcp.Fields{SrcPort: 1000, DstPort: 7306, Seq: 1, Flags: tcp.FlagSYN, Window: 65535},
		&tcp.Options{HasMSS: true, MSS: 1460, HasTimestamps: true, TSVal: 1, SACKPermitted: true, HasWindowScale: true, WindowScale: 7})
	if err != nil {
		t.Fatal(err)
	}
	lk.frame = lk.frame[:34+hl]
	ipHdr := lk.frame[14:34]
	ipHdr[0], ipHdr[8], ipHdr[9] = 0x45, 64, 6
	ipHdr[2], ipHdr[3] = 0, byte(20+hl)
	copy(ipHdr[12:], src[:])
	copy(ipHdr[16:], []byte{198, 18, 9, 1})
	var sum uint32
	for i := 0; i < 20; i += 2 {
		sum += uint32(ipHdr[i])<<8 | uint32(ipHdr[i+1])
	}
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	ipHdr[10], ipHdr[11] = byte(^sum>>8), byte(^sum)
	port := uint16(1000)
	syn := func() {
		port++
		tcp.Header(th[:hl]).SetSrcPort(port)
		tcp.Header(th[:hl]).UpdateChecksum(tcp.PseudoHeaderSum(src, [4]byte{198, 18, 9, 1}, hl))
		lk.n = 1
		s.Poll()
	}
	for i := 0; i < 10; i++ {
		syn()
	}
	if s.Stats.SynCookiesSent != 9 || s.Stats.HalfOpen != 1 || lk.sent != 10 {
		t.Fatalf("cookies %d half-open %d sent %d (RxBadIP %d, RxBadChecksum %d)", s.Stats.SynCookiesSent, s.Stats.HalfOpen, lk.sent, s.Stats.RxBadIP, s.Stats.RxBadChecksum)
	}
	conns := s.NumConns()
	if n := testing.AllocsPerRun(1000, syn); n != 0 {
		t.Fatalf("%v allocations per cookie SYN-ACK, want 0", n)
	}
	if s.NumConns() != conns || s.Stats.SynCookiesSent != 1010 {
		t.Fatalf("conns %d -> %d, cookies %d", conns, s.NumConns(), s.Stats.SynCookiesSent)
	}
}
