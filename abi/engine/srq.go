package main

import (
	"errors"
	"sync"
	"sync/atomic"
	"syscall"

	"xrnic/verbs"
)

// srqObj is an SRQ (xrnic_create_srq) and the watcher that turns its limit
// events into IBV_EVENT_SRQ_LIMIT_REACHED on the context's async channel.
type srqObj struct {
	srq    *verbs.SRQ
	pd     *pdObj
	async  *channel
	cookie uint64
	maxSGE int
	nqps   atomic.Int32
	stop   chan struct{}
	wg     sync.WaitGroup
}

func createSRQ(pdh uint64, in *srqInitT, out *uint64) int {
	p := getT[pdObj](pdh)
	if p == nil {
		return fail(syscall.EBADF, "xrnic_create_srq: no such PD")
	}
	var async *channel
	if in.AsyncCh != 0 {
		if async = getT[channel](in.AsyncCh); async == nil {
			return fail(syscall.EBADF, "xrnic_create_srq: no such async channel")
		}
	}
	a := dev.a
	sge := int(max(in.MaxSGE, 1))
	if in.MaxWR == 0 || int64(in.MaxWR) > int64(a.MaxWR) || sge > a.MaxSGE || in.SRQLimit > in.MaxWR {
		return fail(syscall.EINVAL, "xrnic_create_srq: max_wr %d (1..%d), max_sge %d (at most %d), srq_limit %d (at most max_wr)",
			in.MaxWR, a.MaxWR, in.MaxSGE, a.MaxSGE, in.SRQLimit)
	}
	srq, err := p.pd.CreateSRQ(verbs.SRQAttr{Depth: int(in.MaxWR), MaxSGE: sge, Limit: int(in.SRQLimit)})
	if err != nil {
		if errors.Is(err, verbs.ErrTooManyQPs) {
			return fail(syscall.ENOMEM, "xrnic_create_srq: %v", err)
		}
		return fail(syscall.EINVAL, "xrnic_create_srq: %v", err)
	}
	s := &srqObj{srq: srq, pd: p, async: async, cookie: in.Cookie, maxSGE: sge, stop: make(chan struct{})}
	h := handles.add(s)
	if h == 0 {
		srq.Close()
		return fail(syscall.ENOMEM, "xrnic_create_srq: too many objects")
	}
	p.nqps.Add(1)
	if async != nil {
		s.wg.Add(1)
		go s.watch()
	}
	in.MaxSGE = uint32(sge)
	*out = h
	return 0
}

// watch queues IBV_EVENT_SRQ_LIMIT_REACHED each time the armed limit is
// reached.
func (s *srqObj) watch() {
	defer s.wg.Done()
	for {
		select {
		case <-s.srq.LimitEvents():
			debugf("SRQ: limit reached")
			ev := eventT{Kind: xEvAsync, Code: IBV_EVENT_SRQ_LIMIT_REACHED, Cookie: s.cookie}
			s.async.push(&ev)
		case <-s.stop:
			return
		}
	}
}

func destroySRQ(h uint64) int {
	ctl.Lock()
	defer ctl.Unlock()
	s := getT[srqObj](h)
	if s == nil {
		return fail(syscall.EBADF, "xrnic_destroy_srq: no such SRQ")
	}
	if s.nqps.Load() > 0 {
		return fail(syscall.EBUSY, "xrnic_destroy_srq: QPs still use the SRQ (destroy them first)")
	}
	if err := s.srq.Close(); err != nil && !errors.Is(err, verbs.ErrClosed) {
		if errors.Is(err, verbs.ErrSRQBusy) {
			return fail(syscall.EBUSY, "xrnic_destroy_srq: %v", err)
		}
		return fail(syscall.EINVAL, "xrnic_destroy_srq: %v", err)
	}
	handles.remove(h)
	close(s.stop)
	s.wg.Wait()
	s.pd.nqps.Add(-1)
	return 0
}

func modifySRQ(h uint64, attr *srqAttrT, mask int32) int {
	s := getT[srqObj](h)
	if s == nil {
		return fail(syscall.EBADF, "xrnic_modify_srq: no such SRQ")
	}
	if mask&^(srqMaxWR|srqLimit) != 0 {
		return fail(syscall.EINVAL, "xrnic_modify_srq: unknown attribute mask %#x", mask)
	}
	if mask&srqMaxWR != 0 {
		return fail(syscall.EOPNOTSUPP, "xrnic_modify_srq: IBV_SRQ_MAX_WR: an SRQ cannot be resized (as with Linux siw)")
	}
	if mask&srqLimit != 0 {
		if attr.SRQLimit > uint32(s.srq.Query().Depth) {
			return fail(syscall.EINVAL, "xrnic_modify_srq: srq_limit %d above max_wr %d", attr.SRQLimit, s.srq.Query().Depth)
		}
		if err := s.srq.SetLimit(int(attr.SRQLimit)); err != nil {
			return fail(syscall.EINVAL, "xrnic_modify_srq: %v", err)
		}
	}
	return 0
}

func querySRQ(h uint64, attr *srqAttrT) int {
	s := getT[srqObj](h)
	if s == nil {
		return fail(syscall.EBADF, "xrnic_query_srq: no such SRQ")
	}
	q := s.srq.Query()
	*attr = srqAttrT{MaxWR: uint32(q.Depth), MaxSGE: uint32(q.MaxSGE), SRQLimit: uint32(q.Limit)}
	return 0
}

// postSRQRecv is xrnic_post_srq_recv.
func postSRQRecv(h uint64, wrs *recvWRT, n int32, posted *int32) int {
	if posted != nil {
		*posted = 0
	}
	s := getT[srqObj](h)
	if s == nil {
		return int(syscall.EBADF)
	}
	ws, ok := recvWRs(wrs, n)
	if !ok {
		return failErr(syscall.EINVAL, errBadWR)
	}
	for i := range ws {
		wr, ok := recvWR(&ws[i], s.maxSGE)
		if !ok {
			return failErr(syscall.EINVAL, errBadWR)
		}
		if err := s.srq.PostRecv(&wr); err != nil {
			return postErr(err)
		}
		if posted != nil {
			*posted++
		}
	}
	return 0
}
