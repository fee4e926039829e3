// Package engine is the xrnic RNIC engine: queue pairs, completion
// queues, MPA connection setup, and the RDMAP/DDP/MPA transmit and receive
// paths of iWARP (RFC 5040 RDMAP, RFC 5041 DDP, RFC 5044 MPA with the RFC
// 6581 enhanced setup, RFC 7306 atomics and Immediate Data). It runs over
// any reliable in-order byte stream (LLP) a transport.Transport provides:
// kernel TCP sockets (transport/kernel, the default, unprivileged) or the
// user-space TCP over AF_XDP (transport/afxdp). It is internal: verbs is
// the public API, and the work-request types are package rnic's.
//
// # API shape
//
// The exported API mirrors libibverbs/rdma_cm so that a verbs package can
// wrap it 1:1: Open(Config) → *Device (Attributes, AllocPD, RegMR/DeregMR
// over the device's mem.Table, CreateCQ, CreateQP, Listen); CQ.Poll, Wait,
// Arm/Events (ibv_poll_cq, ibv_req_notify_cq); QP.PostSend/PostRecv
// (ibv_post_send/recv) with SendWR/RecvWR/SGE copied by value into
// preallocated ring slots; Completion (ibv_wc) with the libibverbs status
// names; QP.Connect/ConnectLLP, Listener.Accept → ConnRequest.Accept/Reject
// (rdma_connect, rdma_accept, rdma_reject); QP.Disconnect and QP.Close.
//
// # Goroutines and locking
//
// Each connected QP has a tx goroutine that owns the LLP's write side and
// the MPA Framer, and (over kernel TCP) an rx goroutine that reads into a
// per-QP buffer and feeds input. Posting copies the WR into the SQ/RQ ring
// under the QP mutex and rings a doorbell (a channel of capacity 1). rx never
// waits for tx: inbound Read and Atomic Requests go into an IRD-bounded FIFO
// that tx drains, generating Read Responses lazily from memory in chunks
// (64 KiB per turn, so the SQ is not starved) and Atomic Responses in
// request order. Atomics execute in rx at delivery time (mem.Table.Check
// with OpAtomic, then package atomics on the target word; the big-endian
// wire values are numbers in host order by then) and the original value
// waits in the FIFO for its response.
//
// The receive seam: input consumes any piece of the in-order stream (the
// Deframer buffers partial FPDUs). A push-based stack implements PushLLP
// and gets the receive function instead of a read loop.
//
// Transports: Config.Transport is a transport.Transport value (nil:
// transport/kernel). A transport.PushConn delivers received payload by
// calling the QP's receive function instead of being read; a
// transport.InlineConn also runs the QP's transmit step (txStep,
// inline.go) on its own goroutine, which pulls the framed FPDUs one at a
// time (seal records where each ends), so the afxdp transport's poll loop
// owns both directions of every connection; the QP's tx goroutine then
// only ends the stream (Terminate, close).
//
// # Receive path
//
// MPA: the Deframer checks the CRC over the received bytes and the markers
// before a ULPDU is handed up. DDP/RDMAP: rdmap.Classify does the stateless
// checks; then tagged segments (Write, Read Response) are placed straight
// into the MR window returned by mem.Table.Check (zero-length tagged
// segments are not checked, RFC 5041 §5.2); untagged QN 0 messages (Sends,
// Immediate Data) are reassembled into the head receive WR by MSN and MO
// (no WR → DDP 2/0x02, MSN ≠ expected → 2/0x03, MO beyond the buffer →
// 2/0x04, too long → 2/0x05, the RFC code rather than siw's 0x02);
// Read Responses complete the oldest outstanding Read at L after the sink
// checks (STag, TO and length equal the request); Atomic Responses (QN 3)
// are matched by MSN with the Request Identifier (we send the request's QN 1
// MSN) as cross-check, the original value is written to the WR's 8-byte
// buffer in host order and put in the completion. Immediate Data is placed in a
// receive buffer of at least 8 bytes (RFC 7306 §6), or only reported in
// the completion of a receive with no buffer (1..7 bytes are too short); it
// completes as OpRecvWriteImm with the Write's length when the peer's
// previous message on its SQ stream was an RDMA Write. Send with Invalidate
// invalidates through mem.Table.RemoteInvalidate after placement.
//
// # Ordering and completion (RFC 5040 §5.5, RFC 7306 §5.4)
//
// Send-queue WRs are framed in order and completed in order: a Send,
// Write or Immediate completes when the LLP accepted its bytes, but never
// before an earlier Read or Atomic completes. Reads and Atomics share the
// negotiated ORD (more may be posted; they wait in the SQ); FlagFence holds
// a WR until all earlier Reads/Atomics completed. Unsignalled successful
// WRs produce no completion; errors always do. Every posted WR reserves a
// CQ entry until it is polled, so a completion can never be lost: a full
// CQ grows (doubling, up to MaxCQE), and posting fails with ErrCQFull only
// at MaxCQE. The queues attached to a CQ may exceed its depth.
//
// # Errors
//
// Every invalid input is a predeclared *term.Error returned by the receive
// path; the QP encodes the Terminate from the offending segment with
// rdmap.PutTerminate (term.Include chooses the M/D/R parts), moves to
// QPError, completes every outstanding WR exactly once (the WR the error
// belongs to with a specific status, the rest StatusWRFlushErr), and tx
// sends the Terminate as the very last FPDU, half-closes, waits (bounded)
// for the peer's FIN and closes. A received Terminate gives the WR it names
// StatusRemAccessErr (protection and tagged-buffer errors),
// StatusRemInvReqErr (untagged-buffer, version and opcode errors) or
// StatusRemOpErr, and flushes the rest without answering. Errors while
// building an outbound message (a local SGE that fails its check) complete
// the WR with a local status and send Terminate RDMAP/0x0/0x00 without
// headers (RFC 5040 §7.1). Per-QP counters (Stats) count messages and
// bytes by direction and opcode, Terminates by error, and atomics.
//
// # Connection setup (cm.go)
//
// MPA revision 2 with the RFC 6581 enhanced word by default, revision 1
// selectable; a responder answers each revision in kind. CRC is on unless
// both sides ask otherwise; markers are inserted when the peer's M flag
// asks and removed when we asked. Frames are read exactly (header, then
// PD_Length bytes). Every step is bounded by the context and
// ConnParams.Timeout through LLP deadlines. A malformed Request or Reply
// closes TCP; RFC 6581 IRD and RTR failures send Terminate LLP 0x06/0x07.
// In peer-to-peer mode the initiator's first FPDU is the RTR (zero-length
// Write to STag 1, zero-length Read, or zero-length Send, preferred in that
// order), and a responder sends nothing before it has received the first
// FPDU (RFC 5044 §7.1.2 rule 4); a responder consumes a Send RTR without a
// receive WR.
//
// The stream positions of markers are counted from the first octet of full
// operation on each direction (SeqStart 0), which is all RFC 5044 §4.3
// needs.
//
// Invalidation (invalidate.go): a Local Invalidate completes, and a
// receive reporting a remote invalidation is delivered, only after a grace
// period of the STag table, so no placement into the STag is still running
// on any QP. The watchdog (watchdog.go) ends QPs whose peer stalls mid-FPDU
// or leaves a Read or Atomic unanswered; ULPDU lengths over the MULPDU of
// the MSS we advertised are refused at once (cm.go maxULPDU). The listener
// (listener.go) reads Requests in parallel, admits peers before reading and
// bounds connections in setup.
package engine
