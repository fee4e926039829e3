package engine

import (
	"sync"

	"xrnic/mem"
	"xrnic/wire/term"
)

// SRQAttr are the creation attributes of a shared receive queue
// (ibv_srq_init_attr).
type SRQAttr struct {
	PD     mem.PD // the PD the receives' lkeys must belong to
	Depth  int    // receive WRs held at most (max_wr)
	MaxSGE int    // SGEs per receive WR (default 4)
	// Limit arms the limit event at creation (srq_limit; 0: not armed).
	Limit int
}

// SRQInfo is what Query reports (ibv_query_srq).
type SRQInfo struct {
	Depth, MaxSGE int
	Limit         int // armed limit, 0: not armed
	Posted        int // receives waiting in the queue
}

// SRQ is a shared receive queue: receive WRs that any QP created with it
// takes, one per inbound message, in posting order. A QP on an SRQ has no
// receive queue of its own (PostRecv on it is ErrInvalidWR). A QP takes a
// WR when the first segment of a Send or an Immediate Data arrives, and
// reserves its completion on its own receive CQ then; the WR completes
// there with the QP's number. A message that finds the SRQ empty ends
// only its own stream (Terminate DDP 2/0x02, RFC 5041 §7.2, as an empty
// RQ does); the SRQ and its other QPs go on. A QP that ends flushes only
// the WR it had taken; the others stay in the SRQ.
//
// Lock order: QP.mu, then SRQ.mu; CQ.mu is never taken under SRQ.mu.
type SRQ struct {
	dev    *Device
	pd     mem.PD
	maxSGE int
	events chan struct{} // limit reached (capacity 1)

	mu         sync.Mutex
	rq         []rqEntry
	sge        []SGE
	head, tail uint32
	limit      int // armed while > 0
	users      int // QPs created with it
	closed     bool
}

// CreateSRQ creates a shared receive queue (ibv_create_srq).
func (d *Device) CreateSRQ(a SRQAttr) (*SRQ, error) {
	if a.MaxSGE == 0 {
		a.MaxSGE = 4
	}
	if a.Depth <= 0 || a.Depth > d.cfg.MaxWR || a.MaxSGE < 0 || a.MaxSGE > d.cfg.MaxSGE ||
		a.Limit < 0 || a.Limit > a.Depth {
		return nil, ErrBadAttr
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, ErrClosed
	}
	if d.nsrqs >= d.cfg.MaxQPs {
		return nil, ErrTooManyQPs
	}
	d.nsrqs++
	return &SRQ{dev: d, pd: a.PD, maxSGE: a.MaxSGE, events: make(chan struct{}, 1),
		rq: make([]rqEntry, a.Depth), sge: make([]SGE, a.Depth*max(a.MaxSGE, 1)), limit: a.Limit}, nil
}

func (s *SRQ) slot(seq uint32) (*rqEntry, []SGE) {
	i := int(seq % uint32(len(s.rq)))
	m := max(s.maxSGE, 1)
	return &s.rq[i], s.sge[i*m : i*m+m]
}

// PD returns the SRQ's protection domain.
func (s *SRQ) PD() mem.PD { return s.pd }

// MaxSGE returns the SGEs a receive WR may have.
func (s *SRQ) MaxSGE() int { return s.maxSGE }

// PostRecv queues a receive work request (ibv_post_srq_recv). Like
// QP.PostRecv it copies wr, checks the lkeys when a message fills it, and
// allocates nothing. No CQ entry is reserved until a QP takes it.
func (s *SRQ) PostRecv(wr *RecvWR) error {
	if len(wr.SGL) > s.maxSGE {
		return ErrInvalidWR
	}
	var length uint64
	for i := range wr.SGL {
		length += uint64(wr.SGL[i].Length)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	if int(s.tail-s.head) >= len(s.rq) {
		return ErrQueueFull
	}
	e, sgl := s.slot(s.tail)
	*e = rqEntry{id: wr.ID, nsge: copy(sgl, wr.SGL), length: length}
	s.tail++
	return nil
}

// SetLimit arms the limit event (ibv_modify_srq with IBV_SRQ_LIMIT): once
// fewer than limit receives wait in the SRQ, LimitEvents gets one event
// and the SRQ disarms. 0 disarms it. A limit above the depth is
// ErrBadAttr. The depth cannot be changed (as in Linux siw).
func (s *SRQ) SetLimit(limit int) error {
	if limit < 0 || limit > len(s.rq) {
		return ErrBadAttr
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	s.limit = limit
	return nil
}

// LimitEvents returns the channel (capacity 1) that receives a value when
// the armed limit is reached (IBV_EVENT_SRQ_LIMIT_REACHED).
func (s *SRQ) LimitEvents() <-chan struct{} { return s.events }

// Query returns the SRQ's attributes and occupancy.
func (s *SRQ) Query() SRQInfo {
	s.mu.Lock()
	defer s.mu.Unlock()
	return SRQInfo{Depth: len(s.rq), MaxSGE: s.maxSGE, Limit: s.limit, Posted: int(s.tail - s.head)}
}

// Close destroys the SRQ: ErrSRQBusy while a QP created with it is not
// closed. The receives still queued are dropped without a completion, as
// Linux siw drops them (no QP owns them, so no CQ is theirs).
func (s *SRQ) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	if s.users > 0 {
		s.mu.Unlock()
		return ErrSRQBusy
	}
	s.closed = true
	s.head = s.tail
	s.mu.Unlock()
	s.dev.mu.Lock()
	s.dev.nsrqs--
	s.dev.mu.Unlock()
	return nil
}

func (s *SRQ) attach() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.users++
	return true
}

// detachIf undoes attach; nil does nothing (a QP without an SRQ).
func (s *SRQ) detachIf() {
	if s == nil {
		return
	}
	s.mu.Lock()
	s.users--
	s.mu.Unlock()
}

// take moves the oldest receive into dst and its SGEs into dsgl (qp.mu
// held); it reports false when the SRQ is empty. It raises the limit
// event when fewer than the armed limit remain.
func (s *SRQ) take(dst *rqEntry, dsgl []SGE) bool {
	s.mu.Lock()
	if s.head == s.tail {
		s.mu.Unlock()
		return false
	}
	e, sgl := s.slot(s.head)
	*dst = *e
	copy(dsgl, sgl[:e.nsge])
	s.head++
	fire := s.limit > 0 && int(s.tail-s.head) < s.limit
	if fire {
		s.limit = 0
	}
	s.mu.Unlock()
	if fire {
		select {
		case s.events <- struct{}{}:
		default:
		}
	}
	return true
}

// putBack queues a receive a sink QP has handed over at the tail again
// (QPAttr.RecvSink); false when the SRQ has no room or is gone.
func (s *SRQ) putBack(r *rqEntry, sgl []SGE) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || int(s.tail-s.head) >= len(s.rq) {
		return false
	}
	e, esgl := s.slot(s.tail)
	*e = *r
	copy(esgl, sgl[:r.nsge])
	s.tail++
	return true
}

// useSRQ makes qp, being created, take its receives from s (nil: its own
// RQ): its one rq slot gets s's SGE count and PD, and it may hold behind
// an invalidation as many completions as s has receives.
func (qp *QP) useSRQ(s *SRQ) error {
	if s == nil {
		return nil
	}
	if s.dev != qp.dev {
		return ErrWrongDevice
	}
	if !s.attach() {
		return ErrClosed
	}
	qp.srq, qp.rqPD, qp.rqSGEs = s, s.pd, max(s.maxSGE, 1)
	qp.rqSGE = make([]SGE, qp.rqSGEs)
	qp.held = make([]Completion, 0, len(s.rq))
	return nil
}

// srqTakeLocked gives a QP on an SRQ whose own one-slot queue is empty
// the SRQ's next receive, with an entry reserved on its receive CQ. The
// error is the Terminate to send when it cannot: no QP's receive, no
// buffer (DDP 2/0x02, as an empty RQ), or no room on the CQ, which would
// lose the completion (a local catastrophic error of this stream only).
func (qp *QP) srqTakeLocked() *term.Error {
	if qp.srq == nil {
		return term.DDPUntaggedNoBuffer
	}
	if !qp.rcq.reserve() {
		return term.RDMAPLocalCatastrophic
	}
	r, sgl := qp.rqSlot(qp.rqTail)
	if !qp.srq.take(r, sgl) {
		qp.rcq.release()
		return term.DDPUntaggedNoBuffer
	}
	qp.rqTail++
	return nil
}
