//go:build linux

package afxdp

import (
	"net"
	"net/netip"
	"testing"

	"xrnic/internal/netns"
	"xrnic/internal/netnstest"
)

// nsPrefix names every namespace the integration tests create; leftovers
// of killed runs are removed before a new pair is made.
const nsPrefix = "xrnictest-"

// Addresses of the pair, from the 198.18.0.0/15 benchmarking range.
var (
	ipA  = [4]byte{198, 18, 0, 1}
	ipB  = [4]byte{198, 18, 0, 2}
	macA = [6]byte{0x02, 0x00, 0x5e, 0x00, 0x00, 0x01}
	macB = [6]byte{0x02, 0x00, 0x5e, 0x00, 0x00, 0x02}
)

// newVethPair makes two namespaces joined by a veth with queues queues on
// each end, addressed 198.18.0.1/24 (A) and 198.18.0.2/24 (B), with static
// neighbours: our AF_XDP replies need no ARP, and the peer need not
// resolve us through the steering program. Cleanup deletes the
// namespaces, which destroys the veth and anything attached.
func newVethPair(t testing.TB, queues int) *netnstest.Pair {
	t.Helper()
	end := func(ns, dev string, mac [6]byte, ip, peer [4]byte) netns.End {
		return netns.End{NS: ns, Dev: dev, MAC: net.HardwareAddr(mac[:]),
			Addr: netip.PrefixFrom(netip.AddrFrom4(ip), 24), Neigh: netip.AddrFrom4(peer)}
	}
	topo := netnstest.New(t, netns.Options{Prefix: nsPrefix, Links: []netns.Link{{
		A: end("a", "xrt-a", macA, ipA, ipB), B: end("b", "xrt-b", macB, ipB, ipA), Queues: queues}}})
	return &netnstest.Pair{NSA: topo.NS("a"), NSB: topo.NS("b"), DevA: "xrt-a", DevB: "xrt-b"}
}
