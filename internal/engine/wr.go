package datapath

import "strconv"

// Opcode names a work request or a completion's operation, as libibverbs'
// ibv_wr_opcode and ibv_wc_opcode do.
type Opcode uint8

// Send-queue opcodes.
const (
	OpSend      Opcode = iota + 1 // RDMAP Send
	OpSendSE                      // Send with Solicited Event
	OpSendInv                     // Send with Invalidate
	OpSendSEInv                   // Send with Solicited Event and Invalidate
	OpWrite                       // RDMA Write
	OpWriteImm                    // RDMA Write followed by Immediate Data
	OpRead                        // RDMA Read
	OpFetchAdd                    // RFC 7306 FetchAdd (masked when AddMask != 0)
	OpCmpSwap                     // RFC 7306 CmpSwap (masked unless both masks are all-ones)
	OpImm                         // RFC 7306 Immediate Data
	OpImmSE                       // RFC 7306 Immediate Data with Solicited Event
	OpLocalInv                    // invalidate a local STag

	// Receive-side completion opcodes.
	OpRecv         // a Send (any variant) arrived in a posted receive buffer
	OpRecvImm      // Immediate Data (with or without SE) arrived
	OpRecvWriteImm // Immediate Data that followed an RDMA Write arrived
)

var opcodeNames = [...]string{
	OpSend: "SEND", OpSendSE: "SEND_SE", OpSendInv: "SEND_INV", OpSendSEInv: "SEND_SE_INV",
	OpWrite: "RDMA_WRITE", OpWriteImm: "RDMA_WRITE_WITH_IMM", OpRead: "RDMA_READ",
	OpFetchAdd: "ATOMIC_FETCH_AND_ADD", OpCmpSwap: "ATOMIC_CMP_AND_SWP",
	OpImm: "IMM", OpImmSE: "IMM_SE", OpLocalInv: "LOCAL_INV",
	OpRecv: "RECV", OpRecvImm: "RECV_IMM", OpRecvWriteImm: "RECV_RDMA_WITH_IMM",
}

func (o Opcode) String() string {
	if int(o) < len(opcodeNames) && opcodeNames[o] != "" {
		return opcodeNames[o]
	}
	return "Opcode(" + strconv.Itoa(int(o)) + ")"
}

// Status is a completion status, named as libibverbs' ibv_wc_status.
type Status uint8

// Completion statuses.
const (
	StatusSuccess      Status = iota // IBV_WC_SUCCESS
	StatusLocLenErr                  // local length error: a message does not fit the receive buffer, or an SGE list is too long
	StatusLocQPOpErr                 // local QP operation error: an internal consistency error on the QP
	StatusLocProtErr                 // local protection error: an SGE names an STag, PD, range or right that is not ours
	StatusWRFlushErr                 // flushed: the QP went to error before this work request finished
	StatusBadRespErr                 // bad response: the peer answered with something we did not ask for
	StatusLocAccessErr               // local access error: a protection error on a local buffer targeted by the peer
	StatusRemInvReqErr               // remote invalid request: the peer found the request malformed (DDP/RDMAP version, opcode, length)
	StatusRemAccessErr               // remote access error: the peer refused the STag, PD, rights or bounds
	StatusRemOpErr                   // remote operation error: the peer could not complete the operation
	StatusRetryExcErr                // the transport gave up (connection lost)
	StatusFatalErr                   // local catastrophic error
	StatusGeneralErr                 // anything else
)

var statusNames = [...]string{
	StatusSuccess: "success", StatusLocLenErr: "local length error",
	StatusLocQPOpErr: "local QP operation error", StatusLocProtErr: "local protection error",
	StatusWRFlushErr: "work request flushed error", StatusBadRespErr: "bad response error",
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

// SGE is a scatter/gather element, as libibverbs' ibv_sge: Length bytes at
// tagged offset Addr of the local memory region whose STag is LKey (iWARP
// uses one STag as local and remote key). With the verbs default
// (mem.TOAddress) Addr is the virtual address of the first byte.
type SGE struct {
	Addr   uint64
	Length uint32
	LKey   uint32
}

// SendFlags are the flags of a send work request (ibv_send_flags).
type SendFlags uint8

const (
	// FlagSignaled asks for a completion on success (QPs created with
	// SigAll complete every WR). Errors always complete.
	FlagSignaled SendFlags = 1 << iota
	// FlagFence holds the WR until every earlier RDMA Read and Atomic of
	// the QP has completed (IBV_SEND_FENCE).
	FlagFence
)

// SendWR is a send-queue work request (ibv_send_wr). PostSend copies it,
// SGL included, into a preallocated slot: the caller may reuse it at once.
//
// Per opcode:
//   - OpSend, OpSendSE: SGL is the message.
//   - OpSendInv, OpSendSEInv: also InvalidateSTag, the peer's STag to
//     invalidate after delivery.
//   - OpWrite: SGL to RemoteSTag/RemoteTO. OpWriteImm: then Immediate Data
//     Imm, which completes a receive at the target after the Write is placed.
//   - OpRead: RemoteSTag/RemoteTO into at most one SGE (the Read Request names
//     one sink STag); no SGE is a zero-length Read.
//   - OpFetchAdd: CompareAdd is the Add Data, AddMask the RFC 7306 Add Mask (0
//     is the ordinary 64-bit add). OpCmpSwap: CompareAdd is the Compare Data,
//     Swap the Swap Data, CompareMask and SwapMask are used as given (all-ones
//     for the verbs unmasked compare-and-swap; 0 would make it an atomic
//     read). Both need exactly one SGE of 8 bytes (with local write access)
//     that receives the original remote value in host byte order, as
//     libibverbs does; the completion carries it too. The remote target
//     RemoteSTag/RemoteTO must resolve to a 64-bit aligned address.
//   - OpImm, OpImmSE: the 8 bytes of Immediate Data in Imm (sent big-endian);
//     no SGE.
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

// RecvWR is a receive work request (ibv_recv_wr): one buffer for one
// untagged message (any Send variant or Immediate Data).
type RecvWR struct {
	ID  uint64
	SGL []SGE
}

// WCFlags are completion flags (ibv_wc_flags).
type WCFlags uint8

const (
	WCWithImm   WCFlags = 1 << iota // Imm holds Immediate Data
	WCWithInv                       // the peer invalidated InvalidatedSTag (Send with Invalidate)
	WCSolicited                     // the message carried the Solicited Event flag
)

// Completion is a work completion (ibv_wc).
type Completion struct {
	ID      uint64
	Status  Status
	Op      Opcode
	Flags   WCFlags
	QPNum   uint32
	ByteLen uint32 // bytes received (receives), read or sent; 8 for atomics
	// Imm is the Immediate Data (receive completions with WCWithImm).
	Imm uint64
	// InvalidatedSTag is the STag the peer invalidated (WCWithInv).
	InvalidatedSTag uint32
	// AtomicOrig is the original remote value of a successful atomic.
	AtomicOrig uint64
	// Err is the iWARP error behind a non-flush error status: the Terminate
	// this QP sent or received (nil otherwise).
	Err error
}
