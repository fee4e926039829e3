//go:build linux

package deploy

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"xrnic/internal/daemontest"
	"xrnic/internal/hugetest"
	"xrnic/internal/netns"
	"xrnic/internal/netnstest"
	"xrnic/internal/require"
	"xrnic/mem"
)

// TestIntegrationDaemonAFXDP is the afxdp walk-through of deploy/README.md
// between two network namespaces joined by a veth pair: xrnicd runs on the
// afxdp transport in A, xrnicctl runs over kernel TCP in B (so every
// operation is also an afxdp <-> kernel interop check). It checks values,
// that the XDP and user-space TCP metrics moved, promtool on the afxdp
// /metrics, and a clean SIGTERM: exit 0, no XDP program on the interface,
// the daemon's program and maps gone from the kernel, no pinned xrnic
// objects, no socket file, the regions' hugepages gone with the daemon.
func TestIntegrationDaemonAFXDP(t *testing.T) {
	netnstest.RequireRoot(t, true)
	const (
		devA, devB = "xda", "xdb"
		ipA, ipB   = "198.18.3.1", "198.18.3.2"
	)
	// A single-buffer AF_XDP socket cannot take the 64 KiB GSO frames a
	// kernel TCP peer sends over veth: one segment per frame.
	end := func(ns, dev, ip string) netns.End {
		return netns.End{NS: ns, Dev: dev, Addr: netip.PrefixFrom(netip.MustParseAddr(ip), 24), LimitGSO: true}
	}
	topo := netnstest.New(t, netns.Options{Prefix: "xrnicdeploy-", Links: []netns.Link{{A: end("a", devA, ipA), B: end("b", devB, ipB)}}})
	nsA, nsB := topo.NS("a"), topo.NS("b")

	// Hugepages for the two regions, and two spare: the pool is
	// host-wide and any process may map a free page. The oracle is the
	// daemon's own /proc/PID/smaps, not the pool's counters, which other
	// packages' tests move meanwhile. (The UMEM, 12 pages, falls back.)
	// Built first, so that the pages are free only while xrnicd starts.
	daemontest.Build(t)
	hugetest.Reserve(t, mem.Size2M, 4)

	// xrnicctl runs in namespace B: remote operations go over kernel TCP
	// to the daemon's afxdp transport; the control socket is a file.
	listen, metrics := ipA+":7306", "127.0.0.1:9736" // metrics inside A
	d := &daemon{daemontest.Start(t, daemontest.Options{Netns: nsA, CtlNetns: nsB, Args: []string{
		"--transport", "afxdp", "--iface", devA, "--listen", listen, "--metrics", metrics, "--log-level", "debug",
		"--region", "counter:4K:rwa", "--region", "buf:64K:rw", "--hugepages", "prefer"}})}
	if d.Transport != "afxdp" || d.Listen != listen {
		t.Fatalf("status: transport %q listen %q", d.Transport, d.Listen)
	}
	log := d.Log
	for _, want := range []string{`transport=afxdp`, `msg="XDP attached"`, `mode=generic`} {
		if !strings.Contains(log.String(), want) {
			t.Errorf("start-up log lacks %s", want)
		}
	}
	c, b := d.Regions["counter"], d.Regions["buf"]

	// Each region's VMA in the daemon is the one that starts with what a
	// peer wrote at its TO 0: a prefaulted 2 MiB hugetlb page.
	pid := d.Cmd.Process.Pid
	regionVMAs := map[string]hugetest.Mapping{}
	for _, name := range []string{"counter", "buf"} {
		marker := make([]byte, 16)
		rand.Read(marker)
		d.MustCtl(t, "write", listen, d.Regions[name].STag, "0", hex.EncodeToString(marker))
		m := hugetest.MappingStartingWith(t, pid, marker)
		if !hugetest.AssertHugetlb(t, m, mem.Size2M, mem.Size2M) {
			t.Errorf("region %s is not on a prefaulted 2 MiB hugetlb page", name)
		}
		regionVMAs[name] = m
	}

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

	hc := nsClient(nsA)
	before := scrapeWith(t, hc, metrics)

	// Atomics, Read and Write from namespace B.
	d.setWord(t, "counter", 8, 40)
	if got := d.atomic(t, "fetchadd", listen, c.STag, "8", "2"); got != 40 {
		t.Fatalf("fetchadd original %d", got)
	}
	if got := d.atomic(t, "cmpswap", listen, c.STag, "8", "42", "7"); got != 42 {
		t.Fatalf("cmpswap original %d", got)
	}
	if got := d.atomic(t, "cmpswap", listen, c.STag, "8", "42", "9"); got != 7 {
		t.Fatalf("cmpswap miss original %d", got)
	}
	if w := d.word(t, "counter", 8); w != 7 {
		t.Fatalf("counter %d", w)
	}
	d.MustCtl(t, "write", listen, b.STag, "0x100", "00112233445566778899")
	if out := d.MustCtl(t, "read", listen, b.STag, "0xfe", "14"); strings.TrimSpace(out) != "0000001122334455667788990000" {
		t.Fatalf("read %q", out)
	}
	// A remote error: the daemon's Terminate reaches xrnicctl.
	if _, err := d.Ctl.Run("fetchadd", listen, b.STag, "0", "1"); err == nil || !strings.Contains(err.Error(), "Terminate RDMAP/0x1/0x02") {
		t.Fatalf("fetchadd without atomic access: %v", err)
	}

	waitFor(t, "afxdp metrics", func() string {
		after := scrapeWith(t, hc, metrics)
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
			{"xrnic_tcp_segments_total", []string{"direction", "rx"}, 32},
			{"xrnic_tcp_segments_total", []string{"direction", "tx"}, 32},
			// Every handshake times its SYN: at least one RTT sample each.
			{"xrnic_tcp_rtt_seconds_count", nil, 8},
			{"xrnic_atomics_total", []string{"operation", "cmp_swap"}, 2},
			{"xrnic_terminates_total", []string{"direction", "tx"}, 1},
		} {
			if g := grew(c.name, c.pairs...); g < c.min {
				return fmt.Sprintf("%s%v grew by %v, want at least %v", c.name, c.pairs, g, c.min)
			}
		}
		for _, fam := range []string{"xrnic_xdp_rx_dropped_total", "xrnic_xdp_rx_invalid_descriptors_total", "xrnic_xdp_tx_invalid_descriptors_total",
			"xrnic_xdp_rx_ring_full_total", "xrnic_xdp_fill_ring_empty_total", "xrnic_xdp_tx_ring_empty_total", "xrnic_xdp_tx_busy_total"} {
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

	// promtool on the afxdp daemon's exposition (a subtest: without
	// promtool only it skips, or fails under CI).
	t.Run("promtool", func(t *testing.T) {
		promtool := require.Tool(t, "promtool", "prometheus")
		pc := exec.Command(promtool, "check", "metrics")
		pc.Stdin = bytes.NewReader(metricsBody(t, hc, metrics))
		if out, err := pc.CombinedOutput(); err != nil {
			t.Errorf("promtool check metrics: %v\n%s", err, out)
		}
	})

	// SIGTERM and what must be gone.
	d.Stop(t, 30*time.Second)
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
	filepath.WalkDir("/sys/fs/bpf", func(p string, e os.DirEntry, err error) error {
		if err == nil && strings.Contains(strings.ToLower(e.Name()), "xrnic") {
			t.Errorf("pinned xrnic object left: %s", p)
		}
		return nil
	})
	// The regions' hugepages went with the daemon.
	for _, m := range regionVMAs {
		hugetest.AssertReleased(t, pid, m)
	}
	if !strings.Contains(log.String(), "xrnicd stopped") {
		t.Error("no orderly stop in the log")
	}
}

// nsClient fetches from inside namespace ns: connections are dialled on
// a thread that entered it (a socket keeps its namespace whichever thread
// uses it afterwards).
func nsClient(ns string) *http.Client {
	dial := func(ctx context.Context, network, addr string) (c net.Conn, err error) {
		err = netns.Do(ns, func() error {
			var d net.Dialer
			c, err = d.DialContext(ctx, network, addr)
			return err
		})
		return c, err
	}
	return &http.Client{Transport: &http.Transport{DialContext: dial, DisableKeepAlives: true}, Timeout: 10 * time.Second}
}
