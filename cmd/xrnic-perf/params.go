package main

import (
	"errors"
	"fmt"
	"io"
	"math"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"
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
	drive      bool
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
	rxSpin     time.Duration
	noCRC      bool
	version    bool // --version

	set   map[string]bool // flags given explicitly, by their long names
	notes []string        // perftest flags that do not apply, one note each
}

const usageText = `usage:
  xrnic-perf TEST [options]            server: waits for a client
  xrnic-perf TEST [options] SERVER     client: connects to SERVER (host or host:port)
TEST is one of write_bw write_lat read_bw read_lat send_bw send_lat atomic_bw atomic_lat imm_lat.
Both sides take the same options (as in perftest). Other commands:
  xrnic-perf tcp_bw|tcp_lat [options] [SERVER]   kernel TCP baseline (a stream / a ping-pong; tcp_lat -o N: N requests in flight)
  xrnic-perf xdp_lat --iface IF [options] [SERVER] raw AF_XDP frame ping-pong, no TCP or iWARP (root; -o N: N frames in flight)
  xrnic-perf xdp_bw --iface IF [-s SIZE] [-n N] [-D SECS] [SERVER]
                                                 raw AF_XDP stream of full-size frames (root; -s defaults to the MTU's
                                                 payload, multi-buffer above a 4 KiB chunk; -n frames, default 1000000)
  xrnic-perf demo [--quick]                      the guided tour (make demo)
  xrnic-perf bench [--out DIR] [--quick]         the full sweep and the goal table of issue 16 (make bench; --quick: a short sweep only)
  xrnic-perf bench --goals [--reps N]            only the goal table: every run it needs, N interleaved repetitions (default 3), medians
Options:
`

// option is one line of the help: the flag's shorthand (maybe none),
// its name and the placeholder of its value ("" for a switch), printed as
// perftest's usage() does: "  -s, --size=<size>  ...".
type option struct {
	short, long, arg string
}

// helpLine is the head of the option's help line.
func (o option) helpLine() string {
	var b strings.Builder
	if o.short != "" {
		b.WriteString("  -" + o.short + ", ")
	} else {
		b.WriteString("      ")
	}
	b.WriteString("--" + o.long)
	if o.arg != "" {
		b.WriteString("=" + o.arg)
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

// argAnnotation is the pflag annotation holding the placeholder of a
// flag's value in the help ("<size>"); switches have none.
const argAnnotation = "xrnic-perf/arg"

// newFlagSet declares every option of xrnic-perf on a FlagSet writing
// into p. The help (fs.Usage) lists them in this order, one line each.
// *given are the spellings of the ignored flags on the command line, in
// order, from typedForms; the notes take them in turn (by the long name
// once none is left).
func newFlagSet(p *params, out io.Writer, given *[]string) *pflag.FlagSet {
	fs := pflag.NewFlagSet("xrnic-perf", pflag.ContinueOnError)
	fs.SetOutput(out)
	fs.SortFlags = false
	// arg names the value of the flag in the help, as perftest's usage()
	// does ("--size=<size>").
	arg := func(name, placeholder string) {
		if err := fs.SetAnnotation(name, argAnnotation, []string{placeholder}); err != nil {
			panic(err)
		}
	}
	fs.Usage = func() {
		fmt.Fprint(out, usageText)
		fs.VisitAll(func(f *pflag.Flag) {
			fmt.Fprintf(out, "%s  %s\n", helpOption(f).helpLine(), optionUsage(f))
		})
		fmt.Fprintf(out, "%s  %s\n", option{"h", "help", ""}.helpLine(), "show this help")
	}
	seconds := func(d *time.Duration) func(string) error {
		return func(s string) error {
			v, err := parseSeconds(s)
			*d = v
			return err
		}
	}
	fs.IntVarP(&p.size, "size", "s", 0, "message size in bytes (default 65536 for bw, 2 for lat, 8 for atomics)")
	arg("size", "<size>")
	fs.BoolVarP(&p.all, "all", "a", false, "run sizes 2 .. --max_size (powers of two)")
	fs.IntVarP(&p.iters, "iters", "n", 0, "iterations (default 5000 for write_bw, 1000 otherwise)")
	arg("iters", "<iters>")
	fs.FuncP("duration", "D", "run for this many seconds instead of -n", seconds(&p.duration))
	arg("duration", "<seconds>")
	fs.FuncP("margin", "f", "with -D: seconds excluded at the start and the end (default 2, less for short runs)", seconds(&p.margin))
	arg("margin", "<seconds>")
	fs.IntVarP(&p.txDepth, "tx-depth", "t", 0, "outstanding work requests per QP (default 128 for bw, 1 for lat)")
	arg("tx-depth", "<dep>")
	fs.IntVarP(&p.rxDepth, "rx-depth", "r", 512, "send_bw: receive buffers per QP (capped at 32 MiB of buffers)")
	arg("rx-depth", "<dep>")
	fs.IntVarP(&p.outs, "outs", "o", 128, "outstanding Reads/atomics (ORD/IRD; default 128); tcp_lat: requests in flight on the connection, xdp_lat: frames in flight (default 1: ping-pong; 1 to 1024)")
	arg("outs", "<num>")
	fs.IntVarP(&p.qps, "qp", "q", 1, "number of QPs")
	arg("qp", "<num of qp's>")
	fs.IntVarP(&p.cqMod, "cq-mod", "Q", 100, "bw tests: one completion every N work requests (as perftest: 1 above 8 KiB unless -Q, -a or -e)")
	arg("cq-mod", "<num>")
	fs.IntVarP(&p.port, "port", "p", 18515, "TCP port")
	arg("port", "<port>")
	fs.BoolVarP(&p.bidir, "bidirectional", "b", false, "write_bw/read_bw: traffic in both directions, reported summed")
	fs.StringVarP(&p.atomicType, "atomic_type", "A", "FETCH_AND_ADD", "FETCH_AND_ADD or CMP_AND_SWAP")
	arg("atomic_type", "<type>")
	fs.BoolVarP(&p.events, "events", "e", false, "sleep on CQ events instead of polling first")
	for _, ig := range ignoredFlags {
		// note records the flag as given: "-d mlx5_0" or "--ib-dev mlx5_0".
		note := func(value string) {
			form := "--" + ig.long
			if given != nil && len(*given) > 0 {
				form, *given = (*given)[0], (*given)[1:]
			}
			if value != "" {
				form += " " + value
			}
			p.notes = append(p.notes, fmt.Sprintf("%s ignored: %s", form, ig.why))
		}
		usage := "ignored: " + ig.why
		if ig.arg == "" {
			fs.BoolFuncP(ig.long, ig.short, usage, func(s string) error {
				if v, err := strconv.ParseBool(s); err != nil || !v {
					return errors.New("a switch: give it or leave it out")
				}
				note("")
				return nil
			})
			continue
		}
		fs.FuncP(ig.long, ig.short, usage, func(s string) error {
			if ig.check != nil {
				if err := ig.check(s); err != nil {
					return err
				}
			}
			note(s)
			return nil
		})
		arg(ig.long, ig.arg)
	}
	fs.BoolVar(&p.masked, "masked_atomics", false, "use RFC 7306 masked atomics (Add Mask with carry boundaries; Compare/Swap masks)")
	fs.BoolVar(&p.gbits, "report_gbits", false, "report bandwidth in Gb/sec (1 Gb/s = 1.25e8 bytes per second) instead of MiB/sec")
	fs.BoolVar(&p.outJSON, "out_json", false, "write the results as JSON (to --out_json_file, default perftest_out.json)")
	fs.StringVar(&p.jsonFile, "out_json_file", "", "JSON output file (implies --out_json)")
	arg("out_json_file", "<file>")
	fs.BoolVar(&p.validate, "data_validation", false, "check Write/Read/Send payloads and the final atomic value")
	fs.BoolVar(&p.writeImm, "write_with_imm", false, "write_bw/write_lat: RDMA Write with Immediate Data (completes a receive at the target)")
	fs.StringVar(&p.transport, "transport", "kernel", "the transport")
	arg("transport", "<kernel|afxdp>")
	fs.StringVar(&p.iface, "iface", "", "network interface of the afxdp transport")
	arg("iface", "<name>")
	fs.StringVar(&p.bind, "bind", "", "server: listen address (default all)")
	arg("bind", "<addr>")
	fs.DurationVar(&p.timeout, "timeout", 60*time.Second, "bound of connection setup and of each size's run")
	arg("timeout", "<duration>")
	fs.IntVar(&p.maxSize, "max_size", 1<<20, "with -a: the largest message size")
	arg("max_size", "<size>")
	fs.BoolVar(&p.quiet, "quiet", false, "print only the result lines")
	fs.BoolVar(&p.drive, "drive", false, "busy-poll and do the engine's receive work on the polling goroutine (run to completion, as the C ABI's ibv_poll_cq does): afxdp runs the transport's poll step, kernel reads the data QPs' sockets; it never sleeps on a CQ, which costs bandwidth where spinners outnumber cores")
	fs.DurationVar(&p.spin, "spin", 0, "busy-poll a CQ this long before sleeping on it (default 0: on small hosts the engine's own poll loop needs the CPU; -e forces 0)")
	arg("spin", "<duration>")
	fs.DurationVar(&p.rxSpin, "rx-spin", 0, "kernel transport: each QP's reader polls its socket this long after the last data before it sleeps (the responder of Reads and Atomics then answers without being woken; costs a busy core); 0: never")
	arg("rx-spin", "<duration>")
	fs.BoolVar(&p.noCRC, "no-crc", false, "ask for MPA connections without CRCs (RFC 5044 §7.1.1, the C bit: CRCs are off only when both ends ask, so give it to both), to measure what the CRC costs; the banner says which was agreed")
	fs.BoolVar(&p.version, "version", false, "print the version and exit")
	return fs
}

// helpOption is the flag's help line head.
func helpOption(f *pflag.Flag) option {
	o := option{short: f.Shorthand, long: f.Name}
	if a := f.Annotations[argAnnotation]; len(a) == 1 {
		o.arg = a[0]
	}
	return o
}

// typedForms is the pre-pass that keeps the notes of the ignored flags in
// the spelling the user gave ("-d mlx5_0 ignored" for -d, "--ib-dev mlx5_0
// ignored" for --ib-dev), which pflag does not tell a Value: it walks args
// with pflag's grammar (fs declares which flags take a value) and returns,
// in order, "-d" or "--ib-dev" for each ignored flag it meets. It stops
// where pflag would (at "--" or an unknown flag); pflag reports errors.
func typedForms(fs *pflag.FlagSet, args []string) []string {
	var forms []string
	for len(args) > 0 {
		s := args[0]
		args = args[1:]
		switch {
		case len(s) < 2 || s[0] != '-':
			continue // a positional argument
		case s == "--":
			return forms
		case s[1] == '-':
			name, _, hasValue := strings.Cut(s[2:], "=")
			f := fs.Lookup(name)
			if f == nil {
				return forms
			}
			if isIgnored(name) {
				forms = append(forms, "--"+name)
			}
			if !hasValue && f.NoOptDefVal == "" && len(args) > 0 {
				args = args[1:]
			}
		default:
			for sh := s[1:]; sh != ""; {
				f := fs.ShorthandLookup(sh[:1])
				if f == nil {
					return forms
				}
				if isIgnored(f.Name) {
					forms = append(forms, "-"+sh[:1])
				}
				switch {
				case len(sh) > 2 && sh[1] == '=':
					sh = ""
				case f.NoOptDefVal != "":
					sh = sh[1:]
				case len(sh) > 1:
					sh = ""
				default:
					sh = ""
					if len(args) > 0 {
						args = args[1:]
					}
				}
			}
		}
	}
	return forms
}

// optionUsage is the flag's usage text with its default, as
// flag.PrintDefaults would add it.
func optionUsage(f *pflag.Flag) string {
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

var (
	errUsage   = errors.New("usage")
	errVersion = errors.New("version requested") // --version: print the version (printVersion) and exit
)

// parseParams parses "TEST [options] [SERVER]" with options and the
// server address in any order, as perftest does.
func parseParams(args []string, out io.Writer) (*params, error) {
	p := &params{}
	var given []string
	fs := newFlagSet(p, out, &given)
	if len(args) == 0 {
		fs.Usage()
		return nil, errUsage
	}
	given = typedForms(fs, args)
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if p.version {
		return nil, errVersion
	}
	pos := fs.Args()
	p.set = map[string]bool{}
	fs.Visit(func(f *pflag.Flag) {
		if !isIgnored(f.Name) {
			p.set[f.Name] = true
		}
	})
	if len(pos) == 0 || len(pos) > 2 {
		fs.Usage()
		return nil, errUsage
	}
	t, ok := lookupTest(pos[0])
	if !ok && pos[0] != "tcp_bw" && pos[0] != "tcp_lat" && pos[0] != "xdp_lat" && pos[0] != "xdp_bw" {
		return nil, fmt.Errorf("unknown test %q (want one of %s, tcp_bw, tcp_lat, xdp_lat, xdp_bw)", pos[0], testNames())
	}
	if !ok {
		t = testKind{name: pos[0], verb: verbSend, bw: pos[0] == "tcp_bw" || pos[0] == "xdp_bw"}
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

// version is the module version of the binary ("(devel)" in a build from
// a work tree).
func version() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		return bi.Main.Version
	}
	return "(devel)"
}

// printVersion is --version's output.
func printVersion(w io.Writer) {
	fmt.Fprintln(w, "xrnic-perf version", version())
}

func isIgnored(name string) bool {
	for _, ig := range ignoredFlags {
		if name == ig.long {
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
	if p.iters == 0 && t.name == "xdp_bw" {
		p.iters = xdpBWDefaultFrames
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
	if (t.name == "tcp_lat" || t.name == "xdp_lat") && !p.set["outs"] {
		p.outs = 1 // a ping-pong unless -o asks for a pipeline
	}
	if t.name == "xdp_lat" || t.name == "xdp_bw" {
		p.transport = "afxdp" // raw frames on the afxdp package
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
	case t.name == "tcp_lat" && (p.outs < 1 || p.outs > maxTCPOuts):
		return fmt.Errorf("-o: 1 to %d requests in flight for tcp_lat", maxTCPOuts)
	case t.name == "xdp_lat" && (p.outs < 1 || p.outs > maxTCPOuts):
		return fmt.Errorf("-o: 1 to %d frames in flight for xdp_lat", maxTCPOuts)
	case (t.name == "xdp_lat" || t.name == "xdp_bw") && p.iface == "":
		return fmt.Errorf("%s needs --iface", t.name)
	case t.name == "xdp_bw" && p.all:
		return errors.New("-a: not for xdp_bw (its frames are full-size: -s defaults to the MTU's payload)")
	case t.name == "xdp_lat" && p.size > xdpMaxPayload:
		return fmt.Errorf("-s: xdp_lat frames carry at most %d bytes (one 4096-byte UMEM chunk)", xdpMaxPayload)
	case t.name != "tcp_lat" && t.name != "xdp_lat" && (p.outs < 1 || p.outs > 128):
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
		// perftest signals every work request above 8 KiB unless -Q, -a
		// or -e is given (its "disabled" CQ moderation): the same test
		// must post the same way.
		if p.size > cqModSizeLimit && !p.all && !p.events && !p.set["cq-mod"] {
			p.cqMod = 1
		}
		p.cqMod = min(p.cqMod, p.txDepth)
	} else {
		p.cqMod = 1
	}
	if p.duration > 0 && !p.set["margin"] {
		p.margin = min(2*time.Second, p.duration/4)
	}
	return nil
}

// cqModSizeLimit is perftest's MSG_SIZE_CQ_MOD_LIMIT.
const cqModSizeLimit = 8192

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
