// Command testreport turns `go test -json` into what a person reads: the
// usual one line per package, the whole output of every failed test, the
// slowest packages, and a closing count. make unit pipes its go test runs
// through it, so that CI's log shows where the time went and every
// failure, not only the first.
//
//	go test -json ./... | go run ./internal/tools/testreport -name unit -slowest 10
//
// It exits non-zero when a test or a package failed, or when the input
// ended inside a package (go test was killed).
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"
)

// event is one line of `go test -json` (cmd/test2json).
type event struct {
	Action  string
	Package string
	Test    string
	Output  string
	Elapsed float64
}

type pkgState struct {
	name    string
	out     []string            // package-level output
	tests   map[string][]string // each running test's output
	elapsed time.Duration
	done    bool
	failed  bool
}

type report struct {
	w                    io.Writer
	pkgs                 map[string]*pkgState
	order                []*pkgState
	passed, failed, skip int
	skipped              []string
	failedTests          []string
}

func (r *report) pkg(name string) *pkgState {
	p := r.pkgs[name]
	if p == nil {
		p = &pkgState{name: name, tests: map[string][]string{}}
		r.pkgs[name] = p
		r.order = append(r.order, p)
	}
	return p
}

func (r *report) event(e event) {
	if e.Package == "" {
		if e.Output != "" {
			fmt.Fprint(r.w, e.Output) // build output
		}
		return
	}
	p := r.pkg(e.Package)
	if e.Test == "" {
		switch e.Action {
		case "output":
			p.out = append(p.out, e.Output)
		case "pass", "fail", "skip":
			p.done = true
			p.failed = e.Action == "fail"
			p.elapsed = time.Duration(e.Elapsed * float64(time.Second))
			r.finish(p)
		}
		return
	}
	switch e.Action {
	case "output":
		p.tests[e.Test] = append(p.tests[e.Test], e.Output)
	case "pass":
		r.passed++
		delete(p.tests, e.Test)
	case "skip":
		r.skip++
		r.skipped = append(r.skipped, e.Package+" "+e.Test+": "+skipReason(p.tests[e.Test]))
		delete(p.tests, e.Test)
	case "fail":
		r.failed++
		r.failedTests = append(r.failedTests, e.Package+" "+e.Test)
		// A parent's output holds its subtests' too: print the
		// innermost failures whole, and a parent only for lines of its
		// own.
		for _, l := range p.tests[e.Test] {
			fmt.Fprint(r.w, l)
		}
		delete(p.tests, e.Test)
	}
}

// skipReason is the message of a skipped test's output.
func skipReason(out []string) string {
	for i := len(out) - 1; i >= 0; i-- {
		l := strings.TrimSpace(out[i])
		if l != "" && !strings.HasPrefix(l, "--- SKIP") && !strings.HasPrefix(l, "=== ") {
			return l
		}
	}
	return "(no message)"
}

// finish prints a package's own lines: the "ok"/"FAIL" line, and on a
// failure whatever the package printed outside its tests (a panic, a
// timeout's goroutine dump, a TestMain message).
func (r *report) finish(p *pkgState) {
	for _, l := range p.out {
		t := strings.TrimSpace(l)
		if !p.failed && (t == "PASS" || strings.HasPrefix(t, "=== ") || t == "") {
			continue
		}
		if !p.failed && !strings.HasPrefix(t, "ok") && !strings.HasPrefix(t, "?") && !strings.HasPrefix(t, "testclean:") {
			continue
		}
		fmt.Fprint(r.w, l)
	}
	// Tests still running when the package ended (a timeout or a crash):
	// their output is the evidence.
	for name, out := range p.tests {
		fmt.Fprintf(r.w, "--- unfinished %s:\n", name)
		for _, l := range out {
			fmt.Fprint(r.w, l)
		}
	}
}

func main() {
	name := flag.String("name", "test", "the word before the closing count")
	slowest := flag.Int("slowest", 10, "how many of the slowest packages to list")
	durations := flag.String("durations", "", "also write each package's duration (TSV: seconds, package, result) to this file")
	flag.Parse()
	r := &report{w: os.Stdout, pkgs: map[string]*pkgState{}}
	sc := bufio.NewScanner(os.Stdin)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var e event
		if len(line) == 0 || line[0] != '{' || json.Unmarshal(line, &e) != nil {
			fmt.Printf("%s\n", line) // not JSON: go vet or the build talking
			continue
		}
		r.event(e)
	}
	bad := false
	for _, p := range r.order {
		if !p.done {
			fmt.Printf("FAIL\t%s\t(no result: go test was interrupted)\n", p.name)
			r.finish(&pkgState{name: p.name, out: p.out, tests: p.tests, failed: true})
			bad = true
		}
		if p.failed {
			bad = true
		}
	}
	byTime := append([]*pkgState(nil), r.order...)
	sort.Slice(byTime, func(i, j int) bool { return byTime[i].elapsed > byTime[j].elapsed })
	if *durations != "" {
		var b strings.Builder
		for _, p := range byTime {
			res := "ok"
			if p.failed || !p.done {
				res = "FAIL"
			}
			fmt.Fprintf(&b, "%.1f\t%s\t%s\n", p.elapsed.Seconds(), p.name, res)
		}
		if err := os.WriteFile(*durations, []byte(b.String()), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "testreport:", err)
		}
	}
	if n := min(*slowest, len(byTime)); n > 0 {
		fmt.Printf("%s: slowest packages:\n", *name)
		for _, p := range byTime[:n] {
			fmt.Printf("  %7.1fs  %s\n", p.elapsed.Seconds(), p.name)
		}
	}
	if len(r.skipped) > 0 {
		fmt.Printf("%s: %d skipped:\n", *name, len(r.skipped))
		for _, s := range r.skipped {
			fmt.Printf("  %s\n", s)
		}
	}
	if len(r.failedTests) > 0 {
		fmt.Printf("%s: failed:\n", *name)
		for _, s := range r.failedTests {
			fmt.Printf("  %s\n", s)
		}
	}
	fmt.Printf("%s: %d passed, %d failed, %d skipped\n", *name, r.passed, r.failed, r.skip)
	if bad || r.failed > 0 {
		os.Exit(1)
	}
}
