// Package netlinkutil is the small rtnetlink client the afxdp transport of
// datapath needs: the kernel's neighbour table (RTM_GETNEIGH, and
// RTM_NEWNEIGH with NTF_USE to make the kernel resolve an address), route
// lookups (RTM_GETROUTE for one destination: output device, gateway,
// preferred source, route MTU) and the XDP attachment of a device
// (IFLA_XDP in RTM_GETLINK/RTM_SETLINK, to find and remove a stale
// attachment of a crashed run).
//
// A Conn is bound to the network namespace of the thread that opened it and
// may be used from any goroutine (requests are serialised). Messages are
// built and parsed with encoding/binary; this is control-path code that
// allocates freely.
package netlinkutil

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"

	"golang.org/x/sys/unix"
)

// ErrNotFound is returned when the kernel has no such neighbour or route.
var ErrNotFound = errors.New("netlinkutil: not found")

var ne = binary.NativeEndian

// Conn is a NETLINK_ROUTE socket.
type Conn struct {
	mu  sync.Mutex
	fd  int
	seq uint32
	buf []byte
}

// Open opens a NETLINK_ROUTE socket in the calling thread's network
// namespace.
func Open() (*Conn, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("netlink socket: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("netlink bind: %w", err)
	}
	unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Sec: 5})
	return &Conn{fd: fd, buf: make([]byte, 1<<16)}, nil
}

// Close closes the socket.
func (c *Conn) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.fd < 0 {
		return nil
	}
	err := unix.Close(c.fd)
	c.fd = -1
	return err
}

type attr struct {
	typ  uint16
	data []byte
}

func putAttrs(b []byte, attrs []attr) []byte {
	for _, a := range attrs {
		l := 4 + len(a.data)
		b = ne.AppendUint16(b, uint16(l))
		b = ne.AppendUint16(b, a.typ)
		b = append(b, a.data...)
		for len(b)%4 != 0 {
			b = append(b, 0)
		}
	}
	return b
}

func parseAttrs(b []byte) map[uint16][]byte {
	m := map[uint16][]byte{}
	for len(b) >= 4 {
		l := int(ne.Uint16(b))
		if l < 4 || l > len(b) {
			break
		}
		m[ne.Uint16(b[2:])&^unix.NLA_F_NESTED] = b[4:l]
		al := (l + 3) &^ 3
		if al > len(b) {
			break
		}
		b = b[al:]
	}
	return m
}

// request sends one message (body after the nlmsghdr) and calls fn with the
// body of every reply until the end of a dump or the ACK. It returns the
// kernel's error for the request, if any.
func (c *Conn) request(typ, flags uint16, body []byte, fn func(typ uint16, body []byte)) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.fd < 0 {
		return errors.New("netlinkutil: closed")
	}
	c.seq++
	seq := c.seq
	msg := make([]byte, 0, unix.NLMSG_HDRLEN+len(body))
	msg = ne.AppendUint32(msg, uint32(unix.NLMSG_HDRLEN+len(body)))
	msg = ne.AppendUint16(msg, typ)
	msg = ne.AppendUint16(msg, flags|unix.NLM_F_REQUEST)
	msg = ne.AppendUint32(msg, seq)
	msg = ne.AppendUint32(msg, 0)
	msg = append(msg, body...)
	if err := unix.Sendto(c.fd, msg, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return fmt.Errorf("netlink send: %w", err)
	}
	for {
		n, _, err := unix.Recvfrom(c.fd, c.buf, 0)
		if err != nil {
			return fmt.Errorf("netlink receive: %w", err)
		}
		b := c.buf[:n]
		for len(b) >= unix.NLMSG_HDRLEN {
			l := int(ne.Uint32(b))
			if l < unix.NLMSG_HDRLEN || l > len(b) {
				return errors.New("netlinkutil: truncated message")
			}
			mtyp := ne.Uint16(b[4:])
			mflags := ne.Uint16(b[6:])
			mseq := ne.Uint32(b[8:])
			mb := b[unix.NLMSG_HDRLEN:l]
			b = b[min((l+3)&^3, len(b)):]
			if mseq != seq {
				continue
			}
			switch mtyp {
			case unix.NLMSG_DONE:
				return nil
			case unix.NLMSG_ERROR:
				if len(mb) < 4 {
					return errors.New("netlinkutil: short error message")
				}
				if e := int32(ne.Uint32(mb)); e != 0 {
					return unix.Errno(-e)
				}
				return nil
			default:
				fn(mtyp, mb)
				if mflags&unix.NLM_F_MULTI == 0 && flags&unix.NLM_F_ACK == 0 {
					return nil
				}
			}
		}
	}
}

// Neigh is a neighbour table entry.
type Neigh struct {
	Ifindex int
	IP      [4]byte
	MAC     [6]byte
	HasMAC  bool
	State   uint16 // NUD_* bits
}

// Usable reports whether the entry has a link-layer address the kernel
// itself would use (reachable, stale, delay, probe, permanent or noarp).
func (n Neigh) Usable() bool {
	const ok = unix.NUD_REACHABLE | unix.NUD_STALE | unix.NUD_DELAY | unix.NUD_PROBE | unix.NUD_PERMANENT | unix.NUD_NOARP
	return n.HasMAC && n.State&ok != 0
}

// ndmsg: family u8, pad u8, pad u16, ifindex s32, state u16, flags u8, type u8
func ndmsg(ifindex int, state uint16, flags uint8) []byte {
	b := make([]byte, 12)
	b[0] = unix.AF_INET
	ne.PutUint32(b[4:], uint32(int32(ifindex)))
	ne.PutUint16(b[8:], state)
	b[10] = flags
	return b
}

// Neighbours dumps the IPv4 neighbour table of ifindex (0: all devices).
func (c *Conn) Neighbours(ifindex int) ([]Neigh, error) {
	var out []Neigh
	err := c.request(unix.RTM_GETNEIGH, unix.NLM_F_DUMP, ndmsg(0, 0, 0), func(typ uint16, b []byte) {
		if typ != unix.RTM_NEWNEIGH || len(b) < 12 || b[0] != unix.AF_INET {
			return
		}
		n := Neigh{Ifindex: int(int32(ne.Uint32(b[4:]))), State: ne.Uint16(b[8:])}
		if ifindex != 0 && n.Ifindex != ifindex {
			return
		}
		a := parseAttrs(b[12:])
		dst := a[unix.NDA_DST]
		if len(dst) != 4 {
			return
		}
		copy(n.IP[:], dst)
		if ll := a[unix.NDA_LLADDR]; len(ll) == 6 {
			copy(n.MAC[:], ll)
			n.HasMAC = true
		}
		out = append(out, n)
	})
	return out, err
}

// Neighbour looks ip up in the neighbour table of ifindex.
func (c *Conn) Neighbour(ifindex int, ip [4]byte) (Neigh, error) {
	ns, err := c.Neighbours(ifindex)
	if err != nil {
		return Neigh{}, err
	}
	for _, n := range ns {
		if n.IP == ip {
			return n, nil
		}
	}
	return Neigh{}, ErrNotFound
}

// Solicit asks the kernel to resolve ip on ifindex (RTM_NEWNEIGH with
// NTF_USE: the kernel "uses" the entry, creating it if needed, which starts
// ARP resolution exactly as if it had a packet for ip). It sends nothing
// itself; the answer shows up in the neighbour table.
func (c *Conn) Solicit(ifindex int, ip [4]byte) error {
	body := putAttrs(ndmsg(ifindex, unix.NUD_NONE, unix.NTF_USE), []attr{{unix.NDA_DST, ip[:]}})
	return c.request(unix.RTM_NEWNEIGH, unix.NLM_F_CREATE|unix.NLM_F_REPLACE|unix.NLM_F_ACK, body, func(uint16, []byte) {})
}

// Route is the kernel's answer for one destination.
type Route struct {
	Ifindex int
	Gateway [4]byte // zero when the destination is on-link
	Src     [4]byte // preferred source address (zero if none)
	MTU     int     // route MTU metric (0: the device's)
}

// NextHop returns the address whose MAC frames to dst must carry.
func (r Route) NextHop(dst [4]byte) [4]byte {
	if r.Gateway != ([4]byte{}) {
		return r.Gateway
	}
	return dst
}

// RouteGet asks the kernel how it would route to dst (ip route get).
func (c *Conn) RouteGet(dst [4]byte) (Route, error) {
	// rtmsg: family, dst_len, src_len, tos, table, protocol, scope, type, flags u32
	b := make([]byte, 12)
	b[0] = unix.AF_INET
	b[1] = 32
	body := putAttrs(b, []attr{{unix.RTA_DST, dst[:]}})
	var r Route
	found := false
	err := c.request(unix.RTM_GETROUTE, 0, body, func(typ uint16, b []byte) {
		if typ != unix.RTM_NEWROUTE || len(b) < 12 {
			return
		}
		a := parseAttrs(b[12:])
		if v := a[unix.RTA_OIF]; len(v) == 4 {
			r.Ifindex = int(ne.Uint32(v))
			found = true
		}
		if v := a[unix.RTA_GATEWAY]; len(v) == 4 {
			copy(r.Gateway[:], v)
		}
		if v := a[unix.RTA_PREFSRC]; len(v) == 4 {
			copy(r.Src[:], v)
		}
		if v := a[unix.RTA_METRICS]; v != nil {
			if m := parseAttrs(v)[unix.RTAX_MTU]; len(m) == 4 {
				r.MTU = int(ne.Uint32(m))
			}
		}
	})
	if err != nil {
		if errors.Is(err, unix.ENETUNREACH) || errors.Is(err, unix.EHOSTUNREACH) {
			return r, ErrNotFound
		}
		return r, err
	}
	if !found {
		return r, ErrNotFound
	}
	return r, nil
}

// XDP describes the XDP programs attached to a device (IFLA_XDP).
type XDP struct {
	Attached uint8  // XDP_ATTACHED_NONE, _DRV, _SKB, _HW or _MULTI
	ProgID   uint32 // the program (of the single attachment)
	SKBProg  uint32 // generic-mode program, with XDP_ATTACHED_MULTI
	DrvProg  uint32 // native-mode program, with XDP_ATTACHED_MULTI
}

// ProgIDs returns the ids of every attached program.
func (x XDP) ProgIDs() []uint32 {
	var ids []uint32
	for _, id := range []uint32{x.ProgID, x.SKBProg, x.DrvProg} {
		if id != 0 && (len(ids) == 0 || ids[len(ids)-1] != id) {
			ids = append(ids, id)
		}
	}
	return ids
}

func ifinfomsg(ifindex int) []byte {
	b := make([]byte, 16)
	b[0] = unix.AF_UNSPEC
	ne.PutUint32(b[4:], uint32(int32(ifindex)))
	return b
}

// LinkXDP reports the XDP attachment of ifindex.
func (c *Conn) LinkXDP(ifindex int) (XDP, error) {
	var x XDP
	body := putAttrs(ifinfomsg(ifindex), []attr{{unix.IFLA_EXT_MASK, ne.AppendUint32(nil, rtextFilterSkipStats)}})
	err := c.request(unix.RTM_GETLINK, 0, body, func(typ uint16, b []byte) {
		if typ != unix.RTM_NEWLINK || len(b) < 16 {
			return
		}
		v := parseAttrs(b[16:])[unix.IFLA_XDP]
		if v == nil {
			return
		}
		a := parseAttrs(v)
		if w := a[unix.IFLA_XDP_ATTACHED]; len(w) == 1 {
			x.Attached = w[0]
		}
		u32 := func(t uint16) uint32 {
			if w := a[t]; len(w) == 4 {
				return ne.Uint32(w)
			}
			return 0
		}
		x.ProgID = u32(unix.IFLA_XDP_PROG_ID)
		x.SKBProg = u32(unix.IFLA_XDP_SKB_PROG_ID)
		x.DrvProg = u32(unix.IFLA_XDP_DRV_PROG_ID)
	})
	return x, err
}

// SetXDP attaches the program fd to ifindex through the legacy netlink
// interface (fd -1 detaches) with XDP_FLAGS_* flags. datapath attaches with
// a bpf_link; this is for removing attachments made the old way (ip link
// set dev X xdp ...) and for tests that simulate one left behind.
func (c *Conn) SetXDP(ifindex, fd int, flags uint32) error {
	nested := putAttrs(nil, []attr{
		{unix.IFLA_XDP_FD, ne.AppendUint32(nil, uint32(int32(fd)))},
		{unix.IFLA_XDP_FLAGS, ne.AppendUint32(nil, flags)},
	})
	body := putAttrs(ifinfomsg(ifindex), []attr{{unix.IFLA_XDP | unix.NLA_F_NESTED, nested}})
	return c.request(unix.RTM_SETLINK, unix.NLM_F_ACK, body, func(uint16, []byte) {})
}

const rtextFilterSkipStats = 1 << 3 // RTEXT_FILTER_SKIP_STATS
