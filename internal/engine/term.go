package engine

import (
	"xrnic/wire/ddp"
	"xrnic/wire/rdmap"
	"xrnic/wire/term"
)

// decodePeerTermLocked decodes a received Terminate header in either
// control word layout (term.Decode) and settles an ambiguous word by what
// this stream has sent (docs/spec/interop.md#siw-terminate):
//
//   - after an RFC 7306 message (opcodes 0x8-0xB) the RDMAP reading wins:
//     Unexpected OpCode is what a peer without the extensions answers
//     (RFC 7306 §1.1), and siw sends it as 20 06 00 00;
//   - while the stream is in setup (this Terminate is the first FPDU we
//     received, and we sent at most one) the LLP reading wins: RFC 6581
//     errors 0x05-0x07 come then, as the initiator's first FPDU or as the
//     responder's answer to it (docs/spec/mpa.md#terminate-setup);
//   - otherwise the RFC reading stands.
func (qp *QP) decodePeerTermLocked(pl []byte) (term.Terminate, error) {
	t, err := term.Decode(pl)
	if err != nil || !t.Ambiguous {
		return t, err
	}
	var want term.Layer
	switch {
	case qp.sentExtensions():
		want = term.LayerRDMAP
	case qp.stats.rxFPDUs.Load() <= 1 && qp.stats.txFPDUs.Load() <= 1:
		want = term.LayerLLP
	default:
		return t, nil
	}
	if t.Err.Layer != want && t.Alt.Layer == want {
		if a, err := term.DecodeLayout(pl, term.LayoutSiw); err == nil {
			return a, nil
		}
	}
	return t, nil
}

// sentExtensions reports whether this stream sent an RFC 7306 message.
func (qp *QP) sentExtensions() bool {
	c := &qp.stats
	return c.txMsgs[rdmap.OpImmediate&0xF].Load()+c.txMsgs[rdmap.OpImmediateSE&0xF].Load()+
		c.txMsgs[rdmap.OpAtomicRequest&0xF].Load()+c.txMsgs[rdmap.OpAtomicResponse&0xF].Load() != 0
}

// readSourceFailedLocked ends the stream when the source of the Read at
// the head of the IRD queue fails while its response is being built (an
// STag invalidated or deregistered after the request was accepted). RFC
// 5040 §4.8: the Terminate carries the RDMA header updated to where the
// Read stopped (sink and source TO advanced by the bytes sent, the size
// what is left), with the Read Request's DDP header rebuilt
// (docs/spec/rdmap.md#terminate).
func (qp *QP) readSourceFailedLocked(r *irdEntry, e *term.Error) {
	var seg [ddp.UntaggedHeaderLen + rdmap.ReadRequestLen]byte
	// Every queued request took one QN 1 MSN in order, so the head's is
	// the next expected one minus the queue length.
	msn := qp.inReqMSN - (qp.irdTail - qp.irdHead)
	rdmap.PutReadRequest(seg[:], msn, rdmap.ReadParams{
		SinkSTag: r.sinkSTg, SinkTO: r.sinkTO + r.off,
		Size:    uint32(r.size - r.off),
		SrcSTag: r.srcSTag, SrcTO: r.srcTO + r.off,
	})
	qp.fatalLocked(e, seg[:], true)
}
