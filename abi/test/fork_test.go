package abitest

import (
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"xrnic/internal/netnstest"
)

// forkMessage is the start of what libibverbs.so.1 says, once, in a
// child forked after the engine was loaded.
const forkMessage = "xrnic: this process forked after the xrnic engine (libxrnic.so) was loaded"

// killNamespacePids kills every process left in ns (a forked child the
// test's own process kill did not reach), before the namespace goes.
func killNamespacePids(t testing.TB, ns string) {
	out, _ := exec.Command("ip", "netns", "pids", ns).Output()
	for _, f := range strings.Fields(string(out)) {
		if pid, err := strconv.Atoi(f); err == nil {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// kernelPair is a namespace pair on the kernel transport (the processes
// here connect to their own address, which afxdp on a veth cannot see).
func kernelPair(t *testing.T) *env {
	lib := requireLibs(t)
	requireBins(t)
	netnstest.RequireRoot(t, false)
	netnstest.RemoveStale(nsPrefix)
	p := netnstest.NewPair(t, netnstest.PairOptions{Prefix: nsPrefix, DevA: "xra", DevB: "xrb", AddrA: ipA, AddrB: ipB})
	t.Cleanup(func() {
		killNamespacePids(t, p.NSA)
		killNamespacePids(t, p.NSB)
	})
	e := &env{lib: lib, tr: transports[0], pair: p, port: 23000}
	e.waitRunning(t)
	return e
}

// TestFork runs c/forktest.c: children forked before the engine is
// loaded each load their own and move data; a child forked after it gets
// EIO at once from every call (forktest kills a child that hangs and
// reports it), and the parent keeps working.
func TestFork(t *testing.T) {
	e := kernelPair(t)
	bin := buildC(t, "forktest")
	for _, c := range []struct {
		mode string
		want []string
	}{
		{"before", []string{"fork_before"}},
		{"after", []string{"fork_after"}},
	} {
		t.Run(c.mode, func(t *testing.T) {
			port := e.nextPort()
			e.nextPort()
			e.nextPort() // children: port+1, port+2
			p := e.start(t, e.pair.NSA, 2*time.Minute, nil, bin, c.mode, ipA.String(), fmt.Sprint(port))
			err := p.wait()
			out := p.out.String()
			order, res := checks(out)
			if len(order) == 0 {
				t.Fatalf("no checks reported\n%s", p.describe())
			}
			for _, name := range order {
				for _, l := range res[name] {
					if strings.HasPrefix(l, "FAIL ") {
						t.Error(l)
					}
				}
			}
			oks := strings.Count(out, "ok "+c.want[0]+" ")
			switch c.mode {
			case "before":
				if oks != 3 {
					t.Errorf("%d of parent, child1, child2 moved data, want 3", oks)
				}
				if strings.Contains(out, forkMessage) {
					t.Errorf("a child forked before the load was told it forked after")
				}
			case "after":
				if oks != 9 {
					t.Errorf("%d of 9 checks passed (parent before and after, 7 in the child)", oks)
				}
				if n := strings.Count(out, forkMessage); n != 1 {
					t.Errorf("the child said %d times that it forked after the load, want once", n)
				}
			}
			if err != nil && !t.Failed() {
				t.Errorf("%s", p.describe())
			}
			if t.Failed() {
				t.Logf("output:\n%s", out)
			}
		})
	}
	t.Run("sigurg", func(t *testing.T) {
		// Go takes SIGURG when its runtime starts and never forwards it:
		// a handler the application installed before must come back.
		p := e.start(t, e.pair.NSA, time.Minute, nil, bin, "sigurg")
		if err := p.wait(); err != nil || !strings.Contains(p.out.String(), "ok sigurg") {
			t.Errorf("%s", p.describe())
		}
	})
}

// qperfResult matches a result line: "    latency  =  54.3 us".
var qperfResult = regexp.MustCompile(`(?m)^\s+(latency|bw|msg_rate)\s+=\s+([0-9.,]+)\s+\S+`)

// TestQperf runs Debian's unmodified qperf over rdma_cm (-cm1): the server
// forks a child per test before it touches RDMA, which loads its own
// engine. Kernel transport, qperf's default options: every RC test of
// the issue, rc_rdma_write_lat's Write with Immediate into qperf's 1-byte
// receives included (docs/VERBS-ABI.md), and the atomics.
func TestQperf(t *testing.T) {
	requireBins(t, "qperf")
	e := kernelPair(t)
	srv := e.start(t, e.pair.NSA, 5*time.Minute, nil, "qperf", "-lp", "19765")
	deadline := time.Now().Add(10 * time.Second)
	for {
		out, _ := exec.Command("ip", "netns", "exec", e.pair.NSA, "ss", "-Hltn", "sport = :19765").Output()
		if strings.Contains(string(out), "19765") {
			break
		}
		if srv.exited() || time.Now().After(deadline) {
			t.Fatalf("qperf server not listening\n%s", srv.describe())
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, test := range [][]string{
		{"rc_lat"}, {"rc_bw"}, {"rc_bi_bw"}, {"rc_rdma_write_lat"}, {"rc_rdma_write_bw"},
		{"rc_rdma_write_poll_lat"}, {"rc_rdma_read_lat"}, {"rc_rdma_read_bw"},
		{"rc_compare_swap_mr"}, {"rc_fetch_add_mr"},
	} {
		name := test[len(test)-1]
		t.Run(name, func(t *testing.T) {
			args := append([]string{"-lp", "19765", "-cm1", "-t", "2", ipA.String()}, test...)
			out, err := e.run(t, e.pair.NSB, 90*time.Second, "qperf", args...)
			for try := 1; try < 8 && err != nil && strings.Contains(out, "unexpected event from RDMA CM: Event rejected"); try++ {
				// qperf 0.4.11's own race: its server child sends the
				// client the port after rdma_bind_addr and before
				// rdma_listen, so the client can connect first and be
				// refused (fixed upstream after 0.4.11: "Fix rdmacm race").
				t.Logf("try %d: qperf's client beat its server's rdma_listen; again", try)
				out, err = e.run(t, e.pair.NSB, 90*time.Second, "qperf", args...)
			}
			m := qperfResult.FindStringSubmatch(out)
			if err != nil || m == nil {
				t.Fatalf("qperf %s: %v\n%s\n--- server ---\n%s", strings.Join(args, " "), err, out, srv.out.String())
			}
			v, perr := strconv.ParseFloat(strings.ReplaceAll(m[2], ",", ""), 64)
			if perr != nil || v <= 0 {
				t.Fatalf("qperf %s: %s = %q, want a positive number\n%s", name, m[1], m[2], out)
			}
			t.Logf("%s: %s", name, strings.TrimSpace(m[0]))
		})
	}
}
