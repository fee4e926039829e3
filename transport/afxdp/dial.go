package afxdp

import (
	"context"
	"fmt"

	"golang.org/x/sys/unix"

	"xrnic/bpf"
	"xrnic/tcpstack"
	"xrnic/transport"
	"xrnic/wire/eth"
)

// dial opens a user-space TCP connection to addr on queue 0 and waits for
// the handshake.
func (x *Transport) dial(ctx context.Context, addr string) (transport.Conn, error) {
	ip, port, err := parseIPv4Port(addr)
	if err != nil {
		return nil, err
	}
	mac, err := x.resolve(ctx, ip)
	if err != nil {
		return nil, err
	}
	l := x.loops[0]
	var c *xconn
	var derr error
	estab := make(chan error, 1)
	if err := l.do(func() { c, derr = l.q.dial(ip, port, mac, estab) }); err != nil {
		return nil, err
	}
	if derr != nil {
		return nil, derr
	}
	select {
	case err := <-estab:
		if err != nil {
			c.Close()
			return nil, err
		}
		return c, nil
	case <-ctx.Done():
		c.Close()
		return nil, ctx.Err()
	}
}

func (q *xdpQueue) dial(ip [4]byte, port uint16, mac eth.MAC, estab chan error) (*xconn, error) {
	x := q.x
	fd, lport, err := x.reservePort(0)
	if err != nil {
		return nil, fmt.Errorf("reserve a local port: %w", err)
	}
	flow := bpf.Flow{LocalIP: x.addr, RemoteIP: ip, LocalPort: lport, RemotePort: port}
	if err := x.prog.AddFlow(flow); err != nil {
		unix.Close(fd)
		return nil, err
	}
	c, err := q.stack.Dial(ip, port, tcpstack.DialOptions{RemoteMAC: &mac, LocalPort: lport})
	if err != nil {
		x.prog.DeleteFlow(flow)
		unix.Close(fd)
		return nil, err
	}
	xc := q.newConn(c, flow, fd)
	xc.estab = estab
	return xc, nil
}
