package wiretest

import (
	"encoding/binary"
	"fmt"
	"math/bits"
	"strconv"
	"strings"

	"xrnic/wire/mpa"
	"xrnic/wire/rdmap"
	"xrnic/wire/term"
)

// Check is the comparison of one decoded unit (an MPA frame, an FPDU, or
// the TCP/IP layer of the whole capture) with what was encoded.
type Check struct {
	Name   string
	OpCode int // RDMAP opcode, -1 for MPA frames and TCP/IP
	Frame  int // 1-based frame number (0 for the TCP/IP check)
	// Mismatches lists every field tshark decoded differently, as
	// "field: tshark X, encoded Y".
	Mismatches []string
	// Notes lists documented limits of the tshark dissector met here.
	Notes []string
}

// OK reports whether tshark agreed on every field.
func (c Check) OK() bool { return len(c.Mismatches) == 0 }

// Documented behaviour of the tshark 4.0 iWARP dissectors that the
// comparison models (docs/spec/interop.md#tshark).
const (
	NoteImmediate = "tshark 4.0 does not know opcodes 0x8/0x9 (shows \"Unknown\", " +
		"does not decode the 8 bytes of Immediate Data); framing and CRC go on"
	NoteAtomicResponse = "tshark labels the Original Remote Data Value " +
		"\"Original Request Identifier\" (field original_remote_data_value is right)"
	NoteTermDDPLen = "tshark sizes the terminated DDP header by EType (1 -> 14 bytes, " +
		"else 18), not by its T bit: terminated DDP/RDMA headers shown shifted"
	NoteRev2 = "tshark 4.0 knows no MPA Rev 2: S (0x10) shows as Reserved, " +
		"Request gets \"Res not zero\"/\"Rev not one\" warnings"
)

// TsharkTermDDPLen is the terminated-DDP-header length the tshark 4.0
// dissector assumes for a Terminate of error type etype.
func TsharkTermDDPLen(etype uint8) int {
	if etype == term.ETypeDDPTagged {
		return 14
	}
	return 18
}

type checker struct {
	c      *Check
	fields map[string]string
}

func (k *checker) mismatch(field, got, want string) {
	k.c.Mismatches = append(k.c.Mismatches, fmt.Sprintf("%s: tshark %q, encoded %q", field, got, want))
}

func (k *checker) u(field string, want uint64) {
	got := k.fields[field]
	v, err := strconv.ParseUint(got, 0, 64)
	if err != nil || v != want {
		k.mismatch(field, got, fmt.Sprintf("%d (%#x)", want, want))
	}
}

func (k *checker) b(field string, want bool) {
	w := "0"
	if want {
		w = "1"
	}
	if got := k.fields[field]; got != w {
		k.mismatch(field, got, w)
	}
}

func (k *checker) hex(field string, want []byte) {
	if got := k.fields[field]; got != hexBytes(want) {
		k.mismatch(field, got, hexBytes(want))
	}
}

func (k *checker) absent(names ...string) {
	for _, f := range names {
		if got := k.fields[f]; got != "" {
			k.mismatch(f, got, "(absent)")
		}
	}
}

// Compare checks tshark's decode against what the session encoded and
// returns one Check for the TCP/IP layer, one per MPA frame and one per
// FPDU. The expected values include the documented behaviour of the tshark
// 4.0 dissectors (see the Note constants).
func (s *Session) Compare(d *Decode) []Check {
	var res []Check
	frames := s.Conv.Frames()

	// TCP/IP: every frame, checksums verified and no TCP analysis flags.
	tc := Check{Name: "TCP/IP (all frames)", OpCode: -1}
	for i, f := range frames {
		n := i + 1
		fl, ok := d.Frames[n]
		if !ok {
			tc.Mismatches = append(tc.Mismatches, fmt.Sprintf("frame %d: not decoded", n))
			continue
		}
		sub := Check{}
		k := &checker{c: &sub, fields: fl}
		k.u("ip.checksum.status", 1) // 1 = good
		k.u("tcp.checksum.status", 1)
		k.u("tcp.seq_raw", uint64(f.Seq))
		k.u("tcp.ack_raw", uint64(f.Ack))
		k.u("tcp.flags", uint64(f.Flags))
		k.u("tcp.len", uint64(len(f.Payload)))
		k.absent("tcp.analysis.flags")
		for _, m := range sub.Mismatches {
			tc.Mismatches = append(tc.Mismatches, fmt.Sprintf("frame %d: %s", n, m))
		}
	}
	if len(d.Frames) != len(frames) {
		tc.Mismatches = append(tc.Mismatches, fmt.Sprintf("tshark decoded %d frames, capture has %d",
			len(d.Frames), len(frames)))
	}
	res = append(res, tc)

	for _, m := range []MPAFrame{s.Request, s.Reply} {
		res = append(res, compareMPA(m, d))
	}
	for i := range s.FPDUs {
		res = append(res, compareFPDU(&s.FPDUs[i], d))
	}
	return res
}

func compareMPA(m MPAFrame, d *Decode) Check {
	name := "MPA Request"
	key, other := "iwarp_mpa.key.req", "iwarp_mpa.key.rep"
	keyText := mpa.KeyRequest
	if m.Kind == mpa.Reply {
		name = "MPA Reply"
		key, other = other, key
		keyText = mpa.KeyReply
	}
	c := Check{Name: fmt.Sprintf("%s Rev %d", name, m.Rev), OpCode: -1, Frame: m.Frame + 1}
	k := &checker{c: &c, fields: d.Frames[c.Frame]}
	k.hex(key, []byte(keyText))
	k.absent(other, "iwarp_mpa.ulpdulength", "iwarp_ddp.dv")
	k.b("iwarp_mpa.marker_flag", m.M)
	k.b("iwarp_mpa.crc_flag", m.C)
	k.b("iwarp_mpa.rej_flag", m.R)
	// tshark's "Reserved" is the low 5 bits: RFC 6581's S bit included.
	k.u("iwarp_mpa.res", uint64(m.Flags()&0x1f))
	k.u("iwarp_mpa.rev", uint64(m.Rev))
	k.u("iwarp_mpa.pdlength", uint64(m.PDLength))
	k.hex("iwarp_mpa.privatedata", m.PrivateData)
	if m.S || m.Rev != 1 {
		c.Notes = append(c.Notes, NoteRev2)
	}
	return c
}

func compareFPDU(f *FPDU, d *Decode) Check {
	c := Check{Name: f.Name, OpCode: int(f.OpCode), Frame: f.Frames[0] + 1}
	fields, ok := d.Frames[c.Frame]
	if !ok {
		c.Mismatches = append(c.Mismatches, "frame not decoded")
		return c
	}
	if len(f.Frames) > 1 {
		c.Notes = append(c.Notes, "FPDU spans several TCP segments: tshark 4.0 assumes one FPDU per segment")
	}
	k := &checker{c: &c, fields: fields}

	// MPA.
	k.u("iwarp_mpa.ulpdulength", uint64(f.ULPDULen))
	if f.PadLen > 0 {
		k.hex("iwarp_mpa.pad", make([]byte, f.PadLen))
	} else {
		k.absent("iwarp_mpa.pad")
	}
	field := binary.BigEndian.Uint32(f.Wire[len(f.Wire)-mpa.CRCSize:])
	k.u("iwarp_mpa.crc_check", uint64(field))
	k.absent("iwarp_mpa.crc") // present only when CRC is off
	v, ok := d.CRC[c.Frame]
	switch {
	case !ok:
		k.mismatch("CRC verdict", "(none)", verdict(f.CRCGood))
	case v.Good != f.CRCGood:
		k.mismatch("CRC verdict", verdict(v.Good), verdict(f.CRCGood))
	case !v.Good && v.ShouldBe != bits.ReverseBytes32(f.CRC):
		// tshark reads the field big-endian and compares it with the
		// byte-swapped CRC32c: its "should be" is our CRC, swapped.
		k.mismatch("CRC should-be", fmt.Sprintf("%#08x", v.ShouldBe),
			fmt.Sprintf("%#08x", bits.ReverseBytes32(f.CRC)))
	}

	// DDP.
	k.b("iwarp_ddp.tagged_flag", f.Tagged)
	k.b("iwarp_ddp.last_flag", f.Last)
	k.u("iwarp_ddp.rsvd", 0)
	k.u("iwarp_ddp.dv", uint64(f.DV))
	if f.Tagged {
		k.u("iwarp_ddp.stag", uint64(f.STag))
		k.u("iwarp_ddp.tagged_offset", f.TO)
		k.absent("iwarp_ddp.qn", "iwarp_ddp.msn", "iwarp_ddp.mo", "iwarp_ddp.rsvdulp")
	} else {
		var ulp [5]byte
		ulp[0] = f.RV<<6 | uint8(f.OpCode)
		binary.BigEndian.PutUint32(ulp[1:], f.InvSTag)
		k.hex("iwarp_ddp.rsvdulp", ulp[:])
		k.u("iwarp_ddp.qn", uint64(f.QN))
		k.u("iwarp_ddp.msn", uint64(f.MSN))
		k.u("iwarp_ddp.mo", uint64(f.MO))
		k.absent("iwarp_ddp.stag", "iwarp_ddp.tagged_offset")
	}

	// RDMAP.
	k.u("iwarp_rdma.version", uint64(f.RV))
	k.u("iwarp_rdma.rsv", 0)
	k.u("iwarp_rdma.opcode", uint64(f.OpCode))
	switch f.OpCode {
	case rdmap.OpSendInvalidate, rdmap.OpSendSEInvalidate:
		k.u("iwarp_rdma.inval_stag", uint64(f.InvSTag))
	default:
		k.absent("iwarp_rdma.inval_stag")
	}
	switch f.OpCode {
	case rdmap.OpWrite, rdmap.OpReadResponse, rdmap.OpSend, rdmap.OpSendInvalidate,
		rdmap.OpSendSE, rdmap.OpSendSEInvalidate:
		if f.PayloadLen > 0 {
			k.u("data.len", uint64(f.PayloadLen))
		}
	default:
		k.absent("data.len")
	}

	if r := f.Read; r != nil {
		k.u("iwarp_rdma.sinkstag", uint64(r.SinkSTag))
		k.u("iwarp_rdma.sinkto", r.SinkTO)
		k.u("iwarp_rdma.rdmardsz", uint64(r.Size))
		k.u("iwarp_rdma.srcstag", uint64(r.SrcSTag))
		k.u("iwarp_rdma.srcto", r.SrcTO)
	} else {
		k.absent("iwarp_rdma.sinkstag", "iwarp_rdma.srcstag")
	}

	if a := f.Atomic; a != nil {
		k.u("iwarp_rdma.atomic.reserved", 0)
		k.u("iwarp_rdma.atomic.opcode", uint64(a.AOpCode))
		k.u("iwarp_rdma.atomic.request_identifier", uint64(a.RequestID))
		k.u("iwarp_rdma.atomic.remote_stag", uint64(a.STag))
		k.u("iwarp_rdma.atomic.remote_tagged_offset", a.TO)
		if a.AOpCode == rdmap.AOpFetchAdd {
			k.u("iwarp_rdma.atomic.add_data", a.AddSwap)
			k.u("iwarp_rdma.atomic.add_mask", a.AddSwapMask)
			k.absent("iwarp_rdma.atomic.swap_data", "iwarp_rdma.atomic.swap_mask")
		} else {
			k.u("iwarp_rdma.atomic.swap_data", a.AddSwap)
			k.u("iwarp_rdma.atomic.swap_mask", a.AddSwapMask)
			k.absent("iwarp_rdma.atomic.add_data", "iwarp_rdma.atomic.add_mask")
		}
		k.u("iwarp_rdma.atomic.compare_data", a.Compare)
		k.u("iwarp_rdma.atomic.compare_mask", a.CompareMask)
	} else {
		k.absent("iwarp_rdma.atomic.opcode", "iwarp_rdma.atomic.request_identifier")
	}

	if r := f.AtomicResponse; r != nil {
		k.u("iwarp_rdma.atomic.original_request_identifier", uint64(r.RequestID))
		k.u("iwarp_rdma.atomic.original_remote_data_value", r.Value)
		c.Notes = append(c.Notes, NoteAtomicResponse)
	} else {
		k.absent("iwarp_rdma.atomic.original_request_identifier",
			"iwarp_rdma.atomic.original_remote_data_value")
	}

	if f.Immediate != nil {
		c.Notes = append(c.Notes, NoteImmediate)
		if info := fields["_ws.col.Info"]; !strings.Contains(info, fmt.Sprintf("Unknown %d", f.OpCode)) {
			k.mismatch("_ws.col.Info", info, fmt.Sprintf("... Unknown %d ...", f.OpCode))
		}
	}

	if t := f.Terminate; t != nil {
		compareTerminate(k, t)
	} else {
		k.absent("iwarp_rdma.term_layer")
	}
	return c
}

func verdict(good bool) string {
	if good {
		return "good"
	}
	return "bad"
}

func compareTerminate(k *checker, t *Terminate) {
	e := t.Err
	k.u("iwarp_rdma.term_layer", uint64(e.Layer))
	etype, code := "iwarp_rdma.term_etype", "iwarp_rdma.term_errcode"
	switch e.Layer {
	case term.LayerRDMAP:
		etype, code = "iwarp_rdma.term_etype_rdma", "iwarp_rdma.term_errcode_rdma"
	case term.LayerDDP:
		etype = "iwarp_rdma.term_etype_ddp"
		switch e.EType {
		case term.ETypeDDPTagged:
			code = "iwarp_rdma.term_errcode_ddp_tagged"
		case term.ETypeDDPUntagged:
			code = "iwarp_rdma.term_errcode_ddp_untagged"
		}
	case term.LayerLLP:
		etype, code = "iwarp_rdma.term_etype_llp", "iwarp_rdma.term_errcode_llp"
	}
	k.u(etype, uint64(e.EType))
	k.u(code, uint64(e.Code))
	k.b("iwarp_rdma.term_hdrct_m", t.Parts&term.PartM != 0)
	k.b("iwarp_rdma.hdrct_d", t.Parts&term.PartD != 0)
	k.b("iwarp_rdma.hdrct_r", t.Parts&term.PartR != 0)
	k.u("iwarp_rdma.term_rsvd", 0)
	// What follows the control word, as encoded; tshark cuts it by its own
	// rule (TsharkTermDDPLen).
	rest := append(append([]byte{}, t.DDPHeader...), t.RDMAHeader...)
	off := 0
	if t.Parts&term.PartD != 0 {
		k.hex("iwarp_rdma.term_ddp_seg_len", binary.BigEndian.AppendUint16(nil, t.SegLen))
		n := TsharkTermDDPLen(e.EType)
		if n != len(t.DDPHeader) {
			k.c.Notes = append(k.c.Notes, NoteTermDDPLen)
		}
		k.hex("iwarp_rdma.term_ddp_h", rest[:min(n, len(rest))])
		off = n
	} else {
		k.absent("iwarp_rdma.term_ddp_seg_len", "iwarp_rdma.term_ddp_h")
	}
	if t.Parts&term.PartR != 0 {
		k.hex("iwarp_rdma.term_rdma_h", rest[min(off, len(rest)):min(off+term.RDMAHeaderLen, len(rest))])
	} else {
		k.absent("iwarp_rdma.term_rdma_h")
	}
}
