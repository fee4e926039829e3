package tcp

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"testing"

	"xrnic/wire/eth"
	"xrnic/wire/inet"
	"xrnic/wire/ipv4"
)

// naive is an independent RFC 1071 reference checksum over the
// concatenation of its arguments.
func naive(parts ...[]byte) uint16 {
	var b []byte
	for _, p := range parts {
		b = append(b, p...)
	}
	var s uint32
	for i := 0; i < len(b); i += 2 {
		w := uint32(b[i]) << 8
		if i+1 < len(b) {
			w |= uint32(b[i+1])
		}
		s += w
		s = (s & 0xffff) + (s >> 16)
	}
	return ^uint16(s)
}

// pseudo builds the 12-byte IPv4 pseudo-header by hand.
func pseudo(src, dst [4]byte, segLen int) []byte {
	return append(append(append([]byte{}, src[:]...), dst[:]...), 0, 6, byte(segLen>>8), byte(segLen))
}

// synFrame is a 74-byte Ethernet/IPv4/TCP SYN written byte by byte from
// the RFC layouts, in the option layout Linux sends:
//
//	Ethernet: 02:00:00:00:00:02 <- 02:00:00:00:00:01, type 0x0800
//	IPv4: IHL 5, total 60, ID 0x1c46, DF, TTL 64, TCP, checksum 0x0a74,
//	      10.0.0.1 -> 10.0.0.2
//	TCP: 49153 -> 20049, seq 0x12345678, ack 0, offset 10, SYN,
//	     window 64240, checksum 0xdfcb, urgent 0
//	options: MSS 1460 | SACK-Permitted, TS val 123456 ecr 0 | NOP, WS 7
//
// The two checksums were computed outside this package and are checked in
// TestSYNVector with the naive reference, not with the code under test.
var synFrame = []byte{
	0x02, 0x00, 0x00, 0x00, 0x00, 0x02, 0x02, 0x00, 0x00, 0x00, 0x00, 0x01, 0x08, 0x00,
	0x45, 0x00, 0x00, 0x3c, 0x1c, 0x46, 0x40, 0x00, 0x40, 0x06, 0x0a, 0x74,
	0x0a, 0x00, 0x00, 0x01, 0x0a, 0x00, 0x00, 0x02,
	0xc0, 0x01, 0x4e, 0x51, 0x12, 0x34, 0x56, 0x78, 0x00, 0x00, 0x00, 0x00,
	0xa0, 0x02, 0xfa, 0xf0, 0xdf, 0xcb, 0x00, 0x00,
	0x02, 0x04, 0x05, 0xb4,
	0x04, 0x02, 0x08, 0x0a, 0x00, 0x01, 0xe2, 0x40, 0x00, 0x00, 0x00, 0x00,
	0x01, 0x03, 0x03, 0x07,
}

var (
	srcIP = [4]byte{10, 0, 0, 1}
	dstIP = [4]byte{10, 0, 0, 2}
)

func TestSYNVector(t *testing.T) {
	ip, seg := synFrame[14:34], synFrame[34:]
	if naive(ip) != 0 {
		t.Fatal("vector IPv4 checksum does not verify under the reference")
	}
	if naive(pseudo(srcIP, dstIP, len(seg)), seg) != 0 {
		t.Fatal("vector TCP checksum does not verify under the reference")
	}

	f, err := eth.Parse(synFrame)
	if err != nil || f.EtherType() != eth.TypeIPv4 {
		t.Fatalf("eth: %v %#x", err, f.EtherType())
	}
	p, err := ipv4.Parse(f.Payload())
	if err != nil || p.Protocol() != ipv4.ProtoTCP {
		t.Fatalf("ipv4: %v", err)
	}
	h, err := Parse(p.Payload())
	if err != nil {
		t.Fatalf("tcp: %v", err)
	}
	if h.SrcPort() != 49153 || h.DstPort() != 20049 || h.Seq() != 0x12345678 || h.Ack() != 0 ||
		h.DataOffset() != 40 || h.Flags() != FlagSYN || h.Window() != 64240 || h.Checksum() != 0xdfcb ||
		h.Urgent() != 0 || len(h.Options()) != 20 || len(h.Payload()) != 0 {
		t.Fatalf("fields: % x", h)
	}
	ps := p.PseudoHeaderSum()
	if !h.ChecksumValid(ps) || h.ComputeChecksum(ps) != 0xdfcb {
		t.Fatalf("checksum: valid %v computed %#04x", h.ChecksumValid(ps), h.ComputeChecksum(ps))
	}
	if PseudoHeaderSum(srcIP, dstIP, len(h)) != ps {
		t.Fatal("tcp.PseudoHeaderSum differs from ipv4 Header.PseudoHeaderSum")
	}
	if h.IsPartialChecksum(ps) {
		t.Fatal("full checksum reported as partial")
	}

	// Iterator: order and values as on the wire.
	type seen struct {
		kind uint8
		n    int
	}
	var got []seen
	it := h.OptionIter()
	for it.Next() {
		o := it.Option()
		got = append(got, seen{o.Kind, len(o.Data)})
		switch o.Kind {
		case OptMSS:
			if o.MSS() != 1460 {
				t.Errorf("MSS %d", o.MSS())
			}
		case OptWindowScale:
			if o.WindowScale() != 7 {
				t.Errorf("WS %d", o.WindowScale())
			}
		case OptTimestamps:
			if v, e := o.Timestamps(); v != 123456 || e != 0 {
				t.Errorf("TS %d %d", v, e)
			}
		}
	}
	want := []seen{{OptMSS, 2}, {OptSACKPermitted, 0}, {OptTimestamps, 8}, {OptWindowScale, 1}}
	if it.Err() != nil || len(got) != len(want) {
		t.Fatalf("iter: %v %v", it.Err(), got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("iter: %v, want %v", got, want)
		}
	}
	var o Options
	if err := ParseOptions(h.Options(), &o); err != nil {
		t.Fatal(err)
	}
	wantOpts := Options{HasMSS: true, MSS: 1460, HasWindowScale: true, WindowScale: 7,
		SACKPermitted: true, HasTimestamps: true, TSVal: 123456}
	if o != wantOpts {
		t.Fatalf("ParseOptions: %+v", o)
	}

	// Our encoders reproduce the frame byte for byte.
	out := make([]byte, 128)
	n, _ := eth.Put(out, eth.MAC{2, 0, 0, 0, 0, 2}, eth.MAC{2, 0, 0, 0, 0, 1}, eth.TypeIPv4)
	m, err := ipv4.Put(out[n:], &ipv4.Fields{TotalLen: 60, ID: 0x1c46, Flags: ipv4.FlagDF, TTL: 64,
		Protocol: ipv4.ProtoTCP, Src: srcIP, Dst: dstIP})
	if err != nil {
		t.Fatal(err)
	}
	n += m
	m, err = Put(out[n:], &Fields{SrcPort: 49153, DstPort: 20049, Seq: 0x12345678, Flags: FlagSYN, Window: 64240}, &wantOpts)
	if err != nil {
		t.Fatal(err)
	}
	Header(out[n : n+m]).UpdateChecksum(PseudoHeaderSum(srcIP, dstIP, m))
	n += m
	if !bytes.Equal(out[:n], synFrame) {
		t.Fatalf("encoded\n% x\nwant\n% x", out[:n], synFrame)
	}
}

func TestParseTable(t *testing.T) {
	seg := synFrame[34:]
	tests := []struct {
		name string
		b    []byte
		err  error
	}{
		{"syn", seg, nil},
		{"header only no options", append([]byte{}, seg[:20]...), ErrTruncated}, // offset 10 needs 40
		{"short", seg[:19], ErrTruncated},
		{"empty", nil, ErrTruncated},
		{"offset 4", func() []byte { b := append([]byte{}, seg...); b[12] = 0x40; return b }(), ErrDataOffset},
		{"offset 0", func() []byte { b := append([]byte{}, seg...); b[12] = 0x00; return b }(), ErrDataOffset},
		{"offset 5", func() []byte { b := append([]byte{}, seg[:20]...); b[12] = 0x50; return b }(), nil},
		{"offset 15 beyond", func() []byte { b := append([]byte{}, seg...); b[12] = 0xf0; return b }(), ErrTruncated},
		{"offset 15 exact", func() []byte { b := append([]byte{}, seg...); b[12] = 0xf0; return append(b, make([]byte, 20)...) }(), nil},
	}
	for _, tc := range tests {
		if _, err := Parse(tc.b); err != tc.err {
			t.Errorf("%s: err = %v, want %v", tc.name, err, tc.err)
		}
	}
}

func TestOptionsTable(t *testing.T) {
	tests := []struct {
		name  string
		b     []byte
		err   error
		kinds []uint8
	}{
		{"empty", nil, nil, nil},
		{"nops", []byte{1, 1, 1}, nil, nil},
		{"eol then garbage", []byte{2, 4, 1, 0, 0, 0xff, 0xff, 7}, nil, []uint8{2}},
		{"unknown skipped by length", []byte{30, 6, 9, 9, 9, 9, 3, 3, 1}, nil, []uint8{30, 3}},
		{"unknown length 2", []byte{253, 2, 1, 4, 2}, nil, []uint8{253, 4}},
		{"sack 1 block", []byte{1, 1, 5, 10, 0, 0, 0, 1, 0, 0, 0, 2}, nil, []uint8{5}},
		{"sack 4 blocks", append([]byte{5, 34}, make([]byte, 32)...), nil, []uint8{5}},
		{"sack 5 blocks", append([]byte{5, 42}, make([]byte, 40)...), ErrOptionLen, nil},
		{"sack 0 blocks", []byte{5, 2}, ErrOptionLen, nil},
		{"sack partial block", append([]byte{5, 14}, make([]byte, 12)...), ErrOptionLen, nil},
		{"mss len 3", []byte{2, 3, 1, 0}, ErrOptionLen, nil},
		{"ws len 4", []byte{3, 4, 1, 0}, ErrOptionLen, nil},
		{"sackp len 3", []byte{4, 3, 0, 0}, ErrOptionLen, nil},
		{"ts len 8", append([]byte{8, 8}, make([]byte, 6)...), ErrOptionLen, nil},
		{"length 0", []byte{30, 0, 0, 0}, ErrOptionLen, nil},
		{"length 1", []byte{30, 1, 0, 0}, ErrOptionLen, nil},
		{"length past end", []byte{2, 4, 5}, ErrOptionTruncated, nil},
		{"kind without length", []byte{1, 1, 1, 2}, ErrOptionTruncated, nil},
		{"good then bad", []byte{3, 3, 7, 30, 9, 0}, ErrOptionTruncated, []uint8{3}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			it := NewOptionIter(tc.b)
			var kinds []uint8
			for it.Next() {
				kinds = append(kinds, it.Option().Kind)
			}
			if it.Err() != tc.err {
				t.Fatalf("err = %v, want %v", it.Err(), tc.err)
			}
			if !bytes.Equal(kinds, tc.kinds) {
				t.Fatalf("kinds %v, want %v", kinds, tc.kinds)
			}
			if it.Next() {
				t.Fatal("Next true after the end")
			}
			var o Options
			if err := ParseOptions(tc.b, &o); err != tc.err {
				t.Fatalf("ParseOptions err = %v, want %v", err, tc.err)
			}
		})
	}
	var o Options
	if err := ParseOptions([]byte{1, 1, 5, 18, 0, 0, 0, 1, 0, 0, 0, 2, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 5}, &o); err != nil {
		t.Fatal(err)
	}
	if o.NumSACK != 2 || o.SACK[0] != (SACKBlock{1, 2}) || o.SACK[1] != (SACKBlock{0xffffffff, 5}) {
		t.Fatalf("SACK %+v", o)
	}
}

func TestPutOptionsLayout(t *testing.T) {
	tests := []struct {
		name string
		o    Options
		want []byte
		err  error
	}{
		{"none", Options{}, []byte{}, nil},
		{"mss", Options{HasMSS: true, MSS: 0x1234}, []byte{2, 4, 0x12, 0x34}, nil},
		{"sackp alone", Options{SACKPermitted: true}, []byte{1, 1, 4, 2}, nil},
		{"ws", Options{HasWindowScale: true, WindowScale: 14}, []byte{1, 3, 3, 14}, nil},
		{"ts alone", Options{HasTimestamps: true, TSVal: 1, TSEcr: 2}, []byte{1, 1, 8, 10, 0, 0, 0, 1, 0, 0, 0, 2}, nil},
		{"sack", Options{NumSACK: 1, SACK: [4]SACKBlock{{3, 4}}}, []byte{1, 1, 5, 10, 0, 0, 0, 3, 0, 0, 0, 4}, nil},
		{"ts + 3 sack = 40", Options{HasTimestamps: true, NumSACK: 3}, nil, nil},
		{"ts + 4 sack too long", Options{HasTimestamps: true, NumSACK: 4}, nil, ErrOptionsTooLong},
		{"5 sack", Options{NumSACK: 5}, nil, ErrOptionsTooLong},
		{"negative sack", Options{NumSACK: -1}, nil, ErrOptionsTooLong},
	}
	for _, tc := range tests {
		buf := make([]byte, 40)
		n, err := PutOptions(buf, &tc.o)
		if err != tc.err {
			t.Errorf("%s: err %v, want %v", tc.name, err, tc.err)
			continue
		}
		if err == nil && n != tc.o.Len() {
			t.Errorf("%s: n %d, Len %d", tc.name, n, tc.o.Len())
		}
		if tc.want != nil && !bytes.Equal(buf[:n], tc.want) {
			t.Errorf("%s: % x, want % x", tc.name, buf[:n], tc.want)
		}
	}
	if _, err := PutOptions(make([]byte, 3), &Options{HasMSS: true}); err != ErrShortBuffer {
		t.Errorf("short buffer: %v", err)
	}
	if _, err := Put(make([]byte, 19), &Fields{}, nil); err != ErrShortBuffer {
		t.Errorf("Put short: %v", err)
	}
	if _, err := Put(make([]byte, 23), &Fields{}, &Options{HasMSS: true, HasWindowScale: true}); err != ErrShortBuffer {
		t.Errorf("Put short options: %v", err)
	}
}

func randOptions(r *rand.Rand) Options {
	o := Options{
		HasMSS: r.IntN(2) == 0, HasWindowScale: r.IntN(2) == 0, SACKPermitted: r.IntN(2) == 0,
		HasTimestamps: r.IntN(2) == 0,
	}
	if o.HasMSS {
		o.MSS = uint16(r.Uint32())
	}
	if o.HasWindowScale {
		o.WindowScale = uint8(r.Uint32())
	}
	if o.HasTimestamps {
		o.TSVal, o.TSEcr = r.Uint32(), r.Uint32()
	}
	o.NumSACK = r.IntN(5)
	for i := range o.NumSACK {
		o.SACK[i] = SACKBlock{Seq(r.Uint32()), Seq(r.Uint32())}
	}
	return o
}

func TestRoundTrip(t *testing.T) {
	const seed = 0x793
	r := rand.New(rand.NewPCG(seed, seed))
	defer func() {
		if t.Failed() {
			t.Logf("rand seed %#x", seed)
		}
	}()
	buf := make([]byte, 2000)
	for i := 0; i < 3000; i++ {
		f := Fields{
			SrcPort: uint16(r.Uint32()), DstPort: uint16(r.Uint32()), Seq: Seq(r.Uint32()), Ack: Seq(r.Uint32()),
			Flags: Flags(r.Uint32()), Window: uint16(r.Uint32()), Urgent: uint16(r.Uint32()),
		}
		o := randOptions(r)
		n, err := Put(buf, &f, &o)
		if o.Len() > MaxOptionsLen {
			if err != ErrOptionsTooLong {
				t.Fatalf("Len %d: err %v", o.Len(), err)
			}
			continue
		}
		if err != nil || n != MinHeaderLen+o.Len() || n%4 != 0 {
			t.Fatalf("Put: n %d err %v", n, err)
		}
		pl := r.IntN(1500)
		for j := n; j < n+pl; j++ {
			buf[j] = byte(r.Uint32())
		}
		seg := buf[:n+pl]
		var src, dst [4]byte
		binary.BigEndian.PutUint32(src[:], r.Uint32())
		binary.BigEndian.PutUint32(dst[:], r.Uint32())
		ps := PseudoHeaderSum(src, dst, len(seg))
		Header(seg).UpdateChecksum(ps)
		if naive(pseudo(src, dst, len(seg)), seg) != 0 {
			t.Fatal("checksum fails the reference")
		}
		h, err := Parse(seg)
		if err != nil {
			t.Fatal(err)
		}
		if h.SrcPort() != f.SrcPort || h.DstPort() != f.DstPort || h.Seq() != f.Seq || h.Ack() != f.Ack ||
			h.Flags() != f.Flags || h.Window() != f.Window || h.Urgent() != f.Urgent || h.DataOffset() != n ||
			len(h.Payload()) != pl || !h.ChecksumValid(ps) {
			t.Fatalf("mismatch %+v % x", f, h[:n])
		}
		var got Options
		if err := ParseOptions(h.Options(), &got); err != nil || got != o {
			t.Fatalf("options %v: %+v, want %+v", err, got, o)
		}
		// Setters.
		h.SetSrcPort(f.DstPort)
		h.SetDstPort(f.SrcPort)
		h.SetSeq(f.Ack)
		h.SetAck(f.Seq)
		h.SetFlags(^f.Flags)
		h.SetWindow(^f.Window)
		h.SetUrgent(^f.Urgent)
		h.SetChecksum(0x1234)
		if h.SrcPort() != f.DstPort || h.DstPort() != f.SrcPort || h.Seq() != f.Ack || h.Ack() != f.Seq ||
			h.Flags() != ^f.Flags || h.Window() != ^f.Window || h.Urgent() != ^f.Urgent || h.Checksum() != 0x1234 ||
			h.DataOffset() != n {
			t.Fatal("setters")
		}
	}
}

func TestChecksumSingleBitFlip(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	buf := make([]byte, 300)
	o := Options{HasMSS: true, MSS: 9000, HasTimestamps: true, TSVal: 7, NumSACK: 2}
	n, _ := Put(buf, &Fields{SrcPort: 1, DstPort: 2, Seq: 3, Ack: 4, Flags: FlagACK | FlagPSH, Window: 5}, &o)
	for j := n; j < len(buf); j++ {
		buf[j] = byte(r.Uint32())
	}
	seg := Header(buf[:n+101]) // odd length
	ps := PseudoHeaderSum(srcIP, dstIP, len(seg))
	seg.UpdateChecksum(ps)
	if !seg.ChecksumValid(ps) || naive(pseudo(srcIP, dstIP, len(seg)), seg) != 0 {
		t.Fatal("does not verify")
	}
	for bit := 0; bit < 8*len(seg); bit++ {
		seg[bit/8] ^= 1 << (bit % 8)
		if seg.ChecksumValid(ps) {
			t.Fatalf("flip of segment bit %d accepted", bit)
		}
		seg[bit/8] ^= 1 << (bit % 8)
	}
	for bit := 0; bit < 64; bit++ { // pseudo-header addresses
		src, dst := srcIP, dstIP
		if bit < 32 {
			src[bit/8] ^= 1 << (bit % 8)
		} else {
			dst[(bit-32)/8] ^= 1 << (bit % 8)
		}
		if seg.ChecksumValid(PseudoHeaderSum(src, dst, len(seg))) {
			t.Fatalf("flip of pseudo-header address bit %d accepted", bit)
		}
	}
	if seg.ChecksumValid(PseudoHeaderSum(srcIP, dstIP, len(seg)+1)) {
		t.Fatal("wrong length accepted")
	}
}

func TestPartialChecksum(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for i := 0; i < 500; i++ {
		buf := make([]byte, 20+r.IntN(1400))
		for j := range buf {
			buf[j] = byte(r.Uint32())
		}
		n, _ := Put(buf, &Fields{SrcPort: 40000, DstPort: 20049, Seq: Seq(r.Uint32()), Flags: FlagACK, Window: 512}, nil)
		_ = n
		var src, dst [4]byte
		binary.BigEndian.PutUint32(src[:], r.Uint32())
		binary.BigEndian.PutUint32(dst[:], r.Uint32())
		seg := Header(buf)
		// What a Linux sender with offload leaves: the folded pseudo-header
		// sum, i.e. the complement of the pseudo-header's own checksum.
		folded := ^naive(pseudo(src, dst, len(seg)))
		seg.SetChecksum(folded)
		ps := PseudoHeaderSum(src, dst, len(seg))
		if !seg.IsPartialChecksum(ps) {
			t.Fatalf("partial not recognised: field %#04x, pseudo fold %#04x", folded, ps.Fold())
		}
		if seg.ChecksumValid(ps) && naive(pseudo(src, dst, len(seg)), seg) != 0 {
			t.Fatal("ChecksumValid disagrees with the reference")
		}
		seg.CompletePartialChecksum()
		if naive(pseudo(src, dst, len(seg)), seg) != 0 || !seg.ChecksumValid(ps) {
			t.Fatalf("completed checksum %#04x does not verify", seg.Checksum())
		}
	}
}

func TestFlagsString(t *testing.T) {
	if s := (FlagSYN | FlagACK).String(); s != "SYN|ACK" {
		t.Fatalf("%q", s)
	}
	if s := Flags(0xff).String(); s != "FIN|SYN|RST|PSH|ACK|URG|ECE|CWR" {
		t.Fatalf("%q", s)
	}
}

func TestAllocs(t *testing.T) {
	frame := make([]byte, 1514)
	copy(frame, synFrame)
	binary.BigEndian.PutUint16(frame[16:], 1500)
	ipv4.Header(frame[14:]).UpdateChecksum()
	seg := Header(frame[34:])
	seg.UpdateChecksum(PseudoHeaderSum(srcIP, dstIP, len(seg)))
	out := make([]byte, 60)
	o := Options{HasMSS: true, MSS: 1460, HasTimestamps: true, NumSACK: 2}
	var sink int
	n := testing.AllocsPerRun(100, func() {
		f, err := eth.Parse(frame)
		if err != nil {
			panic(err)
		}
		p, err := ipv4.Parse(f.Payload())
		if err != nil {
			panic(err)
		}
		h, err := Parse(p.Payload())
		if err != nil {
			panic(err)
		}
		if !h.ChecksumValid(p.PseudoHeaderSum()) {
			panic("checksum")
		}
		it := h.OptionIter()
		for it.Next() {
			sink += int(it.Option().Kind)
		}
		var po Options
		if ParseOptions(h.Options(), &po) != nil {
			panic("options")
		}
		m, err := Put(out, &Fields{SrcPort: 1, Seq: h.Seq()}, &o)
		if err != nil {
			panic(err)
		}
		Header(out[:m]).UpdateChecksum(PseudoHeaderSum(srcIP, dstIP, m))
		sink += m + int(po.MSS) + int(h.Seq().Add(1).Size(h.Ack()))
		if h.IsPartialChecksum(inet.Sum{}) {
			h.CompletePartialChecksum()
		}
	})
	if n != 0 {
		t.Fatalf("allocs per run = %v, want 0", n)
	}
	_ = sink
}

func FuzzParse(f *testing.F) {
	f.Add(synFrame[34:])
	f.Add(synFrame[34:54])
	f.Add([]byte("\x00\x01\x00\x02\x00\x00\x00\x03\x00\x00\x00\x04\x60\x10\x00\x05\x00\x00\x00\x00\x1e\x04\x01"))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := Parse(b)
		if err != nil {
			return
		}
		_ = h.Payload()
		it := h.OptionIter()
		for it.Next() {
			_ = it.Option()
		}
		// Fixed header round trip.
		fl := Fields{SrcPort: h.SrcPort(), DstPort: h.DstPort(), Seq: h.Seq(), Ack: h.Ack(),
			Flags: h.Flags(), Window: h.Window(), Urgent: h.Urgent()}
		out := make([]byte, MaxHeaderLen)
		n, err := Put(out, &fl, nil)
		if err != nil || n != MinHeaderLen {
			t.Fatalf("Put: %d %v", n, err)
		}
		if !bytes.Equal(out[:12], b[:12]) || out[12] != 0x50 || out[13] != b[13] ||
			!bytes.Equal(out[14:16], b[14:16]) || !bytes.Equal(out[18:20], b[18:20]) {
			t.Fatalf("re-encoded % x from % x", out[:20], b[:20])
		}
		// Options round trip where they parse and fit.
		var o Options
		if ParseOptions(h.Options(), &o) != nil {
			return
		}
		n, err = Put(out, &fl, &o)
		if err != nil {
			if err != ErrOptionsTooLong {
				t.Fatalf("Put options: %v", err)
			}
			return
		}
		h2, err := Parse(out[:n])
		if err != nil {
			t.Fatal(err)
		}
		var o2 Options
		if err := ParseOptions(h2.Options(), &o2); err != nil || o2 != o {
			t.Fatalf("options round trip: %v %+v vs %+v", err, o2, o)
		}
	})
}

func FuzzOptions(f *testing.F) {
	f.Add(synFrame[54:])
	f.Add([]byte{1, 1, 5, 18, 0, 0, 0, 1, 0, 0, 0, 2, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 5})
	f.Add([]byte{30, 6, 9, 9, 9, 9, 3, 3, 1, 0, 0xff})
	f.Add([]byte{2, 4, 5})
	f.Fuzz(func(t *testing.T, b []byte) {
		it := NewOptionIter(b)
		total := 0
		for it.Next() {
			o := it.Option()
			total += 2 + len(o.Data)
			switch o.Kind { // accessors must not panic on validated options
			case OptMSS:
				_ = o.MSS()
			case OptWindowScale:
				_ = o.WindowScale()
			case OptTimestamps:
				_, _ = o.Timestamps()
			case OptSACK:
				for i := range o.SACKBlocks() {
					_ = o.SACKBlock(i)
				}
			}
		}
		if total > len(b) {
			t.Fatalf("options cover %d bytes of %d", total, len(b))
		}
		var o Options
		if err := ParseOptions(b, &o); err != it.Err() {
			t.Fatalf("ParseOptions %v, iterator %v", err, it.Err())
		}
		if it.Err() != nil {
			return
		}
		out := make([]byte, MaxOptionsLen)
		n, err := PutOptions(out, &o)
		if err != nil {
			if err != ErrOptionsTooLong || o.Len() <= MaxOptionsLen {
				t.Fatalf("PutOptions: %v (Len %d)", err, o.Len())
			}
			return
		}
		var o2 Options
		if err := ParseOptions(out[:n], &o2); err != nil || o2 != o {
			t.Fatalf("round trip: %v %+v vs %+v", err, o2, o)
		}
	})
}

func BenchmarkParseFrame(b *testing.B) {
	frame := append([]byte{}, synFrame...)
	b.ReportAllocs()
	b.SetBytes(int64(len(frame)))
	var o Options
	for b.Loop() {
		f, err := eth.Parse(frame)
		if err != nil {
			b.Fatal(err)
		}
		p, err := ipv4.Parse(f.Payload())
		if err != nil {
			b.Fatal(err)
		}
		h, err := Parse(p.Payload())
		if err != nil {
			b.Fatal(err)
		}
		if err := ParseOptions(h.Options(), &o); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkParseFrameVerify1514 adds the TCP checksum over a full-size
// frame to BenchmarkParseFrame.
func BenchmarkParseFrameVerify1514(b *testing.B) {
	frame := make([]byte, 1514)
	copy(frame, synFrame)
	binary.BigEndian.PutUint16(frame[16:], 1500)
	ipv4.Header(frame[14:]).UpdateChecksum()
	Header(frame[34:]).UpdateChecksum(PseudoHeaderSum(srcIP, dstIP, 1480))
	b.ReportAllocs()
	b.SetBytes(int64(len(frame)))
	var o Options
	for b.Loop() {
		f, _ := eth.Parse(frame)
		p, err := ipv4.Parse(f.Payload())
		if err != nil {
			b.Fatal(err)
		}
		h, err := Parse(p.Payload())
		if err != nil {
			b.Fatal(err)
		}
		if !h.ChecksumValid(p.PseudoHeaderSum()) {
			b.Fatal("checksum")
		}
		if err := ParseOptions(h.Options(), &o); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkOptionIter(b *testing.B) {
	opts := synFrame[54:]
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		it := NewOptionIter(opts)
		for it.Next() {
			n++
		}
	}
}

func BenchmarkPutSegment(b *testing.B) {
	buf := make([]byte, 1480)
	o := Options{HasTimestamps: true, TSVal: 1, TSEcr: 2}
	f := Fields{SrcPort: 1, DstPort: 2, Seq: 3, Ack: 4, Flags: FlagACK, Window: 100}
	b.ReportAllocs()
	b.SetBytes(int64(len(buf)))
	for b.Loop() {
		if _, err := Put(buf, &f, &o); err != nil {
			b.Fatal(err)
		}
		Header(buf).UpdateChecksum(PseudoHeaderSum(srcIP, dstIP, len(buf)))
	}
}
