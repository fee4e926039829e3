package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The demo (make demo): as root, two network namespaces joined by a veth
// pair (198.18.0.1 and 198.18.0.2, inside the benchmarking range
// 198.18.0.0/15), xrnicd with the afxdp transport in one, a tour of the
// RNIC from the other with xrnicctl, and a short perf comparison of the
// afxdp and kernel-TCP transports next to plain kernel TCP on the same
// veth. Without root: the same tour on the kernel transport over
// loopback. Everything it creates is removed at the end, on Ctrl-C and on
// failure; leftovers of a crashed run (namespaces named xrnicdemo-PID-*
// whose process is gone) are removed first.

const demoNSPrefix = "xrnicdemo-"

type demo struct {
	bin      string // directory of xrnicd, xrnicctl, xrnic-perf
	tmp      string
	root     bool
	nsA, nsB string
	devA     string
	devB     string
	ipA      string
	procs    []*exec.Cmd
	out      io.Writer
	start    time.Time
	step     int
	steps    int
	results  []demoRow
	afxdpOK  bool
	metrics  string
	tourPeer string
	keep     string // bench: where run JSON files are kept
}

func (d *demo) runTimeout() time.Duration {
	if d.keep != "" {
		return 10 * time.Minute
	}
	return time.Minute
}

type demoRow struct {
	metric              string
	unit                string
	afxdp, kernel, tcp  float64
	better              string // "lower" or "higher"
	afxdpErr, kernelErr string
}

func runDemo(ctx context.Context, args []string) int {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	quick := fs.Bool("quick", false, "fewer iterations")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if len(fs.Args()) == 2 && fs.Arg(0) == "fetch" { // internal: metrics from inside a namespace
		return fetchMetrics(fs.Arg(1))
	}
	d := &demo{out: os.Stdout, start: time.Now(), root: os.Geteuid() == 0}
	exe, err := os.Executable()
	if err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		return 1
	}
	d.bin = filepath.Dir(exe)
	for _, b := range []string{"xrnicd", "xrnicctl"} {
		if _, err := os.Stat(filepath.Join(d.bin, b)); err != nil {
			fmt.Fprintf(os.Stderr, "demo: %s not next to xrnic-perf in %s (make demo builds them into bin/)\n", b, d.bin)
			return 1
		}
	}
	err = d.run(ctx, *quick)
	d.cleanup()
	if err != nil {
		if ctx.Err() != nil {
			fmt.Fprintln(d.out, "\ninterrupted: everything the demo created has been removed")
			return 130
		}
		fmt.Fprintln(os.Stderr, "\ndemo failed:", err)
		fmt.Fprintln(os.Stderr, "everything the demo created has been removed")
		return 1
	}
	return 0
}

func (d *demo) progress(format string, a ...any) {
	d.step++
	fmt.Fprintf(d.out, "[%d/%d %5.1fs] %s\n", d.step, d.steps, time.Since(d.start).Seconds(), fmt.Sprintf(format, a...))
}

func (d *demo) run(ctx context.Context, quick bool) error {
	var err error
	if d.tmp, err = os.MkdirTemp("", "xrnicdemo-"); err != nil {
		return err
	}
	d.steps = 5 + 3 + 2 // setup, daemon, tour, metrics, stop; 3 tests per transport; 2 baselines
	if d.root {
		d.steps += 3
	}
	fmt.Fprintln(d.out, "xrnic demo: a software iWARP RNIC with RFC 7306 atomics and Immediate Data")
	if d.root {
		if _, err := exec.LookPath("ip"); err != nil {
			return errors.New("the ip command (iproute2) is needed: apt-get install iproute2")
		}
		removeStaleDemoNS()
		d.progress("creating namespaces and a veth pair (198.18.0.1 <-> 198.18.0.2)")
		if err := d.setupNS(); err != nil {
			return err
		}
	} else {
		fmt.Fprintln(d.out, "not root: running the tour on the kernel transport over loopback")
		fmt.Fprintln(d.out, "(sudo make demo runs it in two network namespaces with the afxdp transport)")
		d.ipA = "127.0.0.1"
		d.progress("using loopback")
	}
	if err := d.startDaemon(ctx); err != nil {
		return err
	}
	if err := d.tour(ctx); err != nil {
		return err
	}
	d.progress("stopping xrnicd (the perf runs need the interface and the CPUs)")
	d.stopAll()
	if err := d.perf(ctx, quick); err != nil {
		return err
	}
	d.table()
	return nil
}

func removeStaleDemoNS() {
	out, _ := exec.Command("ip", "netns", "list").Output()
	for _, line := range strings.Split(string(out), "\n") {
		name, _, _ := strings.Cut(strings.TrimSpace(line), " ")
		rest, ok := strings.CutPrefix(name, demoNSPrefix)
		if !ok {
			continue
		}
		pid, _, _ := strings.Cut(rest, "-")
		if n, err := strconv.Atoi(pid); err == nil {
			if err := syscall.Kill(n, 0); err == nil || errors.Is(err, syscall.EPERM) {
				continue // its demo still runs
			}
		}
		exec.Command("ip", "netns", "del", name).Run()
	}
}

func ipCmd(args ...string) error {
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

func (d *demo) setupNS() error {
	id := strconv.Itoa(os.Getpid())
	d.nsA, d.nsB = demoNSPrefix+id+"-a", demoNSPrefix+id+"-b"
	d.devA, d.devB = "xdemoa", "xdemob"
	d.ipA = "198.18.0.1"
	for _, ns := range []string{d.nsA, d.nsB} {
		if err := ipCmd("netns", "add", ns); err != nil {
			return err
		}
	}
	if err := ipCmd("-n", d.nsA, "link", "add", d.devA, "type", "veth", "peer", "name", d.devB, "netns", d.nsB); err != nil {
		return err
	}
	for _, x := range [][3]string{{d.nsA, d.devA, "198.18.0.1/24"}, {d.nsB, d.devB, "198.18.0.2/24"}} {
		// Both ends of every run use the same transport, so GSO stays on
		// (limiting it would slow the kernel-TCP runs tenfold; only a
		// kernel-TCP peer of an afxdp end needs it, see docs/PERFORMANCE.md).
		for _, a := range [][]string{
			{"-n", x[0], "addr", "add", x[2], "dev", x[1]},
			{"-n", x[0], "link", "set", x[1], "up"},
			{"-n", x[0], "link", "set", "lo", "up"},
		} {
			if err := ipCmd(a...); err != nil {
				return err
			}
		}
	}
	return nil
}

// command builds a command run in namespace ns ("" = here).
func (d *demo) command(ctx context.Context, ns, name string, args ...string) *exec.Cmd {
	path := filepath.Join(d.bin, name)
	var c *exec.Cmd
	if ns != "" {
		c = exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", ns, path}, args...)...)
	} else {
		c = exec.CommandContext(ctx, path, args...)
	}
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	c.Cancel = func() error { return syscall.Kill(-c.Process.Pid, syscall.SIGTERM) }
	c.WaitDelay = 3 * time.Second
	return c
}

func (d *demo) startDaemon(ctx context.Context) error {
	sock := filepath.Join(d.tmp, "xrnicd.sock")
	listen, metrics := d.ipA+":7306", d.ipA+":9736"
	if !d.root {
		listen, metrics = "127.0.0.1:"+freeLocalPort(), "127.0.0.1:"+freeLocalPort()
	}
	d.tourPeer, d.metrics = listen, "http://"+metrics+"/metrics"
	args := []string{"--listen", listen, "--metrics", metrics, "--socket", sock, "--hugepages", "prefer",
		"--region", "counter:4K:rwa", "--region", "data:64K:rw", "--log-level", "warn"}
	try := []string{"kernel"}
	if d.root {
		try = []string{"afxdp", "kernel"}
	}
	for _, tr := range try {
		a := append([]string{"--transport", tr}, args...)
		if tr == "afxdp" {
			a = append(a, "--iface", d.devA)
		}
		d.progress("starting xrnicd (%s transport) %s", tr, strings.Join(a, " "))
		logf := filepath.Join(d.tmp, "xrnicd-"+tr+".log")
		lf, err := os.Create(logf)
		if err != nil {
			return err
		}
		c := d.command(context.WithoutCancel(ctx), d.nsA, "xrnicd", a...)
		c.Stdout, c.Stderr = lf, lf
		if err := c.Start(); err != nil {
			lf.Close()
			return err
		}
		d.procs = append(d.procs, c)
		exited := make(chan error, 1)
		go func() { exited <- c.Wait(); lf.Close() }()
		ready := false
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
			select {
			case <-exited:
				deadline = time.Time{}
				continue
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(100 * time.Millisecond):
			}
			if exec.Command(filepath.Join(d.bin, "xrnicctl"), "--socket", sock, "status").Run() == nil {
				ready = true
				break
			}
		}
		if ready {
			d.afxdpOK = tr == "afxdp"
			fmt.Fprintf(d.out, "    xrnicd is ready: MPA on %s, metrics at %s\n", listen, d.metrics)
			return nil
		}
		log, _ := os.ReadFile(logf)
		fmt.Fprintf(d.out, "    xrnicd did not start with the %s transport:\n%s\n", tr, indent(string(log)))
		d.stopAll()
	}
	return errors.New("xrnicd did not start")
}

func indent(s string) string {
	var b strings.Builder
	for _, l := range strings.Split(strings.TrimRight(s, "\n"), "\n") {
		b.WriteString("      " + l + "\n")
	}
	return strings.TrimRight(b.String(), "\n")
}

func freeLocalPort() string {
	return strconv.Itoa(pickPort())
}

type regionJSON struct {
	Name string `json:"name"`
	STag string `json:"stag"`
	TO   string `json:"to"`
}

func (d *demo) ctl(ctx context.Context, args ...string) (string, error) {
	tr := []string{"--transport", "kernel"}
	if d.afxdpOK {
		tr = []string{"--transport", "afxdp", "--iface", d.devB}
	}
	full := append(append([]string{}, args[:1]...), append(tr, args[1:]...)...)
	fmt.Fprintf(d.out, "    $ xrnicctl %s\n", strings.Join(full, " "))
	out, err := d.command(ctx, d.nsB, "xrnicctl", full...).CombinedOutput()
	if err != nil && d.afxdpOK {
		// The client side may lack afxdp support: fall back to kernel TCP.
		full = append(append([]string{}, args[:1]...), append([]string{"--transport", "kernel"}, args[1:]...)...)
		out, err = d.command(ctx, d.nsB, "xrnicctl", full...).CombinedOutput()
	}
	fmt.Fprint(d.out, indent(string(out))+"\n")
	return string(out), err
}

func (d *demo) tour(ctx context.Context) error {
	sock := filepath.Join(d.tmp, "xrnicd.sock")
	out, err := exec.Command(filepath.Join(d.bin, "xrnicctl"), "--socket", sock, "-j", "region", "list").Output()
	if err != nil {
		return fmt.Errorf("xrnicctl region list: %w", err)
	}
	var regs []regionJSON
	if err := json.Unmarshal(out, &regs); err != nil {
		return fmt.Errorf("region list: %w", err)
	}
	stag := map[string]string{}
	for _, r := range regs {
		stag[r.Name] = r.STag
	}
	peer := d.tourPeer
	d.progress("the tour, from the other side (%s)", map[bool]string{true: "namespace " + d.nsB, false: "this host"}[d.root])
	steps := []struct {
		what string
		args []string
	}{
		{"capability probe: does the peer execute RFC 7306 atomics? (a FetchAdd of 0)", []string{"probe", peer, stag["counter"], "0"}},
		{"masked FetchAdd: +1 in each 32-bit half, carries stop at bits 31 and 63", []string{"fetchadd", peer, stag["counter"], "0", "0x0000000100000001", "--mask", "0x8000000080000000"}},
		{"again: the original value shows both halves counted", []string{"fetchadd", peer, stag["counter"], "0", "0x0000000100000001", "--mask", "0x8000000080000000"}},
		{"masked CmpSwap: compare and swap the low half only (2 -> 0x77)", []string{"cmpswap", peer, stag["counter"], "0", "2", "0x77", "--compare-mask", "0xffffffff", "--swap-mask", "0xffffffff"}},
		{"FetchAdd of 0 reads the result: high half 2, low half 0x77", []string{"fetchadd", peer, stag["counter"], "0", "0"}},
		{"Write with Immediate: 13 bytes into the data region, then Immediate Data 42", []string{"imm", peer, "42", "--write", stag["data"], "0", "48656c6c6f2c206957415250"}},
		{"RDMA Read of them back", []string{"read", peer, stag["data"], "0", "12"}},
	}
	for _, s := range steps {
		fmt.Fprintf(d.out, "  - %s\n", s.what)
		if _, err := d.ctl(ctx, s.args...); err != nil {
			return fmt.Errorf("%s: %w", s.args[0], err)
		}
	}
	d.progress("xrnicd's counters (Prometheus) at %s", d.metrics)
	var body string
	if d.root {
		o, err := d.command(ctx, d.nsB, "xrnic-perf", "demo", "fetch", d.metrics).Output()
		if err != nil {
			return fmt.Errorf("fetch metrics: %w", err)
		}
		body = string(o)
	} else {
		body = metricsLines(d.metrics)
	}
	fmt.Fprint(d.out, indent(body)+"\n")
	return nil
}

func fetchMetrics(url string) int {
	fmt.Print(metricsLines(url))
	return 0
}

// metricsLines fetches url and keeps the interesting xrnic series.
func metricsLines(url string) string {
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return "metrics: " + err.Error() + "\n"
	}
	defer resp.Body.Close()
	var b strings.Builder
	sc := bufio.NewScanner(resp.Body)
	n := 0
	for sc.Scan() {
		l := sc.Text()
		if strings.HasPrefix(l, "#") || !strings.HasPrefix(l, "xrnic_") || strings.HasSuffix(l, " 0") {
			continue
		}
		if strings.Contains(l, "atomic") || strings.Contains(l, "immediate") || strings.Contains(l, "mpa_") || strings.Contains(l, "qps") || strings.Contains(l, "rdmap") {
			if n < 14 {
				b.WriteString(l + "\n")
			}
			n++
		}
	}
	if n > 14 {
		fmt.Fprintf(&b, "... (%d more series)\n", n-14)
	}
	return b.String()
}

func (d *demo) stopAll() {
	for _, c := range d.procs {
		if c.Process != nil {
			syscall.Kill(-c.Process.Pid, syscall.SIGTERM)
		}
	}
	for _, c := range d.procs {
		if c.Process != nil {
			done := make(chan struct{})
			go func() { c.Process.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				syscall.Kill(-c.Process.Pid, syscall.SIGKILL)
			}
		}
	}
	d.procs = nil
}

func (d *demo) cleanup() {
	d.stopAll()
	if d.nsA != "" {
		exec.Command("ip", "netns", "del", d.nsA).Run()
		exec.Command("ip", "netns", "del", d.nsB).Run()
	}
	if d.tmp != "" {
		os.RemoveAll(d.tmp)
	}
}

// perfRun runs one xrnic-perf test (server in A, client in B) and returns
// the client's JSON results.
func (d *demo) perfRun(ctx context.Context, test, transport string, extra ...string) (map[string]any, error) {
	var rows []map[string]any
	if _, err := d.perfRunInto(ctx, &rows, test, transport, extra...); err != nil {
		return nil, err
	}
	return rows[0], nil
}

// perfRunInto runs the test and stores its result rows; it returns the
// client's command line.
func (d *demo) perfRunInto(ctx context.Context, rows *[]map[string]any, test, transport string, extra ...string) (string, error) {
	port := strconv.Itoa(pickPort())
	jf := filepath.Join(d.tmp, fmt.Sprintf("%s-%s-%s.json", test, transport, port))
	common := append([]string{test, "-p", port, "--quiet", "--timeout", "60s"}, extra...)
	srvArgs := append([]string{}, common...)
	cliArgs := append(append([]string{}, common...), "--out_json_file", jf, d.ipA)
	if transport != "" && !strings.HasPrefix(test, "tcp") {
		srvArgs = append(srvArgs, "--transport", transport)
		cliArgs = append(cliArgs, "--transport", transport)
		if transport == "afxdp" {
			srvArgs = append(srvArgs, "--iface", d.devA)
			cliArgs = append(cliArgs, "--iface", d.devB)
		}
	}
	if d.ipA != "127.0.0.1" {
		srvArgs = append(srvArgs, "--bind", d.ipA)
	} else {
		srvArgs = append(srvArgs, "--bind", "127.0.0.1")
	}
	rctx, cancel := context.WithTimeout(ctx, d.runTimeout())
	defer cancel()
	srv := d.command(rctx, d.nsA, "xrnic-perf", srvArgs...)
	var sout bytes.Buffer
	srv.Stdout, srv.Stderr = &sout, &sout
	if err := srv.Start(); err != nil {
		return "", err
	}
	cli := d.command(rctx, d.nsB, "xrnic-perf", cliArgs...)
	cout, cerr := cli.CombinedOutput()
	if cerr != nil {
		syscall.Kill(-srv.Process.Pid, syscall.SIGTERM)
	}
	serr := srv.Wait()
	if cerr != nil {
		// Keep the sizes that completed (the client writes them).
		if b, err := os.ReadFile(jf); err == nil {
			if r, err := resultRows(b); err == nil {
				*rows = r
			}
		}
		return "", fmt.Errorf("%s (%s: %v; server: %s)", lastLine(string(cout)), test, cerr, lastLine(sout.String()))
	}
	if serr != nil {
		return "", fmt.Errorf("%s(%s server: %v)", sout.String(), test, serr)
	}
	b, err := os.ReadFile(jf)
	if err != nil {
		return "", err
	}
	r, err := resultRows(b)
	if err != nil || len(r) == 0 {
		return "", fmt.Errorf("%s: no results in %s: %v", test, jf, err)
	}
	*rows = r
	if d.keep != "" {
		os.WriteFile(filepath.Join(d.keep, filepath.Base(jf)), b, 0o644)
	}
	var shown []string
	for i := 0; i < len(cliArgs); i++ {
		switch cliArgs[i] {
		case "-p", "--timeout", "--out_json_file":
			i++
			continue
		case "--quiet", d.ipA:
			continue
		}
		shown = append(shown, cliArgs[i])
	}
	return "xrnic-perf " + strings.Join(shown, " ") + " SERVER", nil
}

// perfRunAll is perfRun for runs with several sizes (-a).
func (d *demo) perfRunAll(ctx context.Context, test, transport string, extra ...string) ([]map[string]any, error) {
	var rows []map[string]any
	_, err := d.perfRunInto(ctx, &rows, test, transport, extra...)
	return rows, err
}

// resultRows decodes the results of a --out_json file: an object for one
// size, an array for several.
func resultRows(b []byte) ([]map[string]any, error) {
	var doc struct {
		Results json.RawMessage `json:"results"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		return nil, err
	}
	var one map[string]any
	if json.Unmarshal(doc.Results, &one) == nil {
		return []map[string]any{one}, nil
	}
	var many []map[string]any
	err := json.Unmarshal(doc.Results, &many)
	return many, err
}

func num(m map[string]any, k string) float64 {
	f, _ := m[k].(float64)
	return f
}

func (d *demo) perf(ctx context.Context, quick bool) error {
	latN, rateN, bwN := "3000", "50000", "5000"
	if quick {
		latN, rateN, bwN = "500", "5000", "500"
	}
	type spec struct {
		metric, unit, better string
		test                 string
		args                 []string
		key                  string
		scale                float64
		tcp                  string
		tcpArgs              []string
	}
	specs := []spec{
		{"atomic latency (FetchAdd, 1 outstanding)", "µs", "lower", "atomic_lat", []string{"-n", latN}, "t_typical", 1, "tcp_lat", []string{"-n", latN, "-s", "8"}},
		{"atomic rate (FetchAdd, 16 outstanding)", "Mops/s", "higher", "atomic_bw", []string{"-n", rateN, "-t", "16", "-o", "16"}, "MsgRate", 1, "", nil},
		{"64 KiB RDMA Write bandwidth", "MiB/s", "higher", "write_bw", []string{"-n", bwN, "-s", "65536", "-t", "16"}, "BW_average", 1, "tcp_bw", []string{"-n", bwN, "-s", "65536"}},
	}
	transports := []string{"kernel"}
	if d.root {
		transports = []string{"afxdp", "kernel"}
	}
	d.steps = d.step
	for _, s := range specs {
		d.steps += len(transports)
		if s.tcp != "" {
			d.steps++
		}
	}
	for _, s := range specs {
		row := demoRow{metric: s.metric, unit: s.unit, better: s.better}
		for _, tr := range transports {
			if tr == "afxdp" && !d.afxdpOK {
				row.afxdpErr = "n/a"
				continue
			}
			d.progress("%s on the %s transport", s.test, tr)
			r, err := d.perfRun(ctx, s.test, tr, s.args...)
			if err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				fmt.Fprintf(d.out, "    failed: %s\n", firstLine(err.Error()))
				if tr == "afxdp" {
					row.afxdpErr = "failed"
				} else {
					row.kernelErr = "failed"
				}
				continue
			}
			v := num(r, s.key) * s.scale
			fmt.Fprintf(d.out, "    %s = %.2f %s\n", s.key, v, s.unit)
			if tr == "afxdp" {
				row.afxdp = v
			} else {
				row.kernel = v
			}
		}
		if !d.root {
			row.afxdpErr = "needs root"
		}
		if s.tcp != "" {
			d.progress("%s: kernel TCP baseline on the same link", s.tcp)
			r, err := d.perfRun(ctx, s.tcp, "", s.tcpArgs...)
			if err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				fmt.Fprintf(d.out, "    failed: %s\n", firstLine(err.Error()))
			} else {
				row.tcp = num(r, s.key)
				if s.key == "t_typical" {
					row.tcp *= 2 // tcp_lat reports half the round trip
				}
			}
		}
		d.results = append(d.results, row)
	}
	return nil
}

func firstLine(s string) string {
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			return l
		}
	}
	return s
}

func (d *demo) table() {
	link := "loopback (kernel transport only: not root)"
	if d.root {
		link = "veth between two namespaces, MTU 1500"
	}
	fmt.Fprintf(d.out, "\nResults on %s (one short run each; see docs/PERFORMANCE.md for the full sweep):\n\n", link)
	fmt.Fprintf(d.out, "  %-42s %12s %12s %12s %10s %10s\n", "metric", "afxdp", "kernel-TCP", "plain TCP", "afxdp/", "afxdp/")
	fmt.Fprintf(d.out, "  %-42s %12s %12s %12s %10s %10s\n", "", "transport", "transport", "", "kernel", "TCP")
	cell := func(v float64, e string) string {
		if e != "" {
			return e
		}
		if v == 0 {
			return "-"
		}
		return strconv.FormatFloat(v, 'f', 2, 64)
	}
	ratio := func(a, b float64) string {
		if a == 0 || b == 0 {
			return "-"
		}
		return strconv.FormatFloat(a/b, 'f', 2, 64) + "x"
	}
	for _, r := range d.results {
		fmt.Fprintf(d.out, "  %-42s %12s %12s %12s %10s %10s\n", r.metric+" ["+r.unit+"]",
			cell(r.afxdp, r.afxdpErr), cell(r.kernel, r.kernelErr), cell(r.tcp, ""), ratio(r.afxdp, r.kernel), ratio(r.afxdp, r.tcp))
	}
	fmt.Fprintln(d.out, "\n  Latency: lower is better; atomic latency is a full round trip, and so is the TCP baseline's (8-byte ping-pong).")
	fmt.Fprintf(d.out, "  xrnicd served its metrics at %s during the tour (Prometheus text; deploy/ has dashboards).\n", d.metrics)
	fmt.Fprintf(d.out, "  Took %.0f s. Cleaned up: namespaces, veth, processes, temporary files.\n", time.Since(d.start).Seconds())
}

func lastLine(s string) string {
	l := strings.Split(strings.TrimSpace(s), "\n")
	return strings.TrimSpace(l[len(l)-1])
}
