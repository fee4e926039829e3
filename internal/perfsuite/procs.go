package perfsuite

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"xrnic/internal/freeport"
	"xrnic/internal/netns"
	"xrnic/internal/perfsuite/perfjson"
)

// env is what the demo and the sweep share: the binaries they run, the
// two ends, the processes started, a temporary folder and the numbered
// progress lines.
type env struct {
	bin        string // directory of xrnicd, xrnicctl, xrnic-perf
	tmp        string
	root       bool
	topo       topology
	procs      []*exec.Cmd // long-running ones (xrnicd), stopped by stopAll
	out        io.Writer
	start      time.Time
	step       int
	steps      int
	keep       string        // sweep: where each run's JSON is kept
	runTimeout time.Duration // bound of one xrnic-perf server and client
}

// newEnv finds the binaries next to the running executable (make builds
// them all into bin/).
func newEnv() (*env, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	return &env{bin: filepath.Dir(exe), root: os.Geteuid() == 0, out: os.Stdout, start: time.Now(), runTimeout: time.Minute}, nil
}

func (e *env) progress(format string, a ...any) {
	e.step++
	fmt.Fprintf(e.out, "[%d/%d %5.1fs] %s\n", e.step, e.steps, time.Since(e.start).Seconds(), fmt.Sprintf(format, a...))
}

// command builds a command of bin run in namespace ns ("" = here), in a
// process group of its own so that cancelling ctx ends its children too,
// and killed if we die first (netns.CommandContext's Pdeathsig).
func (e *env) command(ctx context.Context, ns, name string, args ...string) *exec.Cmd {
	c := netns.CommandContext(ctx, ns, filepath.Join(e.bin, name), args...)
	c.SysProcAttr.Setpgid = true
	c.Cancel = func() error { return syscall.Kill(-c.Process.Pid, syscall.SIGTERM) }
	c.WaitDelay = 3 * time.Second
	return c
}

// stopAll ends the long-running processes: SIGTERM, SIGKILL after 5 s.
func (e *env) stopAll() {
	for _, c := range e.procs {
		if c.Process != nil {
			syscall.Kill(-c.Process.Pid, syscall.SIGTERM)
		}
	}
	for _, c := range e.procs {
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
	e.procs = nil
}

// cleanup removes everything the run created; it runs on success, on
// failure and on Ctrl-C.
func (e *env) cleanup() {
	e.stopAll()
	if err := e.topo.remove(); err != nil {
		fmt.Fprintln(os.Stderr, "cleanup:", err)
	}
	if e.tmp != "" {
		os.RemoveAll(e.tmp)
	}
}

// runPair runs one xrnic-perf test, the server in A and the client in B
// (transport "" for the kernel TCP baselines), and returns the client's
// result rows and its command line as SUMMARY.md shows it. On failure the
// rows are those of the sizes that completed, if any, and cmd is "".
func (e *env) runPair(ctx context.Context, test, transport string, extra ...string) (rows []map[string]any, cmd string, err error) {
	port := strconv.Itoa(pickPort())
	jf := filepath.Join(e.tmp, fmt.Sprintf("%s-%s-%s.json", test, transport, port))
	common := append([]string{test, "-p", port, "--quiet", "--timeout", "60s"}, extra...)
	srvArgs := append([]string{}, common...)
	cliArgs := append(append([]string{}, common...), "--out_json_file", jf, e.topo.ipA)
	if transport != "" && !strings.HasPrefix(test, "tcp") {
		srvArgs = append(srvArgs, "--transport", transport)
		cliArgs = append(cliArgs, "--transport", transport)
		if transport == "afxdp" {
			srvArgs = append(srvArgs, "--iface", e.topo.devA)
			cliArgs = append(cliArgs, "--iface", e.topo.devB)
		}
	}
	srvArgs = append(srvArgs, "--bind", e.topo.ipA)
	rctx, cancel := context.WithTimeout(ctx, e.runTimeout)
	defer cancel()
	srv := e.command(rctx, e.topo.nsA, "xrnic-perf", srvArgs...)
	var sout bytes.Buffer
	srv.Stdout, srv.Stderr = &sout, &sout
	if err := srv.Start(); err != nil {
		return nil, "", err
	}
	cli := e.command(rctx, e.topo.nsB, "xrnic-perf", cliArgs...)
	cout, cerr := cli.CombinedOutput()
	if cerr != nil {
		syscall.Kill(-srv.Process.Pid, syscall.SIGTERM)
	}
	serr := srv.Wait()
	if cerr != nil {
		// Keep the sizes that completed (the client writes them).
		if b, err := os.ReadFile(jf); err == nil {
			if r, err := perfjson.Rows(b); err == nil {
				rows = r
			}
		}
		return rows, "", fmt.Errorf("%s (%s: %v; server: %s)", lastLine(string(cout)), test, cerr, lastLine(sout.String()))
	}
	if serr != nil {
		return nil, "", fmt.Errorf("%s(%s server: %v)", sout.String(), test, serr)
	}
	b, err := os.ReadFile(jf)
	if err != nil {
		return nil, "", err
	}
	rows, err = perfjson.Rows(b)
	if err != nil || len(rows) == 0 {
		return nil, "", fmt.Errorf("%s: no results in %s: %v", test, jf, err)
	}
	if e.keep != "" {
		os.WriteFile(filepath.Join(e.keep, filepath.Base(jf)), b, 0o644)
	}
	var shown []string
	for i := 0; i < len(cliArgs); i++ {
		switch cliArgs[i] {
		case "-p", "--timeout", "--out_json_file":
			i++
			continue
		case "--quiet", e.topo.ipA:
			continue
		}
		shown = append(shown, cliArgs[i])
	}
	return rows, "xrnic-perf " + strings.Join(shown, " ") + " SERVER", nil
}

// pickPort returns a TCP port that was free a moment ago, below the
// ephemeral range (internal/freeport).
func pickPort() int {
	p, err := freeport.Pick()
	if err != nil {
		return 18515
	}
	return p
}

// num reads a number of a result row (0 when absent).
func num(m map[string]any, k string) float64 {
	f, _ := m[k].(float64)
	return f
}

func firstLine(s string) string {
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			return l
		}
	}
	return s
}

func lastLine(s string) string {
	l := strings.Split(strings.TrimSpace(s), "\n")
	return strings.TrimSpace(l[len(l)-1])
}
