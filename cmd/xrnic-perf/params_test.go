package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"xrnic/internal/perfsuite"
	"xrnic/internal/perfsuite/perfjson"
)

// Each of perftest's flags that do not apply is accepted with its value
// form, prints one note, and leaves the run's parameters as without it.
func TestIgnoredFlags(t *testing.T) {
	cases := []struct {
		args []string
		note string
	}{
		{[]string{"-d", "mlx5_0"}, "xrnic-perf: -d mlx5_0 ignored: xrnic has one device"},
		{[]string{"--ib-dev", "rxe0"}, "xrnic-perf: --ib-dev rxe0 ignored: xrnic has one device"},
		{[]string{"--ib-dev=siw0"}, "xrnic-perf: --ib-dev siw0 ignored: xrnic has one device"},
		{[]string{"-i", "2"}, "xrnic-perf: -i 2 ignored: xrnic has one port"},
		{[]string{"--ib-port=1"}, "xrnic-perf: --ib-port 1 ignored: xrnic has one port"},
		{[]string{"-x", "3"}, "xrnic-perf: -x 3 ignored: iWARP addresses peers by IP, there is no GID"},
		{[]string{"--gid-index", "0"}, "xrnic-perf: --gid-index 0 ignored: iWARP addresses peers by IP, there is no GID"},
		{[]string{"-x", "0x10"}, "xrnic-perf: -x 0x10 ignored: iWARP addresses peers by IP, there is no GID"},
		{[]string{"-m", "1024"}, "xrnic-perf: -m 1024 ignored: the MTU is the interface's (MPA FPDUs ride in TCP segments)"},
		{[]string{"--mtu=4096"}, "xrnic-perf: --mtu 4096 ignored: the MTU is the interface's (MPA FPDUs ride in TCP segments)"},
		{[]string{"-F"}, "xrnic-perf: -F ignored: xrnic-perf times with the monotonic clock and never checks cpufreq"},
		{[]string{"--CPU-freq"}, "xrnic-perf: --CPU-freq ignored: xrnic-perf times with the monotonic clock and never checks cpufreq"},
		{[]string{"-R"}, "xrnic-perf: -R ignored: rdma_cm is always on (xrnic connects QPs with MPA, RFC 6581)"},
		{[]string{"--rdma_cm"}, "xrnic-perf: --rdma_cm ignored: rdma_cm is always on (xrnic connects QPs with MPA, RFC 6581)"},
	}
	bases := [][]string{
		{"write_bw", "-s", "4096", "-q", "2"},
		{"atomic_lat", "-A", "CMP_AND_SWAP"},
		{"read_bw", "-a", "-t", "32", "10.0.0.1"},
	}
	for _, base := range bases {
		var quiet bytes.Buffer
		want, err := parseParams(base, &quiet)
		if err != nil || quiet.Len() != 0 {
			t.Fatalf("%v: %v %q", base, err, quiet.String())
		}
		for _, c := range cases {
			// The flag before the test name, after it, and after the server.
			for _, at := range []int{0, 1, len(base)} {
				args := append(append(append([]string{}, base[:at]...), c.args...), base[at:]...)
				var out bytes.Buffer
				got, err := parseParams(args, &out)
				if err != nil {
					t.Errorf("%v: %v", args, err)
					continue
				}
				if out.String() != c.note+"\n" {
					t.Errorf("%v: stderr %q, want %q", args, out.String(), c.note+"\n")
				}
				if len(got.notes) != 1 {
					t.Errorf("%v: notes %q", args, got.notes)
				}
				got.notes = nil
				if !reflect.DeepEqual(got, want) {
					t.Errorf("%v: parameters changed\n got %+v\nwant %+v", args, got, want)
				}
			}
		}
	}
	// All of them at once: one note each, in order.
	var out bytes.Buffer
	if _, err := parseParams([]string{"send_lat", "-R", "-d", "mlx5_0", "-i", "1", "-x", "3", "-F", "-m", "1024", "10.0.0.1"}, &out); err != nil {
		t.Fatal(err)
	}
	if lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n"); len(lines) != 6 ||
		!strings.HasPrefix(lines[0], "xrnic-perf: -R ignored") || !strings.HasPrefix(lines[5], "xrnic-perf: -m 1024 ignored") {
		t.Errorf("notes:\n%s", out.String())
	}
}

// Values perftest refuses are refused (perftest's CHECK_VALUE: an integer;
// -i at least 1, -x 0 to 64), and the switches take no value; a refused
// flag prints no note.
func TestIgnoredFlagsBadValues(t *testing.T) {
	for _, bad := range [][]string{
		{"-i", "0"}, {"-i", "one"}, {"--ib-port=256"},
		{"-x", "65"}, {"-x", "-1"}, {"--gid-index", "3a"},
		{"-m", "big"}, {"-m", ""}, {"--mtu=1_024"},
		{"-F=false"}, {"--rdma_cm=no"},
		{"-d"},
	} {
		var out bytes.Buffer
		args := append([]string{"write_lat"}, bad...)
		if _, err := parseParams(args, &out); err == nil {
			t.Errorf("%v: no error", args)
		}
		if strings.Contains(out.String(), "xrnic-perf: -") {
			t.Errorf("%v: a note for a refused flag", args)
		}
	}
	// Without a value a switch does not swallow the server address.
	p, err := parseParams([]string{"write_lat", "-F", "10.0.0.1", "-R"}, &bytes.Buffer{})
	if err != nil || p.server != "10.0.0.1" {
		t.Fatalf("%+v %v", p, err)
	}
}

// The help has one line per option, short and long form together, as in
// perftest's usage(): "  -s, --size=<size>  ...", "  -a, --all  ...",
// "      --out_json  ..." for long-only options.
func TestHelpLines(t *testing.T) {
	var out bytes.Buffer
	if _, err := parseParams([]string{"write_bw", "-h"}, &out); !errors.Is(err, pflag.ErrHelp) {
		t.Fatalf("-h: %v", err)
	}
	help := out.String()
	for _, want := range []string{
		"\n  -s, --size=<size>  message size in bytes",
		"\n  -a, --all  run sizes",
		"\n  -n, --iters=<iters>  ",
		"\n  -t, --tx-depth=<dep>  ",
		"\n  -q, --qp=<num of qp's>  ",
		"\n  -p, --port=<port>  TCP port (default 18515)\n",
		"\n  -A, --atomic_type=<type>  FETCH_AND_ADD or CMP_AND_SWAP (default FETCH_AND_ADD)\n",
		"\n  -d, --ib-dev=<dev>  ignored: xrnic has one device\n",
		"\n  -i, --ib-port=<port>  ignored: ",
		"\n  -x, --gid-index=<index>  ignored: ",
		"\n  -m, --mtu=<mtu>  ignored: ",
		"\n  -F, --CPU-freq  ignored: ",
		"\n  -R, --rdma_cm  ignored: ",
		"\n      --out_json  write the results as JSON",
		"\n      --out_json_file=<file>  ",
		"\n  -h, --help  ",
	} {
		if !strings.Contains(help, want) {
			t.Errorf("help lacks %q:\n%s", want, help)
		}
	}
	// Every flag is on exactly one line, and every option line has the
	// perftest shape.
	line := regexp.MustCompile(`^(  -[a-zA-Z], --[a-zA-Z][-_a-zA-Z]*|      --[a-zA-Z][-_a-zA-Z]*)(=<[^>]+>)?  \S`)
	opts := strings.SplitN(help, "Options:\n", 2)
	if len(opts) != 2 {
		t.Fatalf("no Options: in\n%s", help)
	}
	seen := map[string]int{}
	for _, l := range strings.Split(strings.TrimSuffix(opts[1], "\n"), "\n") {
		if !line.MatchString(l) {
			t.Errorf("help line %q is not perftest-style", l)
			continue
		}
		for _, n := range regexp.MustCompile(`-{1,2}([a-zA-Z][-_a-zA-Z]*)`).FindAllStringSubmatch(strings.SplitN(strings.TrimSpace(l), "  ", 2)[0], -1) {
			seen[n[1]]++
		}
	}
	newFlagSet(&params{}, &bytes.Buffer{}, nil).VisitAll(func(f *pflag.Flag) {
		if seen[f.Name] != 1 {
			t.Errorf("flag %q on %d help lines", f.Name, seen[f.Name])
		}
		if f.Shorthand != "" && seen[f.Shorthand] != 1 {
			t.Errorf("shorthand -%s of --%s on %d help lines", f.Shorthand, f.Name, seen[f.Shorthand])
		}
	})
}

// --version stops the parse wherever it stands, with or without a test,
// and prints "xrnic-perf version <v>".
func TestVersion(t *testing.T) {
	for _, args := range [][]string{{"--version"}, {"write_bw", "--version"}, {"-s", "8", "--version", "send_lat", "10.0.0.1"}} {
		var out bytes.Buffer
		if _, err := parseParams(args, &out); !errors.Is(err, errVersion) {
			t.Errorf("%v: %v", args, err)
		}
		if out.Len() != 0 {
			t.Errorf("%v: output %q", args, out.String())
		}
	}
	var out bytes.Buffer
	printVersion(&out)
	if !regexp.MustCompile(`^xrnic-perf version \S+\n$`).MatchString(out.String()) {
		t.Errorf("printVersion: %q", out.String())
	}
	var help bytes.Buffer
	if _, err := parseParams([]string{"--help"}, &help); !errors.Is(err, pflag.ErrHelp) {
		t.Fatalf("--help: %v", err)
	}
	if !strings.Contains(help.String(), "\n      --version  print the version and exit\n") {
		t.Errorf("help lacks --version:\n%s", help.String())
	}
}

// The notes name an ignored flag as it was spelled, also where it shares
// a group of shorthands, follows a flag's value that looks like a flag,
// or comes after "--".
func TestTypedForms(t *testing.T) {
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"write_bw", "-RFd", "mlx5_0"}, []string{"-R", "-F", "-d"}},
		{[]string{"write_bw", "-Ri1", "--ib-dev", "-d"}, []string{"-R", "-i", "--ib-dev"}},
		{[]string{"write_bw", "--atomic_type", "-R", "-x=3", "--mtu=1024"}, []string{"-x", "--mtu"}},
		{[]string{"write_bw", "-s4096", "--CPU-freq", "--", "-R"}, []string{"--CPU-freq"}},
	} {
		fs := newFlagSet(&params{}, &bytes.Buffer{}, nil)
		if got := typedForms(fs, c.args); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%v: %q, want %q", c.args, got, c.want)
		}
	}
	var out bytes.Buffer
	if _, err := parseParams([]string{"send_lat", "-RFd", "mlx5_0", "--ib-port=1"}, &out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"xrnic-perf: -R ignored", "xrnic-perf: -F ignored", "xrnic-perf: -d mlx5_0 ignored", "xrnic-perf: --ib-port 1 ignored"} {
		if !strings.Contains(out.String(), want+":") {
			t.Errorf("notes lack %q:\n%s", want, out.String())
		}
	}
}

// The "test" of test_info is perftest's name of the same test
// (write_test_info_to_file); xrnic_test keeps xrnic-perf's own.
func TestJSONTestNames(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"write_bw"}, "RDMA_Write_BW_Test"},
		{[]string{"write_bw", "-b"}, "RDMA_Write_Bidirectional_BW_Test"},
		{[]string{"write_bw", "--write_with_imm"}, "RDMA_Write_imm_BW_Test"},
		{[]string{"write_lat"}, "RDMA_Write_Latency_Test"},
		{[]string{"write_lat", "--write_with_imm"}, "RDMA_Write_imm_Latency_Test"},
		{[]string{"read_bw"}, "RDMA_Read_BW_Test"},
		{[]string{"read_bw", "--bidirectional"}, "RDMA_Read_Bidirectional_BW_Test"},
		{[]string{"read_lat"}, "RDMA_Read_Latency_Test"},
		{[]string{"send_bw"}, "Send_BW_Test"},
		{[]string{"send_lat"}, "Send_Latency_Test"},
		{[]string{"atomic_bw"}, "Atomic_FETCH_AND_ADD_BW_Test"},
		{[]string{"atomic_bw", "-A", "CMP_AND_SWAP"}, "Atomic_CMP_AND_SWAP_BW_Test"},
		{[]string{"atomic_lat"}, "Atomic_FETCH_AND_ADD_Latency_Test"},
		{[]string{"atomic_lat", "--atomic_type=CMP_AND_SWAP", "--masked_atomics"}, "Atomic_CMP_AND_SWAP_Latency_Test"},
		{[]string{"imm_lat"}, "Immediate_Data_Latency_Test"},
		{[]string{"tcp_bw"}, "TCP_BW_Test"},
		{[]string{"tcp_lat"}, "TCP_Latency_Test"},
	} {
		p, err := parseParams(c.args, &bytes.Buffer{})
		if err != nil {
			t.Fatalf("%v: %v", c.args, err)
		}
		if got := p.jsonTestName(); got != c.want {
			t.Errorf("%v: %q, want %q", c.args, got, c.want)
		}
	}
	// The file carries both names under test_info.
	p, err := parseParams([]string{"atomic_bw", "--out_json_file", filepath.Join(t.TempDir(), "out.json")}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if err := writeResults(p, []any{BWResult{Size: 8, Iters: 5}}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(p.jsonFile)
	if err != nil {
		t.Fatal(err)
	}
	var doc perfjson.Document
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	if doc.TestInfo[perfjson.KeyTest] != "Atomic_FETCH_AND_ADD_BW_Test" || doc.TestInfo[perfjson.KeyXrnicTest] != "atomic_bw" {
		t.Fatalf("test_info: %s", b)
	}
	if rows, err := perfjson.Rows(b); err != nil || len(rows) != 1 || rows[0][perfjson.KeySize] != 8.0 {
		t.Fatalf("rows %v %v", rows, err)
	}
}

// TestUsageNamesRealOptions: every --option the usage text gives for demo
// exists (it once advertised a --keep-going the demo did not have).
func TestUsageNamesRealOptions(t *testing.T) {
	for _, line := range strings.Split(usageText, "\n") {
		f := strings.Fields(line)
		if len(f) < 2 || f[0] != "xrnic-perf" || f[1] != "demo" {
			continue
		}
		fs := perfsuite.DemoFlags()
		for _, w := range f[2:] {
			w = strings.Trim(w, "[]")
			if name, ok := strings.CutPrefix(w, "--"); ok && fs.Lookup(name) == nil {
				t.Errorf("usage names demo --%s, which the demo does not accept", name)
			}
		}
		return
	}
	t.Fatal("the usage text has no demo line")
}

// As perftest (its MSG_SIZE_CQ_MOD_LIMIT), a bandwidth test above 8 KiB
// signals every work request unless -Q, -a or -e says otherwise.
func TestCQModLargeMessages(t *testing.T) {
	for _, c := range []struct {
		args []string
		want int
	}{
		{[]string{"write_bw"}, 1},
		{[]string{"read_bw", "-s", "8192"}, 100},
		{[]string{"read_bw", "-s", "8193"}, 1},
		{[]string{"send_bw", "-Q", "64"}, 64},
		{[]string{"write_bw", "-a"}, 100},
		{[]string{"write_bw", "-e"}, 100},
		{[]string{"write_bw", "-s", "4096", "-t", "16"}, 16},
		{[]string{"write_lat", "-s", "65536"}, 1},
	} {
		p, err := parseParams(c.args, &bytes.Buffer{})
		if err != nil {
			t.Fatalf("%v: %v", c.args, err)
		}
		if p.cqMod != c.want {
			t.Errorf("%v: CQ moderation %d, want %d", c.args, p.cqMod, c.want)
		}
	}
}
