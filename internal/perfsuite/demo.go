package perfsuite

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"xrnic/internal/netns"
	"xrnic/internal/perfsuite/perfjson"
)

// The demo (make demo): as root, two network namespaces joined by a veth
// pair, xrnicd with the afxdp transport in one, a tour of the RNIC from
// the other with xrnicctl (tour.go), and a short perf comparison of the
// afxdp and kernel-TCP transports next to plain kernel TCP on the same
// veth. Without root: the same tour on the kernel transport over
// loopback. Everything it creates is removed at the end, on Ctrl-C and on
// failure.

type demo struct {
	*env
	afxdpOK  bool   // xrnicd runs on the afxdp transport
	metrics  string // xrnicd's metrics URL
	tourPeer string // xrnicd's MPA address
	results  []demoRow
}

type demoRow struct {
	metric              string
	unit                string
	afxdp, kernel, tcp  float64
	better              string // "lower" or "higher"
	afxdpErr, kernelErr string
}

// DemoFlags are the options of Demo (for the usage text and its test).
func DemoFlags() *flag.FlagSet {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.Bool("quick", false, "fewer iterations")
	return fs
}

// Demo is `xrnic-perf demo [--quick]`; it returns the exit status.
func Demo(ctx context.Context, args []string) int {
	fs := DemoFlags()
	quick := fs.Lookup("quick").Value.(flag.Getter)
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if len(fs.Args()) == 2 && fs.Arg(0) == "fetch" { // internal: metrics from inside a namespace
		return fetchMetrics(fs.Arg(1))
	}
	e, err := newEnv()
	if err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		return 1
	}
	for _, b := range []string{"xrnicd", "xrnicctl"} {
		if _, err := os.Stat(filepath.Join(e.bin, b)); err != nil {
			fmt.Fprintf(os.Stderr, "demo: %s not next to xrnic-perf in %s (make demo builds them into bin/)\n", b, e.bin)
			return 1
		}
	}
	d := &demo{env: e}
	err = d.run(ctx, quick.Get().(bool))
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
		if err := netns.Check(false); err != nil {
			return errors.New("the ip command (iproute2) is needed: apt-get install iproute2")
		}
		d.progress("creating namespaces and a veth pair (198.18.0.1 <-> 198.18.0.2)")
		if d.topo, err = newVethPair(); err != nil {
			return err
		}
	} else {
		fmt.Fprintln(d.out, "not root: running the tour on the kernel transport over loopback")
		fmt.Fprintln(d.out, "(sudo make demo runs it in two network namespaces with the afxdp transport)")
		d.topo = loopback
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

// perf is the comparison: each metric on each transport, then the kernel
// TCP baseline on the same link.
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
		{"atomic latency (FetchAdd, 1 outstanding)", "µs", "lower", "atomic_lat", []string{"-n", latN}, perfjson.KeyTypical, 1, "tcp_lat", []string{"-n", latN, "-s", "8"}},
		{"atomic rate (FetchAdd, 16 outstanding)", "Mops/s", "higher", "atomic_bw", []string{"-n", rateN, "-t", "16", "-o", "16"}, perfjson.KeyMsgRate, 1, "", nil},
		{"64 KiB RDMA Write bandwidth", "MiB/s", "higher", "write_bw", []string{"-n", bwN, "-s", "65536", "-t", "16"}, perfjson.KeyBWAverage, 1, "tcp_bw", []string{"-n", bwN, "-s", "65536"}},
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
			rows, _, err := d.runPair(ctx, s.test, tr, s.args...)
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
			v := num(rows[0], s.key) * s.scale
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
			rows, _, err := d.runPair(ctx, s.tcp, "", s.tcpArgs...)
			if err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				fmt.Fprintf(d.out, "    failed: %s\n", firstLine(err.Error()))
			} else {
				row.tcp = num(rows[0], s.key)
				if s.key == perfjson.KeyTypical {
					row.tcp *= 2 // tcp_lat reports half the round trip
				}
			}
		}
		d.results = append(d.results, row)
	}
	return nil
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
