// Package netns builds the network-namespace topologies of xrnic's
// privileged tests and of the two-host demo: namespaces joined by veth
// links, addressed from the benchmarking range 198.18.0.0/15 (RFC 2544)
// only, and removed again by Close.
//
// Namespace names are PREFIX + PID + "-" + SEQ + "-" + ROLE, so a later
// run can tell a leftover of a killed process (its PID is gone) from a
// namespace of a run still going in another process; New removes the
// leftovers of its prefix before it builds anything.
//
// Everything returns errors; internal/netnstest is the testing layer
// (skips, t.Cleanup, t.Fatal) over it.
package netns

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"
)

// Range is where every address of a topology comes from.
var Range = netip.MustParsePrefix("198.18.0.0/15")

// Errors of Check.
var (
	ErrNotRoot = errors.New("needs root: creates network namespaces and veth links")
	ErrNoIP    = errors.New("needs the ip command (iproute2)")
)

// Check reports why this process cannot build topologies (not root, no
// ip command) and, with afxdp, why it cannot open AF_XDP sockets; nil
// when it can.
func Check(afxdp bool) error {
	if os.Geteuid() != 0 {
		return ErrNotRoot
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return ErrNoIP
	}
	if !afxdp {
		return nil
	}
	fd, err := unix.Socket(unix.AF_XDP, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("no AF_XDP sockets here (CONFIG_XDP_SOCKETS?): %w", err)
	}
	unix.Close(fd)
	return nil
}

// IP runs the ip command; the error carries its output.
func IP(args ...string) error {
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

// Command is name run in namespace ns through `ip netns exec`, which
// execs: the process's pid is the command's. With ns "" it runs here.
func Command(ns, name string, args ...string) *exec.Cmd {
	return CommandContext(context.Background(), ns, name, args...)
}

// CommandContext is Command with a context (exec.CommandContext). The
// child is killed when the thread that started it dies (Pdeathsig): a test
// binary killed by go test's -timeout leaves no daemon, peer or capture
// behind to slow or fail the next package.
func CommandContext(ctx context.Context, ns, name string, args ...string) *exec.Cmd {
	var cmd *exec.Cmd
	if ns == "" {
		cmd = exec.CommandContext(ctx, name, args...)
	} else {
		cmd = exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", ns, name}, args...)...)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	return cmd
}

// Do runs f on the calling goroutine with its OS thread switched into
// namespace ns, and switches the thread back afterwards (also when f
// panics or calls runtime.Goexit, as t.Fatal does). Sockets f creates stay
// in ns. Goroutines f starts do not run in ns.
func Do(ns string, f func() error) (err error) {
	target, err := unix.Open(filepath.Join("/run/netns", ns), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("netns %s: %w", ns, err)
	}
	defer unix.Close(target)
	runtime.LockOSThread()
	orig, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("netns: current namespace: %w", err)
	}
	defer unix.Close(orig)
	if err := unix.Setns(target, unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("netns: enter %s: %w", ns, err)
	}
	defer func() {
		if rerr := unix.Setns(orig, unix.CLONE_NEWNET); rerr != nil {
			// Stay locked: the runtime discards the thread when the
			// goroutine exits, so nothing else ever runs in ns on it.
			err = errors.Join(err, fmt.Errorf("netns: leave %s (this goroutine stays in it): %w", ns, rerr))
			return
		}
		runtime.UnlockOSThread()
	}()
	return f()
}

// Ifindex is the index of device dev in namespace ns.
func Ifindex(ns, dev string) (int, error) {
	var idx int
	err := Do(ns, func() error {
		ifi, err := net.InterfaceByName(dev)
		if err != nil {
			return err
		}
		idx = ifi.Index
		return nil
	})
	return idx, err
}

// live holds the namespaces this process made and has not removed:
// RemoveStale keeps them although their PID is ours.
var live sync.Map

// RemoveStale deletes the namespaces named prefix+PID... whose process is
// gone (a killed process cannot run its Close), and those with this
// process's PID that it did not make (left by an earlier process that had
// the same PID). Names of other prefixes are left alone, also when
// prefix is a prefix of theirs.
func RemoveStale(prefix string) error {
	if prefix == "" {
		return errors.New("netns: RemoveStale needs a prefix")
	}
	ents, err := os.ReadDir("/run/netns")
	if errors.Is(err, os.ErrNotExist) {
		return nil // no named namespace at all
	}
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range ents {
		pid, ok := namePID(e.Name(), prefix)
		if !ok || alive(pid) {
			continue
		}
		if _, mine := live.Load(e.Name()); mine {
			continue
		}
		if err := IP("netns", "del", e.Name()); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// RemoveStaleFamily is RemoveStale for every prefix of a family: the
// names family + letters and dashes + PID (+ "-..."), as "xr" covers
// xrnicrl-, xrabi-, xrnic-idle- and the others of xrnic's tests.
func RemoveStaleFamily(family string) error {
	ents, err := os.ReadDir("/run/netns")
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	seen := map[string]bool{}
	var errs []error
	for _, e := range ents {
		rest, ok := strings.CutPrefix(e.Name(), family)
		if !ok {
			continue
		}
		i := strings.IndexAny(rest, "0123456789")
		if i < 0 || strings.Trim(rest[:i], "abcdefghijklmnopqrstuvwxyz-") != "" {
			continue
		}
		if prefix := family + rest[:i]; !seen[prefix] {
			seen[prefix] = true
			errs = append(errs, RemoveStale(prefix))
		}
	}
	return errors.Join(errs...)
}

// namePID parses prefix + PID, followed by "-..." or nothing (the forms of
// this package and of the helpers it replaced).
func namePID(name, prefix string) (int, bool) {
	rest, ok := strings.CutPrefix(name, prefix)
	if !ok {
		return 0, false
	}
	digits, _, _ := strings.Cut(rest, "-")
	pid, err := strconv.Atoi(digits)
	if err != nil || pid <= 0 || strconv.Itoa(pid) != digits {
		return 0, false
	}
	return pid, true
}

// alive: the process pid exists (and is not us: our own names are told
// apart by live).
func alive(pid int) bool {
	if pid == os.Getpid() {
		return false
	}
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// End is one end of a veth link.
type End struct {
	NS  string           // role of its namespace (see Options)
	Dev string           // device name (at most 15 bytes)
	MAC net.HardwareAddr // nil: the kernel picks one
	// Addr, when valid, is assigned to the device (e.g. 198.18.0.1/24);
	// it must lie in Range.
	Addr netip.Prefix
	// LimitGSO limits GSO to one MTU-sized segment: a raw or single-buffer
	// AF_XDP receiver cannot take the 64 KiB GSO frames a kernel TCP
	// peer sends over veth.
	LimitGSO bool
	// Neigh, when valid, gets a permanent neighbour entry on this end
	// pointing at the other end's MAC (which must be set), so no ARP is
	// needed; it must lie in Range.
	Neigh netip.Addr
}

// Link is a veth pair between two ends (in one namespace or two).
type Link struct {
	A, B   End
	MTU    int // 0 keeps 1500
	Queues int // TX and RX queues of each end; 0 keeps 1
}

// Options describe a topology.
type Options struct {
	// Prefix starts every namespace name: one per user (test package,
	// command), and not the start of another user's prefix followed by
	// digits.
	Prefix string
	// Namespaces are roles ("a", "b", "m", ...) to make besides those
	// the links name; each becomes the namespace Prefix+PID-SEQ-role
	// with its loopback up.
	Namespaces []string
	Links      []Link
}

// Topology is a made set of namespaces and links. Deleting a namespace
// destroys the veth ends in it and whatever is attached to them (XDP
// programs, addresses, neighbours) once no socket or process holds it.
type Topology struct {
	roles  map[string]string
	names  []string // in creation order
	mu     sync.Mutex
	closed bool
}

var seq atomic.Int64

// New removes stale namespaces of o.Prefix (RemoveStale), then makes the
// namespaces and links. On error everything made so far is removed again.
func New(o Options) (*Topology, error) {
	if err := o.validate(); err != nil {
		return nil, err
	}
	if err := RemoveStale(o.Prefix); err != nil {
		return nil, fmt.Errorf("netns: remove stale namespaces: %w", err)
	}
	t := &Topology{roles: map[string]string{}}
	base := fmt.Sprintf("%s%d-%d-", o.Prefix, os.Getpid(), seq.Add(1))
	if err := t.build(base, o); err != nil {
		return nil, errors.Join(err, t.Close())
	}
	return t, nil
}

func (o *Options) validate() error {
	if o.Prefix == "" {
		return errors.New("netns: Options.Prefix is empty")
	}
	for _, l := range o.Links {
		for _, e := range []End{l.A, l.B} {
			if e.NS == "" || e.Dev == "" {
				return fmt.Errorf("netns: link end %+v needs NS and Dev", e)
			}
			// The whole subnet, as it is routed on-link.
			if e.Addr.IsValid() && (e.Addr.Bits() < Range.Bits() || !Range.Contains(e.Addr.Masked().Addr())) {
				return fmt.Errorf("netns: subnet %v of %s is outside %v", e.Addr, e.Dev, Range)
			}
			if e.Neigh.IsValid() && !Range.Contains(e.Neigh) {
				return fmt.Errorf("netns: neighbour %v of %s is outside %v", e.Neigh, e.Dev, Range)
			}
		}
		if (l.A.Neigh.IsValid() && l.B.MAC == nil) || (l.B.Neigh.IsValid() && l.A.MAC == nil) {
			return fmt.Errorf("netns: a neighbour entry on %s/%s needs the other end's MAC", l.A.Dev, l.B.Dev)
		}
	}
	return nil
}

func (t *Topology) build(base string, o Options) error {
	roles := append([]string(nil), o.Namespaces...)
	for _, l := range o.Links {
		roles = append(roles, l.A.NS, l.B.NS)
	}
	for _, r := range roles {
		if _, ok := t.roles[r]; ok {
			continue
		}
		name := base + r
		live.Store(name, true)
		if err := IP("netns", "add", name); err != nil {
			live.Delete(name)
			return err
		}
		t.roles[r] = name
		t.names = append(t.names, name)
		if err := IP("-n", name, "link", "set", "lo", "up"); err != nil {
			return err
		}
	}
	for _, l := range o.Links {
		if err := t.link(l); err != nil {
			return err
		}
	}
	return nil
}

func (t *Topology) link(l Link) error {
	end := func(e End) []string {
		a := []string{e.Dev}
		if l.Queues > 0 {
			q := strconv.Itoa(l.Queues)
			a = append(a, "numtxqueues", q, "numrxqueues", q)
		}
		if e.MAC != nil {
			a = append(a, "address", e.MAC.String())
		}
		return a
	}
	nsA, nsB := t.roles[l.A.NS], t.roles[l.B.NS]
	args := append([]string{"-n", nsA, "link", "add"}, end(l.A)...)
	args = append(append(append(args, "type", "veth", "peer", "name"), end(l.B)...), "netns", nsB)
	if err := IP(args...); err != nil {
		return err
	}
	for _, x := range []struct {
		ns   string
		e    End
		peer net.HardwareAddr
	}{{nsA, l.A, l.B.MAC}, {nsB, l.B, l.A.MAC}} {
		var cmds [][]string
		if l.MTU > 0 {
			cmds = append(cmds, []string{"link", "set", x.e.Dev, "mtu", strconv.Itoa(l.MTU)})
		}
		if x.e.LimitGSO {
			cmds = append(cmds, []string{"link", "set", x.e.Dev, "gso_max_size", strconv.Itoa(max(l.MTU, 1500)), "gso_max_segs", "1"})
		}
		if x.e.Addr.IsValid() {
			cmds = append(cmds, []string{"addr", "add", x.e.Addr.String(), "dev", x.e.Dev})
		}
		cmds = append(cmds, []string{"link", "set", x.e.Dev, "up"})
		if x.e.Neigh.IsValid() {
			cmds = append(cmds, []string{"neigh", "replace", x.e.Neigh.String(), "lladdr", x.peer.String(), "dev", x.e.Dev, "nud", "permanent"})
		}
		for _, c := range cmds {
			if err := IP(append([]string{"-n", x.ns}, c...)...); err != nil {
				return err
			}
		}
	}
	return nil
}

// NS is the namespace name of a role ("" if the topology has no such
// role).
func (t *Topology) NS(role string) string { return t.roles[role] }

// Names lists the namespace names in creation order.
func (t *Topology) Names() []string { return append([]string(nil), t.names...) }

// Close deletes the namespaces (and with them the links). It is safe to
// call more than once and from several goroutines; later calls return
// nil.
func (t *Topology) Close() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil
	}
	t.closed = true
	var errs []error
	for i := len(t.names) - 1; i >= 0; i-- {
		name := t.names[i]
		if err := IP("netns", "del", name); err != nil {
			if _, serr := os.Stat(filepath.Join("/run/netns", name)); !errors.Is(serr, os.ErrNotExist) {
				errs = append(errs, err)
			}
		}
		live.Delete(name)
	}
	return errors.Join(errs...)
}
