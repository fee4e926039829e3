//go:build linux

package deploy

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// TestIntegrationDaemonAFXDP is the afxdp walk-through of deploy/README.md
// between two network namespaces joined by a veth pair: xrnicd runs on the
// afxdp transport in A, xrnicctl runs over kernel TCP in B (so every
// operation is also an afxdp <-> kernel interop check). It checks values,
// that the XDP and user-space TCP metrics moved, promtool on the afxdp
// /metrics, and a clean SIGTERM: exit 0, no XDP program on the interface,
// the daemon's program and maps gone from the kernel, no pinned xrnic
// objects, no socket file, hugepage counts as before.
func TestIntegrationDaemonAFXDP(t *testing.T) {
	requireNetnsRoot(t)
	buildBins(t)
	const (
		devA, devB = "xda", "xdb"
		ipA, ipB   = "198.18.3.1", "198.18.3.2"
	)
	nsA := fmt.Sprintf("xrnicdp-%d-e2e-a", os.Getpid())
	nsB := fmt.Sprintf("xrnicdp-%d-e2e-b", os.Getpid())
	for _, ns := range []string{nsA, nsB} {
		exec.Command("ip", "netns", "del", ns).Run()
		ipRun(t, "netns", "add", ns)
		t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
	}
	ipRun(t, "-n", nsA, "link", "add", devA, "type", "veth", "peer", "name", devB, "netns", nsB)
	for _, x := range [][3]string{{nsA, devA, ipA}, {nsB, devB, ipB}} {
		// A single-buffer AF_XDP socket cannot take the 64 KiB GSO
		// frames a kernel TCP peer sends over veth: one segment per frame.
		ipRun(t, "-n", x[0], "link", "set", x[1], "gso_max_size", "1500", "gso_max_segs", "1")
		ipRun(t, "-n", x[0], "addr", "add", x[2]+"/24", "dev", x[1])
		ipRun(t, "-n", x[0], "link", "set", x[1], "up")
		ipRun(t, "-n", x[0], "link", "set", "lo", "up")
	}

	// Two hugepages for the regions, so the counts must come back.
	hpBefore := hugepages(t)
	if hpBefore.free < 2 {
		restore := hpBefore.total
		if err := os.WriteFile("/proc/sys/vm/nr_hugepages", []byte(strconv.Itoa(hpBefore.total+2)), 0); err == nil {
			t.Cleanup(func() { os.WriteFile("/proc/sys/vm/nr_hugepages", []byte(strconv.Itoa(restore)), 0) })
		}
		hpBefore = hugepages(t)
	}

	dir := t.TempDir()
	sock := filepath.Join(dir, "run", "xrnicd.sock")
	listen := ipA + ":7306"
	log := &syncBuf{}
	cmd := exec.Command("ip", "netns", "exec", nsA, xrnicd, "--transport", "afxdp", "--iface", devA,
		"--listen", listen, "--metrics", "127.0.0.1:9736", "--socket", sock, "--log-level", "debug",
		"--region", "counter:4K:rwa", "--region", "buf:64K:rw", "--hugepages", "prefer")
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("xrnicd log:\n%s", log.String())
		}
	})
	// ctl runs xrnicctl in namespace B (remote operations over kernel TCP
	// to the daemon's afxdp transport; the control socket is a file).
	ctl := func(args ...string) (string, error) {
		c := exec.Command("ip", append([]string{"netns", "exec", nsB, xrnicctl, "--socket", sock, "--timeout", "5s"}, args...)...)
		var out, errb bytes.Buffer
		c.Stdout, c.Stderr = &out, &errb
		if err := c.Run(); err != nil {
			return out.String(), fmt.Errorf("xrnicctl %s: %v: %s", strings.Join(args, " "), err, errb.String())
		}
		return out.String(), nil
	}
	mustCtl := func(args ...string) string {
		t.Helper()
		out, err := ctl(args...)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		var st struct {
			Ready     bool   `json:"ready"`
			Transport string `json:"transport"`
			Listen    string `json:"listen"`
		}
		out, err := ctl("status", "-j")
		if err == nil && json.Unmarshal([]byte(out), &st) == nil && st.Ready {
			if st.Transport != "afxdp" || st.Listen != listen {
				t.Fatalf("status %+v", st)
			}
			break
		}
		select {
		case err := <-done:
			t.Fatalf("xrnicd exited during start-up: %v\n%s", err, log.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("xrnicd not ready: %v %s\n%s", err, out, log.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, want := range []string{`transport=afxdp`, `msg="XDP attached"`, `mode=generic`} {
		if !strings.Contains(log.String(), want) {
			t.Errorf("start-up log lacks %s", want)
		}
	}
	var rs []region
	if err := json.Unmarshal([]byte(mustCtl("region", "list", "-j")), &rs); err != nil {
		t.Fatal(err)
	}
	regions := map[string]region{}
	for _, r := range rs {
		regions[r.Name] = r
	}
	c, b := regions["counter"], regions["buf"]

	// What the daemon attached, seen from outside.
	link, _ := exec.Command("ip", "-n", nsA, "link", "show", devA).CombinedOutput()
	m := regexp.MustCompile(`prog/xdp id (\d+)`).FindSubmatch(link)
	if m == nil {
		t.Fatalf("no XDP program on %s:\n%s", devA, link)
	}
	progID, _ := strconv.Atoi(string(m[1]))
	prog, err := ebpf.NewProgramFromID(ebpf.ProgramID(progID))
	if err != nil {
		t.Fatal(err)
	}
	pi, err := prog.Info()
	prog.Close()
	if err != nil || pi.Name != "xrnic_steer" {
		t.Fatalf("attached program %d: %v %+v", progID, err, pi)
	}
	mapIDs, _ := pi.MapIDs()
	if len(mapIDs) == 0 {
		t.Fatal("the attached program has no maps")
	}

	http := metricsIn(t, nsA)
	before := http.scrape(t)

	// Atomics, Read and Write from namespace B.
	atomic := func(args ...string) uint64 {
		t.Helper()
		var r struct {
			Original string `json:"original"`
		}
		out := mustCtl(append(args, "-j")...)
		if err := json.Unmarshal([]byte(out), &r); err != nil || len(r.Original) != 18 {
			t.Fatalf("%v: %q", args, out)
		}
		v, _ := strconv.ParseUint(r.Original[2:], 16, 64)
		return v
	}
	word := func(to int) uint64 {
		t.Helper()
		var r struct {
			Data string `json:"data"`
		}
		json.Unmarshal([]byte(mustCtl("read", listen, c.STag, strconv.Itoa(to), "8", "-j")), &r)
		v, err := hex.DecodeString(r.Data)
		if err != nil || len(v) != 8 {
			t.Fatalf("read %q", r.Data)
		}
		return binary.NativeEndian.Uint64(v)
	}
	mustCtl("write", listen, c.STag, "8", hex.EncodeToString(binary.NativeEndian.AppendUint64(nil, 40)))
	if got := atomic("fetchadd", listen, c.STag, "8", "2"); got != 40 {
		t.Fatalf("fetchadd original %d", got)
	}
	if got := atomic("cmpswap", listen, c.STag, "8", "42", "7"); got != 42 {
		t.Fatalf("cmpswap original %d", got)
	}
	if got := atomic("cmpswap", listen, c.STag, "8", "42", "9"); got != 7 {
		t.Fatalf("cmpswap miss original %d", got)
	}
	if w := word(8); w != 7 {
		t.Fatalf("counter %d", w)
	}
	mustCtl("write", listen, b.STag, "0x100", "00112233445566778899")
	if out := mustCtl("read", listen, b.STag, "0xfe", "14"); strings.TrimSpace(out) != "0000001122334455667788990000" {
		t.Fatalf("read %q", out)
	}
	// A remote error: the daemon's Terminate reaches xrnicctl.
	if _, err := ctl("fetchadd", listen, b.STag, "0", "1"); err == nil || !strings.Contains(err.Error(), "Terminate RDMAP/0x1/0x02") {
		t.Fatalf("fetchadd without atomic access: %v", err)
	}

	waitFor(t, "afxdp metrics", func() string {
		after := http.scrape(t)
		grew := func(name string, pairs ...string) float64 {
			return sum(after, name, pairs...) - max(sum(before, name, pairs...), 0)
		}
		for _, c := range []struct {
			name  string
			pairs []string
			min   float64
		}{
			// 8 connections, each at least handshake, MPA frame, one
			// operation and FIN each way: 4 segments in and out.
			{"xrnic_xdp_program_packets_total", []string{"interface", devA, "counter", "redirected"}, 32},
			{"xrnic_tcp_segments_total", []string{"direction", "in"}, 32},
			{"xrnic_tcp_segments_total", []string{"direction", "out"}, 32},
			// Every handshake times its SYN: at least one RTT sample each.
			{"xrnic_tcp_rtt_seconds_count", nil, 8},
			{"xrnic_atomics_total", []string{"operation", "cmp_swap"}, 2},
			{"xrnic_terminates_total", []string{"direction", "sent"}, 1},
		} {
			if g := grew(c.name, c.pairs...); g < c.min {
				return fmt.Sprintf("%s%v grew by %v, want at least %v", c.name, c.pairs, g, c.min)
			}
		}
		for _, fam := range []string{"xrnic_xdp_rx_dropped_total", "xrnic_xdp_rx_invalid_descriptors_total", "xrnic_xdp_tx_invalid_descriptors_total",
			"xrnic_xdp_rx_ring_full_total", "xrnic_xdp_fill_ring_empty_total", "xrnic_xdp_tx_ring_empty_total"} {
			if sum(after, fam, "interface", devA, "queue", "0") < 0 {
				return fam + " absent for queue 0"
			}
		}
		for _, fam := range []string{"xrnic_tcp_retransmitted_segments_total", "xrnic_tcp_rto_events_total", "xrnic_tcp_out_of_order_segments_total"} {
			if sum(after, fam) < 0 {
				return fam + " absent"
			}
		}
		return ""
	})

	// promtool on the afxdp daemon's exposition.
	if promtool, err := exec.LookPath("promtool"); err == nil {
		pc := exec.Command(promtool, "check", "metrics")
		pc.Stdin = bytes.NewReader(http.body(t))
		if out, err := pc.CombinedOutput(); err != nil {
			t.Errorf("promtool check metrics: %v\n%s", err, out)
		}
	} else {
		t.Log("promtool not installed: skipping promtool check metrics")
	}

	// SIGTERM and what must be gone.
	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("xrnicd after SIGTERM: %v\n%s", err, log.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("xrnicd did not exit after SIGTERM\n%s", log.String())
	}
	if out, _ := exec.Command("ip", "-n", nsA, "link", "show", devA).CombinedOutput(); strings.Contains(string(out), "xdp") {
		t.Errorf("XDP program left on %s:\n%s", devA, out)
	}
	if p, err := ebpf.NewProgramFromID(ebpf.ProgramID(progID)); err == nil {
		p.Close()
		t.Errorf("the daemon's XDP program %d is still loaded", progID)
	} else if !errors.Is(err, os.ErrNotExist) {
		t.Errorf("program %d: %v", progID, err)
	}
	// The kernel frees maps in deferred work after the last reference
	// goes: give it a moment.
	waitFor(t, "the daemon's maps released", func() string {
		for _, id := range mapIDs {
			if mp, err := ebpf.NewMapFromID(id); err == nil {
				mp.Close()
				return fmt.Sprintf("map %d is still in the kernel", id)
			}
		}
		return ""
	})
	filepath.WalkDir("/sys/fs/bpf", func(p string, d os.DirEntry, err error) error {
		if err == nil && strings.Contains(strings.ToLower(d.Name()), "xrnic") {
			t.Errorf("pinned xrnic object left: %s", p)
		}
		return nil
	})
	if _, err := os.Stat(sock); !os.IsNotExist(err) {
		t.Errorf("control socket left: %v", err)
	}
	if hp := hugepages(t); hp != hpBefore {
		t.Errorf("hugepages before %+v, after %+v", hpBefore, hp)
	}
	if !strings.Contains(log.String(), "xrnicd stopped") {
		t.Error("no orderly stop in the log")
	}
}

func requireNetnsRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: network namespaces, XDP and AF_XDP (CI runs it as root)")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("needs the ip command (iproute2)")
	}
	fd, err := unix.Socket(unix.AF_XDP, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Skipf("no AF_XDP sockets here (CONFIG_XDP_SOCKETS?): %v", err)
	}
	unix.Close(fd)
}

func ipRun(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

type hugepageCounts struct{ total, free, rsvd, surp int }

// hugepages reads the default-size hugepage counters of /proc/meminfo.
func hugepages(t *testing.T) hugepageCounts {
	t.Helper()
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		t.Fatal(err)
	}
	var h hugepageCounts
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		n, _ := strconv.Atoi(f[1])
		switch f[0] {
		case "HugePages_Total:":
			h.total = n
		case "HugePages_Free:":
			h.free = n
		case "HugePages_Rsvd:":
			h.rsvd = n
		case "HugePages_Surp:":
			h.surp = n
		}
	}
	return h
}

// nsHTTP fetches the daemon's /metrics inside its namespace: connections
// are dialled on a thread that entered the namespace (a socket keeps its
// namespace whichever thread uses it afterwards).
type nsHTTP struct {
	c    *http.Client
	addr string
}

func metricsIn(t *testing.T, ns string) *nsHTTP {
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		fd, err := unix.Open("/run/netns/"+ns, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return nil, err
		}
		defer unix.Close(fd)
		type res struct {
			c   net.Conn
			err error
		}
		ch := make(chan res, 1)
		go func() {
			runtime.LockOSThread() // never unlocked: the thread is discarded
			if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
				ch <- res{nil, err}
				return
			}
			var d net.Dialer
			c, err := d.DialContext(ctx, network, addr)
			ch <- res{c, err}
		}()
		r := <-ch
		return r.c, r.err
	}
	return &nsHTTP{c: &http.Client{Transport: &http.Transport{DialContext: dial, DisableKeepAlives: true}, Timeout: 10 * time.Second}, addr: "127.0.0.1:9736"}
}

func (h *nsHTTP) body(t *testing.T) []byte {
	t.Helper()
	resp, err := h.c.Get("http://" + h.addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func (h *nsHTTP) scrape(t *testing.T) map[string]float64 {
	t.Helper()
	m := map[string]float64{}
	for _, line := range strings.Split(string(h.body(t)), "\n") {
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("metrics line %q", line)
		}
		m[line[:i]] = v
	}
	return m
}
