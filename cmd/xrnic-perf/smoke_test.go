package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"xrnic/internal/freeport"
)

func freePort(t *testing.T) string {
	t.Helper()
	p, err := freeport.Pick()
	if err != nil {
		t.Fatal(err)
	}
	return strconv.Itoa(p)
}

// runPair runs a server and a client with the same options over loopback
// (kernel transport) and returns the client's output.
func runPair(t *testing.T, args ...string) string {
	t.Helper()
	port := freePort(t)
	args = append(args, "-p", port, "--bind", "127.0.0.1")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// Both ends write --out_json_file: the server to a file of its own,
	// or the two would race for the client's.
	sargs := append([]string(nil), args...)
	for i := range sargs[:len(sargs)-1] {
		if sargs[i] == "--out_json_file" {
			sargs[i+1] += ".server"
		}
	}
	sp, err := parseParams(sargs, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	var sout bytes.Buffer
	done := make(chan error, 1)
	go func() { done <- run(ctx, sp, &sout) }()
	cp, err := parseParams(append(args, "127.0.0.1"), &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	var cout bytes.Buffer
	var cerr error
	for try := 0; try < 50; try++ { // until the server listens
		cout.Reset()
		if cerr = run(ctx, cp, &cout); cerr == nil || !strings.Contains(cerr.Error(), "refused") {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if cerr != nil {
		t.Fatalf("client %v: %v\n%s", args, cerr, cout.String())
	}
	if err := <-done; err != nil {
		t.Fatalf("server %v: %v\n%s", args, err, sout.String())
	}
	return cout.String()
}

// Every test runs end to end with data validation; its report carries
// the right header and one line per size with sane numbers.
func TestSmokeLoopback(t *testing.T) {
	cases := [][]string{
		{"write_bw", "-n", "300", "-s", "4096"},
		{"write_bw", "-n", "300", "-s", "4096", "--no-crc"},
		{"write_bw", "-n", "200", "-s", "1000", "-b"},
		{"write_bw", "-n", "300", "-s", "512", "--write_with_imm", "-r", "16"},
		{"read_bw", "-n", "200", "-q", "3", "-a", "--max_size", "8192"},
		{"send_bw", "-n", "500", "-s", "100", "-r", "8", "-t", "32", "-q", "2"},
		{"atomic_bw", "-n", "300", "-q", "2"},
		{"atomic_bw", "-n", "300", "-A", "CMP_AND_SWAP", "--masked_atomics"},
		{"write_lat", "-n", "100", "--write_with_imm"},
		{"read_lat", "-n", "100", "-s", "64"},
		{"send_lat", "-n", "100", "-s", "300"},
		{"atomic_lat", "-n", "100", "-A", "CMP_AND_SWAP"},
		{"atomic_lat", "-n", "100", "--masked_atomics"},
		{"imm_lat", "-n", "100"},
		{"tcp_lat", "-n", "100"},
		{"tcp_bw", "-n", "100"},
	}
	if !raceEnabled { // raceEnabled; make unit runs this case again without -race
		cases = append(cases, []string{"write_lat", "-n", "100", "-s", "33"})
	}
	for _, c := range cases {
		t.Run(strings.Join(c, " "), func(t *testing.T) {
			args := append([]string{}, c...)
			if !strings.HasPrefix(c[0], "tcp") {
				args = append(args, "--data_validation")
			}
			out := runPair(t, args...)
			bw := strings.HasSuffix(c[0], "_bw")
			header := latHeader
			if bw {
				header = bwHeader(mib)
			}
			if !strings.Contains(out, header) {
				t.Fatalf("no header in\n%s", out)
			}
			if crc := " MPA CRC         : " + onOff(!slices.Contains(c, "--no-crc")); !strings.HasPrefix(c[0], "tcp") && !strings.Contains(out, crc) {
				t.Errorf("no %q in\n%s", crc, out)
			}
			lines := 0
			for _, l := range strings.Split(out, "\n") {
				f := strings.Fields(l)
				if len(f) < 5 || f[0][0] < '0' || f[0][0] > '9' {
					continue
				}
				lines++
				if bw && (f[3] == "0.00" || f[4] == "0.000000") {
					t.Errorf("zero bandwidth: %q", l)
				}
				if !bw && (len(f) != 9 || f[2] == "0.00") {
					t.Errorf("bad latency line: %q", l)
				}
			}
			want := 1
			if strings.Contains(strings.Join(c, " "), "-a") {
				want = 13 // 2 .. 8192
			}
			if lines != want {
				t.Errorf("%d result lines, want %d:\n%s", lines, want, out)
			}
		})
	}
}

func TestSmokeDurationJSON(t *testing.T) {
	f := filepath.Join(t.TempDir(), "out.json")
	out := runPair(t, "atomic_lat", "-D", "1", "--out_json_file", f, "--quiet")
	if !strings.Contains(out, latDurHeader) {
		t.Fatalf("no duration header:\n%s", out)
	}
	b, err := os.ReadFile(f)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Info    map[string]any `json:"test_info"`
		Results LatResult      `json:"results"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	if doc.Results.Avg <= 0 || doc.Info["transport"] != "kernel" {
		t.Fatalf("JSON: %s", b)
	}
}
