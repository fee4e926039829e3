package engine

import "xrnic/internal/rnic"

// The work-request, completion and state types are package rnic's,
// shared with the public API (verbs): aliases, not copies.
type (
	Opcode      = rnic.Opcode
	SendFlags   = rnic.SendFlags
	SGE         = rnic.SGE
	SendWR      = rnic.SendWR
	RecvWR      = rnic.RecvWR
	Status      = rnic.Status
	WCFlags     = rnic.WCFlags
	Completion  = rnic.Completion
	QPState     = rnic.QPState
	Stats       = rnic.Stats
	ProbeResult = rnic.ProbeResult
	TermCount   = rnic.TermCount
)

// Opcodes, flags, statuses and QP states (package rnic).
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
	ProbeFailed        = rnic.ProbeFailed
	ProbeSupported     = rnic.ProbeSupported
	ProbeNotSupported  = rnic.ProbeNotSupported
)

// Errors shared with the public API (package rnic).
var (
	ErrClosed       = rnic.ErrClosed
	ErrBadAttr      = rnic.ErrBadAttr
	ErrTooManyQPs   = rnic.ErrTooManyQPs
	ErrCQBusy       = rnic.ErrCQBusy
	ErrSRQBusy      = rnic.ErrSRQBusy
	ErrQueueFull    = rnic.ErrQueueFull
	ErrCQFull       = rnic.ErrCQFull
	ErrInvalidWR    = rnic.ErrInvalidWR
	ErrTooLong      = rnic.ErrTooLong
	ErrState        = rnic.ErrState
	ErrWrongDevice  = rnic.ErrWrongDevice
	ErrNotConnected = rnic.ErrNotConnected
	ErrAlreadyInUse = rnic.ErrAlreadyInUse
	ErrNoAtomics    = rnic.ErrNoAtomics
)
