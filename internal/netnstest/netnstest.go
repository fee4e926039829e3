// Package netnstest is the testing layer over internal/netns for xrnic's
// privileged tests: it skips without root, registers the removal of what
// it makes with t.Cleanup (so it goes also on failure), and fails the
// test on errors. Stale namespaces of killed runs are removed by
// internal/netns before anything new is made.
package netnstest

import (
	"errors"
	"io"
	"net"
	"net/netip"
	"testing"

	"xrnic/internal/netns"
	"xrnic/internal/require"
)

// RequireRoot skips the test (fails it under CI: package require) unless it runs as root with iproute2 and, when
// xdp is set, AF_XDP sockets.
func RequireRoot(t testing.TB, xdp bool) {
	t.Helper()
	err := netns.Check(xdp)
	if err == nil {
		return
	}
	msg := err.Error()
	if errors.Is(err, netns.ErrNotRoot) {
		if xdp {
			msg += ", attaches XDP and opens AF_XDP sockets"
		}
		msg += " (CI runs it as root)"
	}
	require.Unavailable(t, "%s", msg)
}

// IP runs the ip command and fails the test with its output on error.
func IP(t testing.TB, args ...string) {
	t.Helper()
	if err := netns.IP(args...); err != nil {
		t.Fatal(err)
	}
}

// RemoveStale deletes the namespaces named prefix+PID-... whose process is
// gone (a killed test binary cannot run its cleanup).
func RemoveStale(prefix string) { netns.RemoveStale(prefix) }

// New makes a topology (netns.New) and registers its Close with
// t.Cleanup. Call RequireRoot first.
func New(t testing.TB, o netns.Options) *netns.Topology {
	t.Helper()
	topo, err := netns.New(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := topo.Close(); err != nil {
			t.Errorf("remove namespaces: %v", err)
		}
	})
	return topo
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

// NewPair makes namespaces "a" and "b" of o.Prefix joined by a veth, and
// registers their removal with t.Cleanup. Call RequireRoot first.
func NewPair(t testing.TB, o PairOptions) *Pair {
	t.Helper()
	end := func(ns, dev string, a netip.Addr) netns.End {
		return netns.End{NS: ns, Dev: dev, Addr: netip.PrefixFrom(a, 24), LimitGSO: o.LimitGSO}
	}
	topo := New(t, netns.Options{Prefix: o.Prefix, Links: []netns.Link{{
		A: end("a", o.DevA, o.AddrA), B: end("b", o.DevB, o.AddrB), MTU: o.MTU}}})
	return &Pair{NSA: topo.NS("a"), NSB: topo.NS("b"), DevA: o.DevA, DevB: o.DevB}
}

// In runs f in namespace ns (netns.Do: on this goroutine, its thread
// switched back afterwards) and returns f's error or the switch's.
// Sockets created there stay in it.
func In(t testing.TB, ns string, f func() error) error {
	t.Helper()
	return netns.Do(ns, f)
}

// Do runs f in namespace ns like In and fails the test if the namespace
// cannot be entered or left; f may call t.Fatal.
func Do(t testing.TB, ns string, f func()) {
	t.Helper()
	if err := netns.Do(ns, func() error { f(); return nil }); err != nil {
		t.Fatal(err)
	}
}

// Ifindex is the index of device dev in namespace ns.
func Ifindex(t testing.TB, ns, dev string) int {
	t.Helper()
	idx, err := netns.Ifindex(ns, dev)
	if err != nil {
		t.Fatal(err)
	}
	return idx
}

// Serve listens on addr in namespace ns with kernel TCP and serves one
// connection: it echoes what it reads (echo), or discards it. It returns
// the listening address; the listener closes when the test ends.
func Serve(t testing.TB, ns, addr string, echo bool) string {
	t.Helper()
	var ln net.Listener
	if err := In(t, ns, func() (err error) {
		ln, err = net.Listen("tcp", addr)
		return err
	}); err != nil {
		t.Fatalf("listen on %s in %s: %v", addr, ns, err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		if echo {
			io.Copy(c, c)
		} else {
			io.Copy(io.Discard, c)
		}
	}()
	return ln.Addr().String()
}
