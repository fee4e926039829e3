package verbs

import (
	"sync"

	"xrnic/internal/engine"
)

// SRQAttr are the creation attributes of a shared receive queue
// (ibv_srq_init_attr). The device limits are those of a QP's receive
// queue: Depth at most Attributes.MaxWR, MaxSGE at most
// Attributes.MaxSGE, and at most Attributes.MaxQPs SRQs.
type SRQAttr struct {
	Depth  int // receive WRs held at most (max_wr)
	MaxSGE int // SGEs per receive WR (max_sge); default 4
	// Limit arms the limit event at creation (srq_limit; 0: not armed);
	// see SRQ.SetLimit.
	Limit int
}

// SRQInfo is what SRQ.Query reports (ibv_query_srq): Depth, MaxSGE, the
// armed Limit (0: not armed) and the receives Posted and not yet taken.
type SRQInfo = engine.SRQInfo

// SRQ is a shared receive queue (ibv_srq): receives that every QP created
// with it (QPAttr.SRQ) takes from, one per inbound Send, Immediate Data
// or Write with Immediate, in posting order. Such a QP has no receive
// queue of its own: QP.PostRecv refuses with ErrInvalidWR.
//
// A receive completes on the receive CQ of the QP that took it, with that
// QP's number in Completion.QPNum; the QP reserves the CQ entry when it
// takes the receive, so the receive CQs must have room for the receives
// their QPs may hold. A message that finds the SRQ empty ends only its
// own connection, with the Terminate an empty receive queue gets (DDP
// "no buffer available", RFC 5041); a receive too short for its message
// completes with StatusLocLenErr and ends that connection. The SRQ and
// its other QPs carry on in both cases. A QP that ends flushes only the
// receive it had taken for a message under way, if any.
//
// Post methods may be called from several goroutines.
type SRQ struct {
	pd *PD
	s  srqImpl

	mu  sync.Mutex // post: wr and sge are the copy handed down
	wr  RecvWR
	sge []SGE
}

// CreateSRQ creates a shared receive queue (ibv_create_srq). The lkeys of
// its receives must belong to pd.
func (pd *PD) CreateSRQ(a SRQAttr) (*SRQ, error) {
	if a.MaxSGE <= 0 {
		a.MaxSGE = 4
	}
	if a.MaxSGE > pd.dev.attrs.MaxSGE || a.Depth <= 0 || a.Limit < 0 || a.Limit > a.Depth {
		return nil, ErrBadAttr
	}
	s, err := pd.dev.p.createSRQ(pd.id, &a)
	if err != nil {
		return nil, err
	}
	return &SRQ{pd: pd, s: s, sge: make([]SGE, a.MaxSGE)}, nil
}

// PD returns the SRQ's protection domain.
func (s *SRQ) PD() *PD { return s.pd }

// PostRecv posts a receive work request (ibv_post_srq_recv). It copies wr
// and never allocates; ErrQueueFull when the SRQ holds Depth receives.
func (s *SRQ) PostRecv(wr *RecvWR) error {
	if len(wr.SGL) > len(s.sge) {
		return ErrInvalidWR
	}
	s.mu.Lock()
	s.wr.ID = wr.ID
	s.wr.SGL = s.sge[:copy(s.sge, wr.SGL)]
	err := s.s.postRecv(&s.wr)
	s.mu.Unlock()
	return err
}

// PostRecvBuf posts a receive of one buffer.
func (s *SRQ) PostRecvBuf(id uint64, buf SGE) error {
	s.mu.Lock()
	s.sge[0] = buf
	s.wr = RecvWR{ID: id, SGL: s.sge[:1]}
	err := s.s.postRecv(&s.wr)
	s.mu.Unlock()
	return err
}

// SetLimit arms the limit event (ibv_modify_srq with IBV_SRQ_LIMIT): once
// fewer than limit receives are left in the SRQ, LimitEvents delivers one
// event (IBV_EVENT_SRQ_LIMIT_REACHED) and the SRQ disarms; arm it again
// to hear of the next time. 0 disarms; above the depth is ErrBadAttr.
// The depth cannot be changed (IBV_SRQ_MAX_WR: as Linux siw, not
// supported).
func (s *SRQ) SetLimit(limit int) error { return s.s.setLimit(limit) }

// LimitEvents returns the channel (capacity 1) of the limit event.
func (s *SRQ) LimitEvents() <-chan struct{} { return s.s.limitEvents() }

// Query returns the SRQ's attributes and how many receives it holds.
func (s *SRQ) Query() SRQInfo { return s.s.query() }

// Close destroys the SRQ (ibv_destroy_srq); ErrSRQBusy while a QP created
// with it is not closed. Receives still in it are dropped without a
// completion (no QP took them; Linux siw does the same).
func (s *SRQ) Close() error { return s.s.close() }
