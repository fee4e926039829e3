// Command xrnicctl inspects a running xrnicd through its control socket and
// runs one-shot iWARP operations against any peer (an xrnicd, or another
// RFC 7306 capable RNIC) with its own in-process device.
//
//	xrnicctl [--socket PATH] [-j] status | qp list | region list | stats
//	xrnicctl probe PEER [STAG TO]
//	xrnicctl fetchadd PEER STAG TO ADD [--mask M]
//	xrnicctl cmpswap PEER STAG TO COMPARE SWAP [--compare-mask M] [--swap-mask M]
//	xrnicctl read PEER STAG TO LENGTH
//	xrnicctl write PEER STAG TO HEXDATA
//	xrnicctl send PEER TEXT
//	xrnicctl imm PEER VALUE [--write STAG TO HEXDATA]
//
// PEER is HOST or HOST:PORT (the port defaults to 7306, xrnicd's default). Numbers are decimal
// or 0x-hex (ADD may be negative: two's complement). -j prints JSON,
// otherwise aligned text. Remote operations use the kernel transport by
// default; --transport afxdp --iface IF runs them over AF_XDP and the
// user-space TCP (root or CAP_NET_ADMIN, CAP_BPF, CAP_PERFMON, CAP_NET_RAW; the XDP
// program is attached to IF for the command's lifetime). Errors exit 1 with the completion status and the Terminate in
// words; usage errors exit 2, printed last. A peer that does not answer the
// MPA Request within --mpa-timeout (3 s) is reported as "no MPA reply: not
// an iWARP endpoint?".
//
// status shows the device as ibv_devinfo -v does (transport, interface,
// MTU, XDP mode, queues, zero-copy or copy, capabilities, listeners); qp
// list each QP's local and remote address and queue depths. xrnicctl help
// CMD (or CMD --help) describes a command, --version prints the version,
// and xrnicctl completion bash|zsh|fish prints a completion script, e.g.
// source <(xrnicctl completion bash).
package main

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"xrnic/control"
	"xrnic/verbs"
	"xrnic/wire/term"
)

const defaultSocket = "/run/xrnic/xrnicd.sock"

// synopsis is printed before a usage error, and opens --help.
const synopsis = `usage:
  xrnicctl [--socket PATH] [-j] status | qp list | region list | stats
  xrnicctl [options] probe PEER [STAG TO]
  xrnicctl [options] fetchadd PEER STAG TO ADD [--mask M]
  xrnicctl [options] cmpswap PEER STAG TO COMPARE SWAP [--compare-mask M] [--swap-mask M]
  xrnicctl [options] read PEER STAG TO LENGTH
  xrnicctl [options] write PEER STAG TO HEXDATA
  xrnicctl [options] send PEER TEXT
  xrnicctl [options] imm PEER VALUE [--write STAG TO HEXDATA]
PEER is HOST or HOST:PORT (port 7306, xrnicd's default, when left out);
numbers are decimal or 0x-hex.`

type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(f string, a ...any) error { return usageError{fmt.Sprintf(f, a...)} }

// cli holds the parsed options.
type cli struct {
	socket      string
	json        bool
	conn        connOpts
	mask        string
	compareMask string
	swapMask    string
	write       []string // STAG TO HEXDATA of imm --write
	out         io.Writer
}

// writeValue is imm's --write STAG TO HEXDATA: three values, which
// preparse joins into one ("--write=STAG,TO,HEXDATA" may be given so, too).
type writeValue struct{ c *cli }

func (w writeValue) String() string { return strings.Join(w.c.write, ",") }
func (w writeValue) Type() string   { return "STAG,TO,HEXDATA" }
func (w writeValue) Set(s string) error {
	f := strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' })
	if len(f) != 3 {
		return usagef("--write needs STAG TO HEXDATA")
	}
	w.c.write = f
	return nil
}

// negMark marks a positional argument that looks like a negative number
// (ADD -5) so that pflag does not take it for a shorthand flag.
const negMark = "\x00"

func isNegNum(a string) bool { return len(a) > 1 && a[0] == '-' && a[1] >= '0' && a[1] <= '9' }

// unmark undoes negMark.
func unmark(args []string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = strings.TrimPrefix(a, negMark)
	}
	return out
}

// preparse rewrites the arguments for cobra: options may appear anywhere;
// "--write" takes the next three values; arguments that look like negative
// numbers are positional unless they are the value of the option before
// them.
func preparse(root *cobra.Command, args []string) ([]string, error) {
	takesValue := func(a string) bool {
		var f *pflag.Flag
		switch {
		case strings.HasPrefix(a, "--") && !strings.Contains(a, "="):
			name := a[2:]
			for _, c := range append([]*cobra.Command{root}, root.Commands()...) {
				if f = c.Flags().Lookup(name); f == nil {
					f = c.PersistentFlags().Lookup(name)
				}
				if f != nil {
					break
				}
			}
		case len(a) == 2 && a[0] == '-' && a[1] != '-':
			for _, c := range append([]*cobra.Command{root}, root.Commands()...) {
				if f = c.Flags().ShorthandLookup(a[1:]); f == nil {
					f = c.PersistentFlags().ShorthandLookup(a[1:])
				}
				if f != nil {
					break
				}
			}
		}
		return f != nil && f.NoOptDefVal == ""
	}
	var out []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			return append(out, args[i:]...), nil
		case a == "--write" || a == "-write":
			if len(args) < i+4 {
				return nil, usagef("--write needs STAG TO HEXDATA")
			}
			out = append(out, "--write="+strings.Join(args[i+1:i+4], ","))
			i += 3
		case isNegNum(a) && !(i > 0 && takesValue(args[i-1])):
			out = append(out, negMark+a)
		default:
			out = append(out, a)
		}
	}
	return out, nil
}

// flagError gives pflag's errors the wording of the flag package's, which
// scripts and tests know.
func flagError(err error) error {
	msg := err.Error()
	if name, ok := strings.CutPrefix(msg, "unknown flag: --"); ok {
		msg = "flag provided but not defined: -" + name
	} else if rest, ok := strings.CutPrefix(msg, "unknown shorthand flag: '"); ok {
		if r, _, ok := strings.Cut(rest, "'"); ok {
			msg = "flag provided but not defined: -" + r
		}
	}
	return usageError{msg}
}

// command describes one subcommand.
type command struct {
	use, short, long string
	flags            func(fs *pflag.FlagSet)
	sub              []command
}

// newRoot builds the command tree; every command hands its name and its
// positional arguments to do (dispatch, or a test's capture).
func newRoot(c *cli, stdout, stderr io.Writer, do func(pos []string) error) *cobra.Command {
	root := &cobra.Command{
		Use:   "xrnicctl",
		Short: "inspect xrnicd and run one-shot iWARP operations against any peer",
		Long: synopsis + `

Remote operations use the kernel transport by default; --transport afxdp
--iface IF runs them over AF_XDP and the user-space TCP (root or
CAP_NET_ADMIN, CAP_BPF, CAP_PERFMON, CAP_NET_RAW). Errors exit 1 with the
completion status and the Terminate in words; usage errors exit 2.`,
		Version:           version(),
		Args:              cobra.ArbitraryArgs,
		SilenceErrors:     true,
		SilenceUsage:      true,
		CompletionOptions: cobra.CompletionOptions{HiddenDefaultCmd: false},
		RunE: func(_ *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usagef("no command")
			}
			return usagef("unknown command %q", unmark(args)[0])
		},
		PersistentPreRunE: func(*cobra.Command, []string) error {
			switch c.conn.Transport {
			case "", "kernel", "afxdp":
			default:
				return usagef("--transport %q: want kernel or afxdp", c.conn.Transport)
			}
			if c.conn.MPARev != 1 && c.conn.MPARev != 2 {
				return usagef("--mpa-rev %d: want 2 (RFC 6581) or 1 (RFC 5044)", c.conn.MPARev)
			}
			if c.conn.MPATimeout <= 0 {
				return usagef("--mpa-timeout %v: want a positive duration such as 3s", c.conn.MPATimeout)
			}
			return nil
		},
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return flagError(err) })
	// Help goes to stderr, as it always has (xrnicctl --help 2>&1 | less).
	help := root.HelpFunc()
	root.SetHelpFunc(func(cmd *cobra.Command, args []string) { cmd.SetOut(stderr); help(cmd, args) })

	fs := root.PersistentFlags()
	fs.SortFlags = false
	fs.StringVar(&c.socket, "socket", defaultSocket, "xrnicd control socket `path`")
	fs.BoolVarP(&c.json, "json", "j", false, "print JSON")
	fs.StringVar(&c.conn.Transport, "transport", "kernel", "remote operations: `kernel|afxdp`")
	fs.StringVar(&c.conn.Iface, "iface", "", "`interface` of the afxdp transport")
	fs.DurationVar(&c.conn.Timeout, "timeout", 10*time.Second, "bound of the whole operation")
	fs.DurationVar(&c.conn.MPATimeout, "mpa-timeout", 3*time.Second, "how long to wait for the peer's MPA Reply (a port that is not iWARP never sends one)")
	fs.IntVar(&c.conn.MPARev, "mpa-rev", 2, "MPA `revision` to request: 2 (RFC 6581) or 1 (RFC 5044)")
	fs.BoolVar(&c.conn.NoCRC, "no-crc", false, "ask the peer not to use MPA CRCs")
	fs.BoolVar(&c.conn.PeerToPeer, "p2p", false, "RFC 6581 peer-to-peer mode (the initiator sends a ready-to-receive first)")

	list := func(what string) []command {
		return []command{{use: "list", short: "list the daemon's " + what}}
	}
	cmds := []command{
		{use: "status", short: "the daemon and its device: transport, interface, XDP, capabilities, listeners",
			long: "Shows the daemon (version, uptime, readiness) and its device like ibv_devinfo: transport,\ninterface, MTU, XDP mode and queues, zero-copy or copy, the capabilities\n(max QPs, max MR size, max message size, ORD/IRD, atomics, immediate data) and the listeners."},
		{use: "qp", short: "the daemon's queue pairs", sub: list("QPs: state, local and remote address, MPA, IRD/ORD, queue depths, counters")},
		{use: "region", short: "the daemon's memory regions", sub: list("regions: STag, TO, length, access, backing")},
		{use: "stats", short: "the daemon's message, atomic, Terminate and MPA counters"},
		{use: "probe PEER [STAG TO]", short: "does PEER implement RFC 7306 atomics?",
			long: "Sends a FetchAdd of 0 (to STAG TO, or to STag 0, which no RNIC hands out) and reports whether\nthe peer implements RFC 7306 atomics."},
		{use: "fetchadd PEER STAG TO ADD", short: "RFC 7306 FetchAdd: add ADD (may be negative) to the 8-byte word at STAG TO",
			flags: func(fs *pflag.FlagSet) {
				fs.StringVarP(&c.mask, "mask", "m", "", "RFC 7306 Add Mask `M` (carry boundaries); default 0, a plain 64-bit add")
			}},
		{use: "cmpswap PEER STAG TO COMPARE SWAP", short: "RFC 7306 CmpSwap on the 8-byte word at STAG TO",
			flags: func(fs *pflag.FlagSet) {
				fs.StringVar(&c.compareMask, "compare-mask", "", "Compare Mask `M` (default all ones)")
				fs.StringVar(&c.swapMask, "swap-mask", "", "Swap Mask `M` (default all ones)")
			}},
		{use: "read PEER STAG TO LENGTH", short: "RDMA Read LENGTH bytes at STAG TO; prints them in hex"},
		{use: "write PEER STAG TO HEXDATA", short: "RDMA Write HEXDATA at STAG TO (confirmed by a zero-length Read)"},
		{use: "send PEER TEXT", short: "Send TEXT (the daemon's sink counts it)"},
		{use: "imm PEER VALUE", short: "send Immediate Data VALUE, or a Write with Immediate Data with --write",
			flags: func(fs *pflag.FlagSet) {
				fs.Var(writeValue{c}, "write", "a Write with Immediate Data of `STAG TO HEXDATA` (three values)")
			}},
	}
	var add func(parent *cobra.Command, path []string, cs []command)
	add = func(parent *cobra.Command, path []string, cs []command) {
		for _, d := range cs {
			name, _, _ := strings.Cut(d.use, " ")
			p := append(append([]string(nil), path...), name)
			cmd := &cobra.Command{
				Use: d.use, Short: d.short, Long: d.long, Args: cobra.ArbitraryArgs,
				DisableFlagsInUseLine: true,
				RunE: func(_ *cobra.Command, args []string) error {
					return do(append(append([]string(nil), p...), unmark(args)...))
				},
			}
			if d.flags != nil {
				d.flags(cmd.Flags())
			}
			if len(p) == 1 && len(d.sub) == 0 && name != "send" {
				// Positional arguments are numbers and hex: no file names.
				cmd.ValidArgsFunction = cobra.NoFileCompletions
			}
			add(cmd, p, d.sub)
			parent.AddCommand(cmd)
		}
	}
	add(root, nil, cmds)
	root.InitDefaultHelpCmd()
	root.InitDefaultCompletionCmd()
	for _, sc := range root.Commands() {
		if sc.Name() == "completion" {
			sc.SetOut(stdout) // the script goes to stdout
		}
	}
	return root
}

func version() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		return bi.Main.Version
	}
	return "(devel)"
}

// parse parses the arguments as run does and returns the command and its
// positional arguments instead of running it.
func parse(args []string, out io.Writer) (*cli, []string, error) {
	c := &cli{out: os.Stdout}
	var pos []string
	root := newRoot(c, out, out, func(p []string) error { pos = p; return nil })
	err := execute(root, args)
	return c, pos, err
}

func execute(root *cobra.Command, args []string) error {
	args, err := preparse(root, args)
	if err != nil {
		return err
	}
	root.SetArgs(args)
	return root.Execute()
}

// parseNum parses a decimal or 0x-hex number; a leading '-' gives the
// two's complement (for FetchAdd subtraction).
func parseNum(what, s string) (uint64, error) {
	neg := strings.HasPrefix(s, "-")
	t := strings.TrimPrefix(s, "-")
	var v uint64
	var err error
	if h, ok := strings.CutPrefix(strings.ToLower(t), "0x"); ok {
		v, err = strconv.ParseUint(h, 16, 64)
	} else {
		v, err = strconv.ParseUint(t, 10, 64)
	}
	if err != nil || t == "" {
		return 0, usagef("%s %q: want a decimal or 0x-hex number", what, s)
	}
	if neg {
		v = -v
	}
	return v, nil
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	c := &cli{out: stdout}
	err := execute(newRoot(c, stdout, stderr, c.dispatch), args)
	if err != nil {
		var ue usageError
		if errors.As(err, &ue) {
			// The commands, then the error last, where it is seen; the
			// options are one --help away.
			fmt.Fprintln(stderr, synopsis)
			fmt.Fprintln(stderr, "xrnicctl:", err)
			fmt.Fprintln(stderr, "run xrnicctl --help for the options")
			return 2
		}
		fmt.Fprintln(stderr, "xrnicctl:", err)
		return 1
	}
	return 0
}

func (c *cli) dispatch(pos []string) error {
	if len(pos) == 0 {
		return usagef("no command")
	}
	cmd, args := pos[0], pos[1:]
	want := func(n int, form string) error {
		if len(args) != n {
			return usagef("%s: want %s", cmd, form)
		}
		return nil
	}
	switch cmd {
	case "status":
		if err := want(0, "no arguments"); err != nil {
			return err
		}
		return c.status()
	case "qp", "region":
		if len(args) != 1 || args[0] != "list" {
			return usagef("%s: want %s list", cmd, cmd)
		}
		if cmd == "qp" {
			return c.qpList()
		}
		return c.regionList()
	case "stats":
		if err := want(0, "no arguments"); err != nil {
			return err
		}
		return c.stats()
	case "probe":
		if len(args) != 1 && len(args) != 3 {
			return usagef("probe: want PEER [STAG TO]")
		}
		return c.probe(args)
	case "fetchadd":
		if err := want(4, "PEER STAG TO ADD [--mask M]"); err != nil {
			return err
		}
		return c.atomic(cmd, args)
	case "cmpswap":
		if err := want(5, "PEER STAG TO COMPARE SWAP [--compare-mask M] [--swap-mask M]"); err != nil {
			return err
		}
		return c.atomic(cmd, args)
	case "read":
		if err := want(4, "PEER STAG TO LENGTH"); err != nil {
			return err
		}
		return c.read(args)
	case "write":
		if err := want(4, "PEER STAG TO HEXDATA"); err != nil {
			return err
		}
		return c.writeCmd(args)
	case "send":
		if len(args) < 2 {
			return usagef("send: want PEER TEXT")
		}
		return c.send(args[0], strings.Join(args[1:], " "))
	case "imm":
		if err := want(2, "PEER VALUE [--write STAG TO HEXDATA]"); err != nil {
			return err
		}
		return c.imm(args)
	}
	return usagef("unknown command %q", cmd)
}

func (c *cli) printJSON(v any) error {
	enc := json.NewEncoder(c.out)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func (c *cli) get(path string, v any) error {
	ctx, cancel := context.WithTimeout(context.Background(), c.conn.Timeout)
	defer cancel()
	err := control.NewClient(c.socket).Get(ctx, path, v)
	if err != nil && !errors.Is(err, control.ErrDenied) && !errors.Is(err, control.ErrPermission) {
		var pe *os.PathError
		if errors.As(err, &pe) || strings.Contains(err.Error(), "connect:") {
			return fmt.Errorf("cannot reach xrnicd at %s (is it running? use --socket PATH): %w", c.socket, err)
		}
	}
	return err
}

func (c *cli) table(header string, rows [][]string) {
	tw := tabwriter.NewWriter(c.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, header)
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	tw.Flush()
}

func (c *cli) status() error {
	var s control.StatusInfo
	if err := c.get(control.PathStatus, &s); err != nil {
		return err
	}
	if c.json {
		return c.printJSON(s)
	}
	c.table("FIELD\tVALUE", statusRows(s))
	return nil
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// statusRows are the lines of status: the daemon, then its device as
// ibv_devinfo -v shows one, then its listeners.
func statusRows(s control.StatusInfo) [][]string {
	allow := strings.Join(s.Allow, ", ")
	if allow == "" {
		allow = "all peers"
	}
	rows := [][]string{
		{"version", s.Version}, {"pid", strconv.Itoa(s.PID)}, {"ready", strconv.FormatBool(s.Ready)},
		{"transport", s.Transport}, {"listen", s.Listen}, {"metrics", s.Metrics}, {"allow", allow},
		{"uptime", (time.Duration(s.UptimeSeconds * float64(time.Second))).Round(time.Second).String()},
		{"qps", fmt.Sprintf("%d (max %d)", s.QPs, s.MaxQPs)}, {"regions", strconv.Itoa(s.Regions)},
		{"ord/ird", fmt.Sprintf("%d/%d", s.MaxORD, s.MaxIRD)},
	}
	d := s.Device
	if d.Transport == "" { // an older xrnicd
		return rows
	}
	crc := "on"
	if !d.CRC {
		crc = "off"
	}
	markers := "supported"
	if !d.Markers {
		markers = "not supported"
	}
	llp := "kernel TCP sockets"
	if d.LLP == "afxdp" {
		llp = "user-space TCP over AF_XDP"
	}
	rows = append(rows,
		[]string{"device", fmt.Sprintf("%s over %s (MPA rev %d, CRC %s, markers %s)", d.Transport, llp, d.MPARev, crc, markers)})
	if d.Interface != "" {
		iface := fmt.Sprintf("%s (ifindex %d)", d.Interface, d.Ifindex)
		if d.Addr != "" {
			iface = fmt.Sprintf("%s (ifindex %d, %s)", d.Interface, d.Ifindex, d.Addr)
		}
		xdp := d.XDPMode
		if d.XDPModeReason != "" {
			xdp += " (" + d.XDPModeReason + ")"
		}
		zc := "copy"
		if d.ZeroCopy != nil && *d.ZeroCopy {
			zc = "zero-copy"
		}
		rows = append(rows, []string{"interface", iface}, []string{"mtu", strconv.Itoa(d.MTU)},
			[]string{"xdp_mode", xdp}, []string{"queues", strconv.Itoa(d.Queues)}, []string{"af_xdp", zc})
	} else {
		rows = append(rows, []string{"interface", "- (the kernel routes)"}, []string{"xdp_mode", "- (no XDP)"})
	}
	rows = append(rows,
		[]string{"max_qp", strconv.Itoa(d.MaxQPs)}, []string{"max_qp_wr", strconv.Itoa(d.MaxWR)},
		[]string{"max_sge", strconv.Itoa(d.MaxSGE)}, []string{"max_cqe", strconv.Itoa(d.MaxCQE)},
		[]string{"max_mr", strconv.Itoa(d.MaxMR)}, []string{"max_mr_size", fmt.Sprintf("0x%x", d.MaxMRSize)},
		[]string{"max_msg_sz", fmt.Sprintf("0x%x (%s)", d.MaxMsgSize, sizeText(uint64(d.MaxMsgSize)))},
		[]string{"max_qp_init_rd_atom", fmt.Sprintf("%d (ORD)", d.MaxORD)},
		[]string{"max_qp_rd_atom", fmt.Sprintf("%d (IRD)", d.MaxIRD)},
		[]string{"atomic_cap", d.AtomicCap}, []string{"masked_atomics", yesNo(d.MaskedAtomics)},
		[]string{"immediate_data", yesNo(d.ImmediateData)})
	for _, l := range s.Listeners {
		rows = append(rows, []string{"listener", l.Kind + " " + l.Address})
	}
	return rows
}

// sizeText is n bytes in the largest binary unit that divides it.
func sizeText(n uint64) string {
	for _, u := range []struct {
		s string
		v uint64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n >= u.v && n%u.v == 0 {
			return fmt.Sprintf("%d %s", n/u.v, u.s)
		}
	}
	return fmt.Sprintf("%d bytes", n)
}

func (c *cli) qpList() error {
	var qs []control.QPInfo
	if err := c.get(control.PathQPs, &qs); err != nil {
		return err
	}
	if c.json {
		return c.printJSON(qs)
	}
	c.table(qpHeader, qpRows(qs))
	return nil
}

const qpHeader = "QP\tSTATE\tLOCAL\tREMOTE\tMPA\tCRC\tIRD/ORD\tSQ\tRQ\tRD_OUT\tTX_MSGS\tRX_MSGS\tERROR"

// qpRows are the lines of qp list: SQ is outstanding/depth, RQ
// posted/depth, RD_OUT our outstanding Reads+Atomics/the peer's being
// answered.
func qpRows(qs []control.QPInfo) [][]string {
	var rows [][]string
	for _, q := range qs {
		local, remote := q.LocalAddr, q.RemoteAddr
		if local == "" {
			local = "-"
		}
		if remote == "" {
			remote = q.Peer
		}
		rows = append(rows, []string{strconv.FormatUint(uint64(q.Num), 10), q.State, local, remote, strconv.Itoa(q.MPARev),
			strconv.FormatBool(q.CRC), fmt.Sprintf("%d/%d", q.IRD, q.ORD),
			fmt.Sprintf("%d/%d", q.SQOutstanding, q.SQDepth), fmt.Sprintf("%d/%d", q.RQPosted, q.RQDepth),
			fmt.Sprintf("%d/%d", q.ORDOutstanding, q.IRDOutstanding), strconv.FormatUint(q.TxMsgs, 10),
			strconv.FormatUint(q.RxMsgs, 10), q.Error})
	}
	return rows
}

func (c *cli) regionList() error {
	var rs []control.RegionInfo
	if err := c.get(control.PathRegions, &rs); err != nil {
		return err
	}
	if c.json {
		return c.printJSON(rs)
	}
	var rows [][]string
	for _, r := range rs {
		rows = append(rows, []string{r.Name, r.STag, r.TO, strconv.FormatUint(r.Length, 10), r.Access, r.PageSize, r.Backing})
	}
	c.table("NAME\tSTAG\tTO\tLENGTH\tACCESS\tPAGE\tBACKING", rows)
	return nil
}

func (c *cli) stats() error {
	var s control.StatsInfo
	if err := c.get(control.PathStats, &s); err != nil {
		return err
	}
	if c.json {
		return c.printJSON(s)
	}
	var rows [][]string
	for _, m := range s.Messages {
		rows = append(rows, []string{"rdmap " + m.Direction, m.Opcode, fmt.Sprintf("%d msgs, %d bytes", m.Messages, m.Bytes)})
	}
	rows = append(rows,
		[]string{"atomics", "fetch_add", strconv.FormatUint(s.FetchAdds, 10)},
		[]string{"atomics", "cmp_swap", fmt.Sprintf("%d (%d matched)", s.CmpSwaps, s.CmpSwapMatched)})
	for _, t := range s.Terminates {
		rows = append(rows, []string{"terminates " + t.Direction, t.Error, strconv.FormatUint(t.Count, 10)})
	}
	for _, k := range []string{"accepted", "rejected", "malformed", "negotiation_failed", "timeout", "failed"} {
		rows = append(rows, []string{"mpa", k, strconv.FormatUint(s.MPA[k], 10)})
	}
	rows = append(rows, []string{"connections", "refused (--allow)", strconv.FormatUint(s.Refused, 10)})
	for _, k := range []string{"send", "immediate", "write_immediate"} {
		rows = append(rows, []string{"sink", k, fmt.Sprintf("%d msgs, %d bytes", s.SinkMessages[k], s.SinkBytes[k])})
	}
	c.table("GROUP\tNAME\tVALUE", rows)
	return nil
}

// withSession runs f on a session connected to peer.
func (c *cli) withSession(peer string, bufLen int, f func(ctx context.Context, s *session) error) error {
	ctx, cancel := context.WithTimeout(context.Background(), c.conn.Timeout)
	defer cancel()
	s, err := dial(ctx, peerAddr(peer), bufLen, c.conn)
	if err != nil {
		return err
	}
	defer s.close()
	return f(ctx, s)
}

func (c *cli) stagTO(stag, to string) (uint32, uint64, error) {
	st, err := parseNum("STAG", stag)
	if err != nil {
		return 0, 0, err
	}
	if st > 0xFFFFFFFF {
		return 0, 0, usagef("STAG %q: at most 32 bits", stag)
	}
	t, err := parseNum("TO", to)
	return uint32(st), t, err
}

func (c *cli) probe(args []string) error {
	var stag uint32
	var to uint64
	if len(args) == 3 {
		var err error
		if stag, to, err = c.stagTO(args[1], args[2]); err != nil {
			return err
		}
	}
	return c.withSession(args[0], 8, func(ctx context.Context, s *session) error {
		res, err := s.qp.ProbeAtomics(ctx, stag, to)
		pt := s.qp.PeerTerminate()
		supported := false
		var note string
		switch {
		case res == verbs.ProbeSupported:
			supported = true
		case res == verbs.ProbeNotSupported:
		case pt != nil && (pt.Layer == term.LayerRDMAP && pt.EType == term.ETypeRDMAPRemoteProtection || pt.Is(term.RDMAPCatastrophicStream)):
			// The peer parsed the Atomic Request and refused its target:
			// it implements RFC 7306.
			supported = true
			note = "the peer understood the FetchAdd and refused its target"
		default:
			if err == nil {
				err = errors.New(res.String())
			}
			return fmt.Errorf("probe %s: %w", args[0], err)
		}
		if c.json {
			out := map[string]any{"peer": args[0], "supported": supported}
			if pt != nil {
				out["terminate"] = pt.String()
			}
			return c.printJSON(out)
		}
		if supported {
			fmt.Fprintln(c.out, "supported: RFC 7306 atomics")
		} else {
			fmt.Fprintln(c.out, "not supported: the peer does not implement RFC 7306 atomics")
		}
		if pt != nil {
			fmt.Fprintln(c.out, "terminate received:", pt.String())
		}
		if note != "" {
			fmt.Fprintln(c.out, "note:", note)
		}
		return nil
	})
}

func (c *cli) atomic(cmd string, args []string) error {
	stag, to, err := c.stagTO(args[1], args[2])
	if err != nil {
		return err
	}
	wr := verbs.SendWR{RemoteSTag: stag, RemoteTO: to}
	if cmd == "fetchadd" {
		if c.compareMask != "" || c.swapMask != "" {
			return usagef("fetchadd takes --mask, not --compare-mask/--swap-mask")
		}
		wr.Op = verbs.OpFetchAdd
		if wr.CompareAdd, err = parseNum("ADD", args[3]); err != nil {
			return err
		}
		if c.mask != "" {
			if wr.AddMask, err = parseNum("--mask", c.mask); err != nil {
				return err
			}
		}
	} else {
		if c.mask != "" {
			return usagef("cmpswap takes --compare-mask and --swap-mask, not --mask")
		}
		wr.Op = verbs.OpCmpSwap
		if wr.CompareAdd, err = parseNum("COMPARE", args[3]); err != nil {
			return err
		}
		if wr.Swap, err = parseNum("SWAP", args[4]); err != nil {
			return err
		}
		wr.CompareMask, wr.SwapMask = ^uint64(0), ^uint64(0)
		if c.compareMask != "" {
			if wr.CompareMask, err = parseNum("--compare-mask", c.compareMask); err != nil {
				return err
			}
		}
		if c.swapMask != "" {
			if wr.SwapMask, err = parseNum("--swap-mask", c.swapMask); err != nil {
				return err
			}
		}
	}
	return c.withSession(args[0], 8, func(ctx context.Context, s *session) error {
		wr.SGL = s.sge(0, 8)
		comp, err := s.do(ctx, wr)
		var oe *opError
		if errors.As(err, &oe) && oe.Term != nil && oe.Term.Is(term.RDMAPCatastrophicStream) {
			// The Terminate RFC 7306 §8.2 prescribes for an atomic whose
			// target is not 8-byte aligned: only the peer knows the
			// address TO resolves to, we know the TO we sent.
			return fmt.Errorf("%s: TO must be 8-byte aligned: the peer refused TO 0x%x (it resolves to an address that is not; RFC 7306 §8.2): %w", cmd, to, err)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", cmd, err)
		}
		if c.json {
			return c.printJSON(map[string]string{"original": fmt.Sprintf("0x%016x", comp.AtomicOrig)})
		}
		fmt.Fprintf(c.out, "original 0x%016x (%d)\n", comp.AtomicOrig, comp.AtomicOrig)
		return nil
	})
}

func (c *cli) read(args []string) error {
	stag, to, err := c.stagTO(args[1], args[2])
	if err != nil {
		return err
	}
	n, err := parseNum("LENGTH", args[3])
	if err != nil {
		return err
	}
	if n > 1<<30 {
		return usagef("LENGTH: at most 1 GiB")
	}
	return c.withSession(args[0], int(n), func(ctx context.Context, s *session) error {
		wr := verbs.SendWR{Op: verbs.OpRead, RemoteSTag: stag, RemoteTO: to}
		if n > 0 {
			wr.SGL = s.sge(0, int(n))
		}
		if _, err := s.do(ctx, wr); err != nil {
			return fmt.Errorf("read: %w", err)
		}
		h := hex.EncodeToString(s.buf[:n])
		if c.json {
			return c.printJSON(map[string]any{"length": n, "data": h})
		}
		fmt.Fprintln(c.out, h)
		return nil
	})
}

func parseHex(s string) ([]byte, error) {
	b, err := hex.DecodeString(strings.TrimPrefix(strings.ToLower(s), "0x"))
	if err != nil {
		return nil, usagef("HEXDATA %q: want hex digits, two per byte", s)
	}
	return b, nil
}

func (c *cli) writeCmd(args []string) error {
	stag, to, err := c.stagTO(args[1], args[2])
	if err != nil {
		return err
	}
	data, err := parseHex(args[3])
	if err != nil {
		return err
	}
	return c.withSession(args[0], len(data), func(ctx context.Context, s *session) error {
		copy(s.buf, data)
		if _, err := s.do(ctx, verbs.SendWR{Op: verbs.OpWrite, SGL: s.sge(0, len(data)), RemoteSTag: stag, RemoteTO: to}); err != nil {
			return refusedOr("write", err)
		}
		if err := s.confirm(ctx); err != nil {
			return fmt.Errorf("write: the peer refused it: %w", err)
		}
		return c.done(map[string]any{"written": len(data)}, fmt.Sprintf("wrote %d bytes", len(data)))
	})
}

// refusedOr words the error of a Write, Send or Immediate Data: the
// peer's Terminate usually fails the confirming Read, but it may also
// arrive before the operation completed locally.
func refusedOr(op string, err error) error {
	var oe *opError
	if errors.As(err, &oe) && oe.Term != nil {
		return fmt.Errorf("%s: the peer refused it: %w", op, err)
	}
	return fmt.Errorf("%s: %w", op, err)
}

func (c *cli) done(j any, text string) error {
	if c.json {
		return c.printJSON(j)
	}
	fmt.Fprintln(c.out, text)
	return nil
}

func (c *cli) send(peer, text string) error {
	return c.withSession(peer, len(text), func(ctx context.Context, s *session) error {
		copy(s.buf, text)
		wr := verbs.SendWR{Op: verbs.OpSend}
		if len(text) > 0 {
			wr.SGL = s.sge(0, len(text))
		}
		if _, err := s.do(ctx, wr); err != nil {
			return refusedOr("send", err)
		}
		if err := s.confirm(ctx); err != nil {
			return fmt.Errorf("send: the peer refused it: %w", err)
		}
		return c.done(map[string]any{"sent": len(text)}, fmt.Sprintf("sent %d bytes", len(text)))
	})
}

func (c *cli) imm(args []string) error {
	v, err := parseNum("VALUE", args[1])
	if err != nil {
		return err
	}
	wr := verbs.SendWR{Op: verbs.OpImm, Imm: v}
	var data []byte
	if c.write != nil {
		wr.Op = verbs.OpWriteWithImm
		if wr.RemoteSTag, wr.RemoteTO, err = c.stagTO(c.write[0], c.write[1]); err != nil {
			return err
		}
		if data, err = parseHex(c.write[2]); err != nil {
			return err
		}
	}
	return c.withSession(args[0], len(data), func(ctx context.Context, s *session) error {
		if data != nil {
			copy(s.buf, data)
			wr.SGL = s.sge(0, len(data))
		}
		if _, err := s.do(ctx, wr); err != nil {
			return refusedOr("imm", err)
		}
		if err := s.confirm(ctx); err != nil {
			return fmt.Errorf("imm: the peer refused it: %w", err)
		}
		return c.done(map[string]any{"immediate": fmt.Sprintf("0x%016x", v), "written": len(data)},
			fmt.Sprintf("sent Immediate Data 0x%016x", v))
	})
}
