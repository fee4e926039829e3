package rdmap

import "encoding/binary"

// RDMAP header lengths.
const (
	ReadRequestLen    = 28 // RFC 5040 §4.4
	AtomicRequestLen  = 52 // RFC 7306 §5.2.1 Fig. 4
	AtomicResponseLen = 12 // RFC 7306 §5.2.2 Fig. 6 (not the "32" of §4 prose)
	ImmediateLen      = 8  // RFC 7306 §6
)

// ReadParams are the fields of an RDMA Read Request header.
type ReadParams struct {
	SinkSTag uint32 // Data Sink STag, copied into the Read Response
	SinkTO   uint64 // Data Sink Tagged Offset
	Size     uint32 // RDMA Read Message Size
	SrcSTag  uint32 // Data Source STag
	SrcTO    uint64 // Data Source Tagged Offset
}

// ReadRequest is a view of the 28-byte RDMA Read Request header:
// SinkSTag(4) SinkTO(8) Size(4) SrcSTag(4) SrcTO(8).
type ReadRequest []byte

// ParseReadRequest checks that b holds a Read Request header and returns a
// view of its first 28 bytes.
func ParseReadRequest(b []byte) (ReadRequest, error) {
	if len(b) < ReadRequestLen {
		return nil, ErrTruncated
	}
	return ReadRequest(b[:ReadRequestLen]), nil
}

func (h ReadRequest) SinkSTag() uint32     { return binary.BigEndian.Uint32(h[0:4]) }
func (h ReadRequest) SetSinkSTag(v uint32) { binary.BigEndian.PutUint32(h[0:4], v) }
func (h ReadRequest) SinkTO() uint64       { return binary.BigEndian.Uint64(h[4:12]) }
func (h ReadRequest) SetSinkTO(v uint64)   { binary.BigEndian.PutUint64(h[4:12], v) }
func (h ReadRequest) Size() uint32         { return binary.BigEndian.Uint32(h[12:16]) }
func (h ReadRequest) SetSize(v uint32)     { binary.BigEndian.PutUint32(h[12:16], v) }
func (h ReadRequest) SrcSTag() uint32      { return binary.BigEndian.Uint32(h[16:20]) }
func (h ReadRequest) SetSrcSTag(v uint32)  { binary.BigEndian.PutUint32(h[16:20], v) }
func (h ReadRequest) SrcTO() uint64        { return binary.BigEndian.Uint64(h[20:28]) }
func (h ReadRequest) SetSrcTO(v uint64)    { binary.BigEndian.PutUint64(h[20:28], v) }

// Params returns all fields.
func (h ReadRequest) Params() ReadParams {
	return ReadParams{SinkSTag: h.SinkSTag(), SinkTO: h.SinkTO(), Size: h.Size(), SrcSTag: h.SrcSTag(), SrcTO: h.SrcTO()}
}

// SetParams sets all fields.
func (h ReadRequest) SetParams(p ReadParams) {
	h.SetSinkSTag(p.SinkSTag)
	h.SetSinkTO(p.SinkTO)
	h.SetSize(p.Size)
	h.SetSrcSTag(p.SrcSTag)
	h.SetSrcTO(p.SrcTO)
}

// PutReadRequestHeader writes a Read Request header into b and returns
// ReadRequestLen.
func PutReadRequestHeader(b []byte, p ReadParams) (int, error) {
	if len(b) < ReadRequestLen {
		return 0, ErrShortBuffer
	}
	ReadRequest(b[:ReadRequestLen]).SetParams(p)
	return ReadRequestLen, nil
}

// AOpCode is the 4-bit atomic operation subcode (RFC 7306 §10.1).
type AOpCode uint8

// Atomic operation subcodes; 0x1 is reserved, 0x3-0xF unassigned.
const (
	AOpFetchAdd AOpCode = 0x0
	AOpCmpSwap  AOpCode = 0x2
)

func (a AOpCode) String() string {
	switch a {
	case AOpFetchAdd:
		return "FetchAdd"
	case AOpCmpSwap:
		return "CmpSwap"
	case 0x1:
		return "reserved"
	}
	return "unassigned"
}

// Valid reports whether a is FetchAdd or CmpSwap.
func (a AOpCode) Valid() bool { return a == AOpFetchAdd || a == AOpCmpSwap }

// FetchAddCompareMask is the Compare Mask a requester sends with FetchAdd
// (Compare Data 0, Compare Mask all ones; RFC 7306 §5.2.1).
const FetchAddCompareMask = ^uint64(0)

// AtomicParams are the fields of an Atomic Request header (the 28 reserved
// bits are not among them: sent as 0, ignored).
type AtomicParams struct {
	AOpCode     AOpCode
	RequestID   uint32 // echoed in the Atomic Response
	STag        uint32 // Remote STag
	TO          uint64 // Remote Tagged Offset (target must be 64-bit aligned)
	AddSwap     uint64 // Add Data (FetchAdd) or Swap Data (CmpSwap)
	AddSwapMask uint64 // Add Mask or Swap Mask
	Compare     uint64 // Compare Data (FetchAdd: 0)
	CompareMask uint64 // Compare Mask (FetchAdd: all ones)
}

// AtomicRequest is a view of the 52-byte Atomic Request header:
// Reserved(28 bits) AOpCode(4 bits) RequestID(4) STag(4) TO(8)
// AddSwap(8) AddSwapMask(8) Compare(8) CompareMask(8).
type AtomicRequest []byte

// ParseAtomicRequest checks that b holds an Atomic Request header and
// returns a view of its first 52 bytes. The AOpCode is not checked.
func ParseAtomicRequest(b []byte) (AtomicRequest, error) {
	if len(b) < AtomicRequestLen {
		return nil, ErrTruncated
	}
	return AtomicRequest(b[:AtomicRequestLen]), nil
}

func (h AtomicRequest) Reserved() uint32        { return binary.BigEndian.Uint32(h[0:4]) >> 4 }
func (h AtomicRequest) AOpCode() AOpCode        { return AOpCode(h[3] & 0x0F) }
func (h AtomicRequest) SetAOpCode(v AOpCode)    { h[3] = h[3]&0xF0 | uint8(v&0x0F) }
func (h AtomicRequest) RequestID() uint32       { return binary.BigEndian.Uint32(h[4:8]) }
func (h AtomicRequest) SetRequestID(v uint32)   { binary.BigEndian.PutUint32(h[4:8], v) }
func (h AtomicRequest) STag() uint32            { return binary.BigEndian.Uint32(h[8:12]) }
func (h AtomicRequest) SetSTag(v uint32)        { binary.BigEndian.PutUint32(h[8:12], v) }
func (h AtomicRequest) TO() uint64              { return binary.BigEndian.Uint64(h[12:20]) }
func (h AtomicRequest) SetTO(v uint64)          { binary.BigEndian.PutUint64(h[12:20], v) }
func (h AtomicRequest) AddSwap() uint64         { return binary.BigEndian.Uint64(h[20:28]) }
func (h AtomicRequest) SetAddSwap(v uint64)     { binary.BigEndian.PutUint64(h[20:28], v) }
func (h AtomicRequest) AddSwapMask() uint64     { return binary.BigEndian.Uint64(h[28:36]) }
func (h AtomicRequest) SetAddSwapMask(v uint64) { binary.BigEndian.PutUint64(h[28:36], v) }
func (h AtomicRequest) Compare() uint64         { return binary.BigEndian.Uint64(h[36:44]) }
func (h AtomicRequest) SetCompare(v uint64)     { binary.BigEndian.PutUint64(h[36:44], v) }
func (h AtomicRequest) CompareMask() uint64     { return binary.BigEndian.Uint64(h[44:52]) }
func (h AtomicRequest) SetCompareMask(v uint64) { binary.BigEndian.PutUint64(h[44:52], v) }

// SetReserved sets the 28 reserved bits (tests and fuzzing; send 0).
func (h AtomicRequest) SetReserved(v uint32) {
	binary.BigEndian.PutUint32(h[0:4], v<<4|uint32(h[3]&0x0F))
}

// Params returns all fields but the reserved bits.
func (h AtomicRequest) Params() AtomicParams {
	return AtomicParams{
		AOpCode: h.AOpCode(), RequestID: h.RequestID(), STag: h.STag(), TO: h.TO(),
		AddSwap: h.AddSwap(), AddSwapMask: h.AddSwapMask(), Compare: h.Compare(), CompareMask: h.CompareMask(),
	}
}

// SetParams sets all fields and clears the reserved bits.
func (h AtomicRequest) SetParams(p AtomicParams) {
	binary.BigEndian.PutUint32(h[0:4], uint32(p.AOpCode&0x0F))
	h.SetRequestID(p.RequestID)
	h.SetSTag(p.STag)
	h.SetTO(p.TO)
	h.SetAddSwap(p.AddSwap)
	h.SetAddSwapMask(p.AddSwapMask)
	h.SetCompare(p.Compare)
	h.SetCompareMask(p.CompareMask)
}

// PutAtomicRequestHeader writes an Atomic Request header (reserved bits 0)
// into b and returns AtomicRequestLen. The AOpCode is written as given.
func PutAtomicRequestHeader(b []byte, p AtomicParams) (int, error) {
	if len(b) < AtomicRequestLen {
		return 0, ErrShortBuffer
	}
	AtomicRequest(b[:AtomicRequestLen]).SetParams(p)
	return AtomicRequestLen, nil
}

// AtomicResponse is a view of the 12-byte Atomic Response header:
// Original Request Identifier(4) Original Remote Data Value(8).
type AtomicResponse []byte

// ParseAtomicResponse checks that b holds an Atomic Response header and
// returns a view of its first 12 bytes.
func ParseAtomicResponse(b []byte) (AtomicResponse, error) {
	if len(b) < AtomicResponseLen {
		return nil, ErrTruncated
	}
	return AtomicResponse(b[:AtomicResponseLen]), nil
}

func (h AtomicResponse) RequestID() uint32     { return binary.BigEndian.Uint32(h[0:4]) }
func (h AtomicResponse) SetRequestID(v uint32) { binary.BigEndian.PutUint32(h[0:4], v) }
func (h AtomicResponse) Value() uint64         { return binary.BigEndian.Uint64(h[4:12]) }
func (h AtomicResponse) SetValue(v uint64)     { binary.BigEndian.PutUint64(h[4:12], v) }

// PutAtomicResponseHeader writes an Atomic Response header into b and
// returns AtomicResponseLen.
func PutAtomicResponseHeader(b []byte, requestID uint32, value uint64) (int, error) {
	if len(b) < AtomicResponseLen {
		return 0, ErrShortBuffer
	}
	h := AtomicResponse(b[:AtomicResponseLen])
	h.SetRequestID(requestID)
	h.SetValue(value)
	return AtomicResponseLen, nil
}

// Immediate is a view of the 8-byte Immediate Data header (opaque data).
type Immediate []byte

// ParseImmediate checks that b holds Immediate Data and returns a view of
// its first 8 bytes. (Classify checks the payload is exactly 8 bytes.)
func ParseImmediate(b []byte) (Immediate, error) {
	if len(b) < ImmediateLen {
		return nil, ErrTruncated
	}
	return Immediate(b[:ImmediateLen]), nil
}

// Data returns the 8 opaque bytes.
func (h Immediate) Data() [8]byte { return [8]byte(h[:8]) }

// SetData sets the 8 opaque bytes.
func (h Immediate) SetData(v [8]byte) { copy(h[:8], v[:]) }

// PutImmediateHeader writes the 8 bytes of Immediate Data into b and
// returns ImmediateLen.
func PutImmediateHeader(b []byte, data [8]byte) (int, error) {
	if len(b) < ImmediateLen {
		return 0, ErrShortBuffer
	}
	Immediate(b[:ImmediateLen]).SetData(data)
	return ImmediateLen, nil
}
