package afxdp

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"xrnic/bpf"
	"xrnic/internal/netns"
	"xrnic/internal/netnstest"
	"xrnic/internal/testclean"
)

// Integration tests of the owner lock, Healthy and the queue check (issue
// 12, point 7): a namespace pair joined by a veth, afxdp on end A.

const ownerNSPrefix = "xrnicafo-"

var (
	ownerIPA = netip.MustParseAddr("198.18.70.1")
	ownerIPB = netip.MustParseAddr("198.18.70.2")
)

// ownerChildEnv makes the test binary the "dead owner" child (TestMain):
// it takes the owner lock of the interface named by the variable and
// leaves an xrnic program attached through netlink (an attachment that
// survives its process, as a crash leaves it), says "ready PROGID" and
// waits to be killed.
const ownerChildEnv = "XRNIC_AFXDP_OWNER_CHILD"

func TestMain(m *testing.M) {
	if iface := os.Getenv(ownerChildEnv); iface != "" {
		os.Exit(ownerChild(iface))
	}
	testclean.Main(m)
}

func ownerChild(iface string) int {
	fail := func(err error) int { fmt.Println("error", err); return 1 }
	ifi, err := net.InterfaceByName(iface)
	if err != nil {
		return fail(err)
	}
	ns, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fail(err)
	}
	if _, err := lockIface(DefaultLockDir, iface, ns, ifi.Index); err != nil {
		return fail(err)
	}
	p, err := bpf.Load(bpf.Options{})
	if err != nil {
		return fail(err)
	}
	l, err := netlink.LinkByIndex(ifi.Index)
	if err != nil {
		return fail(err)
	}
	if err := netlink.LinkSetXdpFdWithFlags(l, p.Prog().FD(), unix.XDP_FLAGS_SKB_MODE); err != nil {
		return fail(err)
	}
	pi, _ := p.Prog().Info()
	id, _ := pi.ID()
	fmt.Println("ready", id)
	io.Copy(io.Discard, os.Stdin) // until killed (or the parent is gone)
	return 0
}

type ownerEnv struct {
	nsA, nsB, devA, devB string
}

func newOwnerEnv(t *testing.T) *ownerEnv {
	t.Helper()
	netnstest.RequireRoot(t, true)
	p := netnstest.NewPair(t, netnstest.PairOptions{Prefix: ownerNSPrefix, DevA: "afoa", DevB: "afob",
		AddrA: ownerIPA, AddrB: ownerIPB, LimitGSO: true})
	return &ownerEnv{nsA: p.NSA, nsB: p.NSB, devA: p.DevA, devB: p.DevB}
}

// open runs Open in namespace A.
func (e *ownerEnv) open(t *testing.T, cfg Config) (*Transport, error) {
	t.Helper()
	cfg.Iface = e.devA
	cfg.Logger = slog.New(slog.DiscardHandler)
	var x *Transport
	err := netnstest.In(t, e.nsA, func() (err error) {
		x, err = Open(cfg)
		return err
	})
	if x != nil {
		t.Cleanup(func() { x.Close() })
	}
	return x, err
}

func (e *ownerEnv) mustOpen(t *testing.T) *Transport {
	t.Helper()
	x, err := e.open(t, Config{})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return x
}

// attached is the id of the XDP program on device A (0: none).
func (e *ownerEnv) attached(t *testing.T) uint32 {
	t.Helper()
	var id uint32
	netnstest.Do(t, e.nsA, func() {
		l, err := netlink.LinkByName(e.devA)
		if err != nil {
			t.Fatal(err)
		}
		if xd := l.Attrs().Xdp; xd != nil && xd.Attached {
			id = xd.ProgId
		}
	})
	return id
}

// echo checks that x still carries traffic: a connection to a kernel TCP
// echo server in B, one message there and back.
func (e *ownerEnv) echo(t *testing.T, x *Transport) {
	t.Helper()
	addr := netnstest.Serve(t, e.nsB, ownerIPB.String()+":0", true)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := x.Dial(ctx, addr)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	defer c.Close()
	msg := []byte("one owner per interface")
	if _, err := c.Write(msg); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(c, got); err != nil || string(got) != string(msg) {
		t.Fatalf("echo: %q, %v", got, err)
	}
}

func selfComm(t *testing.T, pid int) string {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm")
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// A second Open on an interface in use fails with the lock error naming
// the holder and leaves the first one's attachment alone; after the first
// closes, Open succeeds.
func TestIntegrationOwnerSecondOpen(t *testing.T) {
	e := newOwnerEnv(t)
	x1 := e.mustOpen(t)
	if err := x1.Healthy(); err != nil {
		t.Fatalf("Healthy after Open: %v", err)
	}
	prog := e.attached(t)
	if prog == 0 || prog != x1.progID {
		t.Fatalf("attached program %d, ours %d", prog, x1.progID)
	}

	start := time.Now()
	x2, err := e.open(t, Config{})
	if err == nil {
		x2.Close()
		t.Fatal("a second Open on the same interface succeeded")
	}
	t.Logf("second Open (%v): %v", time.Since(start).Round(time.Millisecond), err)
	var op *OpError
	if !errors.Is(err, ErrInUse) || !errors.As(err, &op) || op.Op != OpLock {
		t.Fatalf("second Open: %v: want an OpError (Op %q) wrapping ErrInUse", err, OpLock)
	}
	want := fmt.Sprintf("another xrnic process (pid %d, %s) holds %s", os.Getpid(), selfComm(t, os.Getpid()), e.devA)
	if !strings.Contains(err.Error(), want) {
		t.Errorf("second Open: %q does not say %q", err, want)
	}
	if got := e.attached(t); got != prog {
		t.Fatalf("the second Open changed the attachment: program %d, was %d", got, prog)
	}
	if err := x1.Healthy(); err != nil {
		t.Fatalf("first transport after the second Open: %v", err)
	}
	e.echo(t, x1)

	if err := x1.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(x1.lock.path); !os.IsNotExist(err) {
		t.Errorf("lock file %s after Close: %v", x1.lock.path, err)
	}
	if err := x1.Healthy(); err == nil {
		t.Error("Healthy after Close: nil")
	}
	x3, err := e.open(t, Config{})
	if err != nil {
		t.Fatalf("Open after the owner closed: %v", err)
	}
	if x3.Info().Replaced != "" {
		t.Errorf("Open after a clean Close replaced %s", x3.Info().Replaced)
	}
	if err := x3.Healthy(); err != nil {
		t.Fatal(err)
	}
	e.echo(t, x3)
}

// An attachment whose owner is alive (another process holding the lock) is
// left alone; once that owner is dead (SIGKILL: its lock goes with it, its
// netlink attachment stays), Open replaces it.
func TestIntegrationOwnerDeadOwner(t *testing.T) {
	e := newOwnerEnv(t)
	cmd := netns.Command(e.nsA, os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), ownerChildEnv+"="+e.devA)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		stdin.Close()
		<-exited
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "ready ") {
		t.Fatalf("child: %q %v", line, err)
	}
	stale, _ := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "ready ")))
	if got := e.attached(t); got != uint32(stale) {
		t.Fatalf("the child's program %d is not attached (%d)", stale, got)
	}

	// Its owner is alive: refused, untouched.
	pid := cmd.Process.Pid
	_, err = e.open(t, Config{})
	want := fmt.Sprintf("another xrnic process (pid %d, %s) holds %s", pid, selfComm(t, pid), e.devA)
	if !errors.Is(err, ErrInUse) || !strings.Contains(err.Error(), want) {
		t.Fatalf("Open while another process holds %s: %v: want %q", e.devA, err, want)
	}
	t.Logf("live owner: %v", err)
	if got := e.attached(t); got != uint32(stale) {
		t.Fatalf("Open refused but changed the attachment: %d, was %d", got, stale)
	}

	// Its owner dies: replaced.
	cmd.Process.Signal(syscall.SIGKILL)
	<-exited
	if got := e.attached(t); got != uint32(stale) {
		t.Fatalf("the dead owner's attachment is gone (%d): the test needs it to survive", got)
	}
	x := e.mustOpen(t)
	if x.Info().Replaced == "" || !strings.Contains(x.Info().Replaced, strconv.Itoa(stale)) {
		t.Errorf("Open after the owner died: Replaced %q, want program %d", x.Info().Replaced, stale)
	}
	t.Logf("dead owner: replaced %s", x.Info().Replaced)
	if got := e.attached(t); got != x.progID {
		t.Fatalf("attached %d, ours %d", got, x.progID)
	}
	if err := x.Healthy(); err != nil {
		t.Fatal(err)
	}
	e.echo(t, x)
}

// Healthy reports the program detached behind the transport's back.
func TestIntegrationOwnerHealthyDetached(t *testing.T) {
	e := newOwnerEnv(t)
	x := e.mustOpen(t)
	if err := x.Healthy(); err != nil {
		t.Fatal(err)
	}
	// Our attachment is a bpf_link: `ip link set dev X xdp off` leaves it
	// (on a veth it addresses native mode, where nothing is attached) and
	// `xdpgeneric off` is refused ("Can't replace active BPF XDP link").
	// What does remove it behind our back is BPF_LINK_DETACH, as
	// `bpftool link detach` or an xrnic without the owner lock does.
	for _, how := range []string{"xdp", "xdpgeneric"} {
		out, ipErr := exec.Command("ip", "-n", e.nsA, "link", "set", "dev", e.devA, how, "off").CombinedOutput()
		t.Logf("ip link set dev %s %s off: %v %s; attached %d", e.devA, how, ipErr, strings.TrimSpace(string(out)), e.attached(t))
	}
	if e.attached(t) != 0 {
		detached := false
		it := new(link.Iterator)
		for it.Next() {
			li, err := it.Link.Info()
			if err != nil || li.Type != link.XDPType || uint32(li.Program) != x.progID {
				continue
			}
			if err := it.Link.(interface{ Detach() error }).Detach(); err != nil {
				t.Fatalf("detach bpf_link %d: %v", li.ID, err)
			}
			detached = true
		}
		it.Close()
		if !detached {
			t.Fatal("no bpf_link holds our program")
		}
	}
	if id := e.attached(t); id != 0 {
		t.Fatalf("program %d still attached", id)
	}
	err := x.Healthy()
	if !errors.Is(err, ErrNotAttached) {
		t.Fatalf("Healthy after the detach: %v: want ErrNotAttached", err)
	}
	t.Logf("Healthy: %v", err)
}

// Queues above the device's (a veth has one) fail promptly with the
// ethtool hint.
func TestIntegrationOwnerQueuesExceed(t *testing.T) {
	e := newOwnerEnv(t)
	err := openWithin(t, e, Config{Queues: 2}, 10*time.Second)
	if !errors.Is(err, ErrQueues) || !strings.Contains(err.Error(), "ethtool -L "+e.devA+" combined 2") {
		t.Fatalf("Open with Queues 2 on a one-queue veth: %v: want ErrQueues with the ethtool -L hint", err)
	}
	// Nothing left behind: the next Open works.
	x := e.mustOpen(t)
	if err := x.Healthy(); err != nil {
		t.Fatal(err)
	}
}

// Every failure of Open after a poll loop's queue was set up returns (it
// used to wait forever for a loop that was never started): with the queue
// check off, binding queue 1's socket fails.
func TestIntegrationOwnerOpenFailureReturns(t *testing.T) {
	e := newOwnerEnv(t)
	queueCheck = func(string, int) error { return nil }
	t.Cleanup(func() { queueCheck = checkQueues })
	err := openWithin(t, e, Config{Queues: 2}, 10*time.Second)
	var op *OpError
	if !errors.As(err, &op) || op.Op != OpSocket {
		t.Fatalf("Open with Queues 2, unchecked: %v: want an OpError of step %q", err, OpSocket)
	}
	if id := e.attached(t); id != 0 {
		t.Errorf("the failed Open left program %d attached", id)
	}
	queueCheck = checkQueues
	x := e.mustOpen(t)
	if err := x.Healthy(); err != nil {
		t.Fatal(err)
	}
}

// openWithin runs Open and fails the test if it does not return in time.
func openWithin(t *testing.T, e *ownerEnv, cfg Config, bound time.Duration) error {
	t.Helper()
	type result struct {
		x   *Transport
		err error
	}
	ch := make(chan result, 1)
	start := time.Now()
	go func() {
		var r result
		r.err = netns.Do(e.nsA, func() (err error) {
			cfg.Iface, cfg.Logger = e.devA, slog.New(slog.DiscardHandler)
			r.x, err = Open(cfg)
			return err
		})
		ch <- r
	}()
	select {
	case r := <-ch:
		if r.x != nil {
			r.x.Close()
			t.Fatalf("Open %+v succeeded", cfg)
		}
		t.Logf("Open with Queues %d failed after %v: %v", cfg.Queues, time.Since(start).Round(time.Millisecond), r.err)
		return r.err
	case <-time.After(bound):
		t.Fatalf("Open with Queues %d did not return within %v", cfg.Queues, bound)
		return nil
	}
}
