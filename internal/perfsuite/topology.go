package perfsuite

import (
	"net/netip"

	"xrnic/internal/netns"
)

// The two ends of every run. As root: two network namespaces joined by a
// veth pair, 198.18.0.1 and 198.18.0.2 (internal/netns keeps addresses in
// the benchmarking range 198.18.0.0/15), so the afxdp transport has an
// interface of its own. Otherwise both ends run on this host over
// loopback. netns.New first removes the namespaces of runs that were
// killed before their cleanup.

const nsPrefix = "xrnicdemo-"

// topology says where the server end (A) and the client end (B) run.
type topology struct {
	nt         *netns.Topology // nil on loopback
	nsA, nsB   string          // "" on loopback: on this host
	devA, devB string          // the veth ends ("" on loopback)
	ipA        string          // the server's address
}

var loopback = topology{ipA: "127.0.0.1"}

// newVethPair creates the namespaces and the veth pair. Both ends of
// every run use the same transport, so GSO stays on (limiting it would
// slow the kernel-TCP runs tenfold; only a kernel-TCP peer of an afxdp end
// needs it, see docs/PERFORMANCE.md).
func newVethPair() (topology, error) { return newVethPairMTU(0) }

// newVethPairMTU is newVethPair with the MTU of both ends (0 keeps 1500).
func newVethPairMTU(mtu int) (topology, error) {
	const devA, devB = "xdemoa", "xdemob"
	nt, err := netns.New(netns.Options{Prefix: nsPrefix, Links: []netns.Link{{
		A:   netns.End{NS: "a", Dev: devA, Addr: netip.MustParsePrefix("198.18.0.1/24")},
		B:   netns.End{NS: "b", Dev: devB, Addr: netip.MustParsePrefix("198.18.0.2/24")},
		MTU: mtu,
	}}})
	if err != nil {
		return topology{}, err
	}
	return topology{nt: nt, nsA: nt.NS("a"), nsB: nt.NS("b"), devA: devA, devB: devB, ipA: "198.18.0.1"}, nil
}

// remove deletes the namespaces (and with them the veth pair).
func (t topology) remove() error {
	if t.nt == nil {
		return nil
	}
	return t.nt.Close()
}
