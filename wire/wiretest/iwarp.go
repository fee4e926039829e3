package wiretest

import (
	"errors"
	"fmt"

	"xrnic/wire/ddp"
	"xrnic/wire/mpa"
	"xrnic/wire/rdmap"
	"xrnic/wire/tcp"
	"xrnic/wire/term"
)

// MPAFrame is what was encoded into an MPA Request or Reply frame.
type MPAFrame struct {
	Frame       int // index into Conversation.Frames
	From        Side
	Kind        mpa.Kind
	M, C, R, S  bool
	Rev         uint8
	PDLength    int
	PrivateData []byte        // all private data, the enhanced word included
	Enhanced    *mpa.Enhanced // RFC 6581 word (Rev 2 with S only)
}

// Flags returns the flag byte the frame carries.
func (f MPAFrame) Flags() uint8 {
	var b uint8
	if f.M {
		b |= mpa.FlagM
	}
	if f.C {
		b |= mpa.FlagC
	}
	if f.R {
		b |= mpa.FlagR
	}
	if f.S {
		b |= mpa.FlagS
	}
	return b
}

// AtomicResponse is what was encoded into an Atomic Response header.
type AtomicResponse struct {
	RequestID uint32
	Value     uint64
}

// Terminate is what was encoded into a Terminate header.
type Terminate struct {
	Err        *term.Error
	Parts      term.Parts
	SegLen     uint16 // DDP Segment Length (with D)
	DDPHeader  []byte // terminated DDP header (with D): 14 or 18 bytes
	RDMAHeader []byte // terminated RDMA header (with R): 28 bytes
}

// FPDU is one FPDU of a Session and the field values it was encoded with.
type FPDU struct {
	Name   string
	From   Side
	Frames []int // the frames carrying it (one when it fits a segment)
	Offset int   // offset of its first byte in the first frame's TCP payload

	ULPDULen, PadLen int
	CRC              uint32 // CRC32c of the covered bytes (the field, read LSB first)
	CRCGood          bool   // false once CorruptCRC has damaged it
	Wire             []byte // the FPDU as sent

	// DDP (RFC 5041 §4).
	Tagged, Last bool
	DV           uint8
	STag         uint32 // tagged
	TO           uint64 // tagged
	InvSTag      uint32 // untagged RsvdULP word (Invalidate STag or 0)
	QN, MSN, MO  uint32 // untagged

	// RDMAP (RFC 5040 §4, RFC 7306).
	RV         uint8
	OpCode     rdmap.OpCode
	PayloadLen int // DDP payload bytes (RDMAP header included)

	Read           *rdmap.ReadParams
	Atomic         *rdmap.AtomicParams
	AtomicResponse *AtomicResponse
	Immediate      *[8]byte
	Terminate      *Terminate
}

// SessionConfig configures BuildSession.
type SessionConfig struct {
	// Conv configures the TCP conversation (zero: DefaultConfig).
	Conv Config
	// Rev is the MPA revision of the Request and Reply: 1 (RFC 5044,
	// default) or 2 (RFC 6581: S set, 4-byte enhanced word first in the
	// private data, client/server model with IRD = ORD = 16).
	Rev uint8
}

// Session is a canonical iWARP session: TCP handshake, MPA Request and
// Reply (CRC on, no markers), FPDUs of every RDMAP opcode 0x0-0xB from the
// side that would send them, two Terminates, and the TCP close.
type Session struct {
	Conv    *Conversation
	Request MPAFrame
	Reply   MPAFrame
	FPDUs   []FPDU
}

// Request and Reply private data (ULP part).
var (
	RequestPrivateData = []byte("xrnic wiretest initiator")
	ReplyPrivateData   = []byte("xrnic wiretest responder")
)

// ErrIndex: CorruptCRC was given an FPDU index out of range.
var ErrIndex = errors.New("wiretest: FPDU index out of range")

type builder struct {
	s      *Session
	framer [2]*mpa.Framer
	msn    [2][4]uint32 // last MSN used per side and QN
	mulpdu int
	err    error
}

// BuildSession builds the canonical session described in the package
// documentation.
func BuildSession(cfg SessionConfig) (*Session, error) {
	if cfg.Rev == 0 {
		cfg.Rev = mpa.Rev1
	}
	if cfg.Rev != mpa.Rev1 && cfg.Rev != mpa.Rev2 {
		return nil, fmt.Errorf("wiretest: MPA revision %d: want 1 or 2", cfg.Rev)
	}
	c := New(cfg.Conv)
	s := &Session{Conv: c}
	c.Handshake()

	var err error
	if s.Request, err = sendMPAFrame(c, Client, mpa.Request, cfg.Rev, RequestPrivateData); err != nil {
		return nil, err
	}
	if s.Reply, err = sendMPAFrame(c, Server, mpa.Reply, cfg.Rev, ReplyPrivateData); err != nil {
		return nil, err
	}

	b := &builder{s: s, mulpdu: mpa.MULPDU(c.EMSS(), false)}
	for side := range 2 {
		b.framer[side] = mpa.NewFramer(mpa.FramerConfig{SeqStart: uint32(c.NextSeq(Side(side))), CRC: true})
	}

	// The initiator sends first (RFC 5044 §7.1.2 item 4).
	b.write("RDMA Write", 0x00001234, 0x1000, 64)
	b.write("RDMA Write (multi-segment)", 0x00005678, 0x20000, 4000)
	read := rdmap.ReadParams{SinkSTag: 0x0000abcd, SinkTO: 0x3000, Size: 2000,
		SrcSTag: 0x00c0ffee, SrcTO: 0x400000}
	readReq := b.readRequest(read)
	b.readResponse(read)
	b.send("Send", rdmap.OpSend, 0, 100)
	b.send("Send with Invalidate", rdmap.OpSendInvalidate, 0xcafe0001, 48)
	b.send("Send with SE", rdmap.OpSendSE, 0, 33)
	b.send("Send with SE and Invalidate", rdmap.OpSendSEInvalidate, 0xcafe0002, 7)
	fa := rdmap.AtomicParams{AOpCode: rdmap.AOpFetchAdd, RequestID: 0x11223344,
		STag: 0xabcd0100, TO: 0x1000, AddSwap: 0x0000000100000001,
		AddSwapMask: 0x8000000080000000, Compare: 0, CompareMask: rdmap.FetchAddCompareMask}
	cs := rdmap.AtomicParams{AOpCode: rdmap.AOpCmpSwap, RequestID: 0x55667788,
		STag: 0xabcd0100, TO: 0x1008, AddSwap: 0x00000000deadbeef,
		AddSwapMask: 0x00000000ffffffff, Compare: 0x11223344ffffffff, CompareMask: 0xffffffff00000000}
	b.atomicRequest("Atomic Request FetchAdd", fa)
	b.atomicRequest("Atomic Request CmpSwap", cs)
	b.atomicResponse("Atomic Response FetchAdd", fa.RequestID, 0x00000001ffffffff)
	b.atomicResponse("Atomic Response CmpSwap", cs.RequestID, 0x1122334455667788)
	b.immediate("Immediate Data", rdmap.OpImmediate, [8]byte{1, 2, 3, 4, 5, 6, 7, 8})
	b.immediate("Immediate Data with SE", rdmap.OpImmediateSE, [8]byte{0xf0, 0xe1, 0xd2, 0xc3, 0xb4, 0xa5, 0x96, 0x87})
	b.send("Send (after Immediate Data)", rdmap.OpSend, 0, 21)
	// One Terminate per direction (QN 2, MSN 1): the responder reports an
	// RDMAP Remote Protection error on the Read Request (M, D and R: DDP
	// header and RDMA header included), the initiator a DDP tagged-buffer
	// error on the Read Response's first segment (M, D).
	b.terminate("Terminate (RDMAP)", Server, term.RDMAPBaseBounds, readReq)
	b.terminate("Terminate (DDP)", Client, term.DDPTaggedBaseBounds, b.firstULPDU(rdmap.OpReadResponse))
	if b.err != nil {
		return nil, b.err
	}
	c.Close(Client)
	if err := c.Err(); err != nil {
		return nil, err
	}
	return s, nil
}

func sendMPAFrame(c *Conversation, from Side, kind mpa.Kind, rev uint8, pd []byte) (MPAFrame, error) {
	p := mpa.FrameParams{C: true, Rev: rev}
	if rev == mpa.Rev2 {
		p.HasEnhanced = true
		p.Enhanced = mpa.Enhanced{IRD: 16, ORD: 16}
	}
	buf := make([]byte, mpa.FrameLen(p, len(pd)))
	n, err := mpa.PutFrame(buf, kind, p, pd)
	if err != nil {
		return MPAFrame{}, err
	}
	f := MPAFrame{From: from, Kind: kind, C: true, Rev: rev, PDLength: n - mpa.FrameHeaderLen,
		PrivateData: buf[mpa.FrameHeaderLen:n]}
	if p.HasEnhanced {
		f.S = true
		e := p.Enhanced
		f.Enhanced = &e
	}
	f.Frame = c.Send(from, buf[:n])[0]
	return f, nil
}

// fpdu frames the ULPDU in u (the DDP segment) from side, sends it and
// records it with the fields in f.
func (b *builder) fpdu(side Side, u []byte, f FPDU) {
	if b.err != nil {
		return
	}
	c := b.s.Conv
	fr := b.framer[side]
	wire := make([]byte, fr.WireLen(len(u)))
	n, err := fr.Frame(wire, u)
	if err != nil {
		b.err = fmt.Errorf("wiretest: %s: %w", f.Name, err)
		return
	}
	wire = wire[:n]
	f.From = side
	f.ULPDULen = len(u)
	f.PadLen = mpa.PadLen(len(u))
	f.CRC = mpa.FPDU(wire).CRC()
	f.CRCGood = true
	f.Wire = wire
	f.DV = ddp.Version
	f.RV = rdmap.Version
	if f.Tagged {
		f.PayloadLen = len(u) - ddp.TaggedHeaderLen
	} else {
		f.PayloadLen = len(u) - ddp.UntaggedHeaderLen
	}
	f.Frames = c.Send(side, wire)
	b.s.FPDUs = append(b.s.FPDUs, f)
}

func (b *builder) nextMSN(side Side, qn uint32) uint32 {
	b.msn[side][qn]++
	return b.msn[side][qn]
}

func pattern(b []byte, seed byte) {
	for i := range b {
		b[i] = seed + byte(i*7)
	}
}

// tagged sends a tagged message (Write or Read Response) cut into segments
// of at most MULPDU bytes.
func (b *builder) tagged(name string, side Side, op rdmap.OpCode, stag uint32, to uint64, size int) {
	maxPayload := b.mulpdu - ddp.TaggedHeaderLen
	nseg := max(1, (size+maxPayload-1)/maxPayload)
	off := 0
	for i := range nseg {
		n := min(maxPayload, size-off)
		last := i == nseg-1
		u := make([]byte, ddp.TaggedHeaderLen+n)
		var err error
		if op == rdmap.OpWrite {
			_, err = rdmap.PutWrite(u, stag, to+uint64(off), last, n)
		} else {
			_, err = rdmap.PutReadResponse(u, stag, to+uint64(off), last, n)
		}
		if err != nil {
			b.err = err
			return
		}
		pattern(u[ddp.TaggedHeaderLen:], byte(off))
		nm := name
		if nseg > 1 {
			nm = fmt.Sprintf("%s %d/%d", name, i+1, nseg)
		}
		b.fpdu(side, u, FPDU{Name: nm, Tagged: true, Last: last, STag: stag, TO: to + uint64(off), OpCode: op})
		off += n
	}
}

func (b *builder) write(name string, stag uint32, to uint64, size int) {
	b.tagged(name, Client, rdmap.OpWrite, stag, to, size)
}

func (b *builder) readResponse(r rdmap.ReadParams) {
	b.tagged("RDMA Read Response", Server, rdmap.OpReadResponse, r.SinkSTag, r.SinkTO, int(r.Size))
}

func (b *builder) readRequest(r rdmap.ReadParams) []byte {
	msn := b.nextMSN(Client, ddp.QNReadRequest)
	u := make([]byte, ddp.UntaggedHeaderLen+rdmap.ReadRequestLen)
	if _, err := rdmap.PutReadRequest(u, msn, r); err != nil {
		b.err = err
		return nil
	}
	b.fpdu(Client, u, FPDU{Name: "RDMA Read Request", Last: true, QN: ddp.QNReadRequest, MSN: msn,
		OpCode: rdmap.OpReadRequest, Read: &r})
	return u
}

func (b *builder) send(name string, op rdmap.OpCode, inv uint32, size int) {
	msn := b.nextMSN(Client, ddp.QNSend)
	u := make([]byte, ddp.UntaggedHeaderLen+size)
	if _, err := rdmap.PutSend(u, op, inv, msn, 0, true, size); err != nil {
		b.err = err
		return
	}
	pattern(u[ddp.UntaggedHeaderLen:], byte(op))
	b.fpdu(Client, u, FPDU{Name: name, Last: true, InvSTag: inv, QN: ddp.QNSend, MSN: msn, OpCode: op})
}

func (b *builder) atomicRequest(name string, p rdmap.AtomicParams) {
	msn := b.nextMSN(Client, ddp.QNReadRequest)
	u := make([]byte, ddp.UntaggedHeaderLen+rdmap.AtomicRequestLen)
	if _, err := rdmap.PutAtomicRequest(u, msn, p); err != nil {
		b.err = err
		return
	}
	b.fpdu(Client, u, FPDU{Name: name, Last: true, QN: ddp.QNReadRequest, MSN: msn,
		OpCode: rdmap.OpAtomicRequest, Atomic: &p})
}

func (b *builder) atomicResponse(name string, id uint32, v uint64) {
	msn := b.nextMSN(Server, ddp.QNAtomicResponse)
	u := make([]byte, ddp.UntaggedHeaderLen+rdmap.AtomicResponseLen)
	if _, err := rdmap.PutAtomicResponse(u, msn, id, v); err != nil {
		b.err = err
		return
	}
	b.fpdu(Server, u, FPDU{Name: name, Last: true, QN: ddp.QNAtomicResponse, MSN: msn,
		OpCode: rdmap.OpAtomicResponse, AtomicResponse: &AtomicResponse{RequestID: id, Value: v}})
}

func (b *builder) immediate(name string, op rdmap.OpCode, data [8]byte) {
	msn := b.nextMSN(Client, ddp.QNSend)
	u := make([]byte, ddp.UntaggedHeaderLen+rdmap.ImmediateLen)
	if _, err := rdmap.PutImmediate(u, op, msn, data); err != nil {
		b.err = err
		return
	}
	d := data
	b.fpdu(Client, u, FPDU{Name: name, Last: true, QN: ddp.QNSend, MSN: msn, OpCode: op, Immediate: &d})
}

func (b *builder) terminate(name string, side Side, e *term.Error, offending []byte) {
	if b.err != nil {
		return
	}
	u := make([]byte, ddp.UntaggedHeaderLen+term.MaxHeaderLen)
	n, err := rdmap.PutTerminate(u, e, offending)
	if err != nil {
		b.err = err
		return
	}
	u = u[:n]
	t := &Terminate{Err: e, Parts: term.Include(e, offending)}
	if t.Parts&term.PartD != 0 {
		t.SegLen = uint16(len(offending))
		t.DDPHeader = offending[:ddp.Segment(offending).HeaderLen()]
	}
	if t.Parts&term.PartR != 0 {
		t.RDMAHeader = offending[ddp.UntaggedHeaderLen : ddp.UntaggedHeaderLen+term.RDMAHeaderLen]
	}
	b.fpdu(side, u, FPDU{Name: name, Last: true, QN: ddp.QNTerminate, MSN: rdmap.TerminateMSN,
		OpCode: rdmap.OpTerminate, Terminate: t})
}

// firstULPDU returns the ULPDU of the first recorded FPDU with opcode op.
func (b *builder) firstULPDU(op rdmap.OpCode) []byte {
	for _, f := range b.s.FPDUs {
		if f.OpCode == op {
			return f.Wire[mpa.LengthSize : mpa.LengthSize+f.ULPDULen]
		}
	}
	if b.err == nil {
		b.err = fmt.Errorf("wiretest: no %v FPDU to terminate", op)
	}
	return nil
}

// CorruptCRC flips one bit of the CRC field of FPDU i in its frame (the TCP
// checksum is recomputed, so only MPA sees the damage) and marks the FPDU's
// CRC as bad. It is the negative control of a decoder cross-check.
func (s *Session) CorruptCRC(i int) error {
	if i < 0 || i >= len(s.FPDUs) {
		return ErrIndex
	}
	f := &s.FPDUs[i]
	frames := s.Conv.Frames()
	// The CRC's last byte is the FPDU's last byte: find it in the last
	// frame carrying the FPDU.
	last := &frames[f.Frames[len(f.Frames)-1]]
	pos := len(f.Wire) - 1 + f.Offset
	for _, fi := range f.Frames[:len(f.Frames)-1] {
		pos -= len(frames[fi].Payload)
	}
	last.Payload[pos] ^= 0x01
	f.Wire[len(f.Wire)-1] ^= 0x01
	f.CRCGood = false
	ep, peer := s.Conv.Endpoint(last.From), s.Conv.Endpoint(last.From.Peer())
	segStart := len(last.Data) - len(last.Payload) - tcpHeaderLen(last)
	seg := tcp.Header(last.Data[segStart:])
	seg.UpdateChecksum(tcp.PseudoHeaderSum(ep.IP, peer.IP, len(seg)))
	return nil
}

func tcpHeaderLen(f *Frame) int {
	const ethIP = 14 + 20
	return tcp.Header(f.Data[ethIP:]).DataOffset()
}
