package tcpstack

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
	if !c.sndUna.GreaterThan(c.recover) || c.sqLen == 0 {
		return // RFC 6582 §3.2 step 2: not for dupACKs of an earlier episode
	}
	c.scoreboard()
	if c.dupAcks < dupThresh && !c.sqAt(0).lost {
		return
	}
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
