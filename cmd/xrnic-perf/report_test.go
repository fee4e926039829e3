package main

import (
	"bytes"
	"math"
	"strings"
	"testing"
)

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }

// stampsFrom turns per-iteration latencies (µs) into post timestamps (ns).
func stampsFrom(deltasUS ...float64) []int64 {
	st := []int64{0}
	for _, d := range deltasUS {
		st = append(st, st[len(st)-1]+int64(d*1000))
	}
	return st
}

func TestComputeLat(t *testing.T) {
	cases := []struct {
		name   string
		deltas []float64
		rtt    int
		want   LatResult
	}{
		{
			// 12 samples: 1..10 µs and two outliers. m = 10 kept; the
			// median of an even count is the mean of the middle two;
			// t_max and the percentiles index s[10], the smaller outlier
			// (perftest's arithmetic).
			name:   "even-full-rtt",
			deltas: []float64{7, 2000, 1, 9, 3, 1000, 10, 2, 8, 4, 6, 5},
			rtt:    1,
			want: LatResult{Size: 8, Iters: 13, Min: 1, Max: 1000, Typical: 5.5, Avg: 5.5,
				Stdev: math.Sqrt(8.25), P99: 1000, P999: 1000, RTTDiv: 1},
		},
		{
			// Half the round trip: every value halves.
			name:   "even-half-rtt",
			deltas: []float64{7, 2000, 1, 9, 3, 1000, 10, 2, 8, 4, 6, 5},
			rtt:    2,
			want: LatResult{Size: 8, Iters: 13, Min: 0.5, Max: 500, Typical: 2.75, Avg: 2.75,
				Stdev: math.Sqrt(8.25) / 2, P99: 500, P999: 500, RTTDiv: 2},
		},
		{
			// 11 samples, m = 9: odd, the median is s[4].
			name:   "odd",
			deltas: []float64{5, 1, 9, 2, 300, 8, 3, 7, 4, 6, 400},
			rtt:    1,
			want: LatResult{Size: 8, Iters: 12, Min: 1, Max: 300, Typical: 5, Avg: 5,
				Stdev: math.Sqrt(60.0 / 9), P99: 300, P999: 300, RTTDiv: 1},
		},
	}
	for _, c := range cases {
		got := computeLat(8, stampsFrom(c.deltas...), c.rtt)
		w := c.want
		for _, f := range []struct {
			n    string
			g, w float64
		}{{"t_min", got.Min, w.Min}, {"t_max", got.Max, w.Max}, {"t_typical", got.Typical, w.Typical},
			{"t_avg", got.Avg, w.Avg}, {"t_stdev", got.Stdev, w.Stdev}, {"99%", got.P99, w.P99}, {"99.9%", got.P999, w.P999}} {
			if !near(f.g, f.w) {
				t.Errorf("%s: %s = %v, want %v", c.name, f.n, f.g, f.w)
			}
		}
		if got.Iters != w.Iters {
			t.Errorf("%s: iterations %d, want %d", c.name, got.Iters, w.Iters)
		}
	}
}

// A large run: 99% and 99.9% pick s[ceil(0.99 m)] and s[ceil(0.999 m)].
func TestComputeLatPercentiles(t *testing.T) {
	// 2003 samples: 1..2001 µs in reverse order, then two huge ones.
	var d []float64
	for v := 2001; v >= 1; v-- {
		d = append(d, float64(v))
	}
	d = append(d, 1e6, 2e6)
	got := computeLat(2, stampsFrom(d...), 1)
	// m = 2001 kept: ceil(1980.99) = 1981 -> value 1982; ceil(1998.999) = 1999 -> 2000.
	if got.P99 != 1982 || got.P999 != 2000 || got.Typical != 1001 || got.Max != 1e6 {
		t.Fatalf("p99 %v p99.9 %v typical %v max %v, want 1982 2000 1001 1e6", got.P99, got.P999, got.Typical, got.Max)
	}
}

func TestComputeBW(t *testing.T) {
	const ms = int64(1e6)
	cases := []struct {
		name            string
		s               BWSamples
		unit            float64
		peak, avg, rate float64
	}{
		{
			// All posted at 0; completions at 1, 1.5, 3, 4 ms. The best
			// window is post 0 .. completion 1: 1.5 ms for 2 messages.
			name: "peak-window",
			s: BWSamples{Size: 1 << 20, Iters: 4, QPs: 1, CQMod: 1,
				Posted: []int64{0, 0, 0, 0}, Completed: []int64{1 * ms, 3 * ms / 2, 3 * ms, 4 * ms}},
			unit: mib, peak: 1 / 0.75e-3, avg: 1000, rate: 0.001,
		},
		{
			name: "gbits",
			s: BWSamples{Size: 1 << 20, Iters: 4, QPs: 1, CQMod: 1,
				Posted: []int64{0, 0, 0, 0}, Completed: []int64{1 * ms, 3 * ms / 2, 3 * ms, 4 * ms}},
			unit: gbit, peak: (1 << 20) / 0.75e-3 / 1.25e8, avg: 1048576 * 1000 / 1.25e8, rate: 0.001,
		},
		{
			// Completion moderation 2: only Completed[1] and [3] exist.
			// Windows (i, j): (0,1) 2/2, (0,3) 3/4, (1,1) 1.5, (1,3)
			// 2.5/3, (2,3) 2/2, (3,3) 1.5 ms: the best is 0.75 ms.
			name: "cq-mod",
			s: BWSamples{Size: 1000, Iters: 2, QPs: 2, CQMod: 2,
				Posted: []int64{0, ms / 2, ms, 3 * ms / 2}, Completed: []int64{0, 2 * ms, 0, 3 * ms}},
			unit: mib, peak: 1000 / 0.75e-3 / mib, avg: 4000 / 3e-3 / mib, rate: 4 / 3e-3 / 1e6,
		},
		{
			name: "no-peak",
			s: BWSamples{Size: 1000, Iters: 2, QPs: 2, CQMod: 2, NoPeak: true,
				Posted: []int64{0, ms / 2, ms, 3 * ms / 2}, Completed: []int64{0, 2 * ms, 0, 3 * ms}},
			unit: mib, peak: 0, avg: 4000 / 3e-3 / mib, rate: 4 / 3e-3 / 1e6,
		},
	}
	for _, c := range cases {
		r := computeBW(c.s, c.unit)
		if !near(r.Peak, c.peak) || !near(r.Average, c.avg) || !near(r.MsgRate, c.rate) {
			t.Errorf("%s: peak %v avg %v rate %v, want %v %v %v", c.name, r.Peak, r.Average, r.MsgRate, c.peak, c.avg, c.rate)
		}
	}
	d := durationBW(4096, 1000, 2e9, false, mib)
	if !near(d.Average, 4096*500/float64(mib)) || !near(d.MsgRate, 0.0005) || d.Peak != 0 {
		t.Errorf("duration: %+v", d)
	}
}

// The lines line up with perftest's REPORT_FMT / REPORT_FMT_LAT under
// its headers.
func TestReportLayout(t *testing.T) {
	bw := BWResult{Size: 65536, Iters: 5000, Peak: 11030.78, Average: 11030.45, MsgRate: 0.176487}
	if got, want := bw.line(), " 65536      5000             11030.78            11030.45\t\t   0.176487"; got != want {
		t.Errorf("bw line\n got %q\nwant %q", got, want)
	}
	lat := LatResult{Size: 2, Iters: 1000, Min: 1.01, Max: 5.5, Typical: 1.1, Avg: 1.2, Stdev: 0.3, P99: 2.5, P999: 5.5}
	if got, want := lat.line(), " 2       1000          1.01           5.50         1.10     \t       1.20        \t0.30   \t\t2.50    \t\t5.50   "; got != want {
		t.Errorf("lat line\n got %q\nwant %q", got, want)
	}
	h := bwHeader(mib)
	// Each number starts under its column title (perftest's layout puts
	// the bandwidth numbers two characters into their titles).
	line := expandTabs(bw.line())
	for _, col := range []string{"#bytes", "#iterations", "BW peak[MiB/sec]", "BW average[MiB/sec]", "MsgRate[Mpps]"} {
		i := strings.Index(h, col)
		start := i
		for start < len(line) && line[start] == ' ' {
			start++
		}
		if i < 0 || start >= i+len(col) || (start > 0 && line[start-1] != ' ') {
			t.Errorf("column %q at %d: the number starts at %d", col, i, start)
		}
	}
	if bwHeader(gbit) != strings.ReplaceAll(h, "MiB", "Gb") {
		t.Errorf("Gb/s header %q", bwHeader(gbit))
	}
}

func TestParseParams(t *testing.T) {
	p, err := parseParams([]string{"atomic_bw", "-A", "CMP_AND_SWAP", "10.0.0.1", "-q", "4", "--report_gbits", "-t", "512", "-o", "16"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if p.server != "10.0.0.1" || p.qps != 4 || !p.gbits || p.atomicType != "CMP_AND_SWAP" || p.size != 8 || p.txDepth != 16 || p.cqMod != 16 {
		t.Fatalf("%+v", p)
	}
	for _, bad := range [][]string{{"nope"}, {"send_bw", "-b"}, {"atomic_lat", "-s", "16"}, {"write_bw", "--transport", "afxdp"}, {"read_lat", "--write_with_imm"}} {
		if _, err := parseParams(bad, &bytes.Buffer{}); err == nil {
			t.Errorf("%v: no error", bad)
		}
	}
	h := p.hello()
	h2, err := parseHello(h.put())
	if err != nil || h2 != h {
		t.Fatalf("hello round trip: %+v %v", h2, err)
	}
	bi := bufInfo{STag: 0xdeadbeef, RecvTO: 1 << 40, SrcTO: 77, Slot: 4096, RxD: 300, Index: 3}
	if g, err := parseBufInfo(bi.put()); err != nil || g != bi {
		t.Fatalf("bufInfo round trip: %+v %v", g, err)
	}
	m := ctlMsg{Kind: msgResult, OK: true, Size: 9, Count: 1 << 33, Peak: 1.5, Avg: 2.5, Rate: 0.25, Detail: 7}
	b := make([]byte, ctlMsgLen)
	m.put(b)
	if parseCtl(b) != m {
		t.Fatalf("ctl round trip: %+v", parseCtl(b))
	}
}

// expandTabs renders tabs as a terminal does (stops every 8 columns).
func expandTabs(s string) string {
	var b strings.Builder
	for _, r := range s {
		if r == '\t' {
			b.WriteByte(' ')
			for b.Len()%8 != 0 {
				b.WriteByte(' ')
			}
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}
