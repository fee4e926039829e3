package verbs

import (
	"context"
)

// ExecWRID is the work request ID the synchronous helpers (Exec, FetchAdd,
// CmpSwap, Read, Write) use; do not use it for your own WRs. Completions
// with it that a helper abandoned (its context ended first) are dropped by
// Poll.
const ExecWRID uint64 = 0x7872_6e69_635f_6578 // "xrnic_ex"

// WCError is the error of a synchronous helper whose work request
// completed with an error status.
type WCError struct {
	Status Status
	Op     Opcode
	Err    error // the iWARP error (*term.Error) when known
}

func (e *WCError) Error() string {
	s := "verbs: " + e.Op.String() + " completed with status " + e.Status.String()
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

func (e *WCError) Unwrap() error { return e.Err }

// Exec posts wr (signalled, with ID ExecWRID) and waits for its
// completion: a synchronous convenience for tools and tests, built on
// PostSend and the send CQ. It polls the send CQ itself; completions of
// other work requests it meets on the way are kept in order and returned
// by the next Poll. Exec calls on QPs sharing a send CQ run one at a time.
// Do not poll or wait on that CQ from another goroutine meanwhile: a
// poller would drop Exec's completion, and a waiter would not be woken
// for the completions Exec kept. Applications that poll their CQs
// themselves use PostSend and the Post helpers.
//
// A completion with an error status is returned with a *WCError. If ctx
// ends first, the WR stays posted and its completion is dropped later.
func (qp *QP) Exec(ctx context.Context, wr *SendWR) (Completion, error) {
	cq := qp.scq
	cq.execMu.Lock()
	defer cq.execMu.Unlock()
	w := *wr
	w.ID = ExecWRID
	w.Flags |= FlagSignaled
	if err := qp.PostSend(&w); err != nil {
		return Completion{}, err
	}
	var buf [16]Completion
	for {
		cq.pollMu.Lock()
		n := cq.c.poll(buf[:])
		var got Completion
		found := false
		for _, c := range buf[:n] {
			if !found && c.ID == ExecWRID && c.QPNum == qp.num {
				got, found = c, true
				continue
			}
			if c.ID != ExecWRID {
				cq.kept = append(cq.kept, c)
			}
		}
		cq.nkept.Store(int32(len(cq.kept)))
		cq.pollMu.Unlock()
		if found {
			if got.Status != StatusSuccess {
				return got, &WCError{Status: got.Status, Op: got.Op, Err: got.Err}
			}
			return got, nil
		}
		if n == 0 {
			if err := cq.c.wait(ctx); err != nil {
				return Completion{}, err
			}
		}
	}
}

// FetchAdd executes an atomic FetchAdd (masked with mask unless 0) on the
// peer's word at rstag/rto and returns its original value, which also
// lands in result (8 bytes with local write access). See Exec.
func (qp *QP) FetchAdd(ctx context.Context, result SGE, rstag uint32, rto uint64, add, mask uint64) (uint64, error) {
	c, err := qp.Exec(ctx, &SendWR{Op: OpFetchAdd, SGL: []SGE{result}, RemoteSTag: rstag, RemoteTO: rto, CompareAdd: add, AddMask: mask})
	return c.AtomicOrig, err
}

// CmpSwap executes an atomic CmpSwap (see PostCmpSwap) and returns the
// original value; the swap happened iff ((orig ^ cmp) & cmpMask) == 0.
// See Exec.
func (qp *QP) CmpSwap(ctx context.Context, result SGE, rstag uint32, rto uint64, cmp, cmpMask, swap, swapMask uint64) (uint64, error) {
	c, err := qp.Exec(ctx, &SendWR{Op: OpCmpSwap, SGL: []SGE{result}, RemoteSTag: rstag, RemoteTO: rto,
		CompareAdd: cmp, CompareMask: cmpMask, Swap: swap, SwapMask: swapMask})
	return c.AtomicOrig, err
}

// Read executes an RDMA Read into local and waits for it. See Exec.
func (qp *QP) Read(ctx context.Context, local SGE, rstag uint32, rto uint64) error {
	_, err := qp.Exec(ctx, &SendWR{Op: OpRead, SGL: []SGE{local}, RemoteSTag: rstag, RemoteTO: rto})
	return err
}

// Write executes an RDMA Write of local and waits until it completed
// locally (its bytes were handed to the transport). See Exec.
func (qp *QP) Write(ctx context.Context, local SGE, rstag uint32, rto uint64) error {
	_, err := qp.Exec(ctx, &SendWR{Op: OpWrite, SGL: []SGE{local}, RemoteSTag: rstag, RemoteTO: rto})
	return err
}
