// Package netnstest builds the two-host test topology of xrnic's
// privileged tests: network namespaces joined by a veth pair, addressed
// from the benchmarking range 198.18.0.0/15, removed again when the test
// ends (also on failure) and, for runs that were killed before their
// cleanup could run, at the start of the next run.
//
// Namespace names are PREFIX + PID + "-" + sequence + "-a"/"-b", so a
// later run can tell a leftover (its process is gone) from a namespace of
// a test running in parallel in another process.
package netnstest

import (
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"
)

// RequireRoot skips the test unless it runs as root with iproute2 and, when
// xdp is set, AF_XDP sockets.
func RequireRoot(t testing.TB, xdp bool) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: creates network namespaces, attaches XDP and opens AF_XDP sockets (CI runs it as root)")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("needs the ip command (iproute2)")
	}
	if !xdp {
		return
	}
	fd, err := unix.Socket(unix.AF_XDP, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Skipf("no AF_XDP sockets here (CONFIG_XDP_SOCKETS?): %v", err)
	}
	unix.Close(fd)
}

// IP runs the ip command and fails the test with its output on error.
func IP(t testing.TB, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// RemoveStale deletes the namespaces named prefix+PID-... whose process is
// gone (a killed test binary cannot run its cleanup).
func RemoveStale(prefix string) {
	out, _ := exec.Command("ip", "netns", "list").Output()
	for _, line := range strings.Split(string(out), "\n") {
		name, _, _ := strings.Cut(strings.TrimSpace(line), " ")
		rest, ok := strings.CutPrefix(name, prefix)
		if !ok {
			continue
		}
		pid, _, _ := strings.Cut(rest, "-")
		if n, err := strconv.Atoi(pid); err == nil && n != os.Getpid() {
			if _, err := os.Stat(fmt.Sprintf("/proc/%d", n)); err == nil {
				continue
			}
		}
		exec.Command("ip", "netns", "del", name).Run()
	}
}

// PairOptions describe a namespace pair joined by a veth.
type PairOptions struct {
	Prefix       string     // namespace name prefix, unique per test package
	DevA, DevB   string     // veth end names in A and B
	AddrA, AddrB netip.Addr // addresses (a /24) of the two ends
	MTU          int        // 0 keeps 1500
	// LimitGSO limits GSO on both ends to one MTU-sized segment: a
	// single-buffer AF_XDP socket cannot take the 64 KiB GSO frames a
	// kernel TCP peer sends over veth.
	LimitGSO bool
}

// Pair is a made namespace pair.
type Pair struct {
	NSA, NSB   string
	DevA, DevB string
}

var seq atomic.Int64

// NewPair removes stale namespaces of the prefix, then makes the pair and
// registers its removal with t.Cleanup. Call RequireRoot first.
func NewPair(t testing.TB, o PairOptions) *Pair {
	t.Helper()
	RemoveStale(o.Prefix)
	n := seq.Add(1)
	p := &Pair{
		NSA:  fmt.Sprintf("%s%d-%d-a", o.Prefix, os.Getpid(), n),
		NSB:  fmt.Sprintf("%s%d-%d-b", o.Prefix, os.Getpid(), n),
		DevA: o.DevA, DevB: o.DevB,
	}
	for _, ns := range []string{p.NSA, p.NSB} {
		IP(t, "netns", "add", ns)
		t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
	}
	IP(t, "-n", p.NSA, "link", "add", p.DevA, "type", "veth", "peer", "name", p.DevB, "netns", p.NSB)
	for _, x := range []struct {
		ns, dev string
		ip      netip.Addr
	}{{p.NSA, p.DevA, o.AddrA}, {p.NSB, p.DevB, o.AddrB}} {
		if o.MTU > 0 {
			IP(t, "-n", x.ns, "link", "set", x.dev, "mtu", strconv.Itoa(o.MTU))
		}
		if o.LimitGSO {
			IP(t, "-n", x.ns, "link", "set", x.dev, "gso_max_size", strconv.Itoa(max(o.MTU, 1500)), "gso_max_segs", "1")
		}
		IP(t, "-n", x.ns, "addr", "add", x.ip.String()+"/24", "dev", x.dev)
		IP(t, "-n", x.ns, "link", "set", x.dev, "up")
		IP(t, "-n", x.ns, "link", "set", "lo", "up")
	}
	return p
}

// In runs f on a fresh OS thread inside namespace ns; sockets created there
// stay in it. The thread is discarded afterwards (never returned to the Go
// scheduler's pool).
func In(t testing.TB, ns string, f func() error) error {
	t.Helper()
	fd, err := unix.Open("/run/netns/"+ns, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	ch := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread dies with the goroutine
		if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
			ch <- err
			return
		}
		ch <- f()
	}()
	return <-ch
}
