package verbs

import (
	"strconv"

	"xrnic/internal/rnic"
)

// Access is a set of memory access rights (ibv_access_flags).
type Access uint16

const (
	// AccessLocalWrite lets the local RNIC write the memory: receive
	// buffers, Read sinks and atomic result buffers need it
	// (IBV_ACCESS_LOCAL_WRITE).
	AccessLocalWrite Access = 1 << iota
	// AccessRemoteWrite makes the memory an RDMA Write target
	// (IBV_ACCESS_REMOTE_WRITE; needs AccessLocalWrite).
	AccessRemoteWrite
	// AccessRemoteRead makes the memory an RDMA Read source
	// (IBV_ACCESS_REMOTE_READ).
	AccessRemoteRead
	// AccessRemoteAtomic makes the memory an RFC 7306 atomic target
	// (IBV_ACCESS_REMOTE_ATOMIC; needs AccessLocalWrite).
	AccessRemoteAtomic
	// AccessRemoteInvalidate lets the peer invalidate the STag with a Send
	// with Invalidate (iWARP; RFC 5042 advises it only for STags one
	// stream uses).
	AccessRemoteInvalidate
	// AccessZeroBased makes tagged offsets start at 0 instead of the
	// address of the first byte (IBV_ACCESS_ZERO_BASED).
	AccessZeroBased
)

var accessNames = [...]string{"LocalWrite", "RemoteWrite", "RemoteRead", "RemoteAtomic", "RemoteInvalidate", "ZeroBased"}

func (a Access) String() string {
	if a == 0 {
		return "0"
	}
	s := ""
	for i, n := range accessNames {
		if a&(1<<i) != 0 {
			if s != "" {
				s += "|"
			}
			s += n
		}
	}
	if a>>len(accessNames) != 0 {
		if s != "" {
			s += "|"
		}
		s += "0x" + strconv.FormatUint(uint64(a>>len(accessNames)<<len(accessNames)), 16)
	}
	return s
}

// Work requests, completions and QP states are shared with the engine
// (and any other front end) through package xrnic/internal/rnic; these are
// the same types, so posting and polling convert nothing. `go doc
// xrnic/internal/rnic` documents each field; the short form:
//
//   - SGE (ibv_sge): Length bytes at tagged offset Addr of the local MR
//     whose STag is LKey (iWARP uses one STag as local and remote key);
//     MR.SGE builds one.
//   - SendWR (ibv_send_wr), RecvWR (ibv_recv_wr): PostSend and PostRecv
//     copy them, SGL included. Per opcode: OpSend (FlagSolicited: Send with
//     SE), OpSendWithInv (+InvalidateSTag), OpWrite, OpWriteWithImm (then
//     Imm as Immediate Data, completing OpRecvWriteImm at the target),
//     OpRead (at most one SGE), OpFetchAdd (CompareAdd, AddMask),
//     OpCmpSwap (CompareAdd, Swap, CompareMask, SwapMask; CmpSwapAll for
//     the plain one) with one 8-byte SGE receiving the original value,
//     OpImm (8 bytes of Imm, no SGE), OpLocalInv (InvalidateSTag).
//   - Completion (ibv_wc) with Status (ibv_wc_status; String is
//     ibv_wc_status_str), Opcode and WCFlags (WCWithImm, WCWithInv,
//     WCSolicited); Err is the Terminate behind an error status.
//   - QPState: QPInit, QPConnecting, QPRTS, QPClosing, QPError, QPClosed.
type (
	SGE        = rnic.SGE
	Opcode     = rnic.Opcode
	SendFlags  = rnic.SendFlags
	SendWR     = rnic.SendWR
	RecvWR     = rnic.RecvWR
	Status     = rnic.Status
	WCFlags    = rnic.WCFlags
	Completion = rnic.Completion
	QPState    = rnic.QPState
	Stats      = rnic.Stats
	TermCount  = rnic.TermCount
)

// Opcodes, send flags, statuses, completion flags and QP states.
const (
	OpSend             = rnic.OpSend
	OpSendWithInv      = rnic.OpSendWithInv
	OpWrite            = rnic.OpWrite
	OpWriteWithImm     = rnic.OpWriteWithImm
	OpRead             = rnic.OpRead
	OpFetchAdd         = rnic.OpFetchAdd
	OpCmpSwap          = rnic.OpCmpSwap
	OpImm              = rnic.OpImm
	OpLocalInv         = rnic.OpLocalInv
	OpRecv             = rnic.OpRecv
	OpRecvImm          = rnic.OpRecvImm
	OpRecvWriteImm     = rnic.OpRecvWriteImm
	FlagSignaled       = rnic.FlagSignaled
	FlagSolicited      = rnic.FlagSolicited
	FlagFence          = rnic.FlagFence
	CmpSwapAll         = rnic.CmpSwapAll
	StatusSuccess      = rnic.StatusSuccess
	StatusLocLenErr    = rnic.StatusLocLenErr
	StatusLocQPOpErr   = rnic.StatusLocQPOpErr
	StatusLocProtErr   = rnic.StatusLocProtErr
	StatusWRFlushErr   = rnic.StatusWRFlushErr
	StatusBadRespErr   = rnic.StatusBadRespErr
	StatusLocAccessErr = rnic.StatusLocAccessErr
	StatusRemInvReqErr = rnic.StatusRemInvReqErr
	StatusRemAccessErr = rnic.StatusRemAccessErr
	StatusRemOpErr     = rnic.StatusRemOpErr
	StatusRetryExcErr  = rnic.StatusRetryExcErr
	StatusFatalErr     = rnic.StatusFatalErr
	StatusGeneralErr   = rnic.StatusGeneralErr
	WCWithImm          = rnic.WCWithImm
	WCWithInv          = rnic.WCWithInv
	WCSolicited        = rnic.WCSolicited
	QPInit             = rnic.QPInit
	QPConnecting       = rnic.QPConnecting
	QPRTS              = rnic.QPRTS
	QPClosing          = rnic.QPClosing
	QPError            = rnic.QPError
	QPClosed           = rnic.QPClosed
)

// AtomicCap is a device's atomicity guarantee (ibv_atomic_cap).
type AtomicCap uint8

const (
	// AtomicNone: no atomics (IBV_ATOMIC_NONE).
	AtomicNone AtomicCap = iota
	// AtomicHCA: atomic only among the RNIC's own atomics (IBV_ATOMIC_HCA).
	AtomicHCA
	// AtomicGlob: also atomic against CPU threads using atomic
	// instructions on the same aligned word (IBV_ATOMIC_GLOB).
	AtomicGlob
)

func (a AtomicCap) String() string {
	switch a {
	case AtomicNone:
		return "IBV_ATOMIC_NONE"
	case AtomicHCA:
		return "IBV_ATOMIC_HCA"
	case AtomicGlob:
		return "IBV_ATOMIC_GLOB"
	}
	return "AtomicCap(" + strconv.Itoa(int(a)) + ")"
}

// ProbeResult is the outcome of QP.ProbeAtomics: ProbeFailed,
// ProbeSupported or ProbeNotSupported.
type ProbeResult = rnic.ProbeResult

// The outcomes of QP.ProbeAtomics.
const (
	ProbeFailed       = rnic.ProbeFailed
	ProbeSupported    = rnic.ProbeSupported
	ProbeNotSupported = rnic.ProbeNotSupported
)

// PageSize is the page size AllocMR asks for.
type PageSize uint8

const (
	Page2M PageSize = iota // default: 2 MiB hugetlb, falling back to THP, then 4 KiB
	Page1G                 // 1 GiB hugetlb, falling back to 2 MiB hugetlb, THP, 4 KiB
	Page4K                 // ordinary pages
)

// Backing is the kind of memory behind an MR.
type Backing uint8

const (
	BackingUser      Backing = iota // memory the caller registered with RegMR
	Backing4K                       // ordinary 4 KiB pages
	BackingTHP                      // transparent hugepages (madvise)
	BackingHugeTLB2M                // reserved 2 MiB hugetlb pages
	BackingHugeTLB1G                // reserved 1 GiB hugetlb pages
)

var backingNames = [...]string{"user", "4K", "THP", "hugetlb-2M", "hugetlb-1G"}

func (b Backing) String() string {
	if int(b) < len(backingNames) {
		return backingNames[b]
	}
	return "Backing(" + strconv.Itoa(int(b)) + ")"
}
