package engine

import (
	"context"

	"xrnic/wire/term"
)

// ProbeAtomics tells whether the peer supports the RFC 7306 extensions by
// issuing a FetchAdd with Add Data 0 to remoteSTag/remoteTO (an 8-byte
// aligned word the peer registered with remote atomic access; memory is
// not changed). The probe is internal: it produces no completion on the
// send CQ. A peer without the extensions terminates the stream (RFC 7306
// §1.1; docs/spec/rfc7306.md#probe), so probe on a connection you can afford to lose: the QP is then in
// error and ProbeNotSupported comes with ErrNoAtomics. Linux siw's answer,
// 20 06 00 00 in its own control word layout, is read as Unexpected OpCode
// because the FetchAdd went out first (docs/spec/interop.md#siw-terminate).
func (qp *QP) ProbeAtomics(ctx context.Context, remoteSTag uint32, remoteTO uint64) (ProbeResult, error) {
	ch := make(chan sqEntry, 1)
	qp.mu.Lock()
	if qp.state != QPRTS {
		qp.mu.Unlock()
		return ProbeFailed, ErrNotConnected
	}
	qp.probeCh = ch
	if !qp.postInternalLocked(SendWR{Op: OpFetchAdd, RemoteSTag: remoteSTag, RemoteTO: remoteTO}, internalProbe) {
		qp.mu.Unlock()
		return ProbeFailed, ErrQueueFull
	}
	qp.mu.Unlock()
	qp.ring()
	select {
	case e := <-ch:
		if e.status == StatusSuccess {
			return ProbeSupported, nil
		}
		if pt := qp.PeerTerminate(); pt != nil && pt.Is(term.RDMAPUnexpectedOpCode) {
			return ProbeNotSupported, ErrNoAtomics
		}
		if e.err != nil {
			return ProbeFailed, e.err
		}
		if err := qp.Err(); err != nil {
			return ProbeFailed, err
		}
		return ProbeFailed, ErrState
	case <-ctx.Done():
		return ProbeFailed, ctx.Err()
	}
}
