// Package rdmap reads and writes RDMAP messages (RFC 5040 §4) including the
// RFC 7306 extensions (Atomic Request/Response, Immediate Data).
//
// RDMAP lives inside DDP segments (package ddp): its control byte (RV,
// OpCode) is the first RsvdULP byte, the Invalidate STag is the untagged
// RsvdULP word, and some messages carry an RDMAP header at the start of the
// DDP payload: Read Request (28 bytes, RFC 5040 §4.4), Terminate (4 to 52
// bytes, §4.8, package term), Atomic Request (52 bytes, RFC 7306 §5.2.1),
// Atomic Response (12 bytes, §5.2.2) and Immediate Data (8 bytes, §6).
//
// The package has
//   - the control byte (Control), the OpCode type and a per-opcode property
//     table (Props: tagged or not, QN, RDMAP header length, ULP payload
//     allowed, Invalidate STag meaningful);
//   - []byte views with accessor/setter pairs for each RDMAP header and
//     encoders for them (Put*Header);
//   - segment encoders writing a whole DDP segment (DDP header + RDMAP
//     header/payload) into a caller buffer: PutWrite, PutReadResponse,
//     PutSend, PutReadRequest, PutAtomicRequest, PutAtomicResponse,
//     PutImmediate, PutTerminate;
//   - Classify, the stateless receive-path check of a parsed DDP segment.
//
// Nothing here allocates. Decisions where the RFCs leave room (see Classify):
// a message with a fixed RDMAP header (Read Request, Terminate, Immediate
// Data, Atomic Request/Response) must arrive as one segment (MO 0, L set)
// with exactly its header as payload; a wrong length is reported as RDMAP
// Remote Operation "unspecified" (term.RDMAPOperationUnspecified;
// docs/spec/rfc7306.md#errors for Immediate Data), an MO other than 0 as
// term.DDPUntaggedInvalidMO.
package rdmap

import (
	"errors"
	"strconv"
)

// Version is the RDMAP version of RFC 5040 (the RV field); 0 is the RDMA
// Consortium version.
const Version = 1

// Control is the RDMAP control byte: RV(2) Rsv(2) OpCode(4).
type Control uint8

// MakeControl returns a version-1 control byte for op (Rsv = 0).
func MakeControl(op OpCode) Control { return Control(Version<<6 | uint8(op&0x0F)) }

// Version returns the 2-bit RV field.
func (c Control) Version() uint8 { return uint8(c) >> 6 }

// Rsv returns the 2 reserved bits (sent as 0, ignored on receive).
func (c Control) Rsv() uint8 { return uint8(c) >> 4 & 0x3 }

// OpCode returns the 4-bit opcode.
func (c Control) OpCode() OpCode { return OpCode(c & 0x0F) }

// OpCode is the 4-bit RDMAP opcode (RFC 5040 §4.1 Fig. 4, RFC 7306 §4.1).
type OpCode uint8

// Opcodes. 0xC-0xF are reserved.
const (
	OpWrite            OpCode = 0x0
	OpReadRequest      OpCode = 0x1
	OpReadResponse     OpCode = 0x2
	OpSend             OpCode = 0x3
	OpSendInvalidate   OpCode = 0x4
	OpSendSE           OpCode = 0x5
	OpSendSEInvalidate OpCode = 0x6
	OpTerminate        OpCode = 0x7
	OpImmediate        OpCode = 0x8 // RFC 7306
	OpImmediateSE      OpCode = 0x9 // RFC 7306
	OpAtomicRequest    OpCode = 0xA // RFC 7306
	OpAtomicResponse   OpCode = 0xB // RFC 7306
)

var opNames = [16]string{
	"Write", "Read Request", "Read Response", "Send", "Send with Invalidate",
	"Send with SE", "Send with SE and Invalidate", "Terminate", "Immediate Data",
	"Immediate Data with SE", "Atomic Request", "Atomic Response",
	"reserved", "reserved", "reserved", "reserved",
}

func (op OpCode) String() string {
	if op > 0xF {
		return "OpCode(" + strconv.Itoa(int(op)) + ")"
	}
	return opNames[op]
}

// Props describes how an opcode uses DDP (RFC 5040 §4.1 Fig. 4, §4.2
// Fig. 5; RFC 7306 §4.1).
type Props struct {
	Valid      bool   // a defined opcode (0x0-0xB)
	Tagged     bool   // sent as tagged DDP messages
	QN         uint32 // queue number (untagged only)
	HeaderLen  int    // RDMAP header at the start of the DDP payload; Terminate: the minimum, 4 (up to term.MaxHeaderLen)
	Payload    bool   // ULP payload allowed
	Invalidate bool   // the Invalidate STag (untagged RsvdULP word) is meaningful
}

var props = [16]Props{
	OpWrite:            {Valid: true, Tagged: true, Payload: true},
	OpReadRequest:      {Valid: true, QN: 1, HeaderLen: ReadRequestLen},
	OpReadResponse:     {Valid: true, Tagged: true, Payload: true},
	OpSend:             {Valid: true, QN: 0, Payload: true},
	OpSendInvalidate:   {Valid: true, QN: 0, Payload: true, Invalidate: true},
	OpSendSE:           {Valid: true, QN: 0, Payload: true},
	OpSendSEInvalidate: {Valid: true, QN: 0, Payload: true, Invalidate: true},
	OpTerminate:        {Valid: true, QN: 2, HeaderLen: 4},
	OpImmediate:        {Valid: true, QN: 0, HeaderLen: ImmediateLen},
	OpImmediateSE:      {Valid: true, QN: 0, HeaderLen: ImmediateLen},
	OpAtomicRequest:    {Valid: true, QN: 1, HeaderLen: AtomicRequestLen},
	OpAtomicResponse:   {Valid: true, QN: 3, HeaderLen: AtomicResponseLen},
}

// Props returns the properties of op; reserved opcodes have Valid false.
func (op OpCode) Props() Props { return props[op&0x0F] }

// Sentinel errors of this package.
var (
	ErrTruncated   = errors.New("rdmap: truncated header")
	ErrShortBuffer = errors.New("rdmap: buffer too short")
	// ErrOpCode: an encoder was given an opcode it does not write.
	ErrOpCode = errors.New("rdmap: wrong opcode for this message")
	// ErrLength: a negative payload length or one that does not fit the
	// 32-bit DDP message size.
	ErrLength = errors.New("rdmap: bad payload length")
)
