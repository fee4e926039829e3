package main

// Posted receives and Send credits: Send, Immediate Data and Write with
// Immediate consume a posted receive at the target, and an iWARP message
// that finds none is fatal, so receives stay posted across sizes and
// send_bw is paced by credits.

// postInitialRecvs posts the receives that stay posted across sizes:
// the server's rxD buffers per QP (send_bw, Write with Immediate), the
// client's credit buffers, and two per QP for ping-pong tests.
func (s *session) postInitialRecvs() error {
	p := s.p
	if !p.consumesRecv() {
		return nil
	}
	n, bl := s.rxD, s.slot
	if s.client && p.test.bw {
		n, bl = creditBufs, 64
	}
	for q, qp := range s.qps {
		for k := range n {
			if err := qp.PostRecvBuf(uint64(q)<<32|uint64(k), s.rmr.SGE((q*n+k)*bl, bl)); err != nil {
				return err
			}
		}
	}
	s.recvN, s.recvLen = n, bl
	return nil
}

func (s *session) repost(id uint64) error {
	q, k := int(id>>32), int(id&0xffff_ffff)
	return s.qps[q].PostRecvBuf(id, s.rmr.SGE((q*s.recvN+k)*s.recvLen, s.recvLen))
}

func (s *session) recvBuf(id uint64, n int) []byte {
	q, k := int(id>>32), int(id&0xffff_ffff)
	off := (q*s.recvN + k) * s.recvLen
	return s.rbuf[off : off+n]
}

func (s *session) initCredits(rxD int) {
	s.granted = make([]uint64, s.p.qps)
	s.sent = make([]uint64, s.p.qps)
	for q := range s.granted {
		s.granted[q] = uint64(rxD)
	}
}
