//go:build linux

package afxdp

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// nsPrefix names every namespace the integration tests create:
// nsPrefix<pid>-<role>. Leftovers of crashed runs (whose pid is gone) are
// deleted before a new pair is made.
const nsPrefix = "xrnictest-"

// Addresses of the pair, from the 198.18.0.0/15 benchmarking range.
var (
	ipA  = [4]byte{198, 18, 0, 1}
	ipB  = [4]byte{198, 18, 0, 2}
	macA = [6]byte{0x02, 0x00, 0x5e, 0x00, 0x00, 0x01}
	macB = [6]byte{0x02, 0x00, 0x5e, 0x00, 0x00, 0x02}
)

type vethPair struct {
	nsA, nsB   string // network namespace names
	devA, devB string
}

func requireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: creates network namespaces, attaches XDP and opens AF_XDP sockets")
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

func run(t testing.TB, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// removeStale deletes namespaces of earlier runs whose process is gone.
func removeStale(t testing.TB) {
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		t.Fatalf("ip netns list: %v", err)
	}
	for _, line := range strings.Split(string(out), "\n") {
		name, _, _ := strings.Cut(strings.TrimSpace(line), " ")
		rest, ok := strings.CutPrefix(name, nsPrefix)
		if !ok {
			continue
		}
		pid, _, _ := strings.Cut(rest, "-")
		if n, err := strconv.Atoi(pid); err == nil && n != os.Getpid() {
			if _, err := os.Stat(fmt.Sprintf("/proc/%d", n)); err == nil {
				continue // another test binary is running
			}
		}
		exec.Command("ip", "netns", "del", name).Run()
	}
}

// newVethPair makes two namespaces joined by a veth with queues queues on
// each end, addressed 198.18.0.1/24 (A) and 198.18.0.2/24 (B). Cleanup
// deletes the namespaces, which destroys the veth and anything attached.
func newVethPair(t testing.TB, queues int) *vethPair {
	t.Helper()
	removeStale(t)
	p := &vethPair{
		nsA:  fmt.Sprintf("%s%d-a", nsPrefix, os.Getpid()),
		nsB:  fmt.Sprintf("%s%d-b", nsPrefix, os.Getpid()),
		devA: "xrt-a",
		devB: "xrt-b",
	}
	for _, ns := range []string{p.nsA, p.nsB} {
		run(t, "netns", "add", ns)
		t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
	}
	q := strconv.Itoa(queues)
	run(t, "-n", p.nsA, "link", "add", p.devA, "numtxqueues", q, "numrxqueues", q, "address", net.HardwareAddr(macA[:]).String(),
		"type", "veth", "peer", "name", p.devB, "netns", p.nsB, "numtxqueues", q, "numrxqueues", q, "address", net.HardwareAddr(macB[:]).String())
	for _, x := range []struct {
		ns, dev string
		ip      [4]byte
	}{{p.nsA, p.devA, ipA}, {p.nsB, p.devB, ipB}} {
		run(t, "-n", x.ns, "addr", "add", net.IP(x.ip[:]).String()+"/24", "dev", x.dev)
		run(t, "-n", x.ns, "link", "set", x.dev, "up")
		run(t, "-n", x.ns, "link", "set", "lo", "up")
	}
	// Static neighbours: our AF_XDP replies need no ARP, and the peer
	// need not resolve us through the steering program.
	run(t, "-n", p.nsA, "neigh", "replace", net.IP(ipB[:]).String(), "lladdr", net.HardwareAddr(macB[:]).String(), "dev", p.devA, "nud", "permanent")
	run(t, "-n", p.nsB, "neigh", "replace", net.IP(ipA[:]).String(), "lladdr", net.HardwareAddr(macA[:]).String(), "dev", p.devB, "nud", "permanent")
	return p
}

// inNetns runs f on an OS thread switched into namespace ns. Sockets and
// links created by f stay in ns after the thread switches back.
func inNetns(t testing.TB, ns string, f func()) {
	t.Helper()
	runtime.LockOSThread()
	orig, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		runtime.UnlockOSThread()
		t.Fatal(err)
	}
	defer unix.Close(orig)
	target, err := unix.Open("/run/netns/"+ns, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		runtime.UnlockOSThread()
		t.Fatal(err)
	}
	defer unix.Close(target)
	if err := unix.Setns(target, unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread()
		t.Fatal(err)
	}
	defer func() {
		if err := unix.Setns(orig, unix.CLONE_NEWNET); err != nil {
			// Leave the thread locked: the runtime discards it when the
			// goroutine exits, so no other goroutine runs in ns.
			t.Errorf("restore network namespace: %v", err)
			return
		}
		runtime.UnlockOSThread()
	}()
	f()
}

// ifindex returns the index of dev in namespace ns.
func ifindex(t testing.TB, ns, dev string) int {
	t.Helper()
	var idx int
	inNetns(t, ns, func() {
		ifi, err := net.InterfaceByName(dev)
		if err != nil {
			t.Fatal(err)
		}
		idx = ifi.Index
	})
	return idx
}
