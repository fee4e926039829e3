package wiretest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
)

// InstallHint tells a user without tshark how to get it.
const InstallHint = "install Wireshark's command-line tool: apt-get install tshark"

// ErrNoTshark: tshark is not on PATH.
var ErrNoTshark = errors.New("wiretest: tshark not found in PATH (" + InstallHint + ")")

// FindTshark returns the path of tshark or ErrNoTshark.
func FindTshark() (string, error) {
	p, err := exec.LookPath("tshark")
	if err != nil {
		return "", ErrNoTshark
	}
	return p, nil
}

// TsharkFields are the fields RunTshark extracts, one column each.
var TsharkFields = []string{
	"frame.number", "_ws.col.Info",
	"ip.checksum.status", "tcp.checksum.status", "tcp.seq_raw", "tcp.ack_raw", "tcp.flags",
	"tcp.len", "tcp.analysis.flags",
	"iwarp_mpa.key.req", "iwarp_mpa.key.rep", "iwarp_mpa.marker_flag", "iwarp_mpa.crc_flag",
	"iwarp_mpa.rej_flag", "iwarp_mpa.res", "iwarp_mpa.rev", "iwarp_mpa.pdlength",
	"iwarp_mpa.privatedata",
	"iwarp_mpa.ulpdulength", "iwarp_mpa.pad", "iwarp_mpa.crc_check", "iwarp_mpa.crc",
	"iwarp_ddp.tagged_flag", "iwarp_ddp.last_flag", "iwarp_ddp.rsvd", "iwarp_ddp.dv",
	"iwarp_ddp.rsvdulp", "iwarp_ddp.stag", "iwarp_ddp.tagged_offset",
	"iwarp_ddp.qn", "iwarp_ddp.msn", "iwarp_ddp.mo",
	"iwarp_rdma.version", "iwarp_rdma.rsv", "iwarp_rdma.opcode", "iwarp_rdma.inval_stag",
	"iwarp_rdma.reserved",
	"iwarp_rdma.sinkstag", "iwarp_rdma.sinkto", "iwarp_rdma.rdmardsz", "iwarp_rdma.srcstag",
	"iwarp_rdma.srcto",
	"iwarp_rdma.atomic.reserved", "iwarp_rdma.atomic.opcode",
	"iwarp_rdma.atomic.request_identifier", "iwarp_rdma.atomic.remote_stag",
	"iwarp_rdma.atomic.remote_tagged_offset",
	"iwarp_rdma.atomic.add_data", "iwarp_rdma.atomic.add_mask",
	"iwarp_rdma.atomic.swap_data", "iwarp_rdma.atomic.swap_mask",
	"iwarp_rdma.atomic.compare_data", "iwarp_rdma.atomic.compare_mask",
	"iwarp_rdma.atomic.original_request_identifier",
	"iwarp_rdma.atomic.original_remote_data_value",
	"iwarp_rdma.term_layer", "iwarp_rdma.term_etype_rdma", "iwarp_rdma.term_etype_ddp",
	"iwarp_rdma.term_etype_llp", "iwarp_rdma.term_etype",
	"iwarp_rdma.term_errcode_rdma", "iwarp_rdma.term_errcode_ddp_tagged",
	"iwarp_rdma.term_errcode_ddp_untagged", "iwarp_rdma.term_errcode_llp",
	"iwarp_rdma.term_errcode",
	"iwarp_rdma.term_hdrct_m", "iwarp_rdma.hdrct_d", "iwarp_rdma.hdrct_r",
	"iwarp_rdma.term_rsvd", "iwarp_rdma.term_ddp_seg_len", "iwarp_rdma.term_ddp_h",
	"iwarp_rdma.term_rdma_h",
	"data.len",
}

// TsharkOptions are the options every tshark run gets:
//
//   - -n: no name resolution (nothing leaves the machine, output is stable);
//   - --enable-heuristic iwarp_mpa_tcp: the MPA heuristic on TCP. It is on
//     by default; naming it keeps a user profile from turning it off. No
//     decode-as (-d) is needed: MPA has no port, the heuristic recognises
//     the connection by its MPA Request and Reply;
//   - -o ip.check_checksum:TRUE -o tcp.check_checksum:TRUE: verify the IPv4
//     and TCP checksums (off by default in Wireshark).
//
// The MPA dissector checks CRCs by itself once the Request or Reply had C
// set; it has no preference for it.
var TsharkOptions = []string{"-n", "--enable-heuristic", "iwarp_mpa_tcp",
	"-o", "ip.check_checksum:TRUE", "-o", "tcp.check_checksum:TRUE"}

// CRCVerdict is what tshark's MPA dissector says about one FPDU's CRC (the
// verdict exists only as text in the protocol tree, not as a field).
type CRCVerdict struct {
	Good     bool
	Field    uint32 // the CRC field as tshark shows it (read big-endian)
	ShouldBe uint32 // for a bad CRC: the value tshark computed
}

// Decode is tshark's decode of a capture.
type Decode struct {
	Version string
	// Frames maps a 1-based frame number to field name -> value, several
	// occurrences joined by ",". Absent fields are "".
	Frames map[int]map[string]string
	// CRC maps a frame number to the MPA CRC verdict of its FPDU.
	CRC map[int]CRCVerdict
}

func tsharkCmd(ctx context.Context, tshark string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, tshark, append(append([]string{}, TsharkOptions...), args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w: %s", tshark, strings.Join(args, " "), err,
			strings.TrimSpace(stderr.String()))
	}
	return out, nil
}

// TsharkVersion returns the version string of tshark ("4.0.17").
func TsharkVersion(ctx context.Context, tshark string) (string, error) {
	out, err := exec.CommandContext(ctx, tshark, "-v").Output()
	if err != nil {
		return "", fmt.Errorf("%s -v: %w", tshark, err)
	}
	m := regexp.MustCompile(`TShark \(Wireshark\) (\d+\.\d+\.\d+)`).FindSubmatch(out)
	if m == nil {
		return "", fmt.Errorf("%s -v: no version in %q", tshark, firstLine(out))
	}
	return string(m[1]), nil
}

func firstLine(b []byte) string {
	if i := bytes.IndexByte(b, '\n'); i >= 0 {
		return string(b[:i])
	}
	return string(b)
}

// RunTshark decodes the capture at path: one run with -T fields for the
// values of TsharkFields (tab-separated, header line, all occurrences) and
// one verbose run (-V -O iwarp_mpa) for the CRC verdicts.
func RunTshark(ctx context.Context, tshark, path string) (*Decode, error) {
	v, err := TsharkVersion(ctx, tshark)
	if err != nil {
		return nil, err
	}
	d := &Decode{Version: v, Frames: map[int]map[string]string{}, CRC: map[int]CRCVerdict{}}
	args := []string{"-r", path, "-T", "fields", "-E", "header=y", "-E", "separator=/t",
		"-E", "occurrence=a", "-E", "aggregator=,", "-E", "quote=n"}
	for _, f := range TsharkFields {
		args = append(args, "-e", f)
	}
	out, err := tsharkCmd(ctx, tshark, args...)
	if err != nil {
		return nil, err
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	var header []string
	for sc.Scan() {
		cols := strings.Split(sc.Text(), "\t")
		if header == nil {
			header = cols
			continue
		}
		if len(cols) != len(header) {
			return nil, fmt.Errorf("tshark: %d columns, header has %d: %q", len(cols), len(header), sc.Text())
		}
		m := make(map[string]string, len(cols))
		for i, c := range cols {
			m[header[i]] = c
		}
		n, err := strconv.Atoi(m["frame.number"])
		if err != nil {
			return nil, fmt.Errorf("tshark: frame number %q", m["frame.number"])
		}
		d.Frames[n] = m
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}

	out, err = tsharkCmd(ctx, tshark, "-r", path, "-V", "-O", "iwarp_mpa")
	if err != nil {
		return nil, err
	}
	frameRE := regexp.MustCompile(`^Frame (\d+):`)
	crcRE := regexp.MustCompile(`CRC check: 0x([0-9a-f]{8}) \((Good CRC32|Bad CRC32, should be 0x([0-9a-f]{8}))\)`)
	frame := 0
	sc = bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if m := frameRE.FindStringSubmatch(line); m != nil {
			frame, _ = strconv.Atoi(m[1])
			continue
		}
		if m := crcRE.FindStringSubmatch(line); m != nil {
			field, _ := strconv.ParseUint(m[1], 16, 32)
			v := CRCVerdict{Good: m[2] == "Good CRC32", Field: uint32(field)}
			if !v.Good {
				sb, _ := strconv.ParseUint(m[3], 16, 32)
				v.ShouldBe = uint32(sb)
			}
			d.CRC[frame] = v
		}
	}
	return d, sc.Err()
}

// ExpertInfo returns the summaries of the expert infos of at least the given
// severity ("warn", "error", "note", "chat") that tshark raises for the
// frames matching filter (a display filter, e.g. "frame.number==4"; "" for
// all frames), from `-q -z expert,SEVERITY,FILTER`. The MPA dissector of
// tshark 4.0 attaches its warnings to no tree item, so they are not
// reachable as fields.
func ExpertInfo(ctx context.Context, tshark, path, severity, filter string) ([]string, error) {
	z := "expert," + severity
	if filter != "" {
		z += "," + filter
	}
	out, err := tsharkCmd(ctx, tshark, "-r", path, "-q", "-z", z)
	if err != nil {
		return nil, err
	}
	// Lines: "  <freq>  <group>  <protocol>  <summary>" under a
	// "Frequency Group Protocol Summary" header.
	lineRE := regexp.MustCompile(`^\s+(\d+)\s+(\S+)\s+(\S+)\s+(.+?)\s*$`)
	var res []string
	for _, line := range strings.Split(string(out), "\n") {
		if m := lineRE.FindStringSubmatch(line); m != nil {
			res = append(res, m[3]+": "+m[4])
		}
	}
	return res, nil
}

// hexBytes renders b as tshark prints FT_BYTES fields.
func hexBytes(b []byte) string { return hex.EncodeToString(b) }

// WriteTemp writes the session's capture to a new file in dir and returns
// its path.
func (s *Session) WriteTemp(dir, pattern string) (string, error) {
	f, err := os.CreateTemp(dir, pattern)
	if err != nil {
		return "", err
	}
	path := f.Name()
	err = s.Conv.WritePcap(f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return path, err
}
