package tcpstack

import "time"

// SACK-based loss recovery (RFC 6675), used when the connection negotiated
// SACK (unless Config.NewRenoRecovery): a scoreboard over the send queue,
// an estimate of the data in the network ("pipe"), and the NextSeg rules
// that send lost segments first, then new data, then segments below the
// highest SACKed one, while cwnd - pipe allows a segment.
//
// The scoreboard is per segment, not per octet: send segments are never
// merged or split (iWARP FPDU alignment), and SACK blocks from a conforming
// receiver cover whole segments. A segment is lost (IsLost, §4) when
// DupThresh (3) SACKed segments or more than (DupThresh-1)*SMSS SACKed
// octets lie above it; counting segments rather than discontiguous ranges
// is what Linux does too, and matters only for sub-MSS segments.
//
// One addition, as FreeBSD makes it: a partial ACK during recovery marks
// the segment at the new SND.UNA lost (the NewReno inference of RFC 6582),
// so that data the receiver could not hold, and so never SACKed, is resent
// without waiting for the retransmission timer.
//
// Further: early retransmit (RFC 5827) for flights of fewer than four
// segments; a retransmission found lost by RACK's rule, counted in
// transmissions (DupThresh segments sent after it, a later one delivered),
// is resent; and the tail loss probe with RACK's timed inference (below).
// Without these, every loss a request/response flow suffers near the end
// of a flight (most of them) was repaired by the retransmission timer.

const dupThresh = 3

func (c *Conn) sackRecovery() bool { return c.sackOK && !c.s.cfg.NewRenoRecovery }

// scoreboard recomputes each sent segment's lost flag and returns pipe
// (RFC 6675 §4 SetPipe): the octets not SACKed and not lost, plus those
// retransmitted in this recovery.
func (c *Conn) scoreboard() uint32 {
	mss := uint32(c.sndMSS)
	var pipe, sackedBytes uint32
	sacked := 0
	for i := c.sqLen - 1; i >= 0; i-- {
		g := c.sqAt(i)
		if g.seq.GreaterThanEq(c.sndMax) {
			continue // not sent yet
		}
		l := g.seq.Max(c.sndUna).Size(g.end().Min(c.sndMax))
		if g.sacked {
			g.lost = false
			sacked++
			sackedBytes += l
			continue
		}
		g.lost = sacked >= dupThresh || sackedBytes > (dupThresh-1)*mss ||
			(c.headLost && !g.seq.GreaterThan(c.sndUna))
		if g.rexmitR && int32(c.rackN-g.sendN) >= dupThresh {
			// The retransmission is lost too: DupThresh segments sent
			// after it were, and a later one arrived (RACK, RFC 8985
			// §6.2, its reordering window counted in segments).
			g.rexmitR = false
			g.lost = true
		}
		if !g.lost {
			pipe += l
		}
		if g.rexmitR {
			pipe += l
		}
	}
	return pipe
}

// sackDupAck handles a duplicate ACK (or one SACKing new data) with SACK
// recovery (RFC 6675 §5 steps C and 4).
func (c *Conn) sackDupAck() {
	c.dupAcks++
	if c.inRecovery {
		c.s.markDirty(c) // output runs NextSeg with what the ACK freed
		return
	}
	if c.sndUna.LessThan(c.recover) || c.sqLen == 0 {
		// RFC 6582 §3.2 step 2: not for dupACKs of an earlier episode.
		// recover holds SND.MAX, one past the highest sequence number
		// sent, so an ACK "covers more than recover" when it reaches it.
		return
	}
	c.scoreboard()
	if c.dupAcks < c.dupThresh() && !c.sqAt(0).lost {
		return
	}
	c.enterRecovery()
}

// enterRecovery starts SACK loss recovery (RFC 6675 §5 step 4) and
// retransmits the first segment not SACKed.
func (c *Conn) enterRecovery() {
	s := c.s
	s.Stats.FastRetransmits++
	mss := uint32(c.sndMSS)
	c.ssthresh = max(c.sndUna.Size(c.sndMax)/2, 2*mss)
	c.cwnd = c.ssthresh
	c.recover = c.sndMax
	c.inRecovery = true
	c.headLost = false
	c.clearRexmitR()
	for i := 0; i < c.sqLen; i++ { // retransmit the first segment presumed lost
		if g := c.sqAt(i); !g.sacked {
			if g.seq.LessThan(c.sndMax) {
				c.rexmitSeg(g)
			}
			break
		}
	}
	s.markDirty(c)
}

// sackSend sends what recovery allows (RFC 6675 §5 step C, NextSeg §4).
func (c *Conn) sackSend() {
	mss := uint32(c.sndMSS)
	pipe := c.scoreboard()
	lostAt, belowAt := 0, 0
	for pipe+mss <= c.cwnd {
		// (1) The first lost segment not yet retransmitted.
		var g *seg
		for ; lostAt < c.sqLen; lostAt++ {
			x := c.sqAt(lostAt)
			if x.seq.GreaterThanEq(c.sndMax) {
				break
			}
			if x.lost && !x.rexmitR {
				g = x
				break
			}
		}
		if g == nil {
			// (2) New data, if the peer's window takes it.
			if i := c.sendIndex(); i >= 0 && c.sndNxt == c.sndMax {
				x := c.sqAt(i)
				end := x.end()
				need := c.sndNxt.Size(end)
				if x.fin {
					need--
				}
				if c.sndUna.Size(c.sndNxt)+need <= c.sndWnd {
					c.xmit(x, c.sndNxt, end)
					pipe += c.sndNxt.Size(end)
					c.sndNxt = end
					c.sndMax = end
					continue
				}
			}
			// (3) A segment below the highest SACKed one, not yet
			// retransmitted.
			for ; belowAt < c.sqLen; belowAt++ {
				x := c.sqAt(belowAt)
				if x.seq.GreaterThanEq(c.highSacked) || x.seq.GreaterThanEq(c.sndMax) {
					break
				}
				if !x.sacked && !x.rexmitR {
					g = x
					break
				}
			}
			if g == nil {
				return
			}
		}
		pipe += c.rexmitSeg(g)
	}
}

// rexmitSeg retransmits the unacknowledged part of g in this recovery and
// returns its length.
func (c *Conn) rexmitSeg(g *seg) uint32 {
	g.rexmitR = true
	from, to := g.seq.Max(c.sndUna), g.end().Min(c.sndMax)
	c.xmit(g, from, to)
	return from.Size(to)
}

// Tail loss probe (RFC 8985 §7): with SACK, outside loss recovery and with
// an RTT estimate, the timer armed while data is in flight is first the
// probe timeout PTO = 2*SRTT plus an allowance for the peer's delayed ACK
// (never later than the RTO). When it fires, one probe goes out: new data
// if the peer's window takes it, else the last segment sent again, and the
// RTO is armed. The ACK the probe elicits either covers the tail (the loss
// is repaired without a timeout) or SACKs it and so starts fast recovery
// (with early retransmit, below, for a flight of fewer than four
// segments). A request/response flow's losses are mostly tail losses that
// no later segment reveals: without the probe each one cost an RTO.
//
// The allowance for a delayed ACK is Config.DelayedACK: the worst case of
// RFC 8985's WCDelAckT for a peer configured like us (a stack with
// stretch ACKs holds an ACK that long for any flight shorter than
// AckEvery, not only for a single segment). An early probe costs one
// segment.

// armRTO arms the retransmission timer, or the probe timer before it.
func (c *Conn) armRTO() {
	now := c.s.now
	c.rtoAt, c.tlp = now+c.rto, false
	c.rtoDue = c.rtoAt
	if c.sackRecovery() && c.hasRTT && c.retries == 0 &&
		c.sndNxt == c.sndMax && (c.state == StateEstablished || c.state == StateCloseWait) {
		pto := 2*c.srtt + time.Millisecond
		if c.sndUna.Size(c.sndMax) <= uint32(c.sndMSS) {
			pto += c.s.cfg.DelayedACK // WCDelAckT: one segment in flight
		}
		if pto < c.rto {
			c.rtoAt, c.tlp = now+pto, true
		}
	}
	c.rearm()
}

// onPTO sends the tail loss probe (RFC 8985 §7.3).
func (c *Conn) onPTO() {
	s := c.s
	if c.sndMax == c.sndUna || c.sndNxt != c.sndMax || c.sqLen == 0 {
		c.rtoAt, c.tlp = max(c.rtoDue, s.now), false
		c.rearm()
		return
	}
	if c.inRecovery {
		// RACK for a lost retransmission: the first segment was resent
		// and a segment sent after that has been SACKed.
		if h := c.sqAt(0); h.rexmitR && !h.sacked && c.sentAfterSacked(h) {
			h.rexmitR = false
			c.headLost = true
			s.Stats.RACKRecoveries++
			s.markDirty(c)
		}
		c.rtoAt, c.tlp = max(c.rtoDue, s.now), false
		c.rearm()
		return
	}
	if c.sackedAfterHead() {
		// RACK (RFC 8985 §6.2): a segment sent after the first one has
		// arrived and the first one has not, one PTO (more than SRTT
		// plus a reordering window) after it was sent: it is lost.
		s.Stats.RACKRecoveries++
		c.enterRecovery()
		c.rtoAt, c.tlp = s.now+c.rto, false
		c.rearm()
		return
	}
	if c.tlpOut {
		// One probe per episode (RFC 8985 §7.3): the RTO stays due.
		c.rtoAt, c.tlp = max(c.rtoDue, s.now), false
		c.rearm()
		return
	}
	s.Stats.TailLossProbes++
	c.tlpOut = true
	c.tlpRexmit = false
	sent := false
	if i := c.sendIndex(); i >= 0 {
		x := c.sqAt(i)
		end := x.end()
		need := c.sndNxt.Size(end)
		if x.fin {
			need--
		}
		if c.sndUna.Size(c.sndNxt)+need <= c.sndWnd {
			c.xmit(x, c.sndNxt, end)
			c.sndNxt, c.sndMax = end, end
			sent = true
		}
	}
	if !sent {
		for i := c.sqLen - 1; i >= 0; i-- {
			if g := c.sqAt(i); g.seq.LessThan(c.sndMax) {
				c.xmit(g, g.seq.Max(c.sndUna), g.end().Min(c.sndMax))
				c.tlpRexmit = true
				break
			}
		}
	}
	c.tlpEnd = c.sndMax
	c.rtoAt, c.tlp = s.now+c.rto, false
	c.rearm()
}

// tlpAcked ends a probe episode when SND.UNA passes the probe (RFC 8985
// §7.4). Without D-SACK a retransmitted probe cannot be told from a
// spurious one, so the sender must assume it repaired a loss and reduce
// the congestion window (§7.4.2).
func (c *Conn) tlpAcked() {
	if !c.tlpOut || c.sndUna.LessThan(c.tlpEnd) {
		return
	}
	c.tlpOut = false
	if c.tlpRexmit && !c.inRecovery {
		mss := uint32(c.sndMSS)
		c.ssthresh = max(c.cwnd/2, 2*mss)
		c.cwnd = c.ssthresh
	}
}

// dupThresh returns the duplicate ACK threshold: DupThresh, or with fewer
// than four segments outstanding and no new data the window allows, one
// less than the number outstanding (early retransmit, RFC 5827 §3.2,
// segment-based): such a flight can never produce three duplicates.
func (c *Conn) dupThresh() int {
	n := 0
	for i := 0; i < c.sqLen && n < dupThresh+1; i++ {
		if c.sqAt(i).seq.GreaterThanEq(c.sndMax) {
			break
		}
		n++
	}
	if n > dupThresh {
		return dupThresh
	}
	if i := c.sendIndex(); i >= 0 {
		x := c.sqAt(i)
		wnd := min(c.sndWnd, c.cwnd)
		if c.sndUna.Size(c.sndNxt)+c.sndNxt.Size(x.end()) <= wnd {
			return dupThresh // new data can go out and bring more ACKs
		}
	}
	return max(n-1, 1)
}

// delivered notes that g arrived (SACKed or cumulatively acknowledged) for
// the lost retransmission rule in scoreboard: RACK.xmit_ts of RFC 8985
// §6.2 as a transmission count. Only a segment never retransmitted counts:
// which copy of a retransmitted one arrived is ambiguous.
func (c *Conn) delivered(g *seg) {
	if !g.rexmit && int32(g.sendN-c.rackN) > 0 {
		c.rackN = g.sendN
	}
}

// sackedAfterHead reports whether a segment sent after the first
// unacknowledged one (which is not SACKed) has been SACKed.
func (c *Conn) sackedAfterHead() bool {
	h := c.sqAt(0)
	if h.sacked || !h.seq.LessThan(c.sndMax) || c.sndUna.LessThan(c.recover) {
		return false
	}
	return c.sentAfterSacked(h)
}

// sentAfterSacked reports whether a segment sent after h's latest
// transmission has been SACKed.
func (c *Conn) sentAfterSacked(h *seg) bool {
	for i := 1; i < c.sqLen; i++ {
		g := c.sqAt(i)
		if g.seq.GreaterThanEq(c.sndMax) {
			break
		}
		if g.sacked && int32(g.sendN-h.sendN) > 0 {
			return true
		}
	}
	return false
}
