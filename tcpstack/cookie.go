package tcpstack

import (
	"crypto/rand"
	"encoding/binary"
	"math/bits"
	"time"

	"xrnic/wire/tcp"
)

// SYN cookies (RFC 4987 §3.6). When a listener's half-open table is full,
// a SYN is answered statelessly: everything the connection needs from the
// SYN is encoded in our initial sequence number (and, when the peer sent
// timestamps, in the low bits of our TSval), authenticated by a keyed hash,
// and recovered from the final ACK of the handshake, which echoes both
// (ACK = ISS+1, TSecr = our TSval).
//
// The ISS (32 bits):
//
//	bit  31     parity of the cookie period (now / cookiePeriod) it was made in
//	bits 30..28 index into cookieMSS: the largest entry not above the peer's MSS
//	bits 27..0  the low 28 bits of SipHash-2-4 under the period's secret over
//	            (peer address, our address, peer port, our port, the peer's
//	            ISN, the period number, the MSS index, whether timestamps are
//	            in use, the option bits below)
//
// The option bits (6), only when the peer sent timestamps and we use them,
// are the low 6 bits of our SYN-ACK's TSval (the TSval rounded down to
// them, so it never runs ahead of the connection's later TSvals):
//
//	bits 3..0  the peer's window scale (0..14), 15 = no window scaling
//	bit  4     SACK permitted
//	bit  5     0 (reserved)
//
// Without timestamps there is nowhere to keep them, so the SYN-ACK offers
// neither window scaling nor SACK and the connection runs without (as
// Linux). Because the option bits are under the hash too, a peer cannot
// change them (or drop the timestamps) without invalidating the cookie.
//
// Every period has its own 128-bit secret from crypto/rand, made when the
// first cookie of the period is sent; two are kept (the parity bit picks
// one), so a cookie is accepted in the period it was made and the next
// one: between one and two periods, 64 to 128 s, as Linux's two 64 s
// counter periods. An older cookie finds its slot holding a newer secret
// and fails. Final ACKs are checked against cookies only while the
// listener sent cookies in the last two periods; at other times an ACK
// without a connection is answered with a RST as before.

// cookiePeriod is the lifetime unit of a cookie secret.
const cookiePeriod = 64 * time.Second

// cookieMSS are the MSS values a cookie can carry, ascending: common
// Ethernet values (IPv4 over 1500, with PPPoE, tunnels and VPNs), the
// default 536 (RFC 9293 §3.7.1), and a 9000-byte jumbo MTU. The first,
// 64, is the stack's floor for a send MSS: a peer advertising less than
// 536 gets it, so we never send more than any peer's MSS.
var cookieMSS = [8]uint16{64, 536, 1220, 1360, 1400, 1440, 1460, 8960}

const (
	cookieMACBits = 28
	cookieMACMask = 1<<cookieMACBits - 1
	cookieOptMask = 0x3f
	cookieNoWS    = 0xf
	cookieSACK    = 0x10
)

// cookieMSSIndex returns the index of the largest cookieMSS entry not
// above mss (0 if every entry is).
func cookieMSSIndex(mss uint16) uint8 {
	i := len(cookieMSS) - 1
	for i > 0 && cookieMSS[i] > mss {
		i--
	}
	return uint8(i)
}

// cookieSecret is the secret of one cookie period.
type cookieSecret struct {
	period uint32
	valid  bool
	k0, k1 uint64
}

// cookieParams is what a cookie carries about the peer's SYN.
type cookieParams struct {
	mssIdx uint8
	ts     bool  // timestamps in use (the peer sent them and we take them)
	opts   uint8 // option bits (ts only)
}

// cookieSynOptions returns the parameters a cookie records for a SYN's
// options under the stack's configuration.
func (s *Stack) cookieSynOptions(o *tcp.Options) cookieParams {
	mss := uint16(536)
	if o.HasMSS && o.MSS > 0 {
		mss = o.MSS
	}
	p := cookieParams{mssIdx: cookieMSSIndex(mss)}
	if !o.HasTimestamps || s.cfg.DisableTimestamps {
		return p
	}
	p.ts = true
	p.opts = cookieNoWS
	if o.HasWindowScale && !s.cfg.DisableWindowScale {
		p.opts = min(o.WindowScale, 14)
	}
	if o.SACKPermitted && !s.cfg.DisableSACK {
		p.opts |= cookieSACK
	}
	return p
}

// options turns cookie parameters back into the SYN options they stand
// for (the MSS rounded down to the table).
func (p cookieParams) options(tsVal uint32) tcp.Options {
	o := tcp.Options{HasMSS: true, MSS: cookieMSS[p.mssIdx&7]}
	if p.ts {
		o.HasTimestamps, o.TSVal = true, tsVal
		if ws := p.opts & 0xf; ws != cookieNoWS {
			o.HasWindowScale, o.WindowScale = true, ws
		}
		o.SACKPermitted = p.opts&cookieSACK != 0
	}
	return o
}

// cookieSecretFor returns the secret of period t; create makes one for t if
// its slot holds another period's.
func (s *Stack) cookieSecretFor(t uint32, create bool) *cookieSecret {
	e := &s.cookieKeys[t&1]
	if e.valid && e.period == t {
		return e
	}
	if !create {
		return nil
	}
	var b [16]byte
	s.cookieRand(b[:])
	*e = cookieSecret{period: t, valid: true, k0: binary.LittleEndian.Uint64(b[:8]), k1: binary.LittleEndian.Uint64(b[8:])}
	return e
}

func cryptoRand(b []byte) { rand.Read(b) }

// cookiePeriodAt is the cookie period number of time now.
func cookiePeriodAt(now time.Duration) uint32 { return uint32(now / cookiePeriod) }

// cookieMAC is the keyed hash of a cookie's inputs.
func (s *Stack) cookieMAC(k *cookieSecret, key connKey, peerISN tcp.Seq, t uint32, p cookieParams) uint32 {
	m := [3]uint64{
		uint64(binary.BigEndian.Uint32(key.raddr[:])) | uint64(binary.BigEndian.Uint32(s.cfg.Addr[:]))<<32,
		uint64(key.rport) | uint64(key.lport)<<16 | uint64(peerISN)<<32,
		uint64(t) | uint64(p.mssIdx)<<32 | uint64(b2u8(p.ts))<<40 | uint64(p.opts)<<48,
	}
	return uint32(sipHash24(k.k0, k.k1, m[:])) & cookieMACMask
}

func b2u8(b bool) uint8 {
	if b {
		return 1
	}
	return 0
}

// cookieMake returns the ISS cookie for a SYN from key with sequence number
// peerISN, made at time now.
func (s *Stack) cookieMake(key connKey, peerISN tcp.Seq, now time.Duration, p cookieParams) tcp.Seq {
	t := cookiePeriodAt(now)
	k := s.cookieSecretFor(t, true)
	return tcp.Seq((t&1)<<31 | uint32(p.mssIdx&7)<<cookieMACBits | s.cookieMAC(k, key, peerISN, t, p))
}

// cookieCheck validates the cookie echoed by a final ACK from key (its
// sequence number seq, acknowledgment ack, timestamp echo if any) at time
// now and returns the parameters it carries.
func (s *Stack) cookieCheck(key connKey, seq, ack tcp.Seq, hasTS bool, tsEcr uint32, now time.Duration) (cookieParams, bool) {
	iss := uint32(ack.Sub(1))
	t := cookiePeriodAt(now)
	if iss>>31 != t&1 {
		if t == 0 {
			return cookieParams{}, false
		}
		t--
	}
	k := s.cookieSecretFor(t, false)
	if k == nil {
		return cookieParams{}, false
	}
	p := cookieParams{mssIdx: uint8(iss>>cookieMACBits) & 7, ts: hasTS}
	if hasTS {
		p.opts = uint8(tsEcr) & cookieOptMask
	}
	if s.cookieMAC(k, key, seq.Sub(1), t, p) != iss&cookieMACMask {
		return cookieParams{}, false
	}
	return p, true
}

// cookieTSVal is our SYN-ACK's TSval for a cookie: the stack's cookie
// clock rounded down to carry the option bits.
func (s *Stack) cookieTSVal(opts uint8) uint32 {
	now := uint32(s.now/time.Millisecond) + s.cookieTSOffset
	v := now&^cookieOptMask | uint32(opts)
	if int32(v-now) > 0 {
		v -= cookieOptMask + 1
	}
	return v
}

// sendCookieSynAck answers a SYN with a SYN-ACK whose ISS is a cookie, and
// keeps nothing.
func (l *Listener) sendCookieSynAck(g *inSeg, key connKey) {
	s := l.s
	p := s.cookieSynOptions(g.opts)
	iss := s.cookieMake(key, g.seq, s.now, p)
	o := &s.txOpts
	*o = tcp.Options{HasMSS: true, MSS: uint16(s.maxPayload)}
	if p.ts {
		o.HasTimestamps = true
		o.TSVal = s.cookieTSVal(p.opts)
		o.TSEcr = g.opts.TSVal
		if p.opts&0xf != cookieNoWS {
			o.HasWindowScale, o.WindowScale = true, s.rcvWScale
		}
		o.SACKPermitted = p.opts&cookieSACK != 0
	}
	b := s.scratch()
	start := s.writeHeaders(b, headroom, 0, g.srcMAC, key, iss, g.seq.Add(1), tcp.FlagSYN|tcp.FlagACK, uint16(s.synWindow()), o)
	s.queueTx(b[start:headroom])
	s.Stats.SynCookiesSent++
	l.cookieUntil = s.now + 2*cookiePeriod
}

// onCookieACK handles an ACK without a connection that reached the
// listener while it uses cookies. A valid cookie creates the connection
// as if it had been half-open all along and passes it the segment; an
// invalid or expired one is dropped (no RST: it is most likely an attack,
// and we would only be reflecting it). It reports whether the frame was
// kept.
func (l *Listener) onCookieACK(g *inSeg, key connKey) bool {
	s := l.s
	p, ok := s.cookieCheck(key, g.seq, g.ack, g.opts.HasTimestamps, g.opts.TSEcr, s.now)
	if !ok {
		s.Stats.SynCookiesRejected++
		return false
	}
	s.Stats.SynCookiesValidated++
	if len(l.q) >= l.o.Backlog || s.nconns >= s.cfg.MaxConns || l.closed {
		s.Stats.RxSynDropped++ // the peer retransmits its data or ACK
		return false
	}
	c := s.newConn(key, g.srcMAC)
	c.listener = l
	c.state = StateSynRcvd
	c.iss = g.ack.Sub(1)
	c.sndUna, c.sndNxt, c.sndMax = c.iss, g.ack, g.ack
	c.irs = g.seq.Sub(1)
	c.rcvNxt = g.seq
	so := p.options(g.opts.TSVal)
	c.applySynOptions(&inSeg{opts: &so})
	if c.tsOK {
		c.tsOffset = s.cookieTSOffset // the clock the echoed TSval came from
	}
	c.rcvAdv = c.rcvNxt.Add(uint32(s.synWindow()))
	// Counted half-open for established() to uncount; not in the peak: it
	// completes at once and never sits in the table.
	l.halfOpen++
	s.Stats.HalfOpen++
	// The echo is of a TSval rounded down for the option bits: no RTT
	// sample from it (RTT measurement starts with the next ACK).
	g.opts.TSEcr = 0
	kept := c.input(g)
	if c.state == StateSynRcvd {
		c.closeConn(nil) // cannot happen for a valid cookie; never keep it half-open
	}
	return kept
}

// synWindow is the (unscaled) window of our SYN and SYN-ACK.
func (s *Stack) synWindow() int { return min(s.cfg.RecvBuffer, 65535) }

// sipHash24 is SipHash-2-4 (Aumasson and Bernstein, 2012) of the message
// made of the words m (8*len(m) bytes, each word little-endian).
func sipHash24(k0, k1 uint64, m []uint64) uint64 {
	v0 := k0 ^ 0x736f6d6570736575
	v1 := k1 ^ 0x646f72616e646f6d
	v2 := k0 ^ 0x6c7967656e657261
	v3 := k1 ^ 0x7465646279746573
	for _, w := range m {
		v3 ^= w
		v0, v1, v2, v3 = sipRound(v0, v1, v2, v3)
		v0, v1, v2, v3 = sipRound(v0, v1, v2, v3)
		v0 ^= w
	}
	last := uint64(8*len(m)&0xff) << 56
	v3 ^= last
	v0, v1, v2, v3 = sipRound(v0, v1, v2, v3)
	v0, v1, v2, v3 = sipRound(v0, v1, v2, v3)
	v0 ^= last
	v2 ^= 0xff
	for range 4 {
		v0, v1, v2, v3 = sipRound(v0, v1, v2, v3)
	}
	return v0 ^ v1 ^ v2 ^ v3
}

func sipRound(v0, v1, v2, v3 uint64) (uint64, uint64, uint64, uint64) {
	v0 += v1
	v1 = bits.RotateLeft64(v1, 13) ^ v0
	v0 = bits.RotateLeft64(v0, 32)
	v2 += v3
	v3 = bits.RotateLeft64(v3, 16) ^ v2
	v0 += v3
	v3 = bits.RotateLeft64(v3, 21) ^ v0
	v2 += v1
	v1 = bits.RotateLeft64(v1, 17) ^ v2
	v2 = bits.RotateLeft64(v2, 32)
	return v0, v1, v2, v3
}
