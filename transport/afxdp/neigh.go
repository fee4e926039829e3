package afxdp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"xrnic/tcpstack"
	"xrnic/wire/eth"
)

// reservePort binds a kernel TCP socket to our address and port (0: a free
// one) without listening, so the kernel never uses the port itself. The
// socket is created on a thread in the device's namespace. SO_REUSEADDR,
// as servers set it: a kernel connection of the port lingering in
// TIME_WAIT does not hold the port, a kernel socket listening on it does.
func (x *Transport) reservePort(port uint16) (int, uint16, error) {
	fd := -1
	err := onThread(x.ns, func() (err error) {
		fd, err = unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		return err
	})
	if err != nil {
		return -1, 0, err
	}
	if port != 0 {
		if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1); err != nil {
			unix.Close(fd)
			return -1, 0, err
		}
	}
	if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: x.addr, Port: int(port)}); err != nil {
		unix.Close(fd)
		if errors.Is(err, unix.EADDRINUSE) {
			return -1, 0, fmt.Errorf("port %d is in use by a kernel socket: %w", port, tcpstack.ErrAddrInUse)
		}
		return -1, 0, err
	}
	sa, err := unix.Getsockname(fd)
	if err != nil {
		unix.Close(fd)
		return -1, 0, err
	}
	return fd, uint16(sa.(*unix.SockaddrInet4).Port), nil
}

// resolve returns the MAC address frames to ip must carry: route lookup,
// then the kernel's neighbour table, asking the kernel to resolve a
// missing entry and waiting for it (bounded by ctx and 3 s).
func (x *Transport) resolve(ctx context.Context, ip [4]byte) (eth.MAC, error) {
	rts, err := x.nl.RouteGet(net.IP(ip[:]))
	if err == nil && len(rts) == 0 {
		err = errors.New("no route")
	}
	if err != nil {
		return eth.MAC{}, fmt.Errorf("route to %v: %w", netip.AddrFrom4(ip), err)
	}
	rt := rts[0]
	if rt.LinkIndex != x.ifindex {
		return eth.MAC{}, fmt.Errorf("route to %v leaves through device %d, not %s", netip.AddrFrom4(ip), rt.LinkIndex, x.cfg.Iface)
	}
	hop := net.IP(ip[:])
	if gw := rt.Gw.To4(); gw != nil && !gw.IsUnspecified() {
		hop = gw
	}
	deadline := time.Now().Add(3 * time.Second)
	solicited := false
	for {
		n, found, err := x.neighbour(hop)
		if err != nil {
			return eth.MAC{}, err
		}
		if found && usable(n) {
			return eth.MAC(n.HardwareAddr), nil
		}
		if !solicited || (found && n.State&unix.NUD_FAILED != 0) {
			// NTF_USE: the kernel "uses" the entry, creating it if
			// needed, which starts ARP exactly as a packet to hop would.
			// It sends nothing itself; the answer shows up in the table.
			err := x.nl.NeighSet(&netlink.Neigh{LinkIndex: x.ifindex, Family: netlink.FAMILY_V4,
				State: unix.NUD_NONE, Flags: unix.NTF_USE, IP: hop})
			if err != nil {
				return eth.MAC{}, fmt.Errorf("resolve %v: %w", hop, err)
			}
			solicited = true
		}
		if time.Now().After(deadline) {
			return eth.MAC{}, fmt.Errorf("resolve %v: no ARP answer: %w", hop, tcpstack.ErrNoRoute)
		}
		select {
		case <-ctx.Done():
			return eth.MAC{}, ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// neighbour looks hop up in the device's IPv4 neighbour table. A dump
// interrupted by a change of the table may miss the entry; resolve then
// polls again.
func (x *Transport) neighbour(hop net.IP) (netlink.Neigh, bool, error) {
	ns, err := x.nl.NeighList(x.ifindex, netlink.FAMILY_V4)
	if err != nil && !errors.Is(err, netlink.ErrDumpInterrupted) {
		return netlink.Neigh{}, false, err
	}
	for _, n := range ns {
		if n.IP.Equal(hop) {
			return n, true, nil
		}
	}
	return netlink.Neigh{}, false, nil
}

// usable reports whether a neighbour entry has a link-layer address the
// kernel itself would use (reachable, stale, delay, probe, permanent or
// noarp).
func usable(n netlink.Neigh) bool {
	const ok = unix.NUD_REACHABLE | unix.NUD_STALE | unix.NUD_DELAY | unix.NUD_PROBE | unix.NUD_PERMANENT | unix.NUD_NOARP
	return len(n.HardwareAddr) == 6 && n.State&ok != 0
}

func parseIPv4Port(addr string) ([4]byte, uint16, error) {
	host, ps, err := net.SplitHostPort(addr)
	if err != nil {
		return [4]byte{}, 0, err
	}
	port, err := strconv.ParseUint(ps, 10, 16)
	if err != nil {
		return [4]byte{}, 0, fmt.Errorf("port %q: %w", ps, err)
	}
	if host == "" {
		return [4]byte{}, uint16(port), nil
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return [4]byte{}, 0, err
	}
	if !a.Is4() && !a.Is4In6() {
		return [4]byte{}, 0, errors.New("the afxdp transport is IPv4 only")
	}
	return a.Unmap().As4(), uint16(port), nil
}
