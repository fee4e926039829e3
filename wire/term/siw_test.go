package term

import (
	"bytes"
	"encoding/binary"
	"testing"
)

// The bytes below are built from Linux siw's definitions, not from our
// encoder (drivers/infiniband/sw/siw/iwarp.h struct iwarp_terminate and
// siw_qp.c siw_send_terminate; docs/spec/interop.md#siw-terminate).

// siwControl is the control word siw sends: the bitfields layer:4,
// etype:4, ecode:8, flag_m:1, flag_d:1, flag_r:1, reserved:13 of
// __LITTLE_ENDIAN_BITFIELD fill a 32-bit unit from its least significant
// bit, and an x86 or arm64 CPU stores that unit low byte first.
func siwControl(layer, etype, ecode uint32, m, d, r bool) []byte {
	v := layer&0xF | (etype&0xF)<<4 | (ecode&0xFF)<<8
	if m {
		v |= 1 << 16
	}
	if d {
		v |= 1 << 17
	}
	if r {
		v |= 1 << 18
	}
	return binary.LittleEndian.AppendUint32(nil, v)
}

// siwAttach is what siw_send_terminate attaches after the control word:
// the offending FPDU's header as a union iwarp_hdr, structLen bytes from
// the MPA length field on, with that field overwritten by the length minus
// (iwarp_pktinfo[op].hdr_len - 2), i.e. the payload length.
func siwAttach(ulpdu []byte, structLen, opHdrLen int) []byte {
	b := make([]byte, structLen)
	binary.BigEndian.PutUint16(b, uint16(len(ulpdu)-(opHdrLen-2)))
	copy(b[2:], ulpdu[:structLen-2])
	return b
}

// Sizes of siw's structs (MPA length field included).
const (
	siwRdmaWrite  = 16 // struct iwarp_rdma_write, iwarp_ctrl_tagged
	siwSend       = 20 // struct iwarp_send, iwarp_ctrl_untagged
	siwRdmaRreq   = 48 // struct iwarp_rdma_rreq
	siwHdrWrite   = 16 // iwarp_pktinfo[RDMAP_RDMA_WRITE].hdr_len
	siwHdrSend    = 20
	siwHdrReadReq = 48
)

func cat(bs ...[]byte) []byte {
	var out []byte
	for _, b := range bs {
		out = append(out, b...)
	}
	return out
}

func TestDecodeSiwLayout(t *testing.T) {
	write := ulpdu(t, "write-hello")
	send := ulpdu(t, "send-hello")
	read := ulpdu(t, "read-rtr")
	sendInv := ulpdu(t, "send-se-inv")
	tests := []struct {
		name    string
		b       []byte
		literal string // the control word as hex, to pin the bit mapping
		err     *Error
		layout  Layout
		parts   Parts
		segLen  uint16
		ddp     []byte
		rdma    []byte
		alt     *Error // Ambiguous, with this other reading
	}{
		// RDMAP Remote Operation, no headers ("packet layout is unknown"):
		// reads as MPA Insufficient IRD in the RFC layout.
		{"unexpected opcode", siwControl(0, 2, 0x06, false, false, false), "20060000",
			MPAInsufficientIRD, LayoutRFC, 0, 0, nil, nil, RDMAPUnexpectedOpCode},
		{"invalid RDMAP version", siwControl(0, 2, 0x05, false, false, false), "20050000",
			MPALocalCatastrophic, LayoutRFC, 0, 0, nil, nil, RDMAPInvalidVersion},
		// siw's MPA Insufficient IRD reads as Unexpected OpCode in the RFC layout.
		{"insufficient IRD", siwControl(2, 0, 0x06, false, false, false), "02060000",
			RDMAPUnexpectedOpCode, LayoutRFC, 0, 0, nil, nil, MPAInsufficientIRD},
		// DDP tagged Invalid STag with M, D and the 14-byte DDP header.
		{"DDP tagged invalid STag", cat(siwControl(1, 1, 0x00, true, true, false), siwAttach(write, siwRdmaWrite, siwHdrWrite)), "11000300",
			DDPTaggedInvalidSTag, LayoutSiw, PartM | PartD, 5, write[:14], nil, nil},
		{"DDP tagged base bounds", cat(siwControl(1, 1, 0x01, true, true, false), siwAttach(write, siwRdmaWrite, siwHdrWrite)), "11010300",
			DDPTaggedBaseBounds, LayoutSiw, PartM | PartD, 5, write[:14], nil, nil},
		{"DDP untagged invalid QN", cat(siwControl(1, 2, 0x01, true, true, false), siwAttach(send, siwSend, siwHdrSend)), "21010300",
			DDPUntaggedInvalidQN, LayoutSiw, PartM | PartD, 5, send[:18], nil, nil},
		{"DDP untagged no buffer", cat(siwControl(1, 2, 0x02, true, true, false), siwAttach(send, siwSend, siwHdrSend)), "21020300",
			DDPUntaggedNoBuffer, LayoutSiw, PartM | PartD, 5, send[:18], nil, nil},
		// RDMAP Remote Operation with M, D (untagged offending segment).
		{"catastrophic stream", cat(siwControl(0, 2, 0x07, true, true, false), siwAttach(send, siwSend, siwHdrSend)), "20070300",
			RDMAPCatastrophicStream, LayoutSiw, PartM | PartD, 5, send[:18], nil, nil},
		// RDMAP Remote Protection: M, D, R and the whole Read Request
		// (siw's segment length of a Read Request is 46 - 46 = 0).
		{"read invalid STag", cat(siwControl(0, 1, 0x00, true, true, true), siwAttach(read, siwRdmaRreq, siwHdrReadReq)), "10000700",
			RDMAPInvalidSTag, LayoutSiw, PartM | PartD | PartR, 0, read[:18], read[18:46], nil},
		// Send with Invalidate: M, D, R but only the DDP header.
		{"cannot invalidate", cat(siwControl(0, 1, 0x09, true, true, true), siwAttach(sendInv, siwSend, siwHdrSend)), "10090700",
			RDMAPProtectionNoInvalidate, LayoutSiw, PartM | PartD | PartR, uint16(len(sendInv) - 18), sendInv[:18], nil, nil},
		// Local Catastrophic: no headers, the same word in both layouts.
		{"local catastrophic", siwControl(0, 0, 0x00, false, false, false), "00000000",
			RDMAPLocalCatastrophic, LayoutRFC, 0, 0, nil, nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := unhex(t, tt.literal); !bytes.Equal(tt.b[:4], got) {
				t.Fatalf("siw control word % x, want % x", tt.b[:4], got)
			}
			d, err := Decode(tt.b)
			if err != nil {
				t.Fatal(err)
			}
			if d.Err != tt.err || d.Layout != tt.layout || d.Parts != tt.parts || d.SegLen != tt.segLen ||
				!bytes.Equal(d.DDPHeader, tt.ddp) || !bytes.Equal(d.RDMAHeader, tt.rdma) ||
				d.Ambiguous != (tt.alt != nil) || d.Alt != tt.alt {
				t.Fatalf("Decode = %+v (%v)\nwant err %v layout %v parts %v len %d alt %v", d, d, tt.err, tt.layout, tt.parts, tt.segLen, tt.alt)
			}
			// Read in siw's layout, every frame means what siw meant.
			s, err := DecodeLayout(tt.b, LayoutSiw)
			if err != nil {
				t.Fatal(err)
			}
			want := tt.err
			if tt.alt != nil {
				want = tt.alt
			}
			if s.Err != want || s.Layout != LayoutSiw || s.Parts != tt.parts {
				t.Fatalf("DecodeLayout(siw) = %+v, want %v", s, want)
			}
		})
	}
}

// TestDecodeLayoutRules: the rules of Decode beyond siw's own frames.
func TestDecodeLayoutRules(t *testing.T) {
	write := ulpdu(t, "write-hello")
	tests := []struct {
		name   string
		b      []byte
		err    *Error
		layout Layout
		alt    *Error
		fail   error
	}{
		// One reading is a defined triple, the other is not.
		{"RFC known, siw unknown", unhex(t, "12010000"), DDPUntaggedInvalidQN, LayoutRFC, nil, nil},
		{"siw known, RFC unknown", unhex(t, "21010000"), DDPUntaggedInvalidQN, LayoutSiw, nil, nil},
		// Both defined: RDMAP Invalid STag against DDP Local Catastrophic.
		{"ambiguous 01", unhex(t, "01000000"), RDMAPInvalidSTag, LayoutRFC, DDPLocalCatastrophic, nil},
		{"ambiguous 10", unhex(t, "10000000"), DDPLocalCatastrophic, LayoutRFC, RDMAPInvalidSTag, nil},
		// The RFC flags with RFC-reserved bits clear: RFC, though siw's
		// reading (no flags, reserved bit set) would fit a 4-byte frame.
		{"RFC R only", unhex(t, "02062000"), RDMAPUnexpectedOpCode, LayoutRFC, nil, nil},
		// Our own frames stay RFC.
		{"RFC tagged", cat(unhex(t, "1101c000 0013"), write[:14]), DDPTaggedBaseBounds, LayoutRFC, nil, nil},
		// siw flags and a frame too short for them; RFC reading needs 4 bytes.
		{"siw truncated", cat(siwControl(1, 1, 0, true, true, false), []byte{0, 5}), nil, 0, nil, ErrTruncated},
		// siw flags, and bytes after the parts.
		{"siw trailing", cat(siwControl(1, 1, 0, true, true, false), siwAttach(write, siwRdmaWrite, siwHdrWrite), []byte{0}), nil, 0, nil, ErrTrailing},
		// siw's R tolerance needs D, as siw sends it.
		{"siw R only", unhex(t, "20060400"), MPAInsufficientIRD, LayoutRFC, nil, nil},
	}
	for _, tt := range tests {
		d, err := Decode(tt.b)
		if err != tt.fail {
			t.Errorf("%s: err %v, want %v", tt.name, err, tt.fail)
			continue
		}
		if err != nil {
			continue
		}
		if d.Err != tt.err || d.Layout != tt.layout || d.Ambiguous != (tt.alt != nil) || d.Alt != tt.alt {
			t.Errorf("%s: Decode = %v layout %v ambiguous %v alt %v; want %v %v %v", tt.name, d, d.Layout, d.Ambiguous, d.Alt, tt.err, tt.layout, tt.alt)
		}
	}
	if _, err := DecodeLayout(unhex(t, "20060400"), LayoutSiw); err != ErrTruncated {
		t.Errorf("siw R without D: %v", err)
	}
	if _, err := DecodeLayout([]byte{1, 2, 3}, LayoutSiw); err != ErrTruncated {
		t.Errorf("short: %v", err)
	}
}

func TestDecodeSiwString(t *testing.T) {
	write := ulpdu(t, "write-hello")
	d, err := Decode(cat(siwControl(1, 1, 0, true, true, false), siwAttach(write, siwRdmaWrite, siwHdrWrite)))
	if err != nil {
		t.Fatal(err)
	}
	if s := d.String(); !bytes.Contains([]byte(s), []byte("layout=siw")) || !bytes.Contains([]byte(s), []byte("tagged: invalid STag")) {
		t.Errorf("String %q", s)
	}
	d, _ = Decode(unhex(t, "20060000"))
	if s := d.String(); !bytes.Contains([]byte(s), []byte("unexpected OpCode")) {
		t.Errorf("ambiguous String %q lacks the other reading", s)
	}
}

func TestDecodeSiwAllocs(t *testing.T) {
	b := cat(siwControl(0, 1, 0x00, true, true, true), siwAttach(ulpdu(t, "read-rtr"), siwRdmaRreq, siwHdrReadReq))
	amb := unhex(t, "20060000")
	var sink int
	if n := testing.AllocsPerRun(100, func() {
		d, _ := Decode(b)
		a, _ := Decode(amb)
		s, _ := DecodeLayout(amb, LayoutSiw)
		sink += len(d.RDMAHeader) + int(a.Err.Code) + int(s.Err.Code)
	}); n != 0 {
		t.Errorf("allocs = %v", n)
	}
	_ = sink
}
