package abitest

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"xrnic/internal/netnstest"
	"xrnic/internal/testclean"
)

var builds sync.Map // source name -> *built

type built struct {
	once sync.Once
	path string
	err  error
}

// buildC compiles c/<name>.c like any rdma-core application (cc, the
// system headers, -libverbs -lrdmacm: Debian's libraries at link time,
// xrnic's at run time through LD_LIBRARY_PATH), plus abi/include for
// xrnicdv.h. Built once per test binary.
func buildC(t testing.TB, name string) string {
	t.Helper()
	for _, h := range []string{"/usr/include/infiniband/verbs.h", "/usr/include/rdma/rdma_cma.h"} {
		if _, err := os.Stat(h); err != nil {
			skipOrFail(t, "%s missing: %s", h, aptInstall)
		}
	}
	cc := os.Getenv("CC")
	if cc == "" {
		cc = "cc"
	}
	if _, err := exec.LookPath(cc); err != nil {
		skipOrFail(t, "no C compiler (%s): apt-get install -y gcc", cc)
	}
	v, _ := builds.LoadOrStore(name, &built{})
	b := v.(*built)
	b.once.Do(func() {
		root := moduleRoot(t)
		dir, err := os.MkdirTemp("", "xrabi-build-")
		if err != nil {
			b.err = err
			return
		}
		b.path = filepath.Join(dir, name)
		out, err := exec.Command(cc, "-std=gnu11", "-O2", "-g", "-Wall", "-Wextra", "-Werror",
			"-Wno-unused-parameter", "-I", filepath.Join(root, "abi", "include"),
			filepath.Join(root, "abi", "test", "c", name+".c"), "-o", b.path,
			"-libverbs", "-lrdmacm", "-ldl").CombinedOutput()
		if err != nil {
			b.err = fmt.Errorf("cc %s.c: %v\n%s", name, err, out)
		}
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.path
}

func TestMain(m *testing.M) {
	testclean.Prepare()
	code := m.Run()
	builds.Range(func(_, v any) bool {
		if p := v.(*built).path; p != "" {
			os.RemoveAll(filepath.Dir(p))
		}
		return true
	})
	os.Exit(code)
}

// checks parses "ok NAME ..." and "FAIL NAME: why" lines.
func checks(out string) (order []string, results map[string][]string) {
	results = map[string][]string{}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		line := sc.Text()
		var name string
		switch {
		case strings.HasPrefix(line, "ok "):
			name, _, _ = strings.Cut(strings.TrimPrefix(line, "ok "), " ")
		case strings.HasPrefix(line, "FAIL "):
			name, _, _ = strings.Cut(strings.TrimPrefix(line, "FAIL "), ":")
		default:
			continue
		}
		if _, seen := results[name]; !seen {
			order = append(order, name)
		}
		results[name] = append(results[name], line)
	}
	return order, results
}

// cChecks are the checks abitest.c reports on each side.
var cChecks = []string{"device_query", "write_imm_zero_sge", "xrnicdv_imm64", "atomics", "masked_atomics",
	"bad_rkey_read", "local_length_error", "terminate_async_event", "completion_channel", "many_qps",
	"many_qps_disconnect", "small_cq"}

// reportChecks makes a subtest per check of one side's output; a check
// that never reported fails (the program crashed or hung before it).
func reportChecks(t *testing.T, side string, p *proc, want []string) {
	out := p.out.String()
	order, res := checks(out)
	t.Run(side, func(t *testing.T) {
		names := append([]string(nil), want...)
		for _, n := range order {
			if !slices.Contains(want, n) {
				names = append(names, n)
			}
		}
		for _, name := range names {
			lines, ok := res[name]
			t.Run(name, func(t *testing.T) {
				if !ok {
					t.Fatalf("not reported (%s ended: %v)\n%s", side, p.err, out)
				}
				for _, l := range lines {
					if strings.HasPrefix(l, "FAIL ") {
						t.Error(l)
					} else {
						t.Log(l)
					}
				}
			})
		}
		if p.err != nil && !t.Failed() {
			t.Errorf("%s", p.describe())
		}
	})
}

// checkGID checks abitest's "gid HEX" line against the interface's MAC.
func checkGID(t *testing.T, e *env, ns, out string) {
	var mac net.HardwareAddr
	netnstest.Do(t, ns, func() {
		ifi, err := net.InterfaceByName(e.dev(ns))
		if err != nil {
			t.Fatal(err)
		}
		mac = ifi.HardwareAddr
	})
	for _, l := range strings.Split(out, "\n") {
		if g, ok := strings.CutPrefix(l, "gid "); ok {
			var parts []string
			for i := 0; i+4 <= len(g); i += 4 {
				parts = append(parts, g[i:i+4])
			}
			if !gidFromMAC(strings.Join(parts, ":"), mac) {
				t.Errorf("ibv_query_gid index 0 = %s: not from MAC %s", g, mac)
			}
			return
		}
	}
	t.Errorf("no gid line")
}

func TestCProgram(t *testing.T) {
	forEachTransport(t, nil, func(t *testing.T, e *env) {
		bin := buildC(t, "abitest")
		port := e.nextPort()
		e.nextPort() // port+1: the control channel
		srv := e.start(t, e.pair.NSA, 3*time.Minute, nil, bin, "server", ipA.String(), fmt.Sprint(port))
		if !srv.waitFor("listening", 15*time.Second) {
			t.Fatalf("abitest server never listened\n%s", srv.describe())
		}
		cli := e.start(t, e.pair.NSB, 3*time.Minute, nil, bin, "client", ipA.String(), fmt.Sprint(port))
		cli.wait()
		srv.waitAfter(cli)
		reportChecks(t, "client", cli, cChecks)
		reportChecks(t, "server", srv, cChecks)
		t.Run("gid", func(t *testing.T) {
			checkGID(t, e, e.pair.NSA, srv.out.String())
			checkGID(t, e, e.pair.NSB, cli.out.String())
		})
	})
}

// TestOverhead runs the ABI micro-benchmark (c/overhead.c) and logs its
// numbers; it asserts only that every WR completed. Kernel transport:
// the QP connects to its own address, which afxdp on a veth cannot see.
func TestOverhead(t *testing.T) {
	lib := requireLibs(t)
	requireBins(t)
	netnstest.RequireRoot(t, false)
	bin := buildC(t, "overhead")
	netnstest.RemoveStale(nsPrefix)
	p := netnstest.NewPair(t, netnstest.PairOptions{Prefix: nsPrefix, DevA: "xra", DevB: "xrb", AddrA: ipA, AddrB: ipB})
	e := &env{lib: lib, tr: transports[0], pair: p, port: 21000}
	n := "200000"
	// The raw cost of each call: no yield or nap in empty polls (10M of
	// them would nap for minutes).
	pr := e.start(t, p.NSA, 2*time.Minute, []string{"XRNIC_POLL_YIELD=0", "XRNIC_POLL_SLEEP=0"}, bin, ipA.String(), fmt.Sprint(e.nextPort()), n)
	err := pr.wait()
	out := pr.out.String()
	if err != nil || !strings.Contains(out, "ok overhead") {
		t.Fatalf("overhead: %v\n%s", err, out)
	}
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "bench ") {
			t.Log(l)
		}
	}
}
