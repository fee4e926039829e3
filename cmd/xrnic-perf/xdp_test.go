package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"xrnic/internal/netnstest"
)

// xdp_lat's parameters: --iface is required, -o is 1 by default and 1 to
// 1024, a frame fits a chunk.
func TestXDPParams(t *testing.T) {
	p, err := parseParams([]string{"xdp_lat", "--iface", "eth0"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if p.outs != 1 || p.size != 2 || p.transport != "afxdp" || p.jsonTestName() != "XDP_Latency_Test" {
		t.Errorf("defaults: outs %d size %d transport %s test %s", p.outs, p.size, p.transport, p.jsonTestName())
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"xdp_lat"}, "--iface"},
		{[]string{"xdp_lat", "--iface", "x", "-o", "1025"}, "-o: 1 to 1024"},
		{[]string{"xdp_lat", "--iface", "x", "-s", "5000"}, "-s: xdp_lat frames carry at most"},
	} {
		if _, err := parseParams(c.args, &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: error %v, want %q", c.args, err, c.want)
		}
	}
}

// Without root xdp_lat fails with a message saying why (exit status 1).
func TestXDPNeedsRoot(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("running as root: the refusal of an unprivileged run cannot be seen")
	}
	p, err := parseParams([]string{"xdp_lat", "--iface", "lo"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if err := run(context.Background(), p, &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), "needs root") {
		t.Fatalf("error %v, want one saying xdp_lat needs root", err)
	}
}

// xdp_lat end to end between two network namespaces joined by a veth:
// the server in one, the client in the other (goroutines of this
// process), -o 1 and -o 16. The counts are the ones asked for, the
// numbers positive (no timing assertions), the JSON rows agree, and no
// XDP program is left on either end.
func TestXDPLatNetns(t *testing.T) {
	netnstest.RequireRoot(t, true)
	pair := netnstest.NewPair(t, netnstest.PairOptions{Prefix: "xrnicperf-", DevA: "xpa", DevB: "xpb",
		AddrA: netip.MustParseAddr("198.18.0.1"), AddrB: netip.MustParseAddr("198.18.0.2"), LimitGSO: true})
	for _, c := range []struct {
		outs, iters int
	}{{1, 2000}, {16, 2000}} {
		t.Run("-o "+strconv.Itoa(c.outs), func(t *testing.T) {
			f := filepath.Join(t.TempDir(), "out.json")
			common := []string{"xdp_lat", "-n", strconv.Itoa(c.iters), "-o", strconv.Itoa(c.outs), "-p", "18600", "--timeout", "20s"}
			sp, err := parseParams(append(common, "--iface", pair.DevA, "--bind", "198.18.0.1"), &bytes.Buffer{})
			if err != nil {
				t.Fatal(err)
			}
			cp, err := parseParams(append(common, "--iface", pair.DevB, "--out_json_file", f, "198.18.0.1"), &bytes.Buffer{})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			var sout, cout bytes.Buffer
			served := make(chan error, 1)
			go func() { served <- netnstest.In(t, pair.NSA, func() error { return run(ctx, sp, &sout) }) }()
			cerr := netnstest.In(t, pair.NSB, func() error { return run(ctx, cp, &cout) })
			if cerr != nil {
				cancel()
			}
			serr := <-served
			t.Logf("client:\n%s\nserver:\n%s", cout.String(), sout.String())
			if cerr != nil || serr != nil {
				t.Fatalf("client: %v; server: %v", cerr, serr)
			}
			for _, ns := range []struct{ ns, dev string }{{pair.NSA, pair.DevA}, {pair.NSB, pair.DevB}} {
				out, err := exec.Command("ip", "-n", ns.ns, "-d", "link", "show", "dev", ns.dev).CombinedOutput()
				if err != nil {
					t.Fatalf("ip link: %v: %s", err, out)
				}
				if strings.Contains(string(out), "xdp") || strings.Contains(string(out), "prog/") {
					t.Errorf("an XDP program is still attached to %s:\n%s", ns.dev, out)
				}
			}
			var line []string
			for _, l := range strings.Split(cout.String(), "\n") {
				if fl := strings.Fields(l); len(fl) > 0 && fl[0][0] >= '0' && fl[0][0] <= '9' {
					if line != nil {
						t.Fatalf("two result lines:\n%s", cout.String())
					}
					line = fl
				}
			}
			b, doc := readReport(t, f)
			if doc.Info["xrnic_test"] != "xdp_lat" || doc.Info["test"] != "XDP_Latency_Test" {
				t.Errorf("test_info: %s", b)
			}
			if c.outs == 1 {
				if !strings.Contains(cout.String(), latHeader) || len(line) != 9 || line[1] != strconv.Itoa(c.iters) {
					t.Fatalf("latency line %q:\n%s", line, cout.String())
				}
				var r LatResult
				if err := json.Unmarshal(doc.Results, &r); err != nil {
					t.Fatal(err)
				}
				if r.Iters != c.iters || r.RTTDiv != 2 || r.Min <= 0 || r.Avg <= 0 || r.Typical <= 0 {
					t.Errorf("result %+v", r)
				}
				return
			}
			if !strings.Contains(cout.String(), pipeHeader) || len(line) != 5 || line[1] != strconv.Itoa(c.iters) || line[2] != strconv.Itoa(c.outs) {
				t.Fatalf("pipeline line %q:\n%s", line, cout.String())
			}
			var r TCPPipeResult
			if err := json.Unmarshal(doc.Results, &r); err != nil {
				t.Fatal(err)
			}
			if r.Iters != c.iters || r.RTTDiv != 1 || r.MsgRate <= 0 || r.Avg <= 0 || doc.Info["Outstand_reads"] != float64(c.outs) {
				t.Errorf("result %+v, test_info %v", r, doc.Info)
			}
		})
	}
}
