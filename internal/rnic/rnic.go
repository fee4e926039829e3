// Package rnic holds the types the engine and the public API share: work
// requests, completions, their opcodes, flags and statuses, QP states and
// the errors callers test for. verbs re-exports them under its own names
// (type aliases), so there is one set of types and no conversion between
// the front end and the engine; a second front end (the C ABI) uses the
// same. The names follow libibverbs.
package rnic

import (
	"errors"
	"strconv"

	"xrnic/wire/term"
)

// Errors callers test for with errors.Is. Posting returns them unwrapped
// (no formatting on the hot path).
var (
	ErrClosed       = errors.New("xrnic: closed")
	ErrBadAttr      = errors.New("xrnic: attribute out of the device limits (see the device's Attributes)")
	ErrTooManyQPs   = errors.New("xrnic: too many QPs (raise the device's MaxQPs)")
	ErrCQOverflow   = errors.New("xrnic: CQ too small for the queues attached to it") // no longer returned: CQs grow
	ErrCQBusy       = errors.New("xrnic: CQ still has QPs attached (close them first)")
	ErrSRQBusy      = errors.New("xrnic: SRQ still has QPs attached (close them first)")
	ErrQueueFull    = errors.New("xrnic: work queue full (poll the CQ)")
	ErrCQFull       = errors.New("xrnic: CQ at the device's max_cqe has no room for another outstanding work request (poll it)")
	ErrInvalidWR    = errors.New("xrnic: invalid work request (opcode, flags, SGE count or atomic buffer)")
	ErrTooLong      = errors.New("xrnic: message longer than the device maximum")
	ErrState        = errors.New("xrnic: QP is not in a state that allows this")
	ErrWrongDevice  = errors.New("xrnic: object belongs to another device or PD")
	ErrNotConnected = errors.New("xrnic: QP not connected")
	ErrAlreadyInUse = errors.New("xrnic: QP already connected or connecting")
	ErrNoAtomics    = errors.New("xrnic: peer does not support RFC 7306 atomics")
)

// SGE is a scatter/gather element (ibv_sge): Length bytes at tagged offset
// Addr of the local memory region whose STag is LKey. iWARP uses one STag
// as local and remote key. verbs.MR.SGE builds one.
type SGE struct {
	Addr   uint64
	Length uint32
	LKey   uint32
}

// Opcode names a work request's operation (ibv_wr_opcode) and a
// completion's (ibv_wc_opcode).
type Opcode uint8

const (
	OpSend         Opcode = iota + 1 // IBV_WR_SEND / IBV_WC_SEND (with FlagSolicited: Send with SE)
	OpSendWithInv                    // IBV_WR_SEND_WITH_INV: Send with Invalidate (with FlagSolicited: Send with SE and Invalidate)
	OpWrite                          // IBV_WR_RDMA_WRITE / IBV_WC_RDMA_WRITE
	OpWriteWithImm                   // IBV_WR_RDMA_WRITE_WITH_IMM: RDMA Write followed by RFC 7306 Immediate Data
	OpRead                           // IBV_WR_RDMA_READ / IBV_WC_RDMA_READ
	OpFetchAdd                       // IBV_WR_ATOMIC_FETCH_AND_ADD (masked: ibv_exp / RFC 7306 Add Mask)
	OpCmpSwap                        // IBV_WR_ATOMIC_CMP_AND_SWP (masked: RFC 7306 Compare and Swap Masks)
	OpImm                            // RFC 7306 Immediate Data (with FlagSolicited: Immediate Data with SE)
	OpLocalInv                       // IBV_WR_LOCAL_INV / IBV_WC_LOCAL_INV

	// Receive-side completion opcodes.
	OpRecv         // IBV_WC_RECV: a Send (any variant) arrived in a posted receive buffer
	OpRecvImm      // Immediate Data (with or without SE) arrived; IBV_WC_RECV with IBV_WC_WITH_IMM
	OpRecvWriteImm // IBV_WC_RECV_RDMA_WITH_IMM: the Immediate Data followed an RDMA Write
)

var opNames = [...]string{"0", "SEND", "SEND_WITH_INV", "RDMA_WRITE", "RDMA_WRITE_WITH_IMM", "RDMA_READ",
	"ATOMIC_FETCH_AND_ADD", "ATOMIC_CMP_AND_SWP", "IMM", "LOCAL_INV", "RECV", "RECV_IMM", "RECV_RDMA_WITH_IMM"}

func (o Opcode) String() string {
	if int(o) < len(opNames) {
		return opNames[o]
	}
	return "Opcode(" + strconv.Itoa(int(o)) + ")"
}

// SendFlags are the flags of a send work request (ibv_send_flags).
type SendFlags uint8

const (
	// FlagSignaled asks for a completion on success (QPs created with
	// SigAll complete every WR). Errors always complete
	// (IBV_SEND_SIGNALED).
	FlagSignaled SendFlags = 1 << iota
	// FlagSolicited sets the Solicited Event flag of a Send, Send with
	// Invalidate or Immediate Data (IBV_SEND_SOLICITED). Other opcodes
	// refuse it.
	FlagSolicited
	// FlagFence holds the WR until every earlier RDMA Read and Atomic of
	// the QP has completed (IBV_SEND_FENCE).
	FlagFence
)

// SendWR is a send work request (ibv_send_wr). PostSend copies it, SGL
// included: the caller may reuse it (and the SGL array) as soon as
// PostSend returns.
//
// Per opcode:
//   - OpSend: SGL is the message. OpSendWithInv: also InvalidateSTag, the
//     peer's STag to invalidate after delivery.
//   - OpWrite: SGL to RemoteSTag/RemoteTO. OpWriteWithImm: then Imm as
//     Immediate Data, completing a receive at the target (OpRecvWriteImm).
//   - OpRead: RemoteSTag/RemoteTO into at most one SGE.
//   - OpFetchAdd: CompareAdd is the Add Data, AddMask the RFC 7306 Add Mask
//     (0: the ordinary 64-bit add). OpCmpSwap: CompareAdd is the Compare
//     Data, Swap the Swap Data, CompareMask and SwapMask are used as given
//     (all-ones for the plain compare-and-swap; see CmpSwapAll). Both need
//     exactly one 8-byte SGE with local write access, which receives the
//     original remote value in host byte order; the completion carries it
//     too (Completion.AtomicOrig). The remote word must be 8-byte aligned.
//   - OpImm: the 8 bytes of Imm, no SGE.
//   - OpLocalInv: invalidate the local STag InvalidateSTag.
type SendWR struct {
	ID             uint64
	Op             Opcode
	Flags          SendFlags
	SGL            []SGE
	Imm            uint64
	InvalidateSTag uint32
	RemoteSTag     uint32
	RemoteTO       uint64
	CompareAdd     uint64
	Swap           uint64
	AddMask        uint64
	CompareMask    uint64
	SwapMask       uint64
}

// CmpSwapAll is the all-ones mask: CompareMask and SwapMask of the plain
// (unmasked) compare-and-swap of verbs.
const CmpSwapAll = ^uint64(0)

// RecvWR is a receive work request (ibv_recv_wr): one buffer for one
// incoming Send (any variant) or Immediate Data (8 bytes, or no SGE at
// all: then the Immediate Data is in the completion only).
type RecvWR struct {
	ID  uint64
	SGL []SGE
}

// Status is a completion status, named as libibverbs' ibv_wc_status;
// String returns the text of ibv_wc_status_str.
type Status uint8

const (
	StatusSuccess      Status = iota // IBV_WC_SUCCESS
	StatusLocLenErr                  // IBV_WC_LOC_LEN_ERR: a message does not fit the receive buffer
	StatusLocQPOpErr                 // IBV_WC_LOC_QP_OP_ERR: internal consistency error of the QP
	StatusLocProtErr                 // IBV_WC_LOC_PROT_ERR: an SGE names an STag, PD, range or right that is not ours
	StatusWRFlushErr                 // IBV_WC_WR_FLUSH_ERR: the QP went to error before this WR finished
	StatusBadRespErr                 // IBV_WC_BAD_RESP_ERR: the peer answered with something we did not ask for
	StatusLocAccessErr               // IBV_WC_LOC_ACCESS_ERR: protection error on a local buffer the peer targeted
	StatusRemInvReqErr               // IBV_WC_REM_INV_REQ_ERR: the peer found the request malformed
	StatusRemAccessErr               // IBV_WC_REM_ACCESS_ERR: the peer refused the STag, PD, rights or bounds
	StatusRemOpErr                   // IBV_WC_REM_OP_ERR: the peer could not complete the operation
	StatusRetryExcErr                // IBV_WC_RETRY_EXC_ERR: the transport gave up (connection lost)
	StatusFatalErr                   // IBV_WC_FATAL_ERR
	StatusGeneralErr                 // IBV_WC_GENERAL_ERR
)

var statusNames = [...]string{
	StatusSuccess: "success", StatusLocLenErr: "local length error",
	StatusLocQPOpErr: "local QP operation error", StatusLocProtErr: "local protection error",
	StatusWRFlushErr: "Work Request Flushed Error", StatusBadRespErr: "bad response error",
	StatusLocAccessErr: "local access error", StatusRemInvReqErr: "remote invalid request error",
	StatusRemAccessErr: "remote access error", StatusRemOpErr: "remote operation error",
	StatusRetryExcErr: "transport retry counter exceeded", StatusFatalErr: "fatal error",
	StatusGeneralErr: "general error",
}

func (s Status) String() string {
	if int(s) < len(statusNames) {
		return statusNames[s]
	}
	return "Status(" + strconv.Itoa(int(s)) + ")"
}

// WCFlags are completion flags (ibv_wc_flags).
type WCFlags uint8

const (
	WCWithImm   WCFlags = 1 << iota // IBV_WC_WITH_IMM: Imm holds Immediate Data
	WCWithInv                       // IBV_WC_WITH_INV: the peer invalidated InvalidatedSTag
	WCSolicited                     // the message carried the Solicited Event flag
)

// Completion is a work completion (ibv_wc).
type Completion struct {
	ID      uint64 // wr_id
	Status  Status
	Op      Opcode
	Flags   WCFlags
	QPNum   uint32
	ByteLen uint32 // bytes received, read or sent; 8 for atomics
	// Imm is the 64-bit RFC 7306 Immediate Data (WCWithImm).
	Imm uint64
	// InvalidatedSTag is the STag the peer invalidated (WCWithInv).
	InvalidatedSTag uint32
	// AtomicOrig is the original remote value of a successful atomic (it
	// is also in the WR's 8-byte local buffer).
	AtomicOrig uint64
	// Err is the iWARP error behind an error status other than a flush
	// (the Terminate this QP sent or received), or nil. It is a
	// *term.Error of package xrnic/wire/term.
	Err error
}

// QPState is the state of a QP (ibv_qp_state, reduced to what iWARP
// connection management exposes).
type QPState uint8

const (
	QPInit       QPState = iota // created; receives and sends may be posted (IBV_QPS_INIT)
	QPConnecting                // MPA exchange in progress (IBV_QPS_RTR)
	QPRTS                       // connected (IBV_QPS_RTS)
	QPClosing                   // orderly close in progress: posting refused (IBV_QPS_SQD)
	QPError                     // outstanding WRs flushed (IBV_QPS_ERR)
	QPClosed                    // destroyed
)

var qpStateNames = [...]string{"INIT", "CONNECTING", "RTS", "CLOSING", "ERROR", "CLOSED"}

func (s QPState) String() string {
	if int(s) < len(qpStateNames) {
		return qpStateNames[s]
	}
	return "QPState(" + strconv.Itoa(int(s)) + ")"
}

// TermCount is the number of Terminates for one error.
type TermCount struct {
	Err   *term.Error // nil: triples that are not predeclared
	Count uint64
}

// Stats is a snapshot of a QP's counters. Message and byte counters are
// indexed by RDMAP opcode (RFC 5040 RDMAP opcode, 0x0-0xB); bytes are DDP payload
// bytes (RDMAP headers of Read Requests, Atomics, Immediate Data and
// Terminates included).
type Stats struct {
	TxMsgs, RxMsgs   [16]uint64
	TxBytes, RxBytes [16]uint64
	TxFPDUs, RxFPDUs uint64
	TxBatches        uint64 // LLP writes
	TxInline         uint64 // of TxBatches, written inline by the goroutine that posted or received (kernel transport)
	TxPiped          uint64 // of TxBatches, written by a helper while the next batch was framed (kernel transport)
	TermsSent        []TermCount
	TermsRecv        []TermCount
	// TermsRecvSiw counts the received Terminates (of TermsRecv) whose
	// control word was in Linux siw's layout
	// (docs/spec/interop.md#siw-terminate).
	TermsRecvSiw uint64
	// FetchAdds and CmpSwaps executed for the peer; CmpSwapMatched of
	// them matched (and so wrote).
	FetchAdds, CmpSwaps, CmpSwapMatched uint64
	// Stalled is 1 when the engine ended the QP because the peer stalled
	// (a partial FPDU or an unanswered request past its timeout).
	Stalled uint64
}

// ProbeResult is the outcome of the RFC 7306 capability probe (a FetchAdd
// of 0; docs/spec/rfc7306.md#probe).
type ProbeResult uint8

const (
	// ProbeFailed: the probe did not tell (connection lost, access error
	// on the target, timeout, ...).
	ProbeFailed ProbeResult = iota
	// ProbeSupported: the peer executed the FetchAdd of 0.
	ProbeSupported
	// ProbeNotSupported: the peer answered with Terminate RDMAP / Remote
	// Operation / Unexpected OpCode (0x0/0x2/0x06), as RFC 7306 §1.1
	// predicts for an RNIC without the extensions.
	ProbeNotSupported
)

func (r ProbeResult) String() string {
	switch r {
	case ProbeSupported:
		return "supported"
	case ProbeNotSupported:
		return "not supported"
	}
	return "failed"
}
