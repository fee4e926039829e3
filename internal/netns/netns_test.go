package netns

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"xrnic/internal/require"
)

const testPrefix = "xrnicns-"

func TestNamePID(t *testing.T) {
	for _, c := range []struct {
		name string
		pid  int
		ok   bool
	}{
		{"xrnicns-123-4-a", 123, true},
		{"xrnicns-123", 123, true}, // the older helpers' forms
		{"xrnicns-123-e2e-a", 123, true},
		{"xrnicns-", 0, false},
		{"xrnicns-x1-2-a", 0, false},
		{"xrnicns-0123-1-a", 0, false},
		{"xrnicnsx-123-1-a", 0, false},
		{"other-123-1-a", 0, false},
	} {
		pid, ok := namePID(c.name, testPrefix)
		if pid != c.pid || ok != c.ok {
			t.Errorf("namePID(%q) = %d, %v; want %d, %v", c.name, pid, ok, c.pid, c.ok)
		}
	}
}

func TestValidate(t *testing.T) {
	in := func(s string) netip.Prefix { return netip.MustParsePrefix(s) }
	mac, _ := net.ParseMAC("02:00:00:00:00:01")
	for _, c := range []struct {
		o    Options
		want string
	}{
		{Options{}, "Prefix"},
		{Options{Prefix: testPrefix, Links: []Link{{A: End{NS: "a", Dev: "x", Addr: in("10.0.0.1/24")}, B: End{NS: "b", Dev: "y"}}}}, "outside"},
		{Options{Prefix: testPrefix, Links: []Link{{A: End{NS: "a", Dev: "x", Addr: in("198.18.0.1/8")}, B: End{NS: "b", Dev: "y"}}}}, "outside"},
		{Options{Prefix: testPrefix, Links: []Link{{A: End{NS: "a", Dev: "x", Neigh: netip.MustParseAddr("192.0.2.1")}, B: End{NS: "b", Dev: "y", MAC: mac}}}}, "outside"},
		{Options{Prefix: testPrefix, Links: []Link{{A: End{NS: "a", Dev: "x", Neigh: netip.MustParseAddr("198.18.0.2")}, B: End{NS: "b", Dev: "y"}}}}, "MAC"},
		{Options{Prefix: testPrefix, Links: []Link{{A: End{NS: "a"}, B: End{NS: "b", Dev: "y"}}}}, "needs NS and Dev"},
	} {
		if _, err := New(c.o); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("New(%+v): %v, want an error with %q", c.o, err, c.want)
		}
	}
}

func needRoot(t *testing.T) {
	t.Helper()
	if err := Check(false); err != nil {
		require.Unavailable(t, "%v (the ip command: Debian: apt-get install iproute2; CI runs it as root)", err)
	}
}

func exists(ns string) bool {
	_, err := os.Stat(filepath.Join("/run/netns", ns))
	return err == nil
}

// TestTopology builds a, m and b with links a-m and m-b, checks devices,
// addresses, MTU, queues and neighbours, that a connection works across
// one link, that Do restores the thread's namespace, and that Close
// removes everything and may be called twice.
func TestTopology(t *testing.T) {
	needRoot(t)
	macA, _ := net.ParseMAC("02:00:5e:10:00:01")
	macM, _ := net.ParseMAC("02:00:5e:10:00:02")
	topo, err := New(Options{Prefix: testPrefix, Namespaces: []string{"spare"}, Links: []Link{
		{A: End{NS: "a", Dev: "nsta", MAC: macA, Addr: netip.MustParsePrefix("198.18.9.1/24"), LimitGSO: true, Neigh: netip.MustParseAddr("198.18.9.2")},
			B: End{NS: "m", Dev: "nstma", MAC: macM, Addr: netip.MustParsePrefix("198.18.9.2/24")}, MTU: 9000, Queues: 2},
		{A: End{NS: "m", Dev: "nstmb"}, B: End{NS: "b", Dev: "nstb"}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer topo.Close()
	names := topo.Names()
	if len(names) != 4 || topo.NS("spare") != names[0] || topo.NS("x") != "" {
		t.Fatalf("names %v", names)
	}
	for _, n := range names {
		if !strings.HasPrefix(n, fmt.Sprintf("%s%d-", testPrefix, os.Getpid())) || !exists(n) {
			t.Errorf("namespace %q: wrong name or missing", n)
		}
	}
	link, err := exec.Command("ip", "-n", topo.NS("a"), "-d", "link", "show", "nsta").CombinedOutput()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"mtu 9000", "link/ether 02:00:5e:10:00:01", "gso_max_size 9000 gso_max_segs 1", "numtxqueues 2 numrxqueues 2", "state UP"} {
		if !strings.Contains(string(link), want) {
			t.Errorf("nsta lacks %q:\n%s", want, link)
		}
	}
	neigh, _ := exec.Command("ip", "-n", topo.NS("a"), "neigh", "show", "dev", "nsta").CombinedOutput()
	if !strings.Contains(string(neigh), "198.18.9.2 lladdr 02:00:5e:10:00:02 PERMANENT") {
		t.Errorf("neighbour entry:\n%s", neigh)
	}
	if idx, err := Ifindex(topo.NS("b"), "nstb"); err != nil || idx <= 0 {
		t.Errorf("Ifindex: %d, %v", idx, err)
	}
	if _, err := Ifindex(topo.NS("b"), "nsta"); err == nil {
		t.Error("nsta visible in b")
	}

	// A listener in m, a connection from a, each made by Do on this
	// goroutine, whose thread must be back in our namespace afterwards.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	before := nsInode(t)
	var ln net.Listener
	if err := Do(topo.NS("m"), func() (err error) { ln, err = net.Listen("tcp4", "198.18.9.2:0"); return }); err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		if c, err := ln.Accept(); err == nil {
			c.Write([]byte("hello"))
			c.Close()
		}
	}()
	var got []byte
	if err := Do(topo.NS("a"), func() error {
		c, err := net.Dial("tcp4", ln.Addr().String())
		if err != nil {
			return err
		}
		defer c.Close()
		got, err = io.ReadAll(c)
		return err
	}); err != nil || string(got) != "hello" {
		t.Fatalf("connection a -> m: %q, %v", got, err)
	}
	if nsInode(t) != before {
		t.Fatal("Do left the thread in another namespace")
	}
	func() {
		defer func() { recover() }()
		Do(topo.NS("b"), func() error { panic("boom") })
	}()
	if nsInode(t) != before {
		t.Fatal("Do did not restore the namespace after a panic")
	}
	if err := Do(testPrefix+"nosuch", func() error { return nil }); err == nil {
		t.Error("Do in a missing namespace succeeded")
	}
	want := errors.New("from f")
	if err := Do(topo.NS("a"), func() error { return want }); err != want {
		t.Errorf("Do returned %v, want f's error", err)
	}

	if err := topo.Close(); err != nil {
		t.Fatal(err)
	}
	if err := topo.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	for _, n := range names {
		if exists(n) {
			t.Errorf("%s left after Close", n)
		}
	}
}

func nsInode(t *testing.T) uint64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat("/proc/thread-self/ns/net", &st); err != nil {
		t.Fatal(err)
	}
	return st.Ino
}

// TestRemoveStale: a namespace of a dead process and one with our PID that
// we did not make go; those of a live process, of another prefix and of
// a live topology of ours stay.
func TestRemoveStale(t *testing.T) {
	needRoot(t)
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	mine, err := New(Options{Prefix: testPrefix, Namespaces: []string{"live"}})
	if err != nil {
		t.Fatal(err)
	}
	defer mine.Close()
	gone := []string{
		fmt.Sprintf("%s%d-1-a", testPrefix, dead.Process.Pid),
		fmt.Sprintf("%s%d", testPrefix, dead.Process.Pid),
		fmt.Sprintf("%s%d-999999-a", testPrefix, os.Getpid()),
	}
	kept := []string{
		fmt.Sprintf("%s%d-1-a", testPrefix, os.Getppid()),
		fmt.Sprintf("%sx-%d-1-a", testPrefix, dead.Process.Pid),
	}
	for _, n := range append(gone, kept...) {
		if err := IP("netns", "add", n); err != nil {
			t.Fatal(err)
		}
		defer exec.Command("ip", "netns", "del", n).Run()
	}
	if err := RemoveStale(testPrefix); err != nil {
		t.Fatal(err)
	}
	for _, n := range gone {
		if exists(n) {
			t.Errorf("%s not removed", n)
		}
	}
	for _, n := range append(kept, mine.NS("live")) {
		if !exists(n) {
			t.Errorf("%s removed", n)
		}
	}
}
