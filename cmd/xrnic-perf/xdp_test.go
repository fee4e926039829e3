package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
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
	p, err = parseParams([]string{"xdp_bw", "--iface", "eth0"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if p.iters != xdpBWDefaultFrames || p.set["size"] || p.transport != "afxdp" || p.jsonTestName() != "XDP_BW_Test" {
		t.Errorf("xdp_bw defaults: iters %d size set %v transport %s test %s", p.iters, p.set["size"], p.transport, p.jsonTestName())
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"xdp_lat"}, "--iface"},
		{[]string{"xdp_lat", "--iface", "x", "-o", "1025"}, "-o: 1 to 1024"},
		{[]string{"xdp_lat", "--iface", "x", "-s", "5000"}, "-s: xdp_lat frames carry at most"},
		{[]string{"xdp_bw"}, "xdp_bw needs --iface"},
		{[]string{"xdp_bw", "--iface", "x", "-a"}, "-a: not for xdp_bw"},
	} {
		if _, err := parseParams(c.args, &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: error %v, want %q", c.args, err, c.want)
		}
	}
}

// Without root xdp_lat fails with a message saying why (exit status 1).
func TestXDPNeedsRoot(t *testing.T) {
	if os.Geteuid() == 0 {
		// Not a missing tool: as root the refusal cannot be seen. make unit
		// runs it again as uid 65534 and fails if it skips there.
		t.Skip("skipped as root (the refusal of an unprivileged run cannot be seen): make unit runs it again as uid 65534 (setpriv)")
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
			cout := runXDPPair(t, pair, f, "xdp_lat", "-n", strconv.Itoa(c.iters), "-o", strconv.Itoa(c.outs))
			line := resultFields(t, cout)
			b, doc := readReport(t, f)
			if doc.Info["xrnic_test"] != "xdp_lat" || doc.Info["test"] != "XDP_Latency_Test" {
				t.Errorf("test_info: %s", b)
			}
			if c.outs == 1 {
				if !strings.Contains(cout, latHeader) || len(line) != 9 || line[1] != strconv.Itoa(c.iters) {
					t.Fatalf("latency line %q:\n%s", line, cout)
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
			if !strings.Contains(cout, pipeHeader) || len(line) != 5 || line[1] != strconv.Itoa(c.iters) || line[2] != strconv.Itoa(c.outs) {
				t.Fatalf("pipeline line %q:\n%s", line, cout)
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

// runXDPPair runs an xdp test between the two namespaces of pair: the
// server in A, the client in B (goroutines of this process), the client
// writing its JSON to jsonFile; it returns the client's output and fails
// t if either side failed or an XDP program is left on either end.
func runXDPPair(t *testing.T, pair *netnstest.Pair, jsonFile string, args ...string) string {
	t.Helper()
	common := append(append([]string{}, args...), "-p", "18600", "--timeout", "20s")
	sp, err := parseParams(append(common, "--iface", pair.DevA, "--bind", "198.18.0.1"), &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	cp, err := parseParams(append(common, "--iface", pair.DevB, "--out_json_file", jsonFile, "198.18.0.1"), &bytes.Buffer{})
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
	for _, ns := range []struct{ ns, dev string }{{pair.NSA, pair.DevA}, {pair.NSB, pair.DevB}} {
		out, err := exec.Command("ip", "-n", ns.ns, "-d", "link", "show", "dev", ns.dev).CombinedOutput()
		if err != nil {
			t.Fatalf("ip link: %v: %s", err, out)
		}
		if strings.Contains(string(out), "xdp") || strings.Contains(string(out), "prog/") {
			t.Errorf("an XDP program is still attached to %s:\n%s", ns.dev, out)
		}
	}
	if cerr != nil || serr != nil {
		t.Fatalf("client: %v; server: %v", cerr, serr)
	}
	return cout.String()
}

// resultFields is the one result line of a report (the line that starts
// with a number), split into fields.
func resultFields(t *testing.T, out string) []string {
	t.Helper()
	var line []string
	for _, l := range strings.Split(out, "\n") {
		if fl := strings.Fields(l); len(fl) > 0 && fl[0][0] >= '0' && fl[0][0] <= '9' {
			if line != nil {
				t.Fatalf("two result lines:\n%s", out)
			}
			line = fl
		}
	}
	return line
}

// xdp_bw between two namespaces at MTU 1500 and 9000 (multi-buffer
// frames): full-size frames by default, -n bounds the stream; the counts
// are consistent (something arrived, no more than was sent), the JSON
// agrees with the report, and no XDP program is left on either end (no
// timing assertions).
func TestXDPBWNetns(t *testing.T) {
	netnstest.RequireRoot(t, true)
	for _, c := range []struct {
		mtu, frames int
		args        []string
	}{
		{1500, 20000, nil},
		{9000, 20000, nil},
		{1500, 5000, []string{"-s", "100"}},
	} {
		t.Run(fmt.Sprintf("mtu %d %v", c.mtu, c.args), func(t *testing.T) {
			pair := netnstest.NewPair(t, netnstest.PairOptions{Prefix: "xrnicperf-", DevA: "xpa", DevB: "xpb", MTU: c.mtu,
				AddrA: netip.MustParseAddr("198.18.0.1"), AddrB: netip.MustParseAddr("198.18.0.2"), LimitGSO: true})
			f := filepath.Join(t.TempDir(), "out.json")
			cout := runXDPPair(t, pair, f, append([]string{"xdp_bw", "-n", strconv.Itoa(c.frames)}, c.args...)...)
			line := resultFields(t, cout)
			if !strings.Contains(cout, bwHeader(mib)) || len(line) != 5 || line[1] != strconv.Itoa(c.frames) {
				t.Fatalf("result line %q:\n%s", line, cout)
			}
			b, doc := readReport(t, f)
			if doc.Info["xrnic_test"] != "xdp_bw" || doc.Info["test"] != "XDP_BW_Test" || doc.Info["Mtu"] != float64(c.mtu) {
				t.Errorf("test_info: %s", b)
			}
			var r XDPBWResult
			if err := json.Unmarshal(doc.Results, &r); err != nil {
				t.Fatal(err)
			}
			size := c.mtu - xdpIPTCP
			if c.args != nil {
				size = 100
			}
			if r.Size != size || r.FrameLen != size+xdpHeaders || r.Iters != c.frames {
				t.Errorf("size %d frame %d sent %d, want %d, %d, %d", r.Size, r.FrameLen, r.Iters, size, size+xdpHeaders, c.frames)
			}
			if r.Received <= 0 || r.Received > r.Iters {
				t.Errorf("%d frames received of %d sent", r.Received, r.Iters)
			}
			if r.Received > 1 && (r.Average <= 0 || r.MsgRate <= 0) {
				t.Errorf("result %+v", r)
			}
			if wantBufs := (r.FrameLen + 4095) / 4096; r.Buffers != wantBufs || r.MultiBuf != (wantBufs > 1) {
				t.Errorf("%d buffers per frame (multi-buffer %v), want %d", r.Buffers, r.MultiBuf, wantBufs)
			}
		})
	}
}

// --drive (run to completion: the polling goroutine runs the afxdp poll
// step) between two namespaces: send_lat, atomic_lat and, without the
// race detector (it cannot see that write_lat's polled bytes are placed by
// the engine: raceEnabled), write_lat, which spins on memory, complete
// with the counts asked and positive numbers (no timing assertions).
// make unit runs write_lat again without -race.
func TestDriveNetns(t *testing.T) {
	netnstest.RequireRoot(t, true)
	pair := netnstest.NewPair(t, netnstest.PairOptions{Prefix: "xrnicperf-", DevA: "xpa", DevB: "xpb",
		AddrA: netip.MustParseAddr("198.18.0.1"), AddrB: netip.MustParseAddr("198.18.0.2"), LimitGSO: true})
	tests := []string{"send_lat", "atomic_lat"}
	if !raceEnabled {
		tests = append(tests, "write_lat")
	}
	for _, test := range tests {
		t.Run(test, func(t *testing.T) {
			cout := runXDPPair(t, pair, filepath.Join(t.TempDir(), "out.json"), test, "--transport", "afxdp", "--drive", "-n", "2000")
			line := resultFields(t, cout)
			if len(line) != 9 || line[1] != "2000" {
				t.Fatalf("latency line %q:\n%s", line, cout)
			}
			if v, err := strconv.ParseFloat(line[4], 64); err != nil || v <= 0 {
				t.Fatalf("t_typical %q:\n%s", line[4], cout)
			}
		})
	}
}
