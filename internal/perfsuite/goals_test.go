package perfsuite

import (
	"fmt"
	"strings"
	"testing"
)

// The goal table from hand-made medians: ratios of full round trips
// (t_typical × rtt_factor), the median of three repetitions, the
// monotonic depth check, and rows that say why instead of a number when a
// run failed or was not run.
func TestGoalsSummary(t *testing.T) {
	lat := func(typ, factor float64) map[string]any {
		return map[string]any{"t_typical": typ, "rtt_factor": factor}
	}
	rate := func(r float64) map[string]any { return map[string]any{"MsgRate": r} }
	l := &goalLink{MTU: 1500, Runs: map[string][]map[string]any{
		// tcp_lat: half round trips 9, 10, 50: median 10, RTT 20.
		"tcp_lat":           {lat(9, 2), lat(50, 2), lat(10, 2)},
		"atomic_lat kernel": {lat(29, 1), lat(30, 1), lat(31, 1)}, // RTT 30: 1.5x
		"send_lat kernel":   {lat(14, 2)},                         // RTT 28: 1.4x
		"tcp_lat -o 16":     {rate(1)},
	}, Errors: map[string][]string{"write_lat kernel": {"timed out"}}, Commands: map[string]string{"tcp_lat": "x", "write_lat kernel": ""}}
	for i, d := range goalDepths {
		l.Runs[atomicJob(d, "kernel")] = []map[string]any{rate(float64(i + 1))}
	}
	l.Runs[atomicJob(128, "kernel")] = []map[string]any{rate(3.5)} // 4 at -o 64, then 3.5: step 0.875
	out := goalsSummary([]*goalLink{l}, goalJobs(goalsQuick, false), 3, true, "dir")
	for _, want := range []string{
		"| kernel: atomic_lat <= 1.5x tcp_lat | 1500 | atomic_lat kernel 30.00 µs RTT / tcp_lat 20.00 µs RTT | 1.50 | <= 1.5 | yes |",
		"| kernel: send_lat <= 1.3x tcp_lat | 1500 | send_lat kernel 28.00 µs RTT / tcp_lat 20.00 µs RTT | 1.40 | <= 1.3 | no |",
		"| kernel: write_lat <= 1.3x tcp_lat | 1500 | write_lat kernel failed: timed out | - | <= 1.3 | not measured |",
		"smallest step -o 128 / -o 64 | 0.88 | >= 1 (smallest step) | no |",
		"| afxdp: atomic_lat <= 1.3x xdp_lat | 1500 | atomic_lat afxdp not run: afxdp and AF_XDP need root",
		"| both: idle CPU < 1% | 1500 | not measured by xrnic-perf",
		"| tcp_lat | t_typical [µs] | 10.00 (9.00-50.00, 3 runs) |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in\n%s", want, out)
		}
	}
}

// atomicJob is the key of the atomic_bw job at depth d.
func atomicJob(d int, tr string) string { return fmt.Sprintf("atomic_bw -o %d %s", d, tr) }
