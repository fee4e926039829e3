package perfsuite

import (
	"context"
	"encoding/json"
	"encoding/xml"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// sampleRuns is a tiny sweep: Write bandwidth and latency on both
// transports, the TCP baselines and one failed run.
func sampleRuns() []benchRun {
	bw := func(avg float64) []map[string]any {
		return []map[string]any{
			{"MsgSize": 4096.0, "BW_average": avg / 2, "MsgRate": 0.5},
			{"MsgSize": 65536.0, "BW_average": avg, "MsgRate": 0.25},
		}
	}
	lat := func(typ float64) []map[string]any {
		return []map[string]any{{"MsgSize": 2.0, "t_typical": typ, "percentile_99": 2 * typ, "percentile_99.9": 3 * typ}}
	}
	return []benchRun{
		{Name: "write_bw t16", Test: "write_bw", Transport: "afxdp", Command: "xrnic-perf write_bw -t 16 --transport afxdp SERVER", Rows: bw(2000)},
		{Name: "write_bw t16", Test: "write_bw", Transport: "kernel", Command: "xrnic-perf write_bw -t 16 --transport kernel SERVER", Rows: bw(1000)},
		{Name: "write_lat", Test: "write_lat", Transport: "afxdp", Rows: lat(4)},
		{Name: "write_lat", Test: "write_lat", Transport: "kernel", Rows: lat(8)},
		{Name: "tcp_bw", Test: "tcp_bw", Transport: "kernel TCP", Rows: bw(4000)},
		{Name: "tcp_lat", Test: "tcp_lat", Transport: "kernel TCP", Rows: []map[string]any{{"MsgSize": 2.0, "t_typical": 10.0}}},
		{Name: "read_bw t16", Test: "read_bw", Transport: "afxdp", Error: "timed out"},
	}
}

func TestChartsAreSVG(t *testing.T) {
	dir := t.TempDir()
	files := writeCharts(dir, sampleRuns())
	if strings.Join(files, " ") != "bandwidth.svg msgrate.svg latency.svg latency_percentiles.svg" {
		t.Fatalf("charts %v", files)
	}
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		d := xml.NewDecoder(strings.NewReader(string(b)))
		for {
			if _, err := d.Token(); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				t.Fatalf("%s is not well-formed: %v", f, err)
			}
		}
		if !strings.Contains(string(b), "write_bw t16 (afxdp)") && f == "bandwidth.svg" {
			t.Errorf("%s: no legend for write_bw t16 (afxdp)", f)
		}
	}
}

func TestSummary(t *testing.T) {
	s := summary(sampleRuns(), "test link", "results/x", []string{"bandwidth.svg"}, true)
	for _, want := range []string{
		"| 64 KiB Write bandwidth, 16 outstanding [MiB/s] | 2000 | 1000 | 4000 | 2.00x | 0.50x |",
		"| 2 B Write latency (half RTT) [µs] | 4.00 | 8.00 | 10.00 | 0.50x | 0.40x |",
		"This was a --quick sweep.",
		"`bandwidth.svg`",
		"    xrnic-perf write_bw -t 16 --transport afxdp SERVER\n",
		"- read_bw t16 on afxdp (0 sizes done): timed out",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("summary lacks %q:\n%s", want, s)
		}
	}
}

func TestUpdateDoc(t *testing.T) {
	p := filepath.Join(t.TempDir(), "PERF.md")
	os.WriteFile(p, []byte("# Perf\n\nintro\n"), 0o644)
	if err := updateDoc(p, "first\n"); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(p, append(must(os.ReadFile(p)), "\n## after\n"...), 0o644)
	if err := updateDoc(p, "second\n"); err != nil {
		t.Fatal(err)
	}
	want := "# Perf\n\nintro\n\n" + benchBegin + "\n\nsecond\n\n" + benchEnd + "\n\n## after\n"
	if got := string(must(os.ReadFile(p))); got != want {
		t.Fatalf("doc\n got %q\nwant %q", got, want)
	}
	os.WriteFile(p, []byte(benchBegin+"\n"), 0o644)
	if err := updateDoc(p, "x"); err == nil {
		t.Fatal("unbalanced markers: no error")
	}
}

// --replot redraws the charts of a results folder from its all.json.
func TestBenchReplot(t *testing.T) {
	dir := t.TempDir()
	b, _ := json.Marshal(map[string]any{"runs": sampleRuns()})
	os.WriteFile(filepath.Join(dir, "all.json"), b, 0o644)
	if rc := Bench(context.Background(), []string{"--replot", dir}); rc != 0 {
		t.Fatalf("exit status %d", rc)
	}
	if _, err := os.Stat(filepath.Join(dir, "latency.svg")); err != nil {
		t.Fatal(err)
	}
}

func must(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}
