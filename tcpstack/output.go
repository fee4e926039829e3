package tcpstack

import (
	"xrnic/wire/tcp"
)

// output transmits what the windows allow, arms the retransmission or
// persist timer, and sends a pure ACK if one is owed and nothing carried it.
func (c *Conn) output() {
	switch c.state {
	case StateClosed, StateSynSent:
		return
	case StateSynRcvd:
		if c.ackNow {
			c.ackNow = false
		}
		return
	}
	if c.inRecovery && c.sackRecovery() && c.state != StateTimeWait {
		c.sackSend()
		goto done
	}
	for i := c.sendIndex(); i >= 0 && i < c.sqLen && c.state != StateTimeWait; {
		g := c.sqAt(i)
		if !g.end().GreaterThan(c.sndNxt) {
			i++
			continue
		}
		end := g.end()
		need := c.sndNxt.Size(end)
		if g.fin {
			need-- // the FIN needs no window space
		}
		wndEnd := c.sndUna.Add(min(c.sndWnd, c.cwnd))
		var avail uint32
		if wndEnd.GreaterThan(c.sndNxt) {
			avail = c.sndNxt.Size(wndEnd)
		}
		if c.inRecovery && c.sndNxt.LessThan(c.sndMax) {
			// NewReno: during recovery only new data goes out here;
			// holes are retransmitted by the ACK handling.
			break
		}
		switch {
		case need <= avail:
			c.xmit(g, c.sndNxt, end)
			c.sndNxt = end
			i++
		case c.sndNxt == c.sndUna && avail > 0 && avail < need:
			// The peer's window is smaller than the segment and nothing is
			// in flight: send what fits.
			to := c.sndNxt.Add(avail)
			c.xmit(g, c.sndNxt, to)
			c.sndNxt = to
		default:
			goto done
		}
		c.sndMax = c.sndMax.Max(c.sndNxt)
	}
done:
	if c.sndMax != c.sndUna {
		if c.rtoAt == NoDeadline || c.persist {
			c.persist = false
			c.armRTO()
		}
	} else if c.sqLen > 0 && c.sndWnd == 0 && c.rtoAt == NoDeadline {
		c.persist = true
		c.rtoAt, c.tlp = c.s.now+c.rto, false
		c.rearm()
	}
	if c.ackNow {
		c.sendAck()
	}
}

// sendIndex returns the index of the queued segment holding SND.NXT, or -1
// if everything queued has been sent.
//
// The queue is in sequence order, so this is a binary search: output runs
// on every ACK, with up to SendSegments segments in flight.
func (c *Conn) sendIndex() int {
	lo, hi := 0, c.sqLen
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if c.sqAt(m).end().GreaterThan(c.sndNxt) {
			hi = m
		} else {
			lo = m + 1
		}
	}
	if lo == c.sqLen {
		return -1
	}
	return lo
}

// xmit sends [from, to) of segment g with the current ACK and window.
func (c *Conn) xmit(g *seg, from, to tcp.Seq) {
	s := c.s
	off := int(g.seq.Size(from))
	n := min(int(g.seq.Size(to)), g.n) - off
	if n < 0 {
		n = 0
	}
	flags := tcp.FlagACK
	if g.fin && to == g.end() {
		flags |= tcp.FlagFIN
	}
	if n > 0 && off+n == g.n {
		flags |= tcp.FlagPSH
	}
	g.sealed = true
	o := &s.txOpts
	*o = tcp.Options{}
	if c.tsOK {
		o.HasTimestamps = true
		o.TSVal = c.tsNow()
		o.TSEcr = c.tsRecent
	}
	// SACK blocks ride on data too (RFC 2018 §4), as many as the option
	// space and the peer's MSS leave room for: sndMSS already excludes the
	// timestamps, and a segment is never split to make room, so a full
	// one carries none. If this segment cannot carry what a pure ACK
	// would, an owed ACK stays owed and output sends it after the data.
	complete := true
	if c.sackOK && len(c.ooo) > 0 {
		k := 0
		if room := c.sndMSS - n; room >= 12 {
			k = (room - 4) / 8
		}
		complete = c.sackBlocks(o, k)
	}
	wnd := c.windowField()
	var b []byte
	if off == 0 && g.buf != nil {
		b = g.buf
	} else {
		b = s.scratch()
		if n > 0 {
			copy(b[headroom:headroom+n], g.buf[headroom+off:])
		}
	}
	start := s.writeHeaders(b, headroom, n, c.rmac, c.key, from, c.rcvNxt, flags, wnd, o)
	s.queueTx(b[start : headroom+n])
	c.xmitN++
	g.sendN = c.xmitN
	if from.LessThan(c.sndMax) {
		g.rexmit = true
		s.Stats.TxRetransmits++
		if c.rttTiming && c.rttSeq.GreaterThanEq(from) {
			c.rttTiming = false // Karn
		}
	} else if !c.tsOK && !c.rttTiming {
		c.rttTiming = true
		c.rttSeq = from
		c.rttStart = s.now
	}
	owed := c.ackNow
	c.ackSent()
	if !complete {
		c.ackNow = owed
	}
}

func (c *Conn) ackSent() {
	c.ackNow = false
	c.ackPending = 0
	if c.delackAt != NoDeadline {
		c.delackAt = NoDeadline
		c.rearm()
	}
}

// rcvWindow is the receive space left: buffer bytes and frame slots.
func (c *Conn) rcvWindow() int {
	w := c.rcvBufWindow - c.readyBytes
	if f := (len(c.ready) - c.rdLen - len(c.ooo)) * c.sndMSSRecv(); f < w {
		w = f
	}
	return max(w, 0)
}

// sndMSSRecv is the segment size we expect from the peer.
func (c *Conn) sndMSSRecv() int { return c.s.maxPayload - 12 }

// windowField computes the window to advertise (receiver SWS avoidance,
// never shrinking the right edge) and returns the scaled header field.
func (c *Conn) windowField() uint16 {
	w := c.rcvWindow()
	edge := c.rcvNxt.Add(uint32(w))
	if edge.GreaterThan(c.rcvAdv) && c.rcvAdv.GreaterThanEq(c.rcvNxt) &&
		int(c.rcvAdv.Size(edge)) < min(c.rcvBufWindow/2, c.sndMSSRecv()) {
		edge = c.rcvAdv
	}
	edge = edge.Max(c.rcvAdv)
	adv := uint32(0)
	if edge.GreaterThan(c.rcvNxt) {
		adv = c.rcvNxt.Size(edge)
	}
	sc := uint32(1)<<c.rcvWScale - 1
	f := (adv + sc) >> c.rcvWScale
	if f > 65535 {
		f = 65535
	}
	c.rcvAdv = c.rcvAdv.Max(c.rcvNxt.Add(f << c.rcvWScale))
	return uint16(f)
}

// sendAck sends a pure ACK (with SACK blocks when there is out-of-order
// data).
// Its sequence number is SND.MAX, not SND.NXT: after a timeout SND.NXT
// goes back to SND.UNA, and an ACK carrying it would fall left of a peer
// window that already holds later data, be rejected, and be answered by an
// ACK rejected the same way.
func (c *Conn) sendAck() {
	c.sendCtl(c.sndMax, tcp.FlagACK)
}

// sendCtl sends a header-only segment with the connection's options.
func (c *Conn) sendCtl(seq tcp.Seq, flags tcp.Flags) {
	s := c.s
	o := &s.txOpts
	*o = tcp.Options{}
	if c.tsOK && flags&tcp.FlagRST == 0 {
		o.HasTimestamps = true
		o.TSVal = c.tsNow()
		o.TSEcr = c.tsRecent
	}
	if c.sackOK && len(c.ooo) > 0 && flags&tcp.FlagRST == 0 {
		c.sackBlocks(o, tcp.MaxSACKBlocks)
	}
	wnd := c.windowField()
	b := s.scratch()
	start := s.writeHeaders(b, headroom, 0, c.rmac, c.key, seq, c.rcvNxt, flags, wnd, o)
	s.queueTx(b[start:headroom])
	if flags&tcp.FlagRST != 0 {
		s.Stats.TxRST++
	}
	c.ackSent()
}

// sackBlocks fills o with up to most SACK blocks (and never more than 3
// with timestamps, 4 without, the option space) from the out-of-order
// queue, the one holding the latest arrival first (RFC 2018 §4), then the
// highest. It reports whether o got as many blocks as the option space
// allows (every range there is, or a full option).
func (c *Conn) sackBlocks(o *tcp.Options, most int) bool {
	space := 4
	if o.HasTimestamps {
		space = 3
	}
	limit := min(space, most)
	if limit <= 0 {
		return false
	}
	// Merge held segments into ranges, highest first.
	first := -1
	var blocks [tcp.MaxSACKBlocks]tcp.SACKBlock
	nb, ranges := 0, 0
	i := len(c.ooo) - 1
	for i >= 0 {
		ranges++
		l := c.ooo[i].seq
		r := l.Add(uint32(len(c.ooo[i].data)))
		j := i - 1
		for j >= 0 {
			jr := c.ooo[j].seq.Add(uint32(len(c.ooo[j].data)))
			if jr.LessThan(l) {
				break
			}
			l = l.Min(c.ooo[j].seq)
			r = r.Max(jr)
			j--
		}
		i = j
		b := tcp.SACKBlock{Left: l, Right: r}
		in := c.lastOOO.InRange(l, r)
		if nb < limit {
			if in {
				first = nb
			}
			blocks[nb] = b
			nb++
		} else if in && first < 0 {
			blocks[limit-1] = b
			first = limit - 1
		}
	}
	if first > 0 {
		b := blocks[first]
		copy(blocks[1:first+1], blocks[:first])
		blocks[0] = b
	}
	o.NumSACK = nb
	o.SACK = blocks
	return nb == min(ranges, space)
}

// sendSYN sends our SYN (SYN-SENT) or SYN-ACK (SYN-RECEIVED).
func (c *Conn) sendSYN() {
	s := c.s
	o := &s.txOpts
	*o = tcp.Options{HasMSS: true, MSS: uint16(s.maxPayload)}
	active := c.state == StateSynSent
	if !s.cfg.DisableWindowScale && (active || c.wsOK) {
		o.HasWindowScale = true
		o.WindowScale = c.rcvWScale
	}
	if !s.cfg.DisableSACK && (active || c.sackOK) {
		o.SACKPermitted = true
	}
	flags := tcp.FlagSYN
	var ack tcp.Seq
	if !active {
		flags |= tcp.FlagACK
		ack = c.rcvNxt
	}
	if !s.cfg.DisableTimestamps && (active || c.tsOK) {
		o.HasTimestamps = true
		o.TSVal = c.tsNow()
		if !active {
			o.TSEcr = c.tsRecent
		}
	}
	wnd := s.synWindow()
	if !active {
		c.rcvAdv = c.rcvNxt.Add(uint32(wnd))
	}
	b := s.scratch()
	start := s.writeHeaders(b, headroom, 0, c.rmac, c.key, c.iss, ack, flags, uint16(wnd), o)
	s.queueTx(b[start:headroom])
	if c.retries == 0 {
		c.rttTiming = true
		c.rttStart = s.now
		c.rttSeq = c.iss
	} else {
		c.rttTiming = false
	}
	s.markDirty(c)
}

// Congestion control: slow start and congestion avoidance with byte counting
// (RFC 5681), NewReno fast recovery (RFC 6582).

func (c *Conn) onNewAck(acked uint32) {
	mss := uint32(c.sndMSS)
	if c.inRecovery {
		if c.sndUna.GreaterThanEq(c.recover) { // full acknowledgment
			c.inRecovery = false
			c.headLost = false
			flight := c.sndUna.Size(c.sndMax)
			c.cwnd = max(min(c.ssthresh, flight+mss), mss)
			c.clearRexmitR()
			return
		}
		if c.sackRecovery() {
			// RFC 6675: output runs NextSeg against the new pipe; the
			// partial ACK marks the segment at SND.UNA lost (recovery.go).
			c.headLost = true
			return
		}
		// Partial acknowledgment: retransmit the next hole, deflate.
		c.retransmitHole(c.sndMax)
		if acked >= c.cwnd {
			c.cwnd = mss
		} else {
			c.cwnd -= acked
		}
		if acked >= mss {
			c.cwnd += mss
		}
		return
	}
	if l := uint32(c.s.cfg.AckEvery); l > 2 {
		// Stretch ACKs: byte counting with L = AckEvery segments (RFC
		// 3465 §2.3), so growth per byte acknowledged stays as with an
		// ACK every second segment.
		a := min(acked, l*mss)
		if c.cwnd < c.ssthresh {
			c.cwnd += a
		} else {
			c.cwnd += max(uint32(uint64(mss)*uint64(a)/uint64(c.cwnd)), 1)
		}
	} else if c.cwnd < c.ssthresh {
		c.cwnd += min(acked, mss)
	} else {
		c.cwnd += max(mss*mss/c.cwnd, 1)
	}
	c.cwnd = min(c.cwnd, 1<<30)
}

func (c *Conn) onDupAck() {
	if c.sackRecovery() {
		c.sackDupAck()
		return
	}
	mss := uint32(c.sndMSS)
	c.dupAcks++
	if c.inRecovery {
		c.cwnd += mss
		if c.sackOK && c.highSacked.GreaterThan(c.sndUna) {
			c.retransmitHole(c.highSacked)
		}
		c.s.markDirty(c)
		return
	}
	if c.dupAcks < 3 || c.sndUna.LessThan(c.recover) { // see sackDupAck
		return
	}
	// Fast retransmit (RFC 6582 §3.2 step 2).
	c.s.Stats.FastRetransmits++
	flight := c.sndUna.Size(c.sndMax)
	c.ssthresh = max(flight/2, 2*mss)
	c.recover = c.sndMax
	c.inRecovery = true
	c.clearRexmitR()
	c.retransmitHole(c.sndMax)
	c.cwnd = c.ssthresh + 3*mss
	c.s.markDirty(c)
}

func (c *Conn) clearRexmitR() {
	for i := 0; i < c.sqLen; i++ {
		c.sqAt(i).rexmitR = false
	}
}

// retransmitHole retransmits the first sent segment that is neither SACKed
// nor already retransmitted in this recovery (the first unacknowledged one
// without SACK information).
func (c *Conn) retransmitHole(limit tcp.Seq) {
	for i := 0; i < c.sqLen; i++ {
		g := c.sqAt(i)
		if g.seq.GreaterThanEq(limit) {
			return
		}
		if g.sacked || g.rexmitR {
			continue
		}
		g.rexmitR = true
		from := g.seq.Max(c.sndUna)
		to := g.end().Min(c.sndMax)
		c.xmit(g, from, to)
		c.rtoAt, c.tlp = c.s.now+c.rto, false
		c.persist = false
		c.rearm()
		return
	}
}

// onRTO handles the retransmission timer (RFC 6298 §5).
func (c *Conn) onRTO() {
	s := c.s
	c.retries++
	c.rto = min(2*c.rto, s.cfg.MaxRTO)
	switch c.state {
	case StateSynSent, StateSynRcvd:
		limit := s.cfg.SynRetries
		if c.listener != nil {
			limit = s.cfg.SynAckRetries
		}
		if c.retries > limit {
			c.closeConn(ErrTimeout)
			return
		}
		c.sendSYN()
		c.rtoAt, c.tlp = s.now+c.rto, false
		c.rearm()
		return
	}
	if c.sndMax == c.sndUna {
		return
	}
	if c.retries > s.cfg.MaxRetries {
		c.sendCtl(c.sndMax, tcp.FlagRST|tcp.FlagACK)
		c.closeConn(ErrTimeout)
		return
	}
	s.Stats.Timeouts++
	c.tlpOut = false
	mss := uint32(c.sndMSS)
	flight := c.sndUna.Size(c.sndMax)
	if !c.inRecovery || c.retries == 1 {
		c.ssthresh = max(flight/2, 2*mss)
	}
	c.cwnd = mss
	c.inRecovery = false
	c.headLost = false
	c.recover = c.sndMax
	c.dupAcks = 0
	c.rttTiming = false
	for i := 0; i < c.sqLen; i++ { // RFC 2018 §8: forget SACK state
		g := c.sqAt(i)
		g.sacked = false
		g.rexmitR = false
	}
	c.highSacked = c.sndUna
	// Retransmit the first segment whatever the peer's window: if the
	// window closed with data in flight this is the window probe.
	if c.sqLen > 0 {
		g := c.sqAt(0)
		c.xmit(g, c.sndUna, g.end())
		c.sndNxt = g.end()
		c.sndMax = c.sndMax.Max(c.sndNxt)
	} else {
		c.sndNxt = c.sndUna
	}
	c.rtoAt, c.tlp = s.now+c.rto, false
	c.rearm()
	s.markDirty(c)
}

// orphanProbes bounds the zero-window probes of a connection the
// application has closed (Linux's default tcp_orphan_retries is 8).
const orphanProbes = 8

// onPersist sends a zero-window probe: an ACK for SND.UNA-1, which the peer
// must answer with an ACK carrying its window (RFC 9293 §3.8.6.1).
func (c *Conn) onPersist() {
	s := c.s
	c.persist = false
	if c.sndWnd == 0 && c.sqLen > 0 && c.sndMax == c.sndUna {
		// A peer may keep its window shut as long as it answers the
		// probes (RFC 9293 §3.8.6.1); one that stops answering is gone,
		// and an orphaned connection (Close called) gets a bounded number
		// of probes whatever the answers, as Linux's tcp_orphan_retries,
		// so a hostile peer cannot hold it forever.
		c.probes++
		if c.appGone {
			c.orphanProbes++
		}
		if c.probes > s.cfg.MaxRetries || c.orphanProbes > min(orphanProbes, s.cfg.MaxRetries) {
			c.sendCtl(c.sndMax, tcp.FlagRST|tcp.FlagACK)
			c.closeConn(ErrTimeout)
			return
		}
		s.Stats.ZeroWindowProbes++
		c.sendCtl(c.sndUna.Sub(1), tcp.FlagACK)
		c.rto = min(2*c.rto, s.cfg.MaxRTO)
		c.persist = true
		c.rtoAt, c.tlp = s.now+c.rto, false
		c.rearm()
		return
	}
	s.markDirty(c)
}
