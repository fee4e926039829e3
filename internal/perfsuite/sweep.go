package perfsuite

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// The sweep behind `make bench`: every test over message sizes 2 B to
// 1 MiB on both transports (afxdp needs root: two namespaces and a veth,
// as in the demo; without root the kernel transport over loopback), at 1
// and 16 outstanding and with several QPs, next to the kernel TCP
// baseline. It writes each run's JSON, all.json, SVG charts (charts.go)
// and SUMMARY.md into the results folder, and the summary into the
// section of docs/PERFORMANCE.md between the bench markers (summary.go).

// benchRun is one test on one transport, as all.json keeps it.
type benchRun struct {
	Name      string           `json:"name"`
	Test      string           `json:"test"`
	Transport string           `json:"transport"`
	Command   string           `json:"command"`
	Rows      []map[string]any `json:"results"`
	Error     string           `json:"error,omitempty"`
}

// Bench is `xrnic-perf bench [--out DIR] [--doc FILE] [--quick | --goals
// [--reps N]] [--replot DIR]`; it returns the exit status. The full
// sweep ends with the goal table (goals.go); --quick skips it, --goals
// runs only it, with fewer iterations.
func Bench(ctx context.Context, args []string) int {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	out := fs.String("out", "", "results folder (default results/YYYYMMDD-HHMMSS)")
	doc := fs.String("doc", "docs/PERFORMANCE.md", "performance doc whose bench section is rewritten (\"\" for none)")
	quick := fs.Bool("quick", false, "a short sweep (fewer sizes and iterations)")
	replot := fs.String("replot", "", "only redraw the charts of this results folder from its all.json")
	goalsOnly := fs.Bool("goals", false, "only the goal table of issue 16 (fewer iterations; both MTUs as root), into the goal section of --doc")
	reps := fs.Int("reps", 3, "repetitions of every goal run, interleaved (the table takes their medians)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *reps < 1 || (*goalsOnly && *quick) {
		fmt.Fprintln(os.Stderr, "bench: --reps is at least 1; --goals and --quick do not go together")
		return 2
	}
	if *replot != "" {
		raw, err := os.ReadFile(filepath.Join(*replot, "all.json"))
		var doc struct {
			Runs []benchRun `json:"runs"`
		}
		if err == nil {
			err = json.Unmarshal(raw, &doc)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			return 1
		}
		fmt.Println(strings.Join(writeCharts(*replot, doc.Runs), " "))
		return 0
	}
	if *out == "" {
		*out = filepath.Join("results", time.Now().Format("20060102-150405"))
	}
	if err := os.MkdirAll(filepath.Join(*out, "runs"), 0o755); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 1
	}
	e, err := newEnv()
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 1
	}
	e.keep, e.runTimeout = filepath.Join(*out, "runs"), 10*time.Minute
	switch {
	case *goalsOnly:
		e.runTimeout = 2 * time.Minute
		err = e.goals(ctx, *out, *doc, goalsQuick, *reps)
	case *quick:
		err = e.sweep(ctx, *out, *doc, true)
	default:
		if err = e.sweep(ctx, *out, *doc, false); err == nil {
			err = e.goals(ctx, *out, *doc, goalsFull, *reps)
		}
	}
	e.cleanup()
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 1
	}
	return 0
}

// sweep runs every job on every transport, then writes the results
// folder and, unless doc is "", the doc's bench section.
func (e *env) sweep(ctx context.Context, out, doc string, quick bool) error {
	var err error
	if e.tmp, err = os.MkdirTemp("", "xrnicbench-"); err != nil {
		return err
	}
	link := "loopback, kernel transport only (not root)"
	transports := []string{"kernel"}
	if e.root {
		if e.topo, err = newVethPair(); err != nil {
			return err
		}
		link = "veth pair between two network namespaces, MTU 1500"
		transports = []string{"afxdp", "kernel"}
	} else {
		e.topo = loopback
		fmt.Println("not root: the kernel transport over loopback only (sudo make bench adds afxdp)")
	}
	maxSize := "1048576"
	n, nLat, nRate := "1000", "2000", "50000"
	if quick {
		maxSize, n, nLat, nRate = "65536", "200", "300", "5000"
	}
	all := []string{"-a", "--max_size", maxSize}
	type job struct {
		name, test string
		args       []string
		tcp        bool
	}
	var jobs []job
	for _, t := range []struct{ name, test, args string }{
		{"write_bw t16", "write_bw", "-t 16 -n " + n},
		{"write_bw t1", "write_bw", "-t 1 -Q 1 -n " + n},
		{"write_bw t16 q4", "write_bw", "-t 16 -q 4 -n " + n},
		{"read_bw t16", "read_bw", "-t 16 -n " + n},
		{"send_bw t16", "send_bw", "-t 16 -n " + n},
		{"write_lat", "write_lat", "-n " + nLat},
		{"read_lat", "read_lat", "-n " + nLat},
		{"send_lat", "send_lat", "-n " + nLat},
	} {
		jobs = append(jobs, job{t.name, t.test, append(strings.Fields(t.args), all...), false})
	}
	for _, t := range []struct{ name, test, args string }{
		{"atomic_lat", "atomic_lat", "-n " + nLat},
		{"atomic_lat CAS", "atomic_lat", "-A CMP_AND_SWAP -n " + nLat},
		{"imm_lat", "imm_lat", "-n " + nLat},
		{"atomic_bw t1", "atomic_bw", "-t 1 -o 1 -Q 1 -n " + nRate},
		{"atomic_bw t16", "atomic_bw", "-t 16 -o 16 -n " + nRate},
		{"atomic_bw t16 q4", "atomic_bw", "-t 16 -o 16 -q 4 -n " + nRate},
	} {
		jobs = append(jobs, job{t.name, t.test, strings.Fields(t.args), false})
	}
	jobs = append(jobs, job{"tcp_bw", "tcp_bw", append([]string{"-n", n}, all...), true},
		job{"tcp_lat", "tcp_lat", append([]string{"-n", nLat}, all...), true})
	e.steps = 0
	for _, j := range jobs {
		if j.tcp {
			e.steps++
		} else {
			e.steps += len(transports)
		}
	}
	var runs []benchRun
	for _, j := range jobs {
		trs := transports
		if j.tcp {
			trs = []string{"kernel TCP"}
		}
		for _, tr := range trs {
			t0 := time.Now()
			e.progress("%-17s %-10s", j.name, tr)
			rt := tr
			if j.tcp {
				rt = ""
			}
			rows, cmd, err := e.runPair(ctx, j.test, rt, j.args...)
			r := benchRun{Name: j.name, Test: j.test, Transport: tr, Command: cmd, Rows: rows}
			if cmd == "" {
				r.Command = "xrnic-perf " + j.test + " " + strings.Join(j.args, " ") + " --transport " + tr + " SERVER"
			}
			if err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				r.Error = firstLine(err.Error())
				fmt.Printf("    failed: %s\n", r.Error)
			} else {
				fmt.Printf("    %d sizes in %.1fs\n", len(rows), time.Since(t0).Seconds())
			}
			runs = append(runs, r)
		}
	}
	b, _ := json.MarshalIndent(map[string]any{"link": link, "host": hostInfo(), "date": time.Now().Format(time.RFC3339), "runs": runs}, "", "\t")
	if err := os.WriteFile(filepath.Join(out, "all.json"), b, 0o644); err != nil {
		return err
	}
	charts := writeCharts(out, runs)
	sum := summary(runs, link, out, charts, quick)
	if err := os.WriteFile(filepath.Join(out, "SUMMARY.md"), []byte(sum), 0o644); err != nil {
		return err
	}
	if doc != "" {
		if err := updateDoc(doc, sum); err != nil {
			return err
		}
	}
	fmt.Printf("\nwrote %s (all.json, runs/, %s, SUMMARY.md)", out, strings.Join(charts, ", "))
	if doc != "" {
		fmt.Printf(" and the bench section of %s", doc)
	}
	fmt.Printf("; took %.0fs\n", time.Since(e.start).Seconds())
	return nil
}
