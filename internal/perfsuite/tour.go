package perfsuite

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// The tour: xrnicd with two regions in A, then xrnicctl from B walks
// through what the RNIC does (the RFC 7306 capability probe, masked
// FetchAdd and CmpSwap, Write with Immediate, a Read back) and shows
// xrnicd's counters.

// startDaemon starts xrnicd in A, on afxdp when root (kernel if that
// fails), and waits until its control socket answers.
func (d *demo) startDaemon(ctx context.Context) error {
	sock := filepath.Join(d.tmp, "xrnicd.sock")
	listen, metrics := d.topo.ipA+":7306", d.topo.ipA+":9736"
	if !d.root {
		listen, metrics = "127.0.0.1:"+strconv.Itoa(pickPort()), "127.0.0.1:"+strconv.Itoa(pickPort())
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
			a = append(a, "--iface", d.topo.devA)
		}
		d.progress("starting xrnicd (%s transport) %s", tr, strings.Join(a, " "))
		logf := filepath.Join(d.tmp, "xrnicd-"+tr+".log")
		lf, err := os.Create(logf)
		if err != nil {
			return err
		}
		c := d.command(context.WithoutCancel(ctx), d.topo.nsA, "xrnicd", a...)
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

// indent sets a tool's output off under the command that printed it.
func indent(s string) string {
	var b strings.Builder
	for _, l := range strings.Split(strings.TrimRight(s, "\n"), "\n") {
		b.WriteString("      " + l + "\n")
	}
	return strings.TrimRight(b.String(), "\n")
}

// regionJSON is a row of `xrnicctl -j region list`.
type regionJSON struct {
	Name string `json:"name"`
	STag string `json:"stag"`
	TO   string `json:"to"`
}

// ctl runs xrnicctl in B, showing the command and its output.
func (d *demo) ctl(ctx context.Context, args ...string) (string, error) {
	tr := []string{"--transport", "kernel"}
	if d.afxdpOK {
		tr = []string{"--transport", "afxdp", "--iface", d.topo.devB}
	}
	full := append(append([]string{}, args[:1]...), append(tr, args[1:]...)...)
	fmt.Fprintf(d.out, "    $ xrnicctl %s\n", strings.Join(full, " "))
	out, err := d.command(ctx, d.topo.nsB, "xrnicctl", full...).CombinedOutput()
	if err != nil && d.afxdpOK {
		// The client side may lack afxdp support: fall back to kernel TCP.
		full = append(append([]string{}, args[:1]...), append([]string{"--transport", "kernel"}, args[1:]...)...)
		out, err = d.command(ctx, d.topo.nsB, "xrnicctl", full...).CombinedOutput()
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
	d.progress("the tour, from the other side (%s)", map[bool]string{true: "namespace " + d.topo.nsB, false: "this host"}[d.root])
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
		o, err := d.command(ctx, d.topo.nsB, "xrnic-perf", "demo", "fetch", d.metrics).Output()
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
