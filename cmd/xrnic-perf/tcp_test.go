package main

import (
	"bytes"
	"encoding/json"
	"math"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

// tcp_lat's -o: 1 by default (the ping-pong), 1 to 1024; the other tests
// keep their default of 128 and their range of 1 to 128.
func TestTCPOutsParams(t *testing.T) {
	for _, c := range []struct {
		args []string
		outs int
	}{
		{[]string{"tcp_lat"}, 1},
		{[]string{"tcp_lat", "-o", "1"}, 1},
		{[]string{"tcp_lat", "-o", "16"}, 16},
		{[]string{"tcp_lat", "--outs=1024", "10.0.0.1"}, 1024},
		{[]string{"atomic_bw"}, 128},
		{[]string{"atomic_bw", "-o", "16"}, 16},
	} {
		p, err := parseParams(c.args, &bytes.Buffer{})
		if err != nil {
			t.Fatalf("%v: %v", c.args, err)
		}
		if p.outs != c.outs {
			t.Errorf("%v: -o %d, want %d", c.args, p.outs, c.outs)
		}
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"tcp_lat", "-o", "0"}, "-o: 1 to 1024"},
		{[]string{"tcp_lat", "-o", "1025"}, "-o: 1 to 1024"},
		{[]string{"tcp_lat", "-o", "-3"}, "-o: 1 to 1024"},
		{[]string{"atomic_bw", "-o", "129"}, "-o: 1 to 128"},
		{[]string{"read_bw", "-o", "1024"}, "-o: 1 to 128"},
	} {
		_, err := parseParams(c.args, &bytes.Buffer{})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: error %v, want %q", c.args, err, c.want)
		}
	}
	if _, err := parseParams([]string{"tcp_lat", "-o", "x"}, &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), "-o") {
		t.Errorf("-o x: error %v, want one naming -o", err)
	}
}

// With -o 1 tcp_lat's JSON is as before (no Outstand_reads); with -o N it
// carries N as atomic_bw does.
func TestTCPOutsJSONInfo(t *testing.T) {
	for _, c := range []struct {
		outs string
		want any
	}{{"1", nil}, {"16", 16.0}} {
		f := filepath.Join(t.TempDir(), "out.json")
		p, err := parseParams([]string{"tcp_lat", "-o", c.outs, "--out_json_file", f}, &bytes.Buffer{})
		if err != nil {
			t.Fatal(err)
		}
		if err := writeResults(p, []any{LatResult{Size: 2, Iters: 5, RTTDiv: 2}}); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var doc struct {
			Info map[string]any `json:"test_info"`
		}
		if err := json.Unmarshal(b, &doc); err != nil {
			t.Fatal(err)
		}
		if got := doc.Info["Outstand_reads"]; got != c.want {
			t.Errorf("-o %s: Outstand_reads %v, want %v", c.outs, got, c.want)
		}
	}
}

// computePipe: the rate over the first write to the last response, the
// mean of the round trips.
func TestComputePipe(t *testing.T) {
	sent := []int64{0, 0, 1000, 2000}
	done := []int64{3000, 4000, 5000, 8000} // round trips 3, 4, 4, 6 µs
	r := computePipe(8, 2, sent, done)
	if r.Size != 8 || r.Iters != 4 || r.Outs != 2 || r.RTTDiv != 1 {
		t.Fatalf("%+v", r)
	}
	if math.Abs(r.Avg-4.25) > 1e-9 || math.Abs(r.MsgRate-0.5) > 1e-9 { // 4 in 8 µs
		t.Fatalf("avg %v rate %v, want 4.25 and 0.5", r.Avg, r.MsgRate)
	}
	if r := computePipe(8, 2, nil, nil); r.MsgRate != 0 || r.Avg != 0 {
		t.Fatalf("empty: %+v", r)
	}
}

// tcp_lat -o N end to end over loopback: one line per size with the
// counts asked for and a positive rate and round trip; the JSON rows and
// test_info agree; the server ends in step (it reads exactly the bytes of
// the requests, then the client's goodbye).
func TestTCPPipeLoopback(t *testing.T) {
	for _, c := range []struct {
		args       []string
		sizes      []int
		outs, iter int
	}{
		{[]string{"-o", "16", "-n", "300"}, []int{2}, 16, 300},
		{[]string{"-o", "16", "-n", "200", "-s", "8"}, []int{8}, 16, 200},
		{[]string{"-o", "4", "-n", "20", "-s", "100000"}, []int{100000}, 4, 20},         // larger than a write batch
		{[]string{"-o", "1024", "-n", "1100", "-s", "32768"}, []int{32768}, 1024, 1100}, // a window beyond the socket buffers
		{[]string{"-o", "8", "-n", "50", "-a", "--max_size", "64"}, []int{2, 4, 8, 16, 32, 64}, 8, 50},
	} {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			f := filepath.Join(t.TempDir(), "out.json")
			out := runPair(t, append([]string{"tcp_lat", "--out_json_file", f}, c.args...)...)
			if !strings.Contains(out, pipeHeader) || strings.Contains(out, latHeader) {
				t.Fatalf("header:\n%s", out)
			}
			var lines [][]string
			for _, l := range strings.Split(out, "\n") {
				if fl := strings.Fields(l); len(fl) > 0 && fl[0][0] >= '0' && fl[0][0] <= '9' {
					lines = append(lines, fl)
				}
			}
			if len(lines) != len(c.sizes) {
				t.Fatalf("%d result lines, want %d:\n%s", len(lines), len(c.sizes), out)
			}
			for i, fl := range lines {
				if len(fl) != 5 || fl[0] != strconv.Itoa(c.sizes[i]) || fl[1] != strconv.Itoa(c.iter) || fl[2] != strconv.Itoa(c.outs) {
					t.Errorf("line %q, want size %d, %d iterations, %d outstanding", strings.Join(fl, " "), c.sizes[i], c.iter, c.outs)
					continue
				}
				for _, v := range fl[3:] {
					if x, err := strconv.ParseFloat(v, 64); err != nil || x <= 0 {
						t.Errorf("line %q: %q is not positive", strings.Join(fl, " "), v)
					}
				}
			}
			b, doc := readReport(t, f)
			if doc.Info["Outstand_reads"] != float64(c.outs) || doc.Info["xrnic_test"] != "tcp_lat" {
				t.Errorf("test_info: %s", b)
			}
			var rows []TCPPipeResult
			var err error
			if len(c.sizes) == 1 {
				rows = make([]TCPPipeResult, 1)
				err = json.Unmarshal(doc.Results, &rows[0])
			} else {
				err = json.Unmarshal(doc.Results, &rows)
			}
			if err != nil || len(rows) != len(c.sizes) {
				t.Fatalf("results %v: %s", err, b)
			}
			for i, r := range rows {
				if r.Size != c.sizes[i] || r.Iters != c.iter || r.RTTDiv != 1 || r.MsgRate <= 0 || r.Avg <= 0 {
					t.Errorf("row %d: %+v", i, r)
				}
			}
			for _, k := range []string{"MsgSize", "n_iterations", "MsgRate", "t_avg", "rtt_factor"} {
				if !strings.Contains(string(doc.Results), `"`+k+`"`) {
					t.Errorf("results lack %q: %s", k, doc.Results)
				}
			}
		})
	}
}

// The pipeline's loops allocate nothing per request: a run of many
// requests costs the same handful of allocations as its setup.
func TestTCPPipeAllocs(t *testing.T) {
	if raceEnabled {
		// Not about the machine: make unit runs this test again without -race.
		t.Skip("the race detector allocates")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	const iters, size = 20000, 8
	served := make(chan error, 1)
	go func() {
		s, err := ln.Accept()
		if err != nil {
			served <- err
			return
		}
		defer s.Close()
		buf := make([]byte, 64<<10)
		served <- tcpEcho(s, buf, 2*iters*size)
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	buf := make([]byte, size)
	if _, err := tcpPipe(c, buf, iters, 16); err != nil { // warm up
		t.Fatal(err)
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	r, err := tcpPipe(c, buf, iters, 16)
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatal(err)
	}
	if err := <-served; err != nil {
		t.Fatal(err)
	}
	if r.Iters != iters || r.MsgRate <= 0 {
		t.Fatalf("%+v", r)
	}
	n := after.Mallocs - before.Mallocs
	t.Logf("%d allocations for %d requests", n, iters)
	if n > 100 {
		t.Errorf("%d allocations for %d requests", n, iters)
	}
}

// report is the part of an --out_json_file the tests check.
type report struct {
	Info    map[string]any  `json:"test_info"`
	Results json.RawMessage `json:"results"`
}

// readReport reads and decodes the JSON report at path.
func readReport(t *testing.T, path string) ([]byte, report) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var r report
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	return b, r
}
