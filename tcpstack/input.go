package tcpstack

import (
	"time"

	"xrnic/wire/tcp"
)

const pawsIdle = 24 * 24 * time.Hour // RFC 7323 §5.5: TS.Recent older than 24 days is invalid

// input processes a segment for c (RFC 9293 §3.10.7). It reports whether it
// kept the frame (queued its payload); otherwise the caller releases it.
func (c *Conn) input(g *inSeg) bool {
	s := c.s
	switch c.state {
	case StateClosed:
		return false
	case StateSynSent:
		return c.inputSynSent(g)
	}
	rst := g.flags&tcp.FlagRST != 0
	syn := g.flags&tcp.FlagSYN != 0

	if c.state == StateSynRcvd && syn && !rst && g.seq == c.irs {
		if g.flags&tcp.FlagACK == 0 {
			c.sendSYN() // the peer did not get our SYN-ACK
			// The peer is alive: keep the entry for another RTO, so the
			// ACK for this SYN-ACK finds it even if the SYN-ACK retries
			// were about to run out (SynAckRetries).
			if at := s.now + c.rto; c.listener != nil && !c.tlp && at > c.rtoAt {
				c.rtoAt = at
				c.rearm()
			}
			return false
		}
		// Simultaneous open: the peer's SYN-ACK repeats the SYN we already
		// took (RCV.NXT is past it), so as it stands the segment is not
		// acceptable (the RFC 793 figure 8 ambiguity; Linux special-cases
		// it too). Take it as the ACK of our SYN; its window is unscaled.
		g.seq = g.seq.Add(1)
		g.flags &^= tcp.FlagSYN
		g.synAck = true
		syn = false
	}
	// PAWS (RFC 7323 §5.3).
	if c.tsOK && g.opts.HasTimestamps && !rst && int32(g.opts.TSVal-c.tsRecent) < 0 && s.now-c.tsRecentAt < pawsIdle {
		s.Stats.RxPAWS++
		c.wantAck()
		return false
	}
	// Acceptability (RFC 9293 §3.10.7.4, first check).
	wnd := uint32(0)
	if c.rcvAdv.GreaterThan(c.rcvNxt) {
		wnd = c.rcvNxt.Size(c.rcvAdv)
	}
	n := g.seqLen()
	var ok bool
	switch {
	case n == 0 && wnd == 0:
		ok = g.seq == c.rcvNxt
	case n == 0:
		ok = g.seq.InWindow(c.rcvNxt, wnd)
	case wnd == 0:
		// Zero window: still take the ACK (and a bare FIN) of a segment at
		// RCV.NXT; inputData trims the data away.
		ok = g.seq == c.rcvNxt
	default:
		ok = g.seq.InWindow(c.rcvNxt, wnd) || g.seq.Add(uint32(n-1)).InWindow(c.rcvNxt, wnd)
	}
	if !ok {
		if !rst {
			s.Stats.RxOutOfWindow++
			c.wantAck()
		}
		return false
	}
	if rst { // RFC 5961 §3.2
		if g.seq != c.rcvNxt {
			c.challengeAck()
			return false
		}
		if c.state == StateTimeWait || (c.state == StateSynRcvd && c.listener != nil) {
			c.closeConn(nil)
		} else {
			c.closeConn(ErrReset)
		}
		return false
	}
	if syn { // RFC 5961 §4.2
		c.challengeAck()
		return false
	}
	if g.flags&tcp.FlagACK == 0 {
		return false
	}
	if c.state == StateSynRcvd {
		if !g.ack.GreaterThan(c.sndUna) || g.ack.GreaterThan(c.sndMax) {
			s.rawSend(c.key, c.rmac, g.ack, 0, tcp.FlagRST, 0)
			return false
		}
		c.sndWnd = g.window(c.sndWScale)
		c.maxSndWnd = c.sndWnd
		c.sndWl1, c.sndWl2 = g.seq, g.ack
		c.establish()
	}
	// ACK acceptability (RFC 9293 §3.10.7.4, RFC 5961 §5.2).
	if g.ack.GreaterThan(c.sndMax) || g.ack.LessThan(c.sndUna.Sub(c.maxSndWnd)) {
		c.wantAck()
		return false
	}
	if c.tsOK && g.opts.HasTimestamps && g.seq.LessThanEq(c.rcvNxt) {
		c.tsRecent = g.opts.TSVal
		c.tsRecentAt = s.now
	}
	c.processAck(g)
	switch c.state {
	case StateEstablished, StateFinWait1, StateFinWait2:
		if len(g.data) > 0 || g.flags&tcp.FlagFIN != 0 {
			return c.inputData(g)
		}
	case StateTimeWait:
		if g.flags&tcp.FlagFIN != 0 {
			c.wantAck()
			c.setTW(s.cfg.TimeWait)
		}
	}
	return false
}

func (c *Conn) wantAck() {
	c.ackNow = true
	c.s.markDirty(c)
}

// challengeAck sends an ACK in answer to a suspicious RST or SYN (RFC 5961
// §3.2, §4.2), at most 1000 per second per stack (§7).
func (c *Conn) challengeAck() {
	s := c.s
	if s.now-s.challengeAt >= time.Second {
		s.challengeAt = s.now
		s.challengeN = 0
	}
	if s.challengeN >= 1000 {
		return
	}
	s.challengeN++
	s.Stats.RxChallengeACK++
	c.wantAck()
}

func (c *Conn) inputSynSent(g *inSeg) bool {
	s := c.s
	if g.flags&tcp.FlagACK != 0 && (g.ack.LessThanEq(c.iss) || g.ack.GreaterThan(c.sndMax)) {
		if g.flags&tcp.FlagRST == 0 {
			s.rawSend(c.key, c.rmac, g.ack, 0, tcp.FlagRST, 0)
		}
		return false
	}
	if g.flags&tcp.FlagRST != 0 {
		if g.flags&tcp.FlagACK != 0 {
			c.closeConn(ErrRefused)
		}
		return false
	}
	if g.flags&tcp.FlagSYN == 0 {
		return false
	}
	c.irs = g.seq
	c.rcvNxt = g.seq.Add(1)
	c.applySynOptions(g)
	if g.flags&tcp.FlagACK != 0 {
		c.sndUna = g.ack
		c.sndWnd = uint32(g.wnd) // never scaled in a SYN
		c.maxSndWnd = c.sndWnd
		c.sndWl1, c.sndWl2 = g.seq, g.ack
		c.rcvAdv = c.rcvNxt
		c.establish()
		c.wantAck()
		return false
	}
	// Simultaneous open.
	c.state = StateSynRcvd
	c.sendSYN()
	return false
}

// applySynOptions records what the peer's SYN offered.
func (c *Conn) applySynOptions(g *inSeg) {
	s := c.s
	o := g.opts
	peerMSS := 536
	if o.HasMSS && o.MSS > 0 {
		peerMSS = int(o.MSS)
	}
	c.sndMSS = min(peerMSS, s.maxPayload)
	if o.HasWindowScale && !s.cfg.DisableWindowScale {
		c.sndWScale = min(o.WindowScale, 14)
	} else {
		c.sndWScale, c.rcvWScale = 0, 0
	}
	c.wsOK = o.HasWindowScale && !s.cfg.DisableWindowScale
	c.sackOK = o.SACKPermitted && !s.cfg.DisableSACK
	c.tsOK = o.HasTimestamps && !s.cfg.DisableTimestamps
	if c.tsOK {
		c.tsRecent = o.TSVal
		c.tsRecentAt = s.now
		c.sndMSS -= 12
	}
	if c.sndMSS < 64 {
		c.sndMSS = 64
	}
}

func (c *Conn) establish() {
	s := c.s
	c.allocQueues()
	c.state = StateEstablished
	c.estab = true
	c.retries = 0
	c.rtoAt, c.tlp = NoDeadline, false
	if c.rttTiming {
		c.rttSample(s.now - c.rttStart)
	} else if !c.hasRTT {
		c.rto = s.cfg.InitialRTO
	}
	c.rttTiming = false
	c.cwnd = uint32(min(10*c.sndMSS, max(2*c.sndMSS, 14600)))
	c.ssthresh = 1 << 30
	c.recover = c.iss
	c.highSacked = c.sndUna
	c.rearm()
	if c.wrShut {
		// CloseWrite in SYN-RECEIVED queued a FIN (RFC 9293 §3.10.4).
		c.state = StateFinWait1
	}
	if l := c.listener; l != nil {
		l.established(c)
	} else {
		s.addEvent(c, EvEstablished|EvWritable)
	}
}

// processAck handles the ACK field and window of an acceptable segment.
func (c *Conn) processAck(g *inSeg) {
	s := c.s
	ack := g.ack
	winChanged := false
	c.probes = 0 // an acceptable ACK answers any window probe
	// RFC 9293 §3.10.7.4 updates the window only from segments that are
	// not older than the last update (SND.WL1/WL2). Like Linux
	// (tcp_may_update_window) an ACK that advances SND.UNA also updates it:
	// the peer's pure ACKs carry its SND.MAX, so a later retransmission
	// from it has a lower sequence number and would otherwise never reopen
	// a window it once closed.
	if ack.GreaterThan(c.sndUna) && ack.LessThanEq(c.sndMax) || c.sndWl1.LessThan(g.seq) || (c.sndWl1 == g.seq && c.sndWl2.LessThanEq(ack)) {
		w := g.window(c.sndWScale)
		winChanged = w != c.sndWnd
		if w > c.sndWnd {
			s.markDirty(c)
		}
		c.sndWnd = w
		c.maxSndWnd = max(c.maxSndWnd, w)
		c.sndWl1, c.sndWl2 = g.seq, ack
	}
	newSACK := false
	if c.sackOK && g.opts.NumSACK > 0 {
		newSACK = c.markSACK(g.opts)
	}
	if ack.GreaterThan(c.sndUna) {
		acked := c.sndUna.Size(ack)
		// RTT sample (RFC 7323 §4 with timestamps, RFC 6298 Karn otherwise).
		if c.tsOK && g.opts.HasTimestamps && g.opts.TSEcr != 0 {
			ms := c.tsNow() - g.opts.TSEcr
			if int32(ms) >= 0 && ms < 1<<20 {
				c.rttSample(time.Duration(ms) * time.Millisecond)
			}
		} else if c.rttTiming && ack.GreaterThan(c.rttSeq) {
			c.rttTiming = false
			c.rttSample(s.now - c.rttStart)
		}
		c.sndUna = ack
		if c.sndNxt.LessThan(ack) {
			c.sndNxt = ack
		}
		freed := 0
		for c.sqLen > 0 {
			sg := c.sq[c.sqHead]
			if sg.end().GreaterThan(ack) {
				break
			}
			if !sg.sacked {
				c.delivered(sg)
			}
			c.sq[c.sqHead] = nil
			s.freeSeg(sg)
			c.sqHead = (c.sqHead + 1) % len(c.sq)
			c.sqLen--
			freed++
		}
		if freed > 0 && c.wasFull {
			c.wasFull = false
			s.addEvent(c, EvWritable)
		}
		c.retries = 0
		c.onNewAck(acked)
		c.dupAcks = 0
		if newSACK && c.sackRecovery() {
			// RFC 6675 §5 (C): an ACK that SACKs new data is a duplicate
			// whether or not it also advances SND.UNA; a receiver that
			// answers a whole batch with one ACK sends nothing else.
			c.sackDupAck()
		}
		c.tlpAcked()
		if c.sndUna == c.sndMax {
			if !c.persist {
				c.rtoAt, c.tlp = NoDeadline, false
				c.tlp = false
			}
		} else {
			c.persist = false
			c.armRTO()
		}
		c.rearm()
		s.markDirty(c)
		if c.wrShut && c.sqLen == 0 { // our FIN is acknowledged
			switch c.state {
			case StateFinWait1:
				c.state = StateFinWait2
				if c.appGone {
					c.setTW(s.cfg.FinWait2)
				}
			case StateClosing:
				c.enterTimeWait()
			case StateLastAck:
				c.closeConn(nil)
			}
		}
		return
	}
	// A duplicate ACK (RFC 5681 §2) carries no data and changes nothing;
	// with SACK, an ACK that SACKs new data counts too, data or not (RFC
	// 6675 §2): the peer piggybacks its SACK blocks on its own data.
	pureDup := len(g.data) == 0 && g.flags&(tcp.FlagSYN|tcp.FlagFIN) == 0 && !winChanged
	// With SACK recovery only an ACK with new SACK information counts
	// (RFC 6675 §2, DupAck (e)): without D-SACK, the ACK for a duplicate
	// segment is a pure duplicate too, and spurious retransmissions would
	// otherwise start recovery after recovery.
	if c.sackRecovery() {
		pureDup = false
	}
	if ack == c.sndUna && c.sndMax != c.sndUna && (pureDup || newSACK) {
		c.onDupAck()
	}
}

func (c *Conn) tsNow() uint32 { return uint32(c.s.now/time.Millisecond) + c.tsOffset }

// rttSample updates SRTT, RTTVAR and RTO (RFC 6298 §2).
func (c *Conn) rttSample(r time.Duration) {
	if r <= 0 {
		r = time.Millisecond / 2
	}
	c.s.Stats.RTT.observe(r)
	if !c.hasRTT {
		c.hasRTT = true
		c.srtt = r
		c.rttvar = r / 2
	} else {
		d := c.srtt - r
		if d < 0 {
			d = -d
		}
		c.rttvar = (3*c.rttvar + d) / 4
		c.srtt = (7*c.srtt + r) / 8
	}
	c.rto = c.srtt + max(time.Millisecond, 4*c.rttvar)
	c.rto = min(max(c.rto, c.s.cfg.MinRTO), c.s.cfg.MaxRTO)
}

// markSACK marks the send segments covered by the SACK blocks and reports
// whether it marked any that were not yet.
func (c *Conn) markSACK(o *tcp.Options) bool {
	marked := false
	for i := 0; i < o.NumSACK && i < len(o.SACK); i++ {
		b := o.SACK[i]
		if !b.Left.LessThan(b.Right) || b.Left.LessThan(c.sndUna) || b.Right.GreaterThan(c.sndMax) {
			continue
		}
		for j := 0; j < c.sqLen; j++ {
			sg := c.sqAt(j)
			if sg.seq.GreaterThanEq(b.Right) {
				break
			}
			if !sg.sacked && sg.seq.GreaterThanEq(b.Left) && sg.end().LessThanEq(b.Right) {
				sg.sacked = true
				marked = true
				c.delivered(sg)
			}
		}
		if b.Right.GreaterThan(c.highSacked) {
			c.highSacked = b.Right
		}
	}
	return marked
}

// inputData queues the payload (and FIN) of an acceptable segment. It
// reports whether it kept the frame.
func (c *Conn) inputData(g *inSeg) bool {
	s := c.s
	seq := g.seq
	data := g.data
	fin := g.flags&tcp.FlagFIN != 0
	if seq.LessThan(c.rcvNxt) {
		d := int(seq.Size(c.rcvNxt))
		switch {
		case d > len(data):
			data, fin = nil, false
		default:
			data = data[d:]
		}
		seq = c.rcvNxt
	}
	edge := c.rcvAdv.Max(c.rcvNxt)
	if end := seq.Add(uint32(len(data))); end.GreaterThan(edge) {
		if seq.GreaterThanEq(edge) {
			data = nil
		} else {
			data = data[:seq.Size(edge)]
		}
		fin = fin && len(data) == 0 && seq == c.rcvNxt && len(g.data) == 0
	}
	if len(data) == 0 && !fin {
		s.Stats.RxDupData++
		c.wantAck()
		return false
	}
	if c.appGone && len(data) > 0 {
		// New data after Close has nobody to read it: reset, as RFC 1122
		// §4.2.2.13 says and Linux does, rather than let it fill the
		// window and hold the peer in persist forever.
		c.Abort()
		return false
	}
	if seq != c.rcvNxt {
		s.Stats.RxOOO++
		c.quickAcks = quickAcksLoss
		c.wantAck()
		if fin {
			c.oooFin = true
			c.oooFinSeq = seq.Add(uint32(len(data)))
		}
		if len(data) == 0 {
			return false
		}
		c.lastOOO = seq
		return c.oooInsert(seq, data, g.frame)
	}
	kept := false
	if len(data) > 0 {
		if c.rdLen == len(c.ready) {
			s.Stats.RxDropped++
			c.wantAck()
			return false
		}
		c.pushReady(data, g.frame)
		kept = true
	}
	hadOOO := len(c.ooo) > 0
	c.drainOOO()
	if fin || (c.oooFin && c.rcvNxt == c.oooFinSeq) {
		c.rcvFIN()
	}
	if hadOOO || c.finRcvd {
		c.quickAcks = quickAcksLoss
		c.wantAck()
	} else {
		c.ackPending++
		every := s.cfg.AckEvery
		if c.quickAcks > 0 {
			c.quickAcks--
			every = 2
		}
		if c.ackPending >= every {
			c.wantAck()
		} else if c.delackAt == NoDeadline {
			c.delackAt = s.now + s.cfg.DelayedACK
			c.rearm()
		}
	}
	return kept
}

func (c *Conn) pushReady(data, frame []byte) {
	c.ready[(c.rdHead+c.rdLen)%len(c.ready)] = view{data: data, frame: frame}
	c.rdLen++
	c.readyBytes += len(data)
	c.rcvNxt = c.rcvNxt.Add(uint32(len(data)))
	c.s.addEvent(c, EvReadable)
}

func (c *Conn) drainOOO() {
	s := c.s
	for len(c.ooo) > 0 {
		e := c.ooo[0]
		if e.seq.GreaterThan(c.rcvNxt) {
			return
		}
		copy(c.ooo, c.ooo[1:])
		c.ooo[len(c.ooo)-1] = oooEnt{}
		c.ooo = c.ooo[:len(c.ooo)-1]
		c.oooBytes -= len(e.data)
		end := e.seq.Add(uint32(len(e.data)))
		if end.LessThanEq(c.rcvNxt) || c.rdLen == len(c.ready) {
			s.link.Release(e.frame)
			continue
		}
		c.pushReady(e.data[e.seq.Size(c.rcvNxt):], e.frame)
	}
}

// oooInsert holds an out-of-order segment, sorted by sequence number.
func (c *Conn) oooInsert(seq tcp.Seq, data, frame []byte) bool {
	end := seq.Add(uint32(len(data)))
	i := 0
	for i < len(c.ooo) {
		e := &c.ooo[i]
		eEnd := e.seq.Add(uint32(len(e.data)))
		if e.seq.LessThanEq(seq) && end.LessThanEq(eEnd) {
			c.s.Stats.RxDupData++
			return false // already held
		}
		if seq.LessThanEq(e.seq) {
			if eEnd.GreaterThan(end) {
				break
			}
			// The new segment covers e: drop e, so the queue stays sorted
			// by distinct sequence numbers and no frame slot is wasted.
			c.s.link.Release(e.frame)
			c.oooBytes -= len(e.data)
			copy(c.ooo[i:], c.ooo[i+1:])
			c.ooo[len(c.ooo)-1] = oooEnt{}
			c.ooo = c.ooo[:len(c.ooo)-1]
			continue
		}
		i++
	}
	if len(c.ooo) == cap(c.ooo) {
		if i == len(c.ooo) {
			c.s.Stats.RxDropped++
			return false
		}
		last := c.ooo[len(c.ooo)-1] // renege on the highest
		c.s.link.Release(last.frame)
		c.oooBytes -= len(last.data)
		c.ooo = c.ooo[:len(c.ooo)-1]
	}
	c.ooo = c.ooo[:len(c.ooo)+1]
	copy(c.ooo[i+1:], c.ooo[i:])
	c.ooo[i] = oooEnt{seq: seq, data: data, frame: frame}
	c.oooBytes += len(data)
	return true
}

func (c *Conn) rcvFIN() {
	s := c.s
	c.rcvNxt = c.rcvNxt.Add(1)
	c.finRcvd = true
	c.oooFin = false
	s.addEvent(c, EvReadable)
	switch c.state {
	case StateEstablished:
		c.state = StateCloseWait
	case StateFinWait1:
		c.state = StateClosing
	case StateFinWait2:
		c.enterTimeWait()
	}
}

func (c *Conn) enterTimeWait() {
	c.state = StateTimeWait
	c.rtoAt, c.tlp = NoDeadline, false
	c.persist = false
	c.delackAt = NoDeadline
	for c.sqLen > 0 {
		c.s.freeSeg(c.sq[c.sqHead])
		c.sq[c.sqHead] = nil
		c.sqHead = (c.sqHead + 1) % len(c.sq)
		c.sqLen--
	}
	c.setTW(c.s.cfg.TimeWait)
}
