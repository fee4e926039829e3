package reliability

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// idleBulk is what each idle QP writes and reads before it idles.
const idleBulk = 64 << 10

// TestIntegrationIdleQPs: one xrnicd (kernel transport, its default QP
// settings) with clients x perClient established QPs that did a 64 KiB
// Write and Read each and then idle; it reports the daemon's RSS per QP
// (issue 16's goal: 4,096 QPs at 64 KiB or less each). make idleqps runs
// it with 4 x 1,024 QPs (XRNIC_IDLE_QPS sets the total) and writes the
// numbers to XRNIC_IDLE_OUT as JSON. The bound it enforces is far looser
// than the goal (a leak or a per-QP buffer gone wild), so that CI's small
// run stays meaningful on any host.
func TestIntegrationIdleQPs(t *testing.T) {
	clients, total := 4, 128
	if v, err := strconv.Atoi(os.Getenv("XRNIC_IDLE_QPS")); err == nil && v > 0 {
		total = v
	}
	if testing.Short() {
		total = 32
	}
	perClient := (total + clients - 1) / clients
	total = clients * perClient
	// Loopback's MTU (64 KiB) would size every QP's MPA reassembly
	// buffer to a 64 KiB FPDU, which a 64 KiB Write fills: as root the run
	// goes into a namespace of its own whose loopback has an Ethernet MTU.
	netns, mtu := "", "65536 (loopback)"
	if os.Geteuid() == 0 {
		netns, mtu = fmt.Sprintf("xrnic-idle-%d", os.Getpid()), "1500"
		if out, err := exec.Command("ip", "netns", "add", netns).CombinedOutput(); err != nil {
			t.Fatalf("ip netns add: %v: %s", err, out)
		}
		t.Cleanup(func() { exec.Command("ip", "netns", "del", netns).Run() })
		if out, err := exec.Command("ip", "-n", netns, "link", "set", "lo", "mtu", "1500", "up").CombinedOutput(); err != nil {
			t.Fatalf("ip link set lo: %v: %s", err, out)
		}
	}
	d := startDaemonIn(t, netns, "--max-qps", strconv.Itoa(total+64), "--max-setup", strconv.Itoa(total+64), "--max-setup-per-peer", strconv.Itoa(total+64),
		"--region", fmt.Sprintf("data:%d:rw", idleBulk), "--region", "counter:4096:rwa",
		"--log-level", "warn", "--conn-timeout", "10s")
	time.Sleep(500 * time.Millisecond) // let the daemon settle before the baseline
	rss0, _ := procStatus(t, d.pid())
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	argv := []string{self}
	if netns != "" {
		argv = []string{"ip", "netns", "exec", netns, self}
	}
	var procs []*exec.Cmd
	for c := range clients {
		cmd, _ := startSoakClient(t, argv, d, c, perClient, dir, "XRNIC_SOAK_IDLE=1", "XRNIC_SOAK_FOR=10m")
		procs = append(procs, cmd)
	}
	t.Cleanup(func() {
		for _, p := range procs {
			p.Process.Signal(syscall.SIGKILL)
			p.Wait()
		}
	})
	// Wait until every QP has done its operations.
	deadline := time.Now().Add(2*time.Minute + time.Duration(perClient)*3*time.Millisecond)
	for {
		done, errs := 0, []string(nil)
		for c := range clients {
			var s soakSummary
			if b, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("summary%d.json", c))); err == nil {
				json.Unmarshal(b, &s)
			}
			done += int(s.Ops["read"])
			errs = append(errs, s.Errors...)
		}
		if len(errs) > 0 {
			t.Fatalf("clients: %v", errs)
		}
		if done == total {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d QPs connected and done", done, total)
		}
		d.alive(t)
		time.Sleep(200 * time.Millisecond)
	}
	if n := d.status(t); n < total {
		t.Fatalf("the daemon lists %d QPs, want %d", n, total)
	}
	time.Sleep(2 * time.Second) // idle
	rss, fds := procStatus(t, d.pid())
	perQP := float64(rss-rss0) / float64(total)
	t.Logf("daemon RSS %d KiB with no QP, %d KiB with %d idle QPs: %.1f KiB per QP (goal <= 64); %d fds; MTU %s", rss0, rss, total, perQP, fds, mtu)
	if out := os.Getenv("XRNIC_IDLE_OUT"); out != "" {
		b, _ := json.Marshal(map[string]any{"qps": total, "rss0_kib": rss0, "rss_kib": rss, "kib_per_qp": perQP, "fds": fds, "mtu": mtu})
		if err := os.WriteFile(out, b, 0o644); err != nil {
			t.Error(err)
		}
	}
	if perQP > 4096 {
		t.Errorf("%.0f KiB of daemon RSS per idle QP", perQP)
	}
}
