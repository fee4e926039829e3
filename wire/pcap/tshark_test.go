package pcap

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"xrnic/internal/require"
	"xrnic/wire/eth"
	"xrnic/wire/ipv4"
	"xrnic/wire/tcp"
)

// frameSpec is one hand-built Ethernet/IPv4/TCP frame and what tshark must
// decode from it.
type frameSpec struct {
	vlan     uint16 // 0: untagged
	f        tcp.Fields
	o        tcp.Options
	payload  int
	corrupt  bool // flip a payload bit after the checksum: tshark must say Bad
	partial  bool // leave the pseudo-header sum, then CompletePartialChecksum
	wantOpts []string
}

var (
	tsSrcMAC = eth.MAC{0x02, 0, 0, 0, 0, 1}
	tsDstMAC = eth.MAC{0x02, 0, 0, 0, 0, 2}
	tsSrcIP  = [4]byte{192, 0, 2, 1}
	tsDstIP  = [4]byte{192, 0, 2, 2}
)

func buildFrame(t *testing.T, s frameSpec, id uint16) []byte {
	t.Helper()
	b := make([]byte, 2048)
	var n int
	var err error
	if s.vlan != 0 {
		n, err = eth.PutVLAN(b, tsDstMAC, tsSrcMAC, 3, s.vlan, eth.TypeIPv4)
	} else {
		n, err = eth.Put(b, tsDstMAC, tsSrcMAC, eth.TypeIPv4)
	}
	if err != nil {
		t.Fatal(err)
	}
	ipOff := n
	segLen := tcp.MinHeaderLen + s.o.Len() + s.payload
	m, err := ipv4.Put(b[ipOff:], &ipv4.Fields{TotalLen: uint16(ipv4.MinHeaderLen + segLen), ID: id,
		Flags: ipv4.FlagDF, TTL: 64, Protocol: ipv4.ProtoTCP, Src: tsSrcIP, Dst: tsDstIP})
	if err != nil {
		t.Fatal(err)
	}
	tcpOff := ipOff + m
	hl, err := tcp.Put(b[tcpOff:], &s.f, &s.o)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < s.payload; i++ {
		b[tcpOff+hl+i] = byte(i*7 + 1)
	}
	seg := tcp.Header(b[tcpOff : tcpOff+segLen])
	ps := tcp.PseudoHeaderSum(tsSrcIP, tsDstIP, segLen)
	if s.partial {
		seg.SetChecksum(ps.Fold())
		if !seg.IsPartialChecksum(ps) {
			t.Fatal("partial checksum not recognised")
		}
		seg.CompletePartialChecksum()
	} else {
		seg.UpdateChecksum(ps)
	}
	if s.corrupt {
		b[tcpOff+hl] ^= 0x10
	}
	return b[:tcpOff+segLen]
}

// TestTsharkDecodes writes a capture of hand-built frames with our
// encoders and checks that tshark (an independent decoder) reads back the
// same fields and reports both checksums good.
func TestTsharkDecodes(t *testing.T) {
	tshark := require.Tool(t, "tshark", "tshark")
	specs := []frameSpec{
		{f: tcp.Fields{SrcPort: 49153, DstPort: 20049, Seq: 0x12345678, Flags: tcp.FlagSYN, Window: 64240},
			o: tcp.Options{HasMSS: true, MSS: 1460, SACKPermitted: true, HasTimestamps: true, TSVal: 123456,
				HasWindowScale: true, WindowScale: 7},
			wantOpts: []string{"2", "4", "8", "1", "3"}},
		{f: tcp.Fields{SrcPort: 20049, DstPort: 49153, Seq: 0xfffffff0, Ack: 0x12345679,
			Flags: tcp.FlagSYN | tcp.FlagACK, Window: 65535},
			o:        tcp.Options{HasMSS: true, MSS: 8960, SACKPermitted: true, HasWindowScale: true, WindowScale: 14},
			wantOpts: []string{"2", "1", "1", "4", "1", "3"}},
		{vlan: 100, f: tcp.Fields{SrcPort: 49153, DstPort: 20049, Seq: 0x12345679, Ack: 0xfffffff1,
			Flags: tcp.FlagACK | tcp.FlagPSH, Window: 501},
			o: tcp.Options{HasTimestamps: true, TSVal: 0xdeadbeef, TSEcr: 0x01020304, NumSACK: 2,
				SACK: [4]tcp.SACKBlock{{Left: 0xfffffff8, Right: 0x00000010}, {Left: 0x100, Right: 0x200}}},
			payload:  101, // odd length
			wantOpts: []string{"1", "1", "8", "1", "1", "5"}},
		{f: tcp.Fields{SrcPort: 1, DstPort: 65535, Seq: 7, Ack: 9, Flags: tcp.FlagFIN | tcp.FlagACK | tcp.FlagECE | tcp.FlagCWR,
			Window: 0, Urgent: 0}, payload: 1400, partial: true},
		{f: tcp.Fields{SrcPort: 2, DstPort: 3, Seq: 8, Flags: tcp.FlagRST}},
		{f: tcp.Fields{SrcPort: 4, DstPort: 5, Seq: 9, Ack: 1, Flags: tcp.FlagACK | tcp.FlagURG, Urgent: 3},
			payload: 10, corrupt: true},
	}
	path := filepath.Join(t.TempDir(), "frames.pcap")
	var buf bytes.Buffer
	w, err := NewWriter(&buf, WriterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range specs {
		if err := w.WritePacket(time.Unix(1700000000+int64(i), 123000), buildFrame(t, s, uint16(i+1))); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}

	fields := []string{"tcp.srcport", "tcp.dstport", "tcp.seq_raw", "tcp.ack_raw", "tcp.flags",
		"tcp.window_size_value", "tcp.urgent_pointer", "tcp.len", "tcp.option_kind",
		"tcp.options.mss_val", "tcp.options.wscale.shift", "tcp.options.timestamp.tsval",
		"tcp.options.timestamp.tsecr", "tcp.options.sack_le", "tcp.options.sack_re",
		"ip.checksum.status", "tcp.checksum.status", "vlan.id"}
	args := []string{"-r", path, "-n",
		"-o", "tcp.check_checksum:TRUE", "-o", "ip.check_checksum:TRUE",
		"-o", "tcp.relative_sequence_numbers:FALSE", "-o", "tcp.analyze_sequence_numbers:FALSE",
		"-T", "fields", "-E", "separator=/t", "-E", "occurrence=a", "-E", "aggregator=,"}
	for _, f := range fields {
		args = append(args, "-e", f)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, tshark, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("tshark: %v\n%s", err, stderr.String())
	}
	lines := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
	if len(lines) != len(specs) {
		t.Fatalf("tshark printed %d lines for %d frames:\n%s\n%s", len(lines), len(specs), out, stderr.String())
	}
	u := func(v uint64) string { return strconv.FormatUint(v, 10) }
	hex := func(v uint64) string {
		return "0x" + strings.Repeat("0", 4-len(strconv.FormatUint(v, 16))) + strconv.FormatUint(v, 16)
	}
	for i, s := range specs {
		col := strings.Split(lines[i], "\t")
		if len(col) != len(fields) {
			t.Fatalf("frame %d: %d columns: %q", i, len(col), lines[i])
		}
		got := map[string]string{}
		for j, f := range fields {
			got[f] = col[j]
		}
		want := map[string]string{
			"tcp.srcport":           u(uint64(s.f.SrcPort)),
			"tcp.dstport":           u(uint64(s.f.DstPort)),
			"tcp.seq_raw":           u(uint64(s.f.Seq)),
			"tcp.ack_raw":           u(uint64(s.f.Ack)),
			"tcp.flags":             hex(uint64(s.f.Flags)),
			"tcp.window_size_value": u(uint64(s.f.Window)),
			"tcp.len":               u(uint64(s.payload)),
			"tcp.option_kind":       strings.Join(s.wantOpts, ","),
			"ip.checksum.status":    "1", // PROTO_CHECKSUM_E_GOOD
			"tcp.checksum.status":   "1",
			"vlan.id":               "",
		}
		if s.corrupt {
			want["tcp.checksum.status"] = "0" // PROTO_CHECKSUM_E_BAD
		}
		if s.f.Flags&tcp.FlagURG != 0 {
			want["tcp.urgent_pointer"] = u(uint64(s.f.Urgent))
		}
		if s.vlan != 0 {
			want["vlan.id"] = u(uint64(s.vlan))
		}
		if s.o.HasMSS {
			want["tcp.options.mss_val"] = u(uint64(s.o.MSS))
		}
		if s.o.HasWindowScale {
			want["tcp.options.wscale.shift"] = u(uint64(s.o.WindowScale))
		}
		if s.o.HasTimestamps {
			want["tcp.options.timestamp.tsval"] = u(uint64(s.o.TSVal))
			want["tcp.options.timestamp.tsecr"] = u(uint64(s.o.TSEcr))
		}
		if s.o.NumSACK > 0 {
			var le, re []string
			for _, b := range s.o.SACK[:s.o.NumSACK] {
				le, re = append(le, u(uint64(b.Left))), append(re, u(uint64(b.Right)))
			}
			want["tcp.options.sack_le"] = strings.Join(le, ",")
			want["tcp.options.sack_re"] = strings.Join(re, ",")
		}
		for k, v := range want {
			if got[k] != v {
				t.Errorf("frame %d (%v): tshark %s = %q, want %q", i, s.f.Flags, k, got[k], v)
			}
		}
	}
	if t.Failed() {
		t.Logf("tshark output:\n%s", out)
	}
}
