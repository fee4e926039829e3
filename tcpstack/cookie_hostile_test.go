package tcpstack_test

// SYN cookies seen from a raw peer (issue 12, point 4): connections made
// through a cookie for every option combination, cookies that are tampered
// with or too old, the bounded SYN-ACK retries, and the option to drop
// instead.

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"xrnic/tcpstack"
	"xrnic/wire/tcp"
)

// fill fills the listener's half-open table with spoofed SYNs (n of them)
// and discards the SYN-ACKs.
func (h *hostile) fill(n int, salt byte) {
	for i := 0; i < n; i++ {
		h.inject([4]byte{203, 0, 113, salt}, uint16(2000+i), tcp.Fields{Seq: tcp.Seq(i), Flags: tcp.FlagSYN, Window: 65535},
			&tcp.Options{HasMSS: true, MSS: 1460}, nil)
	}
	h.poll()
}

// cookieSYN sends a SYN and returns the stack's SYN-ACK to it, which must
// carry a cookie.
func (h *hostile) cookieSYN(src [4]byte, sport uint16, iss tcp.Seq, o *tcp.Options) seg {
	h.t.Helper()
	sent := h.st.Stats.SynCookiesSent
	h.inject(src, sport, tcp.Fields{Seq: iss, Flags: tcp.FlagSYN, Window: 65535}, o, nil)
	var sa *seg
	for _, s := range h.poll() {
		if s.flags == tcp.FlagSYN|tcp.FlagACK && s.dport == sport && s.dst == src {
			s := s
			sa = &s
		}
	}
	if sa == nil || sa.ack != iss.Add(1) {
		h.t.Fatalf("no SYN-ACK (with ack %d) for a SYN from port %d: %+v", iss.Add(1), sport, sa)
	}
	if h.st.Stats.SynCookiesSent != sent+1 {
		h.t.Fatalf("SYN-ACK without a cookie (SynCookiesSent %d -> %d)", sent, h.st.Stats.SynCookiesSent)
	}
	return *sa
}

// openCookie performs a handshake through a cookie: the listener's table
// must be full. The final ACK echoes the SYN-ACK's TSval, as RFC 7323
// §3.2 requires.
func (h *hostile) openCookie(src [4]byte, sport uint16, o *tcp.Options) *flow {
	h.t.Helper()
	fl := &flow{h: h, src: src, sport: sport, iss: tcp.Seq(0x20000000 + uint32(sport)*7919), win: 65535}
	n := h.st.NumConns()
	sa := h.cookieSYN(src, sport, fl.iss, o)
	if h.st.NumConns() != n {
		h.t.Fatalf("a cookie SYN-ACK left a connection behind (%d -> %d)", n, h.st.NumConns())
	}
	fl.sndNxt, fl.rcvNxt = fl.iss.Add(1), sa.seq.Add(1)
	var ack *tcp.Options
	if o != nil && o.HasTimestamps && sa.opts.HasTimestamps {
		fl.ts, fl.tsVal = true, o.TSVal+1
		ack = &tcp.Options{HasTimestamps: true, TSVal: fl.tsVal, TSEcr: sa.opts.TSVal}
	}
	valid := h.st.Stats.SynCookiesValidated
	h.inject(src, sport, tcp.Fields{Seq: fl.sndNxt, Ack: fl.rcvNxt, Flags: tcp.FlagACK, Window: fl.win}, ack, nil)
	if out := h.poll(); len(out) != 0 {
		h.t.Fatalf("the stack answered the cookie's ACK with %+v", out)
	}
	if h.st.Stats.SynCookiesValidated != valid+1 {
		h.t.Fatalf("cookie not validated (rejected %d)", h.st.Stats.SynCookiesRejected)
	}
	fl.c = h.ln.Accept()
	if fl.c == nil || fl.c.State() != tcpstack.StateEstablished {
		h.t.Fatal("no established connection to accept after a valid cookie")
	}
	return fl
}

// TestHostileSYNCookieOptions: with the half-open table full, a client
// connects through a cookie for every combination of MSS (table entries and
// between), window scale, SACK-permitted and timestamps. The SYN-ACK offers
// window scaling and SACK only when the client sent timestamps (the
// cookie's bits for them live in the TSval), the connection's MSS is the
// client's rounded down to the cookie table (less the timestamps), it
// carries data both ways, and no state was kept between SYN and ACK.
func TestHostileSYNCookieOptions(t *testing.T) {
	type mssCase struct{ sent, want uint16 }
	msss := []mssCase{{536, 536}, {1000, 536}, {1220, 1220}, {1300, 1220}, {1360, 1360}, {1400, 1400}, {1440, 1440},
		{1450, 1440}, {1460, 1460}, {8960, 1460} /* our MTU 1500: 1460 at most */, {100, 64}}
	for _, mc := range msss {
		for _, ts := range []bool{false, true} {
			for _, ws := range []int{-1, 0, 7, 14} {
				for _, sack := range []bool{false, true} {
					name := fmt.Sprintf("mss=%d,ts=%v,ws=%d,sack=%v", mc.sent, ts, ws, sack)
					t.Run(name, func(t *testing.T) {
						h := newHostile(t, tcpstack.Config{RecvBuffer: 64 << 10}, tcpstack.ListenOptions{MaxHalfOpen: 4})
						h.fill(4, 1)
						o := &tcp.Options{HasMSS: true, MSS: mc.sent, SACKPermitted: sack, HasTimestamps: ts, TSVal: 1000}
						if ws >= 0 {
							o.HasWindowScale, o.WindowScale = true, uint8(ws)
						}
						sa := h.cookieSYN(hsPeer, 41000, 5555, o)
						if sa.opts.HasTimestamps != ts || sa.opts.SACKPermitted != (ts && sack) || sa.opts.HasWindowScale != (ts && ws >= 0) {
							t.Fatalf("SYN-ACK options %+v", sa.opts)
						}
						if ts && sa.opts.TSEcr != 1000 {
							t.Fatalf("SYN-ACK TSecr %d, want the SYN's TSval 1000", sa.opts.TSEcr)
						}
						if !sa.opts.HasMSS || sa.opts.MSS != 1460 {
							t.Fatalf("SYN-ACK MSS %v %d, want 1460", sa.opts.HasMSS, sa.opts.MSS)
						}
						fl := h.openCookie(hsPeer, 42000, o)
						want := int(mc.want)
						if ts {
							want = max(want-12, 64)
						}
						if fl.c.MSS() != want {
							t.Fatalf("MSS %d, want %d", fl.c.MSS(), want)
						}
						fl.works(t, 1)
						fl.works(t, 2)
						if h.st.Stats.HalfOpen != 4 || h.st.NumConns() != 5 {
							t.Fatalf("half-open %d, conns %d", h.st.Stats.HalfOpen, h.st.NumConns())
						}
					})
				}
			}
		}
	}
}

// TestHostileSYNCookieRejected: while the listener uses cookies, a final
// ACK with a wrong cookie, another peer ISN, altered or missing timestamp
// bits, or one older than two cookie periods (64 s each) creates nothing
// and is dropped silently (counted); without recent cookies an ACK
// without a connection gets a RST, as ever.
func TestHostileSYNCookieRejected(t *testing.T) {
	h := newHostile(t, tcpstack.Config{}, tcpstack.ListenOptions{MaxHalfOpen: 2})
	// Without cookies in use: RST.
	h.inject(hsPeer, 43000, tcp.Fields{Seq: 1, Ack: 2, Flags: tcp.FlagACK, Window: 100}, nil, nil)
	if out := h.poll(); len(out) != 1 || out[0].flags != tcp.FlagRST || out[0].seq != 2 {
		t.Fatalf("stray ACK without cookies in use: %+v, want a RST", out)
	}
	h.fill(2, 1)
	o := &tcp.Options{HasMSS: true, MSS: 1460, HasTimestamps: true, TSVal: 50, HasWindowScale: true, WindowScale: 7, SACKPermitted: true}
	const iss = tcp.Seq(777000)
	sa := h.cookieSYN(hsPeer, 43001, iss, o)
	ackOpts := func(ecr uint32) *tcp.Options { return &tcp.Options{HasTimestamps: true, TSVal: 51, TSEcr: ecr} }
	cases := []struct {
		name     string
		seq, ack tcp.Seq
		o        *tcp.Options
	}{
		{"cookie+1", iss + 1, sa.seq + 2, ackOpts(sa.opts.TSVal)},
		{"cookie-1", iss + 1, sa.seq, ackOpts(sa.opts.TSVal)},
		{"cookie with bit 30 flipped", iss + 1, (sa.seq ^ 1<<30) + 1, ackOpts(sa.opts.TSVal)},
		{"cookie with bit 31 flipped", iss + 1, (sa.seq ^ 1<<31) + 1, ackOpts(sa.opts.TSVal)},
		{"other peer ISN", iss + 2, sa.seq + 1, ackOpts(sa.opts.TSVal)},
		{"window scale bits altered", iss + 1, sa.seq + 1, ackOpts(sa.opts.TSVal ^ 1)},
		{"SACK bit altered", iss + 1, sa.seq + 1, ackOpts(sa.opts.TSVal ^ 0x10)},
		{"timestamps dropped", iss + 1, sa.seq + 1, nil},
	}
	for _, c := range cases {
		rej := h.st.Stats.SynCookiesRejected
		h.inject(hsPeer, 43001, tcp.Fields{Seq: c.seq, Ack: c.ack, Flags: tcp.FlagACK, Window: 100}, c.o, nil)
		if out := h.poll(); len(out) != 0 {
			t.Errorf("%s: answered with %+v", c.name, out)
		}
		if h.st.Stats.SynCookiesRejected != rej+1 || h.ln.Pending() != 0 || h.st.NumConns() != 2 {
			t.Errorf("%s: rejected %d -> %d, pending %d, conns %d", c.name, rej, h.st.Stats.SynCookiesRejected, h.ln.Pending(), h.st.NumConns())
		}
	}
	if h.st.Stats.SynCookiesValidated != 0 {
		t.Fatalf("%d cookies validated", h.st.Stats.SynCookiesValidated)
	}
	// Expiry. The cookie was made in some 64 s period; keep the listener
	// using cookies (a refill of the table every 10 s) for three periods.
	made := h.clk.Now()
	for h.clk.Now() < made+3*64*time.Second {
		h.clk.Advance(10 * time.Second)
		h.poll()
		h.fill(2, byte(h.clk.Now()/time.Second))
	}
	rej := h.st.Stats.SynCookiesRejected
	h.inject(hsPeer, 43001, tcp.Fields{Seq: iss + 1, Ack: sa.seq + 1, Flags: tcp.FlagACK, Window: 100}, ackOpts(sa.opts.TSVal), nil)
	if out := h.poll(); len(out) != 0 || h.st.Stats.SynCookiesRejected != rej+1 || h.ln.Pending() != 0 {
		t.Fatalf("a cookie %v old: answered %+v, rejected %d -> %d, pending %d", h.clk.Now()-made, out, rej, h.st.Stats.SynCookiesRejected, h.ln.Pending())
	}
	// A fresh cookie still works, and so does a genuine one 100 s old.
	fl := h.openCookie(hsPeer, 43002, o)
	fl.works(t, 1)
	// A cookie lives until the end of the period after the one it was
	// made in: 100 s later it is valid iff it was made less than 28 s into
	// its period. Try one of each.
	for _, into := range []time.Duration{5 * time.Second, 40 * time.Second} {
		now := h.clk.Now()
		h.clk.Set(now - now%(64*time.Second) + 64*time.Second + into)
		h.poll()
		h.fill(2, byte(into/time.Second))
		sa2 := h.cookieSYN(hsPeer, 43003, iss, o)
		for range 10 {
			h.clk.Advance(10 * time.Second)
			h.poll()
			h.fill(2, byte(h.clk.Now()/time.Second))
		}
		h.inject(hsPeer, 43003, tcp.Fields{Seq: iss + 1, Ack: sa2.seq + 1, Flags: tcp.FlagACK, Window: 100}, ackOpts(sa2.opts.TSVal), nil)
		h.poll()
		c := h.ln.Accept()
		if (c != nil) != (into < 28*time.Second) {
			t.Fatalf("a cookie made %v into its period accepted 100 s later: %v", into, c != nil)
		}
		if c != nil {
			c.Abort()
			h.poll()
		}
	}
	// Once no cookie went out for two periods, a stray ACK gets a RST again.
	h.clk.Advance(129 * time.Second)
	h.poll()
	h.inject(hsPeer, 43004, tcp.Fields{Seq: 1, Ack: 2, Flags: tcp.FlagACK, Window: 100}, nil, nil)
	if out := h.poll(); len(out) != 1 || out[0].flags != tcp.FlagRST {
		t.Fatalf("stray ACK after cookies stopped: %+v, want a RST", out)
	}
}

// TestHostileSynAckRetries: a half-open entry sends its SYN-ACK 1 +
// SynAckRetries times with exponential backoff from InitialRTO and is then
// dropped; the active side keeps SynRetries.
func TestHostileSynAckRetries(t *testing.T) {
	for _, c := range []struct {
		retries int
		sends   []time.Duration
		gone    time.Duration
	}{
		{0, []time.Duration{0, time.Second, 3 * time.Second, 7 * time.Second}, 15 * time.Second}, // the default, 3
		{1, []time.Duration{0, time.Second}, 3 * time.Second},
		{6, []time.Duration{0, time.Second, 3 * time.Second, 7 * time.Second, 15 * time.Second, 31 * time.Second, 63 * time.Second},
			123 * time.Second}, // the old behaviour (the last wait capped by MaxRTO 60 s)
	} {
		t.Run(fmt.Sprintf("SynAckRetries=%d", c.retries), func(t *testing.T) {
			h := newHostile(t, tcpstack.Config{SynAckRetries: c.retries}, tcpstack.ListenOptions{})
			start := h.clk.Now()
			h.inject(hsPeer, 44000, tcp.Fields{Seq: 9, Flags: tcp.FlagSYN, Window: 65535}, &tcp.Options{HasMSS: true, MSS: 1460}, nil)
			var sends []time.Duration
			for _, s := range h.poll() {
				if s.flags == tcp.FlagSYN|tcp.FlagACK {
					sends = append(sends, h.clk.Now()-start)
				}
			}
			for h.st.NumConns() > 0 {
				out, ok := h.advance(start + time.Hour)
				for _, s := range out {
					if s.flags == tcp.FlagSYN|tcp.FlagACK {
						sends = append(sends, h.clk.Now()-start)
					}
				}
				if !ok {
					t.Fatal("the half-open entry outlived an hour")
				}
			}
			if fmt.Sprint(sends) != fmt.Sprint(c.sends) || h.clk.Now()-start != c.gone {
				t.Fatalf("SYN-ACKs at %v, gone at %v; want %v, %v", sends, h.clk.Now()-start, c.sends, c.gone)
			}
		})
	}
}

// TestHostileSYNCookiesDisabled: with DisableSYNCookies a full table drops
// SYNs, as before cookies.
func TestHostileSYNCookiesDisabled(t *testing.T) {
	h := newHostile(t, tcpstack.Config{DisableSYNCookies: true}, tcpstack.ListenOptions{MaxHalfOpen: 3})
	h.fill(10, 1)
	if st := h.st.Stats; st.RxSynDropped != 7 || st.SynCookiesSent != 0 || st.HalfOpen != 3 {
		t.Fatalf("dropped %d cookies %d half-open %d; want 7, 0, 3", st.RxSynDropped, st.SynCookiesSent, st.HalfOpen)
	}
}

// TestHostileHalfOpenMemory: a half-open entry holds no queues (they come
// with the handshake's completion), so a full table of 1000 entries on a
// stack with 1 MiB receive buffers costs well under 2 KiB each; with its
// queues (1456 receive views, 257 send slots) one would cost about 75 KiB.
func TestHostileHalfOpenMemory(t *testing.T) {
	const n = 1000
	h := newHostile(t, tcpstack.Config{RecvBuffer: 1 << 20, MaxConns: 2 * n}, tcpstack.ListenOptions{MaxHalfOpen: n})
	h.fill(10, 1) // warm up the batch buffers
	var ms0, ms1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms0)
	for i := 0; i < n/250; i++ {
		h.fill(250, byte(2+i))
		h.link.rx, h.link.tx = nil, nil
	}
	runtime.GC()
	runtime.ReadMemStats(&ms1)
	if h.st.Stats.HalfOpen != n {
		t.Fatalf("%d half-open, want %d", h.st.Stats.HalfOpen, n)
	}
	per := (int64(ms1.HeapInuse) - int64(ms0.HeapInuse)) / (n - 10)
	t.Logf("%d B of heap per half-open entry", per)
	if per > 2048 {
		t.Fatalf("a half-open entry costs %d B of heap", per)
	}
	fl := h.openCookie(hsPeer, 45000, &tcp.Options{HasMSS: true, MSS: 1460, HasTimestamps: true, TSVal: 3})
	fl.works(t, 1)
}
