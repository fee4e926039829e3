//go:build linux

package reliability

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf/link"

	"xrnic/internal/daemontest"
	"xrnic/internal/netns"
	"xrnic/internal/netnstest"
)

// One owner per interface (issue 12, point 7): a second xrnicd on an
// interface in use exits with an error naming the first and leaves it
// serving; /readyz reports an attachment removed behind the daemon's
// back; start-up with more queues than the device has exits promptly.

const ownNSPrefix = "xrnicown-"

var (
	ownIPA = netip.MustParseAddr("198.18.71.1")
	ownIPB = netip.MustParseAddr("198.18.71.2")
)

type ownEnv struct{ nsA, nsB, devA string }

func newOwnEnv(t *testing.T) *ownEnv {
	t.Helper()
	netnstest.RequireRoot(t, true)
	p := netnstest.NewPair(t, netnstest.PairOptions{Prefix: ownNSPrefix, DevA: "owna", DevB: "ownb",
		AddrA: ownIPA, AddrB: ownIPB, LimitGSO: true})
	return &ownEnv{nsA: p.NSA, nsB: p.NSB, devA: p.DevA}
}

func (e *ownEnv) args(extra ...string) []string {
	return append([]string{"--transport", "afxdp", "--iface", e.devA, "--listen", ownIPA.String() + ":7306",
		"--metrics", ownIPA.String() + ":9736", "--hugepages", "off", "--region", "counter:4K:rwa"}, extra...)
}

// start runs xrnicd in A (xrnicctl in B, where the peer is).
func (e *ownEnv) start(t *testing.T) *daemontest.Daemon {
	t.Helper()
	return daemontest.Start(t, daemontest.Options{Args: e.args(), Netns: e.nsA, CtlNetns: e.nsB, LogTail: 20000})
}

// readyz GETs the daemon's /readyz from inside namespace A.
func (e *ownEnv) readyz(t *testing.T, d *daemontest.Daemon) (int, string) {
	t.Helper()
	tr := &http.Transport{DialContext: func(ctx context.Context, network, addr string) (c net.Conn, err error) {
		if err2 := netns.Do(e.nsA, func() error {
			c, err = (&net.Dialer{}).DialContext(ctx, network, addr)
			return err
		}); err2 != nil && err == nil {
			err = err2
		}
		return c, err
	}}
	defer tr.CloseIdleConnections()
	cl := http.Client{Transport: tr, Timeout: 5 * time.Second}
	resp, err := cl.Get("http://" + d.Metrics + "/readyz")
	if err != nil {
		t.Fatalf("GET /readyz: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(b))
}

// fetchAdd runs `xrnicctl fetchadd` from B against the daemon's counter.
func (e *ownEnv) fetchAdd(t *testing.T, d *daemontest.Daemon, add int) string {
	t.Helper()
	r := d.Regions["counter"]
	return strings.TrimSpace(d.MustCtl(t, "fetchadd", d.Listen, r.STag, "0", fmt.Sprint(add)))
}

// runXrnicd runs xrnicd in A to its exit (bounded) and returns its output,
// how long it ran and its exit error.
func runXrnicd(t *testing.T, ns string, bound time.Duration, args ...string) (string, time.Duration, error) {
	t.Helper()
	b := daemontest.Build(t)
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	cmd := netns.CommandContext(ctx, ns, b.Xrnicd, append([]string{"--socket", filepath.Join(t.TempDir(), "xrnicd.sock"),
		"--lock-dir", daemontest.LockDir(t)}, args...)...)
	start := time.Now()
	out, err := cmd.CombinedOutput()
	took := time.Since(start)
	if ctx.Err() != nil {
		t.Fatalf("xrnicd %v still running after %v (killed)\n%s", args, bound, out)
	}
	return string(out), took, err
}

func TestIntegrationOwnerTwoDaemons(t *testing.T) {
	e := newOwnEnv(t)
	d1 := e.start(t)
	if got := e.fetchAdd(t, d1, 1); !strings.Contains(got, "(0)") {
		t.Fatalf("first FetchAdd: %s", got)
	}
	progs := xdpProgs(t, e.nsA, e.devA)
	if len(progs) != 1 {
		t.Fatalf("XDP programs on %s: %v", e.devA, progs)
	}

	out, took, err := runXrnicd(t, e.nsA, 20*time.Second, e.args()...)
	if err == nil {
		t.Fatalf("a second xrnicd on %s exited 0\n%s", e.devA, out)
	}
	want := fmt.Sprintf("another xrnic process (pid %d, xrnicd) holds %s", d1.Cmd.Process.Pid, e.devA)
	if !strings.Contains(out, want) {
		t.Fatalf("second xrnicd (%v): the output does not say %q\n%s", err, want, out)
	}
	t.Logf("second xrnicd exited after %v: %v", took.Round(time.Millisecond), err)
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, want) {
			t.Logf("  %s", l)
		}
	}

	// The first one is untouched: same program, ready, serving.
	if got := xdpProgs(t, e.nsA, e.devA); len(got) != 1 || got[0] != progs[0] {
		t.Fatalf("XDP programs after the second xrnicd: %v, were %v", got, progs)
	}
	if code, body := e.readyz(t, d1); code != http.StatusOK {
		t.Fatalf("first xrnicd /readyz: %d %s", code, body)
	}
	if got := e.fetchAdd(t, d1, 1); !strings.Contains(got, "(1)") {
		t.Fatalf("FetchAdd after the second xrnicd: %s", got)
	}
	d1.Stop(t, 10*time.Second)
}

func TestIntegrationOwnerReadyzDetached(t *testing.T) {
	e := newOwnEnv(t)
	d := e.start(t)
	if code, body := e.readyz(t, d); code != http.StatusOK {
		t.Fatalf("/readyz: %d %s", code, body)
	}
	// Behind its back: the daemon's attachment is a bpf_link, which `ip
	// link set dev X xdp off` does not remove (xdpgeneric off is refused
	// with EBUSY); BPF_LINK_DETACH does, as `bpftool link detach` or an
	// xrnic without the owner lock (which replaced "stale" attachments).
	progs := xdpProgs(t, e.nsA, e.devA)
	if len(progs) != 1 {
		t.Fatalf("XDP programs on %s: %v", e.devA, progs)
	}
	detachXDPLinks(t, progs[0])
	if got := xdpProgs(t, e.nsA, e.devA); len(got) != 0 {
		t.Fatalf("XDP programs still attached: %v", got)
	}
	code, body := e.readyz(t, d)
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "no longer attached") {
		t.Fatalf("/readyz after the detach: %d %q: want 503 naming the lost attachment", code, body)
	}
	t.Logf("/readyz after the detach: %d %s", code, body)
	d.Stop(t, 10*time.Second)
}

func TestIntegrationOwnerTooManyQueues(t *testing.T) {
	e := newOwnEnv(t)
	out, took, err := runXrnicd(t, e.nsA, 20*time.Second, e.args("--queues", "2")...)
	if err == nil {
		t.Fatalf("xrnicd --queues 2 on a one-queue veth exited 0\n%s", out)
	}
	// It must exit, not hang: runXrnicd's 20 s bound is the check (a
	// wall-clock limit below it would fail on a loaded machine).
	if !strings.Contains(out, "ethtool -L "+e.devA+" combined 2") {
		t.Errorf("xrnicd --queues 2: no ethtool -L hint in\n%s", out)
	}
	t.Logf("xrnicd --queues 2 exited after %v: %v", took.Round(time.Millisecond), err)
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "ethtool -L") {
			t.Logf("  %s", l)
		}
	}
}

// detachXDPLinks detaches the bpf_links that attach XDP program prog
// (BPF_LINK_DETACH, what `bpftool link detach` does).
func detachXDPLinks(t *testing.T, prog string) {
	t.Helper()
	it := new(link.Iterator)
	defer it.Close()
	n := 0
	for it.Next() {
		li, err := it.Link.Info()
		if err != nil || li.Type != link.XDPType || fmt.Sprint(li.Program) != prog {
			continue
		}
		d, ok := it.Link.(interface{ Detach() error })
		if !ok {
			t.Fatalf("bpf_link %d cannot be detached", li.ID)
		}
		if err := d.Detach(); err != nil {
			t.Fatalf("detach bpf_link %d: %v", li.ID, err)
		}
		n++
	}
	if err := it.Err(); err != nil {
		t.Fatal(err)
	}
	if n == 0 {
		t.Fatalf("no bpf_link holds XDP program %s", prog)
	}
}
