package main

import (
	"encoding/binary"
	"errors"
	"math"
	"time"
)

// The exchange between client and server needs no side channel: it rides
// on MPA private data and on a control QP.
//
//   - The client first dials a control QP. Its MPA Request carries a hello
//     (all run parameters, 48 bytes); the server builds its resources from
//     it and answers in the MPA Reply (or rejects, with the reason).
//   - Then it dials one data QP per -q. Each Request carries the client's
//     buffer STag and tagged offsets, each Reply the server's, plus the
//     receive depth the server granted (send_bw credits).
//   - Per message size the control QP carries 64-byte Sends: start(size) ->
//     ready, the run, done(count) -> result(validation, server numbers), and
//     bye at the end.

const (
	magic      = 0x58504631 // "XPF1"
	roleCtl    = 1
	roleData   = 2
	helloLen   = 48
	dataReqLen = 36
	ctlMsgLen  = 64
)

const (
	flagValidate = 1 << iota
	flagBidir
	flagWriteImm
	flagMasked
	flagCAS
)

// hello is the control QP's private data.
type hello struct {
	Test     uint8
	Flags    uint16
	Slot     uint32 // largest message (buffer slot) of the run
	QPs      uint16
	TxDepth  uint16
	RxDepth  uint16
	Outs     uint16
	CQMod    uint16
	Iters    uint32
	Duration uint32 // ms
	Margin   uint32 // ms
	Reject   uint8  // server reply: 0 ok, 1 wrong test
}

func (h *hello) put() []byte {
	b := make([]byte, helloLen)
	binary.BigEndian.PutUint32(b[0:], magic)
	b[4] = roleCtl
	b[5] = h.Test
	binary.BigEndian.PutUint16(b[6:], h.Flags)
	binary.BigEndian.PutUint32(b[8:], h.Slot)
	binary.BigEndian.PutUint16(b[12:], h.QPs)
	binary.BigEndian.PutUint16(b[14:], h.TxDepth)
	binary.BigEndian.PutUint16(b[16:], h.RxDepth)
	binary.BigEndian.PutUint16(b[18:], h.Outs)
	binary.BigEndian.PutUint16(b[20:], h.CQMod)
	binary.BigEndian.PutUint32(b[24:], h.Iters)
	binary.BigEndian.PutUint32(b[28:], h.Duration)
	binary.BigEndian.PutUint32(b[32:], h.Margin)
	b[36] = h.Reject
	return b
}

var errBadPrivateData = errors.New("private data is not an xrnic-perf hello (another tool at that port?)")

func parseHello(b []byte) (hello, error) {
	if len(b) < helloLen || binary.BigEndian.Uint32(b) != magic || b[4] != roleCtl {
		return hello{}, errBadPrivateData
	}
	return hello{
		Test: b[5], Flags: binary.BigEndian.Uint16(b[6:]), Slot: binary.BigEndian.Uint32(b[8:]),
		QPs: binary.BigEndian.Uint16(b[12:]), TxDepth: binary.BigEndian.Uint16(b[14:]),
		RxDepth: binary.BigEndian.Uint16(b[16:]), Outs: binary.BigEndian.Uint16(b[18:]),
		CQMod: binary.BigEndian.Uint16(b[20:]), Iters: binary.BigEndian.Uint32(b[24:]),
		Duration: binary.BigEndian.Uint32(b[28:]), Margin: binary.BigEndian.Uint32(b[32:]), Reject: b[36],
	}, nil
}

func (p *params) hello() hello {
	h := hello{Test: p.test.id(), Slot: uint32(slotSize(p)), QPs: uint16(p.qps), TxDepth: uint16(p.txDepth),
		RxDepth: uint16(min(p.rxDepth, 65535)), Outs: uint16(p.outs), CQMod: uint16(p.cqMod), Iters: uint32(p.iters),
		Duration: uint32(p.duration / time.Millisecond), Margin: uint32(p.margin / time.Millisecond)}
	for _, f := range []struct {
		on bool
		v  uint16
	}{{p.validate, flagValidate}, {p.bidir, flagBidir}, {p.writeImm, flagWriteImm}, {p.masked, flagMasked}, {p.atomicType == "CMP_AND_SWAP", flagCAS}} {
		if f.on {
			h.Flags |= f.v
		}
	}
	return h
}

// apply makes the server's params those of the client's hello.
func (h hello) apply(p *params) error {
	if int(h.Test) >= len(tests) {
		return errBadPrivateData
	}
	p.test = tests[h.Test]
	p.qps, p.txDepth, p.rxDepth, p.outs, p.cqMod = int(h.QPs), int(h.TxDepth), int(h.RxDepth), int(h.Outs), int(h.CQMod)
	p.iters = int(h.Iters)
	p.duration = time.Duration(h.Duration) * time.Millisecond
	p.margin = time.Duration(h.Margin) * time.Millisecond
	p.validate = h.Flags&flagValidate != 0
	p.bidir = h.Flags&flagBidir != 0
	p.writeImm = h.Flags&flagWriteImm != 0
	p.masked = h.Flags&flagMasked != 0
	p.atomicType = "FETCH_AND_ADD"
	if h.Flags&flagCAS != 0 {
		p.atomicType = "CMP_AND_SWAP"
	}
	p.size = int(h.Slot)
	p.maxSize = int(h.Slot)
	if p.qps < 1 || p.txDepth < 1 || p.cqMod < 1 || p.size < 1 || p.size > 64<<20 || p.qps > 256 {
		return errBadPrivateData
	}
	return nil
}

// bufInfo describes one side's buffer of one data QP.
type bufInfo struct {
	STag   uint32
	RecvTO uint64 // where the peer writes (and where atomics land)
	SrcTO  uint64 // what the peer reads
	Slot   uint32
	RxD    uint16 // server: receive buffers posted per size (send credits)
	Index  uint16
}

func (bi bufInfo) put() []byte {
	b := make([]byte, dataReqLen)
	binary.BigEndian.PutUint32(b[0:], magic)
	b[4] = roleData
	binary.BigEndian.PutUint16(b[6:], bi.Index)
	binary.BigEndian.PutUint32(b[8:], bi.STag)
	binary.BigEndian.PutUint64(b[12:], bi.RecvTO)
	binary.BigEndian.PutUint64(b[20:], bi.SrcTO)
	binary.BigEndian.PutUint32(b[28:], bi.Slot)
	binary.BigEndian.PutUint16(b[32:], bi.RxD)
	return b
}

func parseBufInfo(b []byte) (bufInfo, error) {
	if len(b) < dataReqLen || binary.BigEndian.Uint32(b) != magic || b[4] != roleData {
		return bufInfo{}, errBadPrivateData
	}
	return bufInfo{
		Index: binary.BigEndian.Uint16(b[6:]), STag: binary.BigEndian.Uint32(b[8:]),
		RecvTO: binary.BigEndian.Uint64(b[12:]), SrcTO: binary.BigEndian.Uint64(b[20:]),
		Slot: binary.BigEndian.Uint32(b[28:]), RxD: binary.BigEndian.Uint16(b[32:]),
	}, nil
}

// Control messages.
const (
	msgStart uint8 = iota + 1
	msgReady
	msgDone
	msgResult
	msgBye
)

type ctlMsg struct {
	Kind   uint8
	OK     bool   // result: validation passed (or not asked)
	Size   uint32 // start
	Count  uint64 // done: messages sent per QP (duration mode); result: messages received
	Peak   float64
	Avg    float64
	Rate   float64
	Detail uint64 // result: the first bad value found by validation
}

func (m *ctlMsg) put(b []byte) {
	clear(b[:ctlMsgLen])
	b[0] = m.Kind
	if m.OK {
		b[1] = 1
	}
	binary.BigEndian.PutUint32(b[4:], m.Size)
	binary.BigEndian.PutUint64(b[8:], m.Count)
	binary.BigEndian.PutUint64(b[16:], math.Float64bits(m.Peak))
	binary.BigEndian.PutUint64(b[24:], math.Float64bits(m.Avg))
	binary.BigEndian.PutUint64(b[32:], math.Float64bits(m.Rate))
	binary.BigEndian.PutUint64(b[40:], m.Detail)
}

func parseCtl(b []byte) ctlMsg {
	return ctlMsg{Kind: b[0], OK: b[1] == 1, Size: binary.BigEndian.Uint32(b[4:]), Count: binary.BigEndian.Uint64(b[8:]),
		Peak: math.Float64frombits(binary.BigEndian.Uint64(b[16:])), Avg: math.Float64frombits(binary.BigEndian.Uint64(b[24:])),
		Rate: math.Float64frombits(binary.BigEndian.Uint64(b[32:])), Detail: binary.BigEndian.Uint64(b[40:])}
}

// slotSize is the per-QP buffer slot: the largest message, at least 64
// bytes, rounded up to 64.
func slotSize(p *params) int {
	n := p.size
	if p.all {
		n = p.maxSize
	}
	return roundUp(max(n, 64), 64)
}

// pattern is the payload byte j of QP q (data validation).
func pattern(q, j int) byte { return byte(j*7 + q*13 + 1) }

func ptr[T any](v T) *T { return &v }
