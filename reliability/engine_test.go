package reliability

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc64"
	"net"
	"testing"
	"time"

	"xrnic/internal/engine"
	"xrnic/internal/engine/enginetest"
	"xrnic/mem"
	"xrnic/transport/kernel"
	"xrnic/wire/rdmap"
	"xrnic/wire/term"
)

// engine is an in-process RNIC (engine.Device) with registered memory,
// answering raw peers that connect over in-memory LLPs.
type testEngine struct {
	dev *engine.Device
	pd  mem.PD
}

func newEngine(t testing.TB) *testEngine {
	t.Helper()
	dev, err := engine.Open(engine.Config{ConnTimeout: 5 * time.Second, MaxQPs: 4096})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Close() })
	return &testEngine{dev: dev, pd: dev.AllocPD()}
}

// region registers n bytes filled with a pattern in pd.
func (e *testEngine) region(t testing.TB, pd mem.PD, n int, access mem.Access, fill byte) (*mem.MR, []byte) {
	t.Helper()
	buf := make([]byte, n)
	for i := range buf {
		buf[i] = fill ^ byte(i*7)
	}
	mr, err := e.dev.RegMR(buf, mem.MROptions{PD: pd, Access: access | mem.LocalWrite, TO: mem.TOZeroBased})
	if err != nil {
		t.Fatal(err)
	}
	return mr, buf
}

var crcTab = crc64.MakeTable(crc64.ECMA)

func sum(b []byte) uint64 { return crc64.Checksum(b, crcTab) }

// qp is one responder QP of the engine in pd, with a few receives posted.
type qp struct {
	qp       *engine.QP
	scq, rcq *engine.CQ
	mr       *mem.MR
}

func (e *testEngine) newQP(pd mem.PD) (*qp, error) {
	q := &qp{}
	var err error
	if q.scq, err = e.dev.CreateCQ(8); err != nil {
		return nil, err
	}
	if q.rcq, err = e.dev.CreateCQ(8); err != nil {
		q.scq.Close()
		return nil, err
	}
	if q.qp, err = e.dev.CreateQP(engine.QPAttr{PD: pd, SendCQ: q.scq, RecvCQ: q.rcq, SQDepth: 4, RQDepth: 4, MaxSGE: 1}); err != nil {
		q.close(e)
		return nil, err
	}
	return q, nil
}

func (q *qp) close(e *testEngine) {
	if q.qp != nil {
		q.qp.Close()
	}
	if q.mr != nil {
		e.dev.DeregMR(q.mr)
	}
	q.rcq.Close()
	q.scq.Close()
}

// connect joins a new responder QP of pd and a raw initiator over
// net.Pipe.
func (e *testEngine) connect(ctx context.Context, pd mem.PD) (*qp, *enginetest.Peer, error) {
	q, err := e.newQP(pd)
	if err != nil {
		return nil, nil, err
	}
	a, b := net.Pipe()
	errc := make(chan error, 1)
	go func() {
		req, err := e.dev.ReadConnRequest(ctx, kernel.WrapConn(a, 1460))
		if err == nil {
			err = req.Accept(ctx, q.qp, engine.ConnParams{})
		}
		errc <- err
	}()
	p, err := enginetest.Handshake(b, enginetest.Options{})
	if aerr := <-errc; err == nil {
		err = aerr
	}
	if err != nil {
		a.Close()
		b.Close()
		q.close(e)
		return nil, nil, err
	}
	return q, p, nil
}

// guessOp is the operation a guess uses to reach memory.
type guessOp int

const (
	guessWrite guessOp = iota
	guessRead
	guessFetchAdd
	guessCmpSwap
	numGuessOps
)

func (o guessOp) String() string {
	return [...]string{"write", "read", "fetchadd", "cmpswap"}[o]
}

// guessULPDU builds the request of a guess at stag/to (the first Read or
// Atomic Request of a stream: MSN 1).
func guessULPDU(op guessOp, stag uint32, to uint64) []byte { return guessULPDUMSN(op, stag, to, 1) }

// guessULPDUMSN is guessULPDU with the QN 1 MSN of the request.
func guessULPDUMSN(op guessOp, stag uint32, to uint64, msn uint32) []byte {
	switch op {
	case guessWrite:
		b := make([]byte, 14+16)
		rdmap.PutWrite(b, stag, to, true, 16)
		copy(b[14:], "GUESSGUESSGUESS!")
		return b
	case guessRead:
		b := make([]byte, 46)
		rdmap.PutReadRequest(b, msn, rdmap.ReadParams{SinkSTag: 0x1234, Size: 64, SrcSTag: stag, SrcTO: to})
		return b
	case guessFetchAdd:
		b := make([]byte, 70)
		rdmap.PutAtomicRequest(b, msn, rdmap.AtomicParams{AOpCode: rdmap.AOpFetchAdd, RequestID: 7, STag: stag, TO: to, AddSwap: 1, CompareMask: ^uint64(0)})
		return b
	default:
		b := make([]byte, 70)
		rdmap.PutAtomicRequest(b, msn, rdmap.AtomicParams{AOpCode: rdmap.AOpCmpSwap, RequestID: 7, STag: stag, TO: to, AddSwap: 0xdead, AddSwapMask: ^uint64(0), Compare: 0, CompareMask: 0})
		return b
	}
}

// wantGuessErr is the Terminate an invalid STag must draw (mem's table:
// DDP 1/0x00 for tagged placement, RDMAP 1/0x00 for a Read source or an
// atomic target).
func wantGuessErr(op guessOp) *term.Error {
	if op == guessWrite {
		return term.DDPTaggedInvalidSTag
	}
	return term.RDMAPInvalidSTag
}

// errUnexpected: the engine answered a guess with something other than
// the expected Terminate.
var errUnexpected = errors.New("unexpected answer to a guess")

// guess connects a raw peer, sends one request at stag, and returns the
// Terminate's error. Every guess costs its connection (the QP goes to
// error), as RFC 5040 §7 prescribes.
func (e *testEngine) guess(ctx context.Context, pd mem.PD, op guessOp, stag uint32, to uint64) (*term.Error, error) {
	q, p, err := e.connect(ctx, pd)
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	defer q.close(e)
	defer p.Close()
	if err := p.Send(guessULPDU(op, stag, to)); err != nil {
		return nil, fmt.Errorf("send: %w", err)
	}
	u, err := p.Next(5 * time.Second)
	if err != nil {
		return nil, fmt.Errorf("no answer: %w", err)
	}
	// The first ULPDU back must be the Terminate (untagged QN 2): a Read
	// Response or an Atomic Response would be a successful access.
	if len(u) < 18 || u[0]&0x80 != 0 || binary.BigEndian.Uint32(u[6:]) != 2 {
		return nil, fmt.Errorf("%w: % x", errUnexpected, u[:min(len(u), 32)])
	}
	tm, err := term.Decode(u[18:])
	if err != nil {
		return nil, fmt.Errorf("terminate: %w", err)
	}
	if q.qp.State() != engine.QPError && q.qp.State() != engine.QPClosed {
		// The state moves before tx sends the Terminate; allow a moment.
		deadline := time.Now().Add(2 * time.Second)
		for q.qp.State() != engine.QPError && q.qp.State() != engine.QPClosed && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		if st := q.qp.State(); st != engine.QPError && st != engine.QPClosed {
			return tm.Err, fmt.Errorf("QP is %v after a Terminate", st)
		}
	}
	return tm.Err, nil
}
