//go:build linux

package reliability

import (
	"bufio"
	"cmp"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"xrnic/bpf"
	"xrnic/internal/engine"
	"xrnic/internal/netnstest"
	"xrnic/transport/afxdp"
)

// Root tests in network namespaces (wire_faults_test.go, restart_test.go,
// malformed_test.go). The topology is
//
//	nsA: rla 198.18.2.1/24 <-veth-> rlma [nsM] rlmb <-veth-> rlb 198.18.2.2/24 :nsB
//
// where nsM runs the faulty wire (bpf.Wire) joining rlma and rlmb, so
// every frame between A and B crosses it whatever the transports. Names
// carry a fixed prefix and the test's pid; namespaces of crashed runs are
// removed at the start of the next one.

const rlNSPrefix = "xrnicrl-"

var (
	rlIPA = netip.MustParseAddr("198.18.2.1")
	rlIPB = netip.MustParseAddr("198.18.2.2")
)

type wireEnv struct {
	nsA, nsM, nsB string
	devA, devB    string
	wire          *bpf.Wire
}

func requireNetRoot(t testing.TB) {
	t.Helper()
	netnstest.RequireRoot(t, true)
}

func rlIP(t testing.TB, args ...string) {
	t.Helper()
	netnstest.IP(t, args...)
}

var rlSeq int

// newWireEnv builds the three namespaces. With wire false, A and B are
// joined by one veth directly (no middle namespace). GSO is limited to
// one MTU-sized segment on A and B (faults then hit single segments, and
// a single-buffer AF_XDP socket can take what a kernel peer sends), and
// transmit checksum offload is off there (see setTxChecksum). The
// kernel's TCP gets rto_min 20ms on the route between A and B, as our
// TCP gets MinRTO 20ms in these tests, so both recover from tail losses
// on the same time scale.
func newWireEnv(t testing.TB, wire bool) *wireEnv {
	t.Helper()
	requireNetRoot(t)
	netnstest.RemoveStale(rlNSPrefix)
	rlSeq++
	base := fmt.Sprintf("%s%d-%d-", rlNSPrefix, os.Getpid(), rlSeq)
	e := &wireEnv{nsA: base + "a", nsM: base + "m", nsB: base + "b", devA: "rla", devB: "rlb"}
	nss := []string{e.nsA, e.nsB}
	if wire {
		nss = append(nss, e.nsM)
	}
	for _, ns := range nss {
		rlIP(t, "netns", "add", ns)
		t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
	}
	if wire {
		rlIP(t, "-n", e.nsM, "link", "add", "rlma", "type", "veth", "peer", "name", e.devA, "netns", e.nsA)
		rlIP(t, "-n", e.nsM, "link", "add", "rlmb", "type", "veth", "peer", "name", e.devB, "netns", e.nsB)
		for _, d := range []string{"rlma", "rlmb", "lo"} {
			rlIP(t, "-n", e.nsM, "link", "set", d, "up")
		}
	} else {
		rlIP(t, "-n", e.nsA, "link", "add", e.devA, "type", "veth", "peer", "name", e.devB, "netns", e.nsB)
	}
	for _, x := range []struct {
		ns, dev string
		ip      netip.Addr
	}{{e.nsA, e.devA, rlIPA}, {e.nsB, e.devB, rlIPB}} {
		rlIP(t, "-n", x.ns, "link", "set", x.dev, "gso_max_size", "1500", "gso_max_segs", "1")
		rlIP(t, "-n", x.ns, "addr", "add", x.ip.String()+"/24", "dev", x.dev)
		rlIP(t, "-n", x.ns, "link", "set", x.dev, "up")
		rlIP(t, "-n", x.ns, "link", "set", "lo", "up")
		rlIP(t, "-n", x.ns, "route", "replace", "198.18.2.0/24", "dev", x.dev, "proto", "kernel", "scope", "link", "src", x.ip.String(), "rto_min", "20ms")
		if err := netnstest.In(t, x.ns, func() error { return setTxChecksum(x.dev, false) }); err != nil {
			t.Fatal(err)
		}
	}
	if wire {
		if err := netnstest.In(t, e.nsM, func() error {
			w, err := bpf.LoadWire()
			if err != nil {
				return err
			}
			e.wire = w
			ma, err := net.InterfaceByName("rlma")
			if err != nil {
				return err
			}
			mb, err := net.InterfaceByName("rlmb")
			if err != nil {
				return err
			}
			return w.Join(ma.Index, mb.Index) // direction 0: A to B
		}); err != nil {
			if e.wire != nil {
				e.wire.Close()
			}
			t.Fatalf("faulty wire: %v", err)
		}
		t.Cleanup(func() { e.wire.Close() })
	}
	return e
}

// kernelTCP reads the Tcp: counters of /proc/net/snmp in namespace ns.
func kernelTCP(t testing.TB, ns string) map[string]uint64 {
	t.Helper()
	m := map[string]uint64{}
	if err := netnstest.In(t, ns, func() error {
		f, err := os.Open("/proc/thread-self/net/snmp")
		if err != nil {
			return err
		}
		defer f.Close()
		var names []string
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			rest, ok := strings.CutPrefix(sc.Text(), "Tcp: ")
			if !ok {
				continue
			}
			fs := strings.Fields(rest)
			if names == nil {
				names = fs
				continue
			}
			for i, v := range fs {
				if i < len(names) {
					n, _ := strconv.ParseInt(v, 10, 64)
					m[names[i]] = uint64(n)
				}
			}
		}
		return sc.Err()
	}); err != nil {
		t.Fatal(err)
	}
	return m
}

// openEngine opens an engine device in namespace ns, configured by cfg;
// with x set, over the afxdp transport x configures (MinRTO 20 ms and a
// quiet logger unless x says otherwise). The device closes with the test.
func openEngine(t testing.TB, ns string, cfg engine.Config, x *afxdp.Config) *engine.Device {
	t.Helper()
	var d *engine.Device
	if err := netnstest.In(t, ns, func() error {
		if x != nil {
			xc := *x
			xc.MinRTO = cmp.Or(xc.MinRTO, 20*time.Millisecond)
			if xc.Logger == nil {
				xc.Logger = slog.New(slog.DiscardHandler)
			}
			tr, err := afxdp.Open(xc)
			if err != nil {
				return err
			}
			cfg.Transport = tr
		}
		var err error
		if d, err = engine.Open(cfg); err != nil && cfg.Transport != nil {
			cfg.Transport.Close()
		}
		return err
	}); err != nil {
		t.Fatalf("open a device in %s: %v", ns, err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// listenEngine listens on host A's address (any port) in namespace ns.
func listenEngine(t testing.TB, ns string, d *engine.Device, lc engine.ListenConfig) *engine.Listener {
	t.Helper()
	var ln *engine.Listener
	if err := netnstest.In(t, ns, func() (err error) {
		ln, err = d.ListenConfig("tcp", netip.AddrPortFrom(rlIPA, 0).String(), lc)
		return err
	}); err != nil {
		t.Fatalf("listen in %s: %v", ns, err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}
