package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"xrnic/control"
	"xrnic/internal/daemontest"
	"xrnic/internal/hugetest"
	"xrnic/mem"
	"xrnic/wire/mpa"
)

func TestParseRegion(t *testing.T) {
	cases := []struct {
		in   string
		want regionSpec
		err  string
	}{
		{"counter:4K:rwa", regionSpec{"counter", 4096, mem.RemoteRead | mem.RemoteWrite | mem.RemoteAtomic}, ""},
		{"lock:8:a", regionSpec{"lock", 8, mem.RemoteAtomic}, ""},
		{"big:2MiB:r", regionSpec{"big", 2 << 20, mem.RemoteRead}, ""},
		{"x:1G:w", regionSpec{"x", 1 << 30, mem.RemoteWrite}, ""},
		{"x:0x1000:w", regionSpec{"x", 4096, mem.RemoteWrite}, ""},
		{"x:4K", regionSpec{}, "NAME:SIZE:ACCESS"},
		{":4K:r", regionSpec{}, "NAME:SIZE:ACCESS"},
		{"x:0:r", regionSpec{}, "positive"},
		{"x:4K:", regionSpec{}, "at least one"},
		{"x:4K:rx", regionSpec{}, "access letters"},
		{"a/b:4K:r", regionSpec{}, "name"},
	}
	for _, c := range cases {
		got, err := parseRegion(c.in)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("parseRegion(%q) error %v, want %q", c.in, err, c.err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("parseRegion(%q) = %+v, %v; want %+v", c.in, got, err, c.want)
		}
	}
}

func TestConfigFile(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "x.conf")
	os.WriteFile(f, []byte(`# comment
listen 127.0.0.1:7000
metrics = 127.0.0.1:7001   # trailing comment
region a:4K:rwa
region b:8K:r
allow 10.0.0.0/8
no-crc
rtr send,read
max-qps 7
log-level debug
`), 0o644)
	c, err := parseArgs([]string{"--config", f, "--max-qps", "9", "--region", "c:4K:w"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.Listen != "127.0.0.1:7000" || c.Metrics != "127.0.0.1:7001" || !c.NoCRC || c.MaxQPs != 9 ||
		c.RTR != mpa.RTRSend|mpa.RTRRead || c.LogLevel.String() != "DEBUG" || len(c.Allow) != 1 || c.Allow[0].String() != "10.0.0.0/8" {
		t.Errorf("config %+v", c)
	}
	// The command line's --region replaces the file's list.
	if len(c.Regions) != 1 || c.Regions[0].Name != "c" {
		t.Errorf("regions %+v", c.Regions)
	}
	os.WriteFile(f, []byte("bogus 1\n"), 0o644)
	if _, err := parseArgs([]string{"--config", f}, io.Discard); err == nil || !strings.Contains(err.Error(), "unknown key") {
		t.Errorf("unknown key: %v", err)
	}
	c = defaultConfig()
	c.Listen, c.Metrics, c.Hugepages, c.PageSize, c.MPARev, c.LogFormat, c.MaxQPs, c.SinkDepth = ":1", "off", "prefer", "2M", "any", "text", 1, 1
	c.Regions = []regionSpec{{"a", 1 << 30, mem.RemoteRead}, {"b", 1, mem.RemoteRead}}
	if err := c.validate(); err == nil || !strings.Contains(err.Error(), "--max-registered-bytes") {
		t.Errorf("registered bytes limit: %v", err)
	}
}

func TestMain(m *testing.M) { daemontest.Main(m) }

// runDaemon runs xrnicd expecting it to exit by itself.
func runDaemon(t *testing.T, args ...string) (int, string) {
	t.Helper()
	cmd := exec.Command(daemontest.Build(t).Xrnicd, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	done := make(chan error, 1)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		cmd.Process.Kill()
		<-done
		t.Fatalf("xrnicd %v did not exit:\n%s", args, out.String())
	}
	return cmd.ProcessState.ExitCode(), out.String()
}

// loNotEthernet is what --iface lo says of the afxdp transport, with or
// without the privileges.
const loNotEthernet = "lo is not an Ethernet device (the loopback device), and the afxdp transport needs one (use the kernel transport on loopback"

func TestStartupErrors(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	sock := func() string { return filepath.Join(t.TempDir(), "x.sock") }
	cases := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"port in use", []string{"--listen", busy.Addr().String(), "--metrics", "off", "--socket", sock()}, 1, "port is in use"},
		{"metrics port in use", []string{"--listen", "127.0.0.1:0", "--metrics", busy.Addr().String(), "--socket", sock()}, 1, "port is in use"},
		{"unknown interface", []string{"--iface", "nosuchif0", "--socket", sock()}, 1, "unknown interface"},
		{"afxdp on a non-Ethernet device", []string{"--transport", "afxdp", "--iface", "lo", "--socket", sock()}, 1, loNotEthernet},
		{"bad xdp mode", []string{"--transport", "afxdp", "--iface", "lo", "--xdp-mode", "fast"}, 2, "--xdp-mode"},
		{"afxdp without iface", []string{"--transport", "afxdp", "--socket", sock()}, 1, "needs --iface"},
		{"bad region", []string{"--region", "x:4K:q"}, 2, "access letters"},
		{"bad allow", []string{"--allow", "10.0.0.0/99"}, 2, "CIDR"},
		{"bad flag", []string{"--nope"}, 2, "flag provided but not defined"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, out := runDaemon(t, c.args...)
			if code != c.code || !strings.Contains(out, c.want) {
				t.Errorf("exit %d, want %d with %q:\n%s", code, c.code, c.want, out)
			}
		})
	}
}

// startDaemon starts xrnicd on loopback without metrics and waits until
// it is ready.
func startDaemon(t *testing.T, args ...string) *daemontest.Daemon {
	t.Helper()
	return daemontest.Start(t, daemontest.Options{Args: append([]string{"--listen", "127.0.0.1:0", "--metrics", "off"}, args...)})
}

func TestAllowAndStartupLog(t *testing.T) {
	d := startDaemon(t, "--allow", "10.1.0.0/16", "--iface", "lo")
	// --iface selects afxdp by default, but lo is not Ethernet: kernel,
	// and the log says why, whatever the privileges.
	reason := `transport=kernel reason="--iface lo given but ` + loNotEthernet
	for _, want := range []string{reason, `allow=10.1.0.0/16`} {
		if !d.WaitLog(t, want) {
			t.Errorf("start-up log lacks %s:\n%s", want, d.Log.String())
		}
	}
	// A peer outside the list is closed before MPA.
	var st control.StatusInfo
	if err := control.NewClient(d.Socket).Get(context.Background(), control.PathStatus, &st); err != nil {
		t.Fatal(err)
	}
	if len(st.Allow) != 1 || st.Allow[0] != "10.1.0.0/16" {
		t.Errorf("status allow %v", st.Allow)
	}
	// The listener resets it before reading anything; on loopback the
	// reset can already fail the dial.
	if c, err := net.Dial("tcp", st.Listen); err == nil {
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if n, err := c.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
			t.Errorf("refused peer: read %d, %v; want the connection closed", n, err)
		}
		c.Close()
	} else if !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("refused peer: dial %v; want it accepted and reset", err)
	}
	var stats control.StatsInfo
	if err := control.NewClient(d.Socket).Get(context.Background(), control.PathStats, &stats); err != nil || stats.Refused != 1 {
		t.Errorf("refused connections %d (%v), want 1", stats.Refused, err)
	}
	d.Stop(t, 20*time.Second)
	d = startDaemon(t)
	if !d.WaitLog(t, `allow="all peers (no --allow given)"`) {
		t.Errorf("start-up log does not state the default allow list:\n%s", d.Log.String())
	}
	d.Stop(t, 20*time.Second)
}

// TestIntegrationHugepages: with no 2 MiB page to give, xrnicd --hugepages
// require refuses to start, naming the sysctl; with pages reserved it
// starts with its region on one prefaulted 2 MiB hugetlb page, and SIGTERM
// gives the page back. The pool is host-wide and other packages' tests map
// 2 MiB pages meanwhile: the oracle is the daemon's own /proc/PID/smaps.
func TestIntegrationHugepages(t *testing.T) {
	if p := hugetest.Set(t, mem.Size2M, 0); p.Available() != 0 {
		t.Fatalf("emptied the 2 MiB pool, yet pages are available: %v", p)
	}
	code, out := runDaemon(t, "--listen", "127.0.0.1:0", "--metrics", "off", "--socket", filepath.Join(t.TempDir(), "s"),
		"--region", "c:4K:rwa", "--hugepages", "require")
	if code != 1 || !strings.Contains(out, "vm.nr_hugepages") {
		t.Errorf("start without hugepages: exit %d, want 1 naming vm.nr_hugepages:\n%s", code, out)
	}

	// One page for the region, one spare: any process may map a free page.
	hugetest.Reserve(t, mem.Size2M, 2)
	d := startDaemon(t, "--region", "c:4K:rwa", "--hugepages", "require")
	pid := d.Cmd.Process.Pid
	// The region's VMA in the daemon is the one that starts with what a
	// peer wrote at TO 0.
	marker := make([]byte, 16)
	rand.Read(marker)
	d.MustCtl(t, "write", d.Listen, d.Regions["c"].STag, "0", hex.EncodeToString(marker))
	m := hugetest.MappingStartingWith(t, pid, marker)
	if !hugetest.AssertHugetlb(t, m, mem.Size2M, mem.Size2M) || m.Size() != mem.Size2M {
		t.Errorf("the daemon's region is not one prefaulted 2 MiB hugetlb page: %v\n%s", m, d.Log.String())
	}
	// And the daemon holds no hugetlb memory besides it.
	ms, err := hugetest.Mappings(pid)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range ms {
		if o.Hugetlb() && o.Start != m.Start {
			t.Errorf("the daemon maps hugetlb memory besides its region: %v", o)
		}
	}
	d.Stop(t, 20*time.Second)
	// Stopped with status 0 and reaped: its mappings, the page among
	// them, are gone.
	hugetest.AssertReleased(t, pid, m)
}

// TestChooseTransport: --transport and --iface resolve to a transport and
// a logged reason; the default with --iface follows the privileges.
func TestChooseTransport(t *testing.T) {
	type tc struct {
		transport, iface string
		want             string
		auto             bool
		err              string
	}
	cases := []tc{
		{"", "", "kernel", false, ""},
		{"kernel", "lo", "kernel", false, ""},
		{"afxdp", "", "", false, "needs --iface"},
		{"dpdk", "", "", false, "want kernel or afxdp"},
		{"", "nosuchif0", "", false, "unknown interface"},
	}
	// lo is no Ethernet device: kernel by default, an error when afxdp is
	// asked for, whatever the privileges.
	cases = append(cases, tc{"", "lo", "kernel", false, ""}, tc{"afxdp", "lo", "", false, "--transport afxdp --iface lo: " + loNotEthernet})
	for _, c := range cases {
		cfg := config{Transport: c.transport, Iface: c.iface}
		tr, reason, auto, err := chooseTransport(&cfg)
		if c.iface == "lo" && c.transport == "" && !strings.Contains(reason, loNotEthernet) {
			t.Errorf("%q/lo: reason %q does not say %q", c.transport, reason, loNotEthernet)
		}
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%q/%q: error %v, want %q", c.transport, c.iface, err, c.err)
			}
			continue
		}
		if err != nil || tr != c.want || auto != c.auto || reason == "" {
			t.Errorf("%q/%q: %q %q auto=%v %v; want %q auto=%v", c.transport, c.iface, tr, reason, auto, err, c.want, c.auto)
		}
	}
}

// TestFlagErrorLast: a bad option is reported alone, not after the
// usage, with the way to the usage; enumerated options list their values.
func TestFlagErrorLast(t *testing.T) {
	code, out := runDaemon(t, "--nope")
	want := "xrnicd: flag provided but not defined: -nope\nrun xrnicd --help for the options\n"
	if code != 2 || out != want {
		t.Errorf("xrnicd --nope: exit %d, output\n%s\nwant exit 2 with just\n%s", code, out, want)
	}
	code, out = runDaemon(t, "--help")
	if code != 0 || !strings.Contains(out, "-region NAME:SIZE:ACCESS") || strings.Contains(out, "xrnicd:") {
		t.Errorf("xrnicd --help: exit %d:\n%s", code, out)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--transport", "dpdk"}, `--transport "dpdk": want kernel or afxdp`},
		{[]string{"--xdp-mode", "fast"}, `--xdp-mode "fast": want auto, native or generic`},
		{[]string{"--hugepages", "always"}, `--hugepages "always": want prefer, require or off`},
		{[]string{"--mpa-rev", "3"}, `--mpa-rev "3": want any, 1 or 2`},
		{[]string{"--log-format", "xml"}, `--log-format "xml": want text or json`},
		{[]string{"--page-size", "4K"}, `--page-size "4K": want 2M or 1G`},
		{[]string{"--log-level", "loud"}, `invalid value "loud" for flag -log-level: want debug, info, warn or error`},
	} {
		cfg, err := parseArgs(c.args, io.Discard)
		if err == nil {
			err = cfg.validate()
		}
		if err == nil || err.Error() != c.want {
			t.Errorf("xrnicd %v: %v; want %q", c.args, err, c.want)
		}
	}
}

// TestHugepageShortfall: --hugepages require names the pages all regions
// need together and the total to reserve.
func TestHugepageShortfall(t *testing.T) {
	regions := []regionSpec{{"a", 4096, mem.RemoteAtomic}, {"b", 3 << 20, mem.RemoteRead}} // 1 + 2 pages of 2 MiB
	need := 0
	for _, r := range regions {
		need += (r.Size + mem.Size2M - 1) / mem.Size2M
	}
	if need != 3 {
		t.Fatalf("need %d", need)
	}
	const nr = "/proc/sys/vm/nr_hugepages"
	cases := []struct {
		free, total int
		want        string
	}{
		{0, 0, "--hugepages require: the regions need 3 2 MiB pages, 0 are free: echo 3 > /proc/sys/vm/nr_hugepages (sysctl -w vm.nr_hugepages=3), or start with --hugepages prefer to fall back to smaller pages"},
		{1, 5, "--hugepages require: the regions need 3 2 MiB pages, 1 are free: echo 7 > /proc/sys/vm/nr_hugepages (sysctl -w vm.nr_hugepages=7), or start with --hugepages prefer to fall back to smaller pages"},
		{3, 3, ""},
	}
	for _, c := range cases {
		err := hugepageShortfall(need, c.free, c.total, mem.Size2M, nr)
		if (err == nil) != (c.want == "") || err != nil && err.Error() != c.want {
			t.Errorf("free %d of %d: %v; want %q", c.free, c.total, err, c.want)
		}
	}
	err := hugepageShortfall(2, 0, 0, mem.Size1G, "/sys/kernel/mm/hugepages/hugepages-1048576kB/nr_hugepages")
	if want := "the regions need 2 1 GiB pages, 0 are free: echo 2 > /sys/kernel/mm/hugepages/hugepages-1048576kB/nr_hugepages, or"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("1 GiB: %v; want %q", err, want)
	}
	// Through the daemon, with fewer than 3 free 2 MiB pages: as root the
	// pool is emptied for the test; otherwise when the host has fewer.
	// Either way under the hugepage lock, so no test adds pages meanwhile.
	if os.Geteuid() == 0 {
		hugetest.Set(t, mem.Size2M, 0)
	} else {
		hugetest.Lock(t)
	}
	if pool, err := mem.Hugepages(mem.Size2M); err == nil && pool.Free < 3 {
		code, out := runDaemon(t, "--listen", "127.0.0.1:0", "--metrics", "off", "--socket", filepath.Join(t.TempDir(), "s"),
			"--region", "a:4K:rwa", "--region", "b:3M:r", "--hugepages", "require")
		if code != 1 || !strings.Contains(out, "the regions need 3 2 MiB pages") {
			t.Errorf("xrnicd --hugepages require: exit %d:\n%s", code, out)
		}
	}
}
