// Package verbs is the public Go API of xrnic, a software iWARP RNIC
// (RDMAP RFC 5040, DDP RFC 5041, MPA RFC 5044/6581, RFC 7306 atomics and
// Immediate Data). It follows libibverbs and rdma_cm closely, so an RDMA
// programmer finds the usual objects under Go names.
//
// # A short tour
//
//	dev, _ := verbs.Open(verbs.DeviceConfig{})            // ibv_open_device
//	pd, _ := dev.AllocPD()                                // ibv_alloc_pd
//	mr, _ := pd.AllocMR(1<<21, verbs.AccessLocalWrite|verbs.AccessRemoteAtomic, verbs.AllocOptions{})
//	cq, _ := dev.CreateCQ(256)                            // ibv_create_cq
//	qp, _ := pd.CreateQP(verbs.QPAttr{SendCQ: cq, RecvCQ: cq, SQDepth: 128, RQDepth: 128})
//	err := qp.Dial(ctx, "10.0.0.2:4791", verbs.ConnParam{PrivateData: hello})
//	qp.PostFetchAdd(1, mr.SGE(0, 8), rkey, raddr, 1, 0, verbs.FlagSignaled)
//	n := cq.Poll(wc)                                      // ibv_poll_cq
//
// The responder listens, accepts (or rejects, with private data) and posts
// receives; both sides then post work requests and poll completions.
//
// # Names
//
//	libibverbs / rdma_cm                 verbs
//	ibv_open_device, ibv_query_device    Open(DeviceConfig), Device.Attributes
//	ibv_alloc_pd / ibv_dealloc_pd        Device.AllocPD, PD.Dealloc
//	ibv_reg_mr / ibv_dereg_mr            PD.RegMR (caller memory), PD.AllocMR (hugepages), MR.Dereg
//	mr->lkey, mr->rkey                   MR.STag (also LKey, RKey: iWARP has one STag)
//	IBV_ACCESS_*                         Access* (plus AccessRemoteInvalidate)
//	ibv_create_cq, ibv_poll_cq           Device.CreateCQ, CQ.Poll
//	ibv_req_notify_cq, ibv_get_cq_event  CQ.Notify, CQ.Events (a channel); CQ.Wait(ctx)
//	ibv_create_qp / ibv_destroy_qp       PD.CreateQP(QPAttr), QP.Close
//	sq_sig_all, IBV_SEND_SIGNALED        QPAttr.SigAll, FlagSignaled
//	IBV_SEND_SOLICITED, IBV_SEND_FENCE   FlagSolicited, FlagFence
//	ibv_post_send, ibv_post_recv         QP.PostSend(*SendWR), QP.PostRecv(*RecvWR), QP.Post* helpers
//	ibv_create_srq / ibv_destroy_srq     PD.CreateSRQ(SRQAttr), SRQ.Close; QPAttr.SRQ (init_attr.srq)
//	ibv_post_srq_recv, ibv_query_srq     SRQ.PostRecv, SRQ.Query
//	ibv_modify_srq (srq_limit)           SRQ.SetLimit, SRQ.LimitEvents (IBV_EVENT_SRQ_LIMIT_REACHED)
//	ibv_sge, ibv_send_wr, ibv_recv_wr    SGE, SendWR, RecvWR
//	ibv_wc, wc.status, wc.opcode         Completion, Status, Opcode
//	IBV_WC_WITH_IMM, IBV_WC_WITH_INV     WCWithImm, WCWithInv
//	atomic_cap (IBV_ATOMIC_GLOB)         Attributes.AtomicCap (AtomicGlob)
//	rdma_listen, rdma_get_request        Device.Listen, Listener.Accept
//	rdma_accept, rdma_reject             ConnRequest.Accept, ConnRequest.Reject
//	rdma_connect                         QP.Dial(ctx, addr, ConnParam)
//	rdma_conn_param                      ConnParam (responder_resources = IRD, initiator_depth = ORD)
//	RDMA_CM_EVENT_REJECTED               *RejectedError (errors.Is(err, ErrRejected))
//	rdma_disconnect                      QP.Disconnect
//
// The operations and their work request opcodes:
//
//	Send / with SE                       OpSend (+FlagSolicited)
//	Send with Invalidate / with SE       OpSendWithInv (+FlagSolicited), SendWR.InvalidateSTag
//	RDMA Write, Write with Immediate     OpWrite, OpWriteWithImm (peer completes OpRecvWriteImm)
//	RDMA Read                            OpRead
//	Immediate Data / with SE (RFC 7306)  OpImm (+FlagSolicited) (peer completes OpRecvImm)
//	FetchAdd, masked (RFC 7306)          OpFetchAdd, SendWR.AddMask
//	CmpSwap, masked (RFC 7306)           OpCmpSwap, SendWR.CompareMask and SwapMask (CmpSwapAll: plain)
//	Local Invalidate                     OpLocalInv
//
// Immediate Data is 64 bits (RFC 7306), not the 32 of InfiniBand; it
// consumes a posted receive: one of at least 8 bytes gets the value placed,
// one with no buffer (an empty SGL, as InfiniBand applications post for
// Write with Immediate) has it in the completion only (ByteLen 0 for
// Immediate Data alone); 1 to 7 bytes complete with StatusLocLenErr and a
// Terminate. QP.Done tells when a connection has ended (the peer's
// orderly close or an error); QP.ToError ends it (ibv_modify_qp to
// IBV_QPS_ERR). An atomic's original
// value lands in its WR's 8-byte local buffer (host byte order) and in
// Completion.AtomicOrig. QP.ProbeAtomics tells whether a peer supports the
// RFC 7306 extensions (a FetchAdd of 0).
//
// Posting copies the work request (SGL included) and never blocks or
// allocates; nor does Poll. Every posted WR reserves a CQ entry until its
// completion is polled, so no completion is ever lost: a full CQ grows
// (a rare allocation), up to MaxCQE, and one at MaxCQE refuses posts
// (ErrCQFull). The queues attached to a CQ may exceed its depth. Exec,
// FetchAdd, CmpSwap, Read and Write are synchronous conveniences for
// tools, built on the same post and poll.
//
// # Atomicity scope
//
// Attributes.AtomicCap is AtomicGlob (IBV_ATOMIC_GLOB): an RFC 7306
// atomic on this device's memory is atomic with respect to every other
// atomic on the same word, whichever QP issues it, and to local threads
// that access the aligned word with sync/atomic; it is not atomic with
// respect to plain loads and stores or to RDMA Write/Read placement on the
// same bytes. `go doc xrnic/atomics` states the guarantee in full.
//
// # Memory
//
// PD.AllocMR maps hugepage-backed memory (falling back to THP or 4 KiB
// pages when the system has none reserved; MR.Backing and MR.Warning say
// what was obtained and how to fix it). PD.RegMR registers memory the
// caller owns: it must stay referenced and unused for anything else until
// MR.Dereg returns. Tagged offsets are addresses by default (TO =
// MR.TO(off)); AccessZeroBased makes them start at 0.
//
// # Devices
//
// DeviceConfig.Transport "kernel" runs the engine (xrnic/internal/engine)
// in the process over kernel TCP sockets (transport/kernel), unprivileged.
// "afxdp" runs the same engine over the user-space TCP on AF_XDP sockets of
// DeviceConfig.XDP.Iface, with an XDP program steering our flows there
// (kernel bypass; root, or CAP_NET_ADMIN, CAP_BPF, CAP_PERFMON and CAP_NET_RAW plus
// CAP_IPC_LOCK or a high RLIMIT_MEMLOCK). Open reports what stands in the
// way with ErrPrivileges, ErrNoInterface or ErrXDPAttach and says what to
// do; Attributes.LLP and Attributes.XDP say what was set up. Both
// transports speak the same iWARP on the wire and interoperate.
// (transport/afxdp). Work requests, completions and their constants are
// the engine's own types (package xrnic/internal/rnic, aliased here), so
// posting and polling convert nothing; the rest sits behind an internal
// provider interface, so a device backed by the xrnicd daemon can be added
// without changing user code.
package verbs
