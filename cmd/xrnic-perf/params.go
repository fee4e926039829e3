package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"time"
)

type verb uint8

const (
	verbSend verb = iota
	verbWrite
	verbRead
	verbAtomic
	verbImm
)

// testKind is one of the perftest-style tests.
type testKind struct {
	name string
	verb verb
	bw   bool
}

var tests = []testKind{
	{"write_bw", verbWrite, true}, {"write_lat", verbWrite, false},
	{"read_bw", verbRead, true}, {"read_lat", verbRead, false},
	{"send_bw", verbSend, true}, {"send_lat", verbSend, false},
	{"atomic_bw", verbAtomic, true}, {"atomic_lat", verbAtomic, false},
	{"imm_lat", verbImm, false},
}

func lookupTest(name string) (testKind, bool) {
	for _, t := range tests {
		if t.name == name {
			return t, true
		}
	}
	return testKind{}, false
}

func (t testKind) id() uint8 {
	for i, x := range tests {
		if x.name == t.name {
			return uint8(i)
		}
	}
	return 0xff
}

// verbName is perftest's testsStr.
func (t testKind) verbName() string {
	switch t.verb {
	case verbSend:
		return "Send"
	case verbWrite:
		return "RDMA_Write"
	case verbRead:
		return "RDMA_Read"
	case verbAtomic:
		return "Atomic"
	}
	return "Immediate_Data"
}

// rttFactor: half the round trip for ping-pong tests (Send, Write,
// Immediate Data), the full round trip for Read and atomics.
func (t testKind) rttFactor() int {
	if t.verb == verbRead || t.verb == verbAtomic {
		return 1
	}
	return 2
}

// params are the options of one run; client and server take the same.
type params struct {
	test       testKind
	server     string // "" on the server
	port       int
	bind       string
	size       int
	all        bool
	iters      int
	duration   time.Duration
	margin     time.Duration
	txDepth    int
	rxDepth    int
	outs       int
	qps        int
	cqMod      int
	bidir      bool
	atomicType string // FETCH_AND_ADD or CMP_AND_SWAP
	masked     bool
	gbits      bool
	outJSON    bool
	jsonFile   string
	validate   bool
	writeImm   bool
	events     bool
	transport  string
	iface      string
	timeout    time.Duration
	maxSize    int // with -a: the largest size (default 1 MiB)
	quiet      bool
	spin       time.Duration

	set   map[string]bool // flags given explicitly
	notes []string        // perftest flags that do not apply, one note each
}

const usageText = `usage:
  xrnic-perf TEST [options]            server: waits for a client
  xrnic-perf TEST [options] SERVER     client: connects to SERVER (host or host:port)
TEST is one of write_bw write_lat read_bw read_lat send_bw send_lat atomic_bw atomic_lat imm_lat.
Both sides take the same options (as in perftest). Other commands:
  xrnic-perf tcp_bw|tcp_lat [options] [SERVER]   kernel TCP baseline (a stream / a ping-pong)
  xrnic-perf demo [--quick]                      the guided tour (make demo)
  xrnic-perf bench [--out DIR] [--quick]         the full sweep (make bench)
Options:
`

// option is one line of the help: a short and a long name of the same
// flag (either may be empty) and the placeholder of its value ("" for a
// switch), printed as perftest's usage() does: "  -s, --size=<size>  ...".
type option struct {
	short, long, arg string
}

func (o option) names() []string {
	var n []string
	for _, s := range []string{o.short, o.long} {
		if s != "" {
			n = append(n, s)
		}
	}
	return n
}

// helpLine is the head of the option's help line.
func (o option) helpLine() string {
	var b strings.Builder
	if o.short != "" {
		b.WriteString("  -" + o.short)
		if o.long != "" {
			b.WriteString(", ")
		}
	} else {
		b.WriteString("      ")
	}
	if o.long != "" {
		b.WriteString("--" + o.long)
	}
	if o.arg != "" {
		if o.long != "" {
			b.WriteString("=")
		} else {
			b.WriteString(" ")
		}
		b.WriteString(o.arg)
	}
	return b.String()
}

// ignoredFlags are perftest's common options that do not apply to xrnic
// (linux-rdma/perftest, src/perftest_parameters.c, long_options and
// usage()). xrnic-perf accepts them with the value form perftest parses,
// prints a note on stderr and runs as without them. why is the note's
// reason; check validates the value as perftest does (nil: any string,
// no value for a switch).
var ignoredFlags = []struct {
	option
	why   string
	check func(string) error
}{
	{option{"d", "ib-dev", "<dev>"}, "xrnic has one device", nil},
	{option{"i", "ib-port", "<port>"}, "xrnic has one port", intIn("IB Port", 1, 255)},
	{option{"x", "gid-index", "<index>"}, "iWARP addresses peers by IP, there is no GID", intIn("Gid index", 0, 64)},
	{option{"m", "mtu", "<mtu>"}, "the MTU is the interface's (MPA FPDUs ride in TCP segments)", intIn("MTU", math.MinInt32, math.MaxInt32)},
	{option{"F", "CPU-freq", ""}, "xrnic-perf times with the monotonic clock and never checks cpufreq", nil},
	{option{"R", "rdma_cm", ""}, "rdma_cm is always on (xrnic connects QPs with MPA, RFC 6581)", nil},
}

// intIn is perftest's CHECK_VALUE_IN_RANGE: an integer in C's strtol
// base-0 syntax (decimal, 0x hex, 0 octal) within [lo, hi].
func intIn(name string, lo, hi int64) func(string) error {
	return func(s string) error {
		v, err := strconv.ParseInt(s, 0, 64)
		if err != nil || strings.Contains(s, "_") {
			return fmt.Errorf("%s argument %s should be an integer", name, s)
		}
		if v < lo || v > hi {
			return fmt.Errorf("%s should be between %d and %d", name, lo, hi)
		}
		return nil
	}
}

// boolFunc is a switch that calls f when given.
type boolFunc func()

func (f boolFunc) String() string { return "" }
func (f boolFunc) Set(s string) error {
	if v, err := strconv.ParseBool(s); err != nil || !v {
		return errors.New("a switch: give it or leave it out")
	}
	f()
	return nil
}
func (f boolFunc) IsBoolFlag() bool { return true }

func newFlagSet(p *params, out io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("xrnic-perf", flag.ContinueOnError)
	fs.SetOutput(out)
	var opts []option
	// both registers an option under its short and long names.
	both := func(short, long, arg string, f func(name string)) {
		o := option{short, long, arg}
		opts = append(opts, o)
		for _, n := range o.names() {
			f(n)
		}
	}
	long := func(name, arg string, f func(name string)) { both("", name, arg, f) }
	fs.Usage = func() {
		fmt.Fprint(out, usageText)
		for _, o := range opts {
			fmt.Fprintf(out, "%s  %s\n", o.helpLine(), optionUsage(fs.Lookup(o.names()[0])))
		}
		fmt.Fprintf(out, "%s  %s\n", option{"h", "help", ""}.helpLine(), "show this help")
	}
	both("s", "size", "<size>", func(n string) {
		fs.IntVar(&p.size, n, 0, "message size in bytes (default 65536 for bw, 2 for lat, 8 for atomics)")
	})
	both("a", "all", "", func(n string) { fs.BoolVar(&p.all, n, false, "run sizes 2 .. --max_size (powers of two)") })
	both("n", "iters", "<iters>", func(n string) {
		fs.IntVar(&p.iters, n, 0, "iterations (default 5000 for write_bw, 1000 otherwise)")
	})
	both("D", "duration", "<seconds>", func(n string) {
		fs.Func(n, "run for this many seconds instead of -n", func(s string) error {
			d, err := parseSeconds(s)
			p.duration = d
			return err
		})
	})
	both("f", "margin", "<seconds>", func(n string) {
		fs.Func(n, "with -D: seconds excluded at the start and the end (default 2, less for short runs)", func(s string) error {
			d, err := parseSeconds(s)
			p.margin = d
			return err
		})
	})
	both("t", "tx-depth", "<dep>", func(n string) {
		fs.IntVar(&p.txDepth, n, 0, "outstanding work requests per QP (default 128 for bw, 1 for lat)")
	})
	both("r", "rx-depth", "<dep>", func(n string) {
		fs.IntVar(&p.rxDepth, n, 512, "send_bw: receive buffers per QP (capped at 32 MiB of buffers)")
	})
	both("o", "outs", "<num>", func(n string) { fs.IntVar(&p.outs, n, 128, "outstanding Reads/atomics (ORD/IRD)") })
	both("q", "qp", "<num of qp's>", func(n string) { fs.IntVar(&p.qps, n, 1, "number of QPs") })
	both("Q", "cq-mod", "<num>", func(n string) {
		fs.IntVar(&p.cqMod, n, 100, "bw tests: one completion every N work requests")
	})
	both("p", "port", "<port>", func(n string) { fs.IntVar(&p.port, n, 18515, "TCP port") })
	both("b", "bidirectional", "", func(n string) {
		fs.BoolVar(&p.bidir, n, false, "write_bw/read_bw: traffic in both directions, reported summed")
	})
	both("A", "atomic_type", "<type>", func(n string) {
		fs.StringVar(&p.atomicType, n, "FETCH_AND_ADD", "FETCH_AND_ADD or CMP_AND_SWAP")
	})
	both("e", "events", "", func(n string) { fs.BoolVar(&p.events, n, false, "sleep on CQ events instead of polling first") })
	for _, ig := range ignoredFlags {
		both(ig.short, ig.long, ig.arg, func(n string) {
			given := "--" + n
			if len(n) == 1 {
				given = "-" + n
			}
			usage := "ignored: " + ig.why
			if ig.arg == "" {
				fs.Var(boolFunc(func() {
					p.notes = append(p.notes, fmt.Sprintf("%s ignored: %s", given, ig.why))
				}), n, usage)
				return
			}
			fs.Func(n, usage, func(s string) error {
				if ig.check != nil {
					if err := ig.check(s); err != nil {
						return err
					}
				}
				p.notes = append(p.notes, fmt.Sprintf("%s %s ignored: %s", given, s, ig.why))
				return nil
			})
		})
	}
	long("masked_atomics", "", func(n string) {
		fs.BoolVar(&p.masked, n, false, "use RFC 7306 masked atomics (Add Mask with carry boundaries; Compare/Swap masks)")
	})
	long("report_gbits", "", func(n string) {
		fs.BoolVar(&p.gbits, n, false, "report bandwidth in Gb/sec (1 Gb/s = 1.25e8 bytes per second) instead of MiB/sec")
	})
	long("out_json", "", func(n string) {
		fs.BoolVar(&p.outJSON, n, false, "write the results as JSON (to --out_json_file, default perftest_out.json)")
	})
	long("out_json_file", "<file>", func(n string) { fs.StringVar(&p.jsonFile, n, "", "JSON output file (implies --out_json)") })
	long("data_validation", "", func(n string) {
		fs.BoolVar(&p.validate, n, false, "check Write/Read/Send payloads and the final atomic value")
	})
	long("write_with_imm", "", func(n string) {
		fs.BoolVar(&p.writeImm, n, false, "write_bw/write_lat: RDMA Write with Immediate Data (completes a receive at the target)")
	})
	long("transport", "<kernel|afxdp>", func(n string) { fs.StringVar(&p.transport, n, "kernel", "the transport") })
	long("iface", "<name>", func(n string) { fs.StringVar(&p.iface, n, "", "network interface of the afxdp transport") })
	long("bind", "<addr>", func(n string) { fs.StringVar(&p.bind, n, "", "server: listen address (default all)") })
	long("timeout", "<duration>", func(n string) {
		fs.DurationVar(&p.timeout, n, 60*time.Second, "bound of connection setup and of each size's run")
	})
	long("max_size", "<size>", func(n string) { fs.IntVar(&p.maxSize, n, 1<<20, "with -a: the largest message size") })
	long("quiet", "", func(n string) { fs.BoolVar(&p.quiet, n, false, "print only the result lines") })
	long("spin", "<duration>", func(n string) {
		fs.DurationVar(&p.spin, n, 0, "busy-poll a CQ this long before sleeping on it (default 0: on small hosts the engine's own poll loop needs the CPU; -e forces 0)")
	})
	return fs
}

// optionUsage is the flag's usage text with its default, as
// flag.PrintDefaults would add it.
func optionUsage(f *flag.Flag) string {
	u := f.Usage
	switch f.DefValue {
	case "", "0", "false", "0s":
	default:
		if !strings.Contains(u, "(default") {
			u += fmt.Sprintf(" (default %s)", f.DefValue)
		}
	}
	return u
}

func parseSeconds(s string) (time.Duration, error) {
	if d, err := time.ParseDuration(s); err == nil {
		return d, nil
	}
	var f float64
	if _, err := fmt.Sscan(s, &f); err != nil || f < 0 {
		return 0, fmt.Errorf("want seconds, got %q", s)
	}
	return time.Duration(f * float64(time.Second)), nil
}

var errUsage = errors.New("usage")

// parseParams parses "TEST [options] [SERVER]" with options and the
// server address in any order, as perftest does.
func parseParams(args []string, out io.Writer) (*params, error) {
	p := &params{}
	fs := newFlagSet(p, out)
	if len(args) == 0 {
		fs.Usage()
		return nil, errUsage
	}
	var pos []string
	rest := args
	for {
		if err := fs.Parse(rest); err != nil {
			return nil, err
		}
		rest = fs.Args()
		if len(rest) == 0 {
			break
		}
		pos = append(pos, rest[0])
		rest = rest[1:]
	}
	p.set = map[string]bool{}
	fs.Visit(func(f *flag.Flag) {
		if !isIgnored(f.Name) {
			p.set[f.Name] = true
		}
	})
	if len(pos) == 0 || len(pos) > 2 {
		fs.Usage()
		return nil, errUsage
	}
	t, ok := lookupTest(pos[0])
	if !ok && pos[0] != "tcp_bw" && pos[0] != "tcp_lat" {
		return nil, fmt.Errorf("unknown test %q (want one of %s, tcp_bw, tcp_lat)", pos[0], testNames())
	}
	if !ok {
		t = testKind{name: pos[0], verb: verbSend, bw: pos[0] == "tcp_bw"}
	}
	p.test = t
	if len(pos) == 2 {
		p.server = pos[1]
	}
	if err := p.defaults(); err != nil {
		return p, err
	}
	for _, n := range p.notes {
		fmt.Fprintln(out, "xrnic-perf:", n)
	}
	return p, nil
}

func isIgnored(name string) bool {
	for _, ig := range ignoredFlags {
		if name == ig.short || name == ig.long {
			return true
		}
	}
	return false
}

func testNames() string {
	var s []string
	for _, t := range tests {
		s = append(s, t.name)
	}
	return strings.Join(s, " ")
}

func (p *params) defaults() error {
	t := p.test
	if p.size == 0 {
		switch {
		case t.verb == verbAtomic:
			p.size = 8
		case t.verb == verbImm:
			p.size = 8
		case t.bw:
			p.size = 65536
		default:
			p.size = 2
		}
	}
	if p.iters == 0 {
		p.iters = 1000
		if t.bw && t.verb == verbWrite {
			p.iters = 5000
		}
	}
	if p.txDepth == 0 {
		p.txDepth = 1
		if t.bw {
			p.txDepth = 128
		}
	}
	if p.jsonFile != "" {
		p.outJSON = true
	}
	if p.outJSON && p.jsonFile == "" {
		p.jsonFile = "perftest_out.json"
	}
	switch {
	case p.iters < 5 && p.duration == 0:
		return errors.New("-n: at least 5 iterations")
	case p.size < 1:
		return errors.New("-s: at least 1 byte")
	case p.qps < 1 || p.qps > 256:
		return errors.New("-q: 1 to 256 QPs")
	case p.txDepth < 1 || p.txDepth > 4096:
		return errors.New("-t: 1 to 4096")
	case p.outs < 1 || p.outs > 128:
		return errors.New("-o: 1 to 128")
	case p.cqMod < 1 || p.cqMod > 1024:
		return errors.New("-Q: 1 to 1024")
	case p.rxDepth < 2:
		return errors.New("-r: at least 2")
	case p.transport != "kernel" && p.transport != "afxdp":
		return fmt.Errorf("--transport %q: want kernel or afxdp", p.transport)
	case p.transport == "afxdp" && p.iface == "":
		return errors.New("--transport afxdp needs --iface")
	case p.atomicType != "FETCH_AND_ADD" && p.atomicType != "CMP_AND_SWAP":
		return fmt.Errorf("-A %q: want FETCH_AND_ADD or CMP_AND_SWAP", p.atomicType)
	case p.bidir && !(t.bw && (t.verb == verbWrite || t.verb == verbRead)):
		return errors.New("-b: only write_bw and read_bw (send_bw's credits are one-way)")
	case p.writeImm && t.verb != verbWrite:
		return errors.New("--write_with_imm: only write_bw and write_lat")
	case p.all && (t.verb == verbAtomic || t.verb == verbImm):
		return errors.New("-a: not for atomics or Immediate Data (their size is 8)")
	case (t.verb == verbAtomic || t.verb == verbImm) && p.size != 8:
		return errors.New("-s: atomics and Immediate Data carry 8 bytes")
	case p.maxSize < 2 || p.maxSize > 64<<20:
		return errors.New("--max_size: 2 to 64 MiB")
	case p.size > 64<<20:
		return errors.New("-s: at most 64 MiB")
	}
	if t.verb == verbRead || t.verb == verbAtomic {
		// ORD bounds what may be outstanding.
		p.txDepth = min(p.txDepth, p.outs)
	}
	if t.bw {
		p.cqMod = min(p.cqMod, p.txDepth)
	} else {
		p.cqMod = 1
	}
	if p.duration > 0 && !p.set["f"] && !p.set["margin"] {
		p.margin = min(2*time.Second, p.duration/4)
	}
	return nil
}

// sizes returns the message sizes of the run.
func (p *params) sizes() []int {
	if !p.all {
		return []int{p.size}
	}
	var s []int
	for n := 2; n <= p.maxSize; n *= 2 {
		s = append(s, n)
	}
	return s
}

func (p *params) unit() float64 {
	if p.gbits {
		return gbit
	}
	return mib
}

// consumesRecv: the test's messages consume posted receives at the target
// (Send, Immediate Data, Write with Immediate), so bandwidth runs are
// paced by credits.
func (p *params) consumesRecv() bool {
	return p.test.verb == verbSend || p.test.verb == verbImm || p.writeImm
}
