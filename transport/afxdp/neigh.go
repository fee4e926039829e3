package afxdp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"time"

	"golang.org/x/sys/unix"

	"xrnic/tcpstack"
	"xrnic/transport/afxdp/netlinkutil"
	"xrnic/wire/eth"
)

// reservePort binds a kernel TCP socket to our address and port (0: a free
// one) without listening, so the kernel never uses the port itself. The
// socket is created on a thread in the device's namespace.
func (x *Transport) reservePort(port uint16) (int, uint16, error) {
	fd := -1
	err := onThread(x.ns, func() (err error) {
		fd, err = unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		return err
	})
	if err != nil {
		return -1, 0, err
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
	rt, err := x.nl.RouteGet(ip)
	if err != nil {
		return eth.MAC{}, fmt.Errorf("route to %v: %w", netip.AddrFrom4(ip), err)
	}
	if rt.Ifindex != x.ifindex {
		return eth.MAC{}, fmt.Errorf("route to %v leaves through device %d, not %s", netip.AddrFrom4(ip), rt.Ifindex, x.cfg.Iface)
	}
	hop := rt.NextHop(ip)
	deadline := time.Now().Add(3 * time.Second)
	solicited := false
	for {
		n, err := x.nl.Neighbour(x.ifindex, hop)
		if err == nil && n.Usable() {
			return n.MAC, nil
		}
		if err != nil && !errors.Is(err, netlinkutil.ErrNotFound) {
			return eth.MAC{}, err
		}
		if !solicited || (err == nil && n.State&unix.NUD_FAILED != 0) {
			if err := x.nl.Solicit(x.ifindex, hop); err != nil {
				return eth.MAC{}, fmt.Errorf("resolve %v: %w", netip.AddrFrom4(hop), err)
			}
			solicited = true
		}
		if time.Now().After(deadline) {
			return eth.MAC{}, fmt.Errorf("resolve %v: no ARP answer: %w", netip.AddrFrom4(hop), tcpstack.ErrNoRoute)
		}
		select {
		case <-ctx.Done():
			return eth.MAC{}, ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
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
