package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"xrnic/control"
	"xrnic/mem"
	"xrnic/wire/mpa"
)

// Default ports. There is no IANA port for iWARP MPA; 7306 is a mnemonic
// for RFC 7306 and not a well-known port. 9736 sits among the ports
// Prometheus exporters use.
const (
	DefaultListen  = ":7306"
	DefaultMetrics = ":9736"
	DefaultSocket  = "/run/xrnic/xrnicd.sock"

	// xrnicctl opens one connection per command and closes it; 32
	// leaves room for monitoring agents polling the socket.
	defaultSocketMaxConns = 32
)

// regionSpec is one --region NAME:SIZE:ACCESS.
type regionSpec struct {
	Name   string
	Size   int
	Access mem.Access // remote rights (LocalWrite is added at registration when needed)
}

// config holds every option; flags and the config file share the keys.
type config struct {
	ConfigFile     string
	Transport      string
	Iface          string
	XDPMode        string
	Queues         int
	Listen         string
	Metrics        string
	WebConfigFile  string // exporter-toolkit web config (TLS, basic auth) of the --metrics server
	Socket         string
	SocketGroup    string
	Regions        []regionSpec
	Hugepages      string // prefer, require, off
	PageSize       string // 2M, 1G
	MPARev         string // any, 1, 2
	NoCRC          bool
	Markers        bool
	RTR            mpa.RTR
	RequiredORD    int
	MaxQPs         int
	MaxQPsPerPeer  int
	MaxSetup       int
	MaxSetupPeer   int
	MaxORD         int
	MaxIRD         int
	MaxRegBytes    int64
	SinkDepth      int
	SinkBuffer     int
	Allow          []netip.Prefix
	LogLevel       slog.Level
	LogFormat      string
	ConnTimeout    time.Duration
	FPDUTimeout    time.Duration
	LockDir        string
	RequestTimeout time.Duration
	RxSpin         time.Duration
	ShutdownTimout time.Duration
	// Bounds of the metrics HTTP server and of the control socket.
	HTTPMaxConns, SocketMaxConns                      int
	HTTPReadTimeout, HTTPWriteTimeout, HTTPIdle       time.Duration
	SocketReadTimeout, SocketWriteTimeout, SocketIdle time.Duration
}

// listFlag is a repeatable flag.
type listFlag struct {
	set func(string) error
	str func() string
}

func (l listFlag) String() string {
	if l.str == nil {
		return ""
	}
	return l.str()
}
func (l listFlag) Set(s string) error { return l.set(s) }
func (l listFlag) Type() string       { return "value" }

// newFlagSet declares every option of xrnicd on fs, writing into c.
func newFlagSet(c *config, out io.Writer) *pflag.FlagSet {
	fs := pflag.NewFlagSet("xrnicd", pflag.ContinueOnError)
	fs.SetOutput(out)
	fs.SortFlags = false
	fs.StringVar(&c.ConfigFile, "config", "", "config `file`: one option per line, \"key value\" (keys as the flags, without --; repeat repeatable keys; # comments); flags given on the command line win")
	fs.StringVar(&c.Transport, "transport", "", "`kernel|afxdp` (default: afxdp when --iface is given and the host allows it, else kernel; the choice is logged)")
	fs.StringVar(&c.Iface, "iface", "", "network `interface` for the afxdp transport (its IPv4 address is the one served; also selects afxdp by default)")
	fs.StringVar(&c.XDPMode, "xdp-mode", "auto", "afxdp: XDP attach `mode`: auto (native, generic where the driver refuses and on veth), native or generic")
	fs.StringVar(&c.LockDir, "lock-dir", "/run/xrnic", "afxdp: `directory` of the per-interface owner locks (one xrnic process per interface; systemd's RuntimeDirectory=xrnic)")
	fs.IntVar(&c.Queues, "queues", 1, "afxdp: receive `queues` served, 0..N-1 (one AF_XDP socket and poll loop each)")
	fs.StringVar(&c.Listen, "listen", DefaultListen, "MPA listen `HOST:PORT` (7306: no IANA port exists for iWARP MPA; 7306 recalls RFC 7306)")
	fs.StringVar(&c.Metrics, "metrics", DefaultMetrics, "HTTP `HOST:PORT` for /metrics, /healthz, /readyz (\"off\" disables)")
	fs.StringVar(&c.WebConfigFile, "web.config.file", "", "Prometheus exporter-toolkit web config `file` for --metrics: TLS (tls_server_config) and basic auth (basic_auth_users, bcrypt hashes); re-read on each connection; empty: plain HTTP")
	fs.StringVar(&c.Socket, "socket", DefaultSocket, "control socket `path` (mode 0660; xrnicctl talks to it)")
	fs.StringVar(&c.SocketGroup, "socket-group", "", "`group` owning the control socket (its members may use xrnicctl)")
	fs.Var(listFlag{set: func(s string) error {
		r, err := parseRegion(s)
		if err == nil {
			for _, o := range c.Regions {
				if o.Name == r.Name {
					return fmt.Errorf("region %q given twice", r.Name)
				}
			}
			c.Regions = append(c.Regions, r)
		}
		return err
	}}, "region", "repeatable `NAME:SIZE:ACCESS`: daemon-owned hugepage memory peers may use; SIZE in bytes or with K, M, G (KiB, MiB, GiB); ACCESS letters r (remote Read), w (remote Write), a (RFC 7306 atomics), e.g. counter:4K:rwa")
	fs.StringVar(&c.Hugepages, "hugepages", "prefer", "`prefer|require|off`: prefer falls back to THP or 4 KiB pages with a warning; require fails start-up naming the sysctl; off uses 4 KiB pages")
	fs.StringVar(&c.PageSize, "page-size", "2M", "hugepage `size` of regions: 2M or 1G")
	fs.StringVar(&c.MPARev, "mpa-rev", "any", "MPA revisions accepted from initiators: `any|1|2` (2 is RFC 6581 enhanced setup; a responder answers in kind)")
	fs.BoolVar(&c.NoCRC, "no-crc", false, "ask peers not to use MPA CRCs (they are off only if the peer asks too; RFC 5044 §4.4)")
	fs.BoolVar(&c.Markers, "markers", false, "ask peers to insert MPA markers")
	fs.Var(listFlag{set: func(s string) error {
		r, err := parseRTR(s)
		c.RTR = r
		return err
	}, str: func() string { return "send,write,read" }}, "rtr", "ready-to-receive `types` accepted in RFC 6581 peer-to-peer mode: comma-separated send, write, read")
	fs.IntVar(&c.RequiredORD, "required-ord", 0, "smallest initiator IRD accepted (RFC 6581 §9.1); below it the connection is refused")
	fs.IntVar(&c.MaxQPs, "max-qps", 1024, "most QPs (connections) at a time")
	fs.IntVar(&c.MaxQPsPerPeer, "max-qps-per-peer", 0, "most QPs at a time from one peer IP address (0: no limit but --max-qps)")
	fs.IntVar(&c.MaxSetup, "max-setup", 1024, "most connections in MPA setup at a time (Request being read or waiting to be served); a new one over it evicts the oldest still without a Request, from the address holding the most (counted as refused)")
	fs.IntVar(&c.MaxSetupPeer, "max-setup-per-peer", 256, "most connections in MPA setup at a time from one peer IP address (a new one over it evicts the oldest still without a Request)")
	fs.IntVar(&c.MaxORD, "max-ord", 128, "outbound Reads+Atomics per QP (ORD)")
	fs.IntVar(&c.MaxIRD, "max-ird", 128, "inbound Reads+Atomics per QP (IRD)")
	fs.Var(listFlag{set: func(s string) error {
		n, err := parseSize(s)
		c.MaxRegBytes = int64(n)
		return err
	}, str: func() string { return "1G" }}, "max-registered-bytes", "most `bytes` of --region memory in total (K, M, G suffixes)")
	fs.IntVar(&c.SinkDepth, "sink-depth", 32, "receive buffers kept posted on each QP (the sink for Sends and Immediate Data)")
	fs.Var(listFlag{set: func(s string) error {
		n, err := parseSize(s)
		c.SinkBuffer = n
		return err
	}, str: func() string { return "8K" }}, "sink-buffer", "`bytes` per sink receive buffer (longer Sends are refused with a DDP Terminate)")
	fs.Var(listFlag{set: func(s string) error {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			if a, err2 := netip.ParseAddr(s); err2 == nil {
				p, err = netip.PrefixFrom(a, a.BitLen()), nil
			}
		}
		if err != nil {
			return fmt.Errorf("--allow %q: want a CIDR such as 10.0.0.0/8", s)
		}
		c.Allow = append(c.Allow, p.Masked())
		return nil
	}}, "allow", "repeatable `CIDR` of peers allowed to connect (default: all, stated in the start-up log)")
	fs.Var(listFlag{set: func(s string) error {
		if c.LogLevel.UnmarshalText([]byte(s)) != nil {
			return errors.New("want debug, info, warn or error")
		}
		return nil
	}, str: func() string { return "info" }}, "log-level", "`level`: debug, info, warn, error")
	fs.StringVar(&c.LogFormat, "log-format", "text", "`format`: text or json (log/slog)")
	fs.DurationVar(&c.ConnTimeout, "conn-timeout", 10*time.Second, "bound of each connection setup step and of a QP's orderly close")
	fs.DurationVar(&c.FPDUTimeout, "fpdu-timeout", 5*time.Second, "end a QP whose peer sent part of an FPDU and then nothing for this long (Terminate, flush); negative: never")
	fs.DurationVar(&c.RequestTimeout, "request-timeout", 30*time.Second, "complete an RDMA Read or Atomic the peer leaves unanswered this long with an error and end the QP; negative: never")
	fs.DurationVar(&c.RxSpin, "rx-spin", 0, "kernel transport: a QP's reader keeps polling its socket this long after the last data before it sleeps, so Reads and Atomics are answered without a wake-up (costs a busy core while requests come; at most GOMAXPROCS-1 readers spin); 0: never")
	fs.DurationVar(&c.ShutdownTimout, "shutdown-timeout", 15*time.Second, "bound of the SIGTERM shutdown")
	fs.IntVar(&c.HTTPMaxConns, "http-max-conns", control.DefaultMaxConns, "most connections the --metrics server holds; at the cap a new one replaces the longest idle keep-alive connection, or waits in the kernel's listen backlog (net.core.somaxconn) until a held one finishes its request; none is closed unanswered")
	fs.DurationVar(&c.HTTPReadTimeout, "http-read-timeout", control.DefaultReadTimeout, "--metrics: bound of reading one request (headers within min(this, 5s))")
	fs.DurationVar(&c.HTTPWriteTimeout, "http-write-timeout", control.DefaultWriteTimeout, "--metrics: bound of writing one response")
	fs.DurationVar(&c.HTTPIdle, "http-idle-timeout", control.DefaultIdleTimeout, "--metrics: a keep-alive connection without a request this long is closed")
	fs.IntVar(&c.SocketMaxConns, "socket-max-conns", defaultSocketMaxConns, "most connections the control socket holds (as --http-max-conns; refused users are closed at accept and never count)")
	fs.DurationVar(&c.SocketReadTimeout, "socket-read-timeout", control.DefaultReadTimeout, "control socket: bound of reading one request")
	fs.DurationVar(&c.SocketWriteTimeout, "socket-write-timeout", control.DefaultWriteTimeout, "control socket: bound of writing one response")
	fs.DurationVar(&c.SocketIdle, "socket-idle-timeout", control.DefaultIdleTimeout, "control socket: a keep-alive connection without a request this long is closed")
	return fs
}

func defaultConfig() config {
	return config{MaxRegBytes: 1 << 30, SinkBuffer: 8 << 10, RTR: mpa.RTRAll, MaxSetup: 1024, MaxSetupPeer: 256,
		HTTPMaxConns: control.DefaultMaxConns, SocketMaxConns: defaultSocketMaxConns,
		HTTPReadTimeout: control.DefaultReadTimeout, HTTPWriteTimeout: control.DefaultWriteTimeout, HTTPIdle: control.DefaultIdleTimeout,
		SocketReadTimeout: control.DefaultReadTimeout, SocketWriteTimeout: control.DefaultWriteTimeout, SocketIdle: control.DefaultIdleTimeout}
}

// parseArgs parses the command line and, with --config, the config file
// (options set on the command line win; a repeatable option given on the
// command line replaces the file's list).
func parseArgs(args []string, out io.Writer) (config, error) {
	c := defaultConfig()
	fs := newFlagSet(&c, out)
	showVersion := fs.Bool("version", false, "print the version and exit")
	// pflag prints its error before some 50 lines of usage; run prints
	// the error alone and points to --help, which prints the usage here.
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			fmt.Fprintln(out, "usage: xrnicd [options] (see deploy/README.md); options:")
			fmt.Fprint(out, fs.FlagUsages())
			return c, err
		}
		return c, flagError(err)
	}
	if *showVersion {
		return c, errVersion
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected argument %q (options start with --)", fs.Arg(0))
	}
	if c.ConfigFile == "" {
		return c, nil
	}
	set := map[string]bool{}
	fs.Visit(func(f *pflag.Flag) { set[f.Name] = true })
	f, err := os.Open(c.ConfigFile)
	if err != nil {
		return c, fmt.Errorf("config: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = strings.TrimSpace(line[:i])
		}
		if line == "" {
			continue
		}
		key, val := line, ""
		if i := strings.IndexAny(line, " \t="); i >= 0 {
			key, val = line[:i], strings.TrimSpace(line[i:])
			val = strings.TrimSpace(strings.TrimPrefix(val, "="))
		}
		key = strings.TrimPrefix(key, "--")
		fl := fs.Lookup(key)
		if fl == nil || key == "config" || key == "version" {
			return c, fmt.Errorf("config %s:%d: unknown key %q (keys are the flag names)", c.ConfigFile, n, key)
		}
		if set[key] {
			continue
		}
		if val == "" {
			if bf, ok := fl.Value.(interface{ IsBoolFlag() bool }); ok && bf.IsBoolFlag() {
				val = "true"
			}
		}
		if err := fs.Set(key, val); err != nil {
			err = flagError(err)
			return c, fmt.Errorf("config %s:%d: %s: %w", c.ConfigFile, n, key, err)
		}
	}
	return c, sc.Err()
}

// parseSize parses a byte count with an optional K, M or G (binary) suffix.
// errVersion is parseArgs's answer to --version: run prints the version.
var errVersion = errors.New("version requested")

var pflagInvalid = regexp.MustCompile(`^invalid argument "(.*)" for "(?:-., )?--([^"]+)" flag: (.*)$`)

// flagError gives pflag's errors the wording of the flag package's, which
// the tests, scripts and operators know.
func flagError(err error) error {
	msg := err.Error()
	if name, ok := strings.CutPrefix(msg, "unknown flag: --"); ok {
		return errors.New("flag provided but not defined: -" + name)
	}
	if rest, ok := strings.CutPrefix(msg, "unknown shorthand flag: '"); ok {
		if r, _, ok := strings.Cut(rest, "'"); ok {
			return errors.New("flag provided but not defined: -" + r)
		}
	}
	if name, ok := strings.CutPrefix(msg, "flag needs an argument: --"); ok {
		return errors.New("flag needs an argument: -" + name)
	}
	if m := pflagInvalid.FindStringSubmatch(msg); m != nil {
		return fmt.Errorf("invalid value %q for flag -%s: %s", m[1], m[2], m[3])
	}
	return err
}

func parseSize(s string) (int, error) {
	t := strings.ToUpper(strings.TrimSpace(s))
	t = strings.TrimSuffix(strings.TrimSuffix(t, "B"), "I")
	mult := 1
	switch {
	case strings.HasSuffix(t, "K"):
		mult = 1 << 10
	case strings.HasSuffix(t, "M"):
		mult = 1 << 20
	case strings.HasSuffix(t, "G"):
		mult = 1 << 30
	}
	if mult != 1 {
		t = t[:len(t)-1]
	}
	n, err := strconv.ParseUint(t, 0, 40)
	if err != nil || n == 0 {
		return 0, fmt.Errorf("size %q: want a positive number of bytes, optionally with K, M or G", s)
	}
	return int(n) * mult, nil
}

// parseRegion parses NAME:SIZE:ACCESS.
func parseRegion(s string) (regionSpec, error) {
	parts := strings.Split(s, ":")
	if len(parts) != 3 || parts[0] == "" {
		return regionSpec{}, fmt.Errorf("--region %q: want NAME:SIZE:ACCESS, e.g. counter:4K:rwa", s)
	}
	for _, ch := range parts[0] {
		if !(ch == '-' || ch == '_' || ch == '.' || ch >= '0' && ch <= '9' || ch >= 'a' && ch <= 'z' || ch >= 'A' && ch <= 'Z') {
			return regionSpec{}, fmt.Errorf("--region %q: the name may hold letters, digits, '-', '_' and '.'", s)
		}
	}
	size, err := parseSize(parts[1])
	if err != nil {
		return regionSpec{}, fmt.Errorf("--region %q: %w", s, err)
	}
	r := regionSpec{Name: parts[0], Size: size}
	for _, ch := range parts[2] {
		switch ch {
		case 'r':
			r.Access |= mem.RemoteRead
		case 'w':
			r.Access |= mem.RemoteWrite
		case 'a':
			r.Access |= mem.RemoteAtomic
		default:
			return regionSpec{}, fmt.Errorf("--region %q: access letters are r (read), w (write), a (atomic)", s)
		}
	}
	if r.Access == 0 {
		return regionSpec{}, fmt.Errorf("--region %q: give at least one access letter (r, w, a)", s)
	}
	return r, nil
}

func parseRTR(s string) (mpa.RTR, error) {
	var r mpa.RTR
	for _, f := range strings.Split(s, ",") {
		switch strings.TrimSpace(strings.ToLower(f)) {
		case "send":
			r |= mpa.RTRSend
		case "write":
			r |= mpa.RTRWrite
		case "read":
			r |= mpa.RTRRead
		case "all":
			r |= mpa.RTRAll
		default:
			return 0, fmt.Errorf("RTR type %q: want send, write or read", f)
		}
	}
	return r, nil
}

// validate checks option combinations.
func (c *config) validate() error {
	switch c.Hugepages {
	case "prefer", "require", "off":
	default:
		return fmt.Errorf("--hugepages %q: want prefer, require or off", c.Hugepages)
	}
	switch c.PageSize {
	case "2M", "1G":
	default:
		return fmt.Errorf("--page-size %q: want 2M or 1G", c.PageSize)
	}
	switch c.MPARev {
	case "any", "1", "2":
	default:
		return fmt.Errorf("--mpa-rev %q: want any, 1 or 2", c.MPARev)
	}
	switch c.XDPMode {
	case "", "auto", "native", "generic":
	default:
		return fmt.Errorf("--xdp-mode %q: want auto, native or generic", c.XDPMode)
	}
	if c.Queues < 0 {
		return errors.New("--queues: at least 1")
	}
	switch c.LogFormat {
	case "text", "json":
	default:
		return fmt.Errorf("--log-format %q: want text or json", c.LogFormat)
	}
	switch c.Transport {
	case "", "kernel", "afxdp":
	default:
		return fmt.Errorf("--transport %q: want kernel or afxdp", c.Transport)
	}
	if c.MaxQPs <= 0 || c.MaxQPsPerPeer < 0 || c.MaxSetup <= 0 || c.MaxSetupPeer <= 0 || c.MaxORD < 0 || c.MaxIRD < 0 || c.SinkDepth <= 0 || c.RequiredORD < 0 {
		return errors.New("limits must be positive (--max-qps, --max-setup, --max-setup-per-peer, --sink-depth) or non-negative (--max-ord, --max-ird, --required-ord)")
	}
	if c.HTTPMaxConns <= 0 || c.SocketMaxConns <= 0 {
		return errors.New("--http-max-conns and --socket-max-conns must be positive")
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"--http-read-timeout", c.HTTPReadTimeout}, {"--http-write-timeout", c.HTTPWriteTimeout}, {"--http-idle-timeout", c.HTTPIdle},
		{"--socket-read-timeout", c.SocketReadTimeout}, {"--socket-write-timeout", c.SocketWriteTimeout}, {"--socket-idle-timeout", c.SocketIdle}} {
		if d.v <= 0 {
			return fmt.Errorf("%s must be positive", d.name)
		}
	}
	if c.MaxORD > int(mpa.MaxIRDORD) || c.MaxIRD > int(mpa.MaxIRDORD) || c.RequiredORD > int(mpa.MaxIRDORD) {
		return fmt.Errorf("--max-ord, --max-ird and --required-ord are at most %d (RFC 6581)", mpa.MaxIRDORD)
	}
	if c.SinkBuffer < 8 {
		return errors.New("--sink-buffer: at least 8 bytes (Immediate Data is placed in it)")
	}
	var total int64
	for _, r := range c.Regions {
		total += int64(r.Size)
	}
	if total > c.MaxRegBytes {
		return fmt.Errorf("the regions hold %d bytes, more than --max-registered-bytes %d: raise the limit or shrink the regions", total, c.MaxRegBytes)
	}
	if _, _, err := net.SplitHostPort(c.Listen); err != nil {
		return fmt.Errorf("--listen %q: want HOST:PORT (e.g. %s)", c.Listen, DefaultListen)
	}
	if c.Metrics != "off" && c.Metrics != "" {
		if _, _, err := net.SplitHostPort(c.Metrics); err != nil {
			return fmt.Errorf("--metrics %q: want HOST:PORT (e.g. %s) or off", c.Metrics, DefaultMetrics)
		}
	}
	return nil
}
