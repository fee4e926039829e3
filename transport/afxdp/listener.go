package afxdp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"

	"golang.org/x/sys/unix"

	"xrnic/bpf"
	"xrnic/tcpstack"
	"xrnic/transport"
)

// listener is a Listen on the afxdp transport: a listener on every
// queue's stack, the port in the listen map and reserved in the kernel.
type listener struct {
	x      *Transport
	port   uint16
	resv   int
	stacks map[*xdpQueue]*tcpstack.Listener
	ch     chan *xconn
	done   chan struct{}
	once   sync.Once
}

func (x *Transport) listen(network, addr string) (*listener, error) {
	if network != "tcp" && network != "tcp4" {
		return nil, fmt.Errorf("afxdp transport: listen on %q: IPv4 TCP only", network)
	}
	ip, port, err := parseIPv4Port(addr)
	if err != nil {
		return nil, err
	}
	if ip != ([4]byte{}) && ip != x.addr {
		return nil, fmt.Errorf("afxdp transport: listen on %v: not the device's address %v", netip.AddrFrom4(ip), netip.AddrFrom4(x.addr))
	}
	ln := &listener{x: x, resv: -1, stacks: map[*xdpQueue]*tcpstack.Listener{}, ch: make(chan *xconn, 128), done: make(chan struct{})}
	var lerr error
	if err := x.loops[0].do(func() {
		ln.resv, ln.port, lerr = x.reservePort(port)
	}); err != nil {
		return nil, err
	}
	if lerr != nil {
		return nil, lerr
	}
	for _, l := range x.loops {
		q := l.q
		if err := l.do(func() {
			var s *tcpstack.Listener
			if s, lerr = q.stack.Listen(ln.port, tcpstack.ListenOptions{}); lerr == nil {
				ln.stacks[q] = s
				q.lns[ln.port] = ln
			}
		}); err != nil || lerr != nil {
			ln.Close()
			return nil, errors.Join(err, lerr)
		}
	}
	if err := x.prog.AddListen(ln.port); err != nil {
		ln.Close()
		return nil, err
	}
	return ln, nil
}

// Addr returns the listening address.
func (ln *listener) Addr() net.Addr {
	return &net.TCPAddr{IP: net.IP(ln.x.addr[:]), Port: int(ln.port)}
}

// pendingOn reports whether the listener has connections to accept on q.
func (ln *listener) pendingOn(q *xdpQueue) bool {
	s := ln.stacks[q]
	return s != nil && s.Pending() > 0
}

// accepted registers a connection the stack of q accepted (on the loop).
func (ln *listener) accepted(q *xdpQueue, c *tcpstack.Conn) {
	raddr, rport := c.RemoteAddr()
	flow := bpf.Flow{LocalIP: ln.x.addr, RemoteIP: raddr, LocalPort: ln.port, RemotePort: rport}
	if err := ln.x.prog.AddFlow(flow); err != nil {
		c.Abort()
		return
	}
	x := q.newConn(c, flow, -1)
	x.deliver() // data that came with or right after the handshake
	select {
	case ln.ch <- x:
	default: // backlog full
		x.closeOnLoop()
	}
}

// Accept waits for an established connection.
func (ln *listener) Accept(ctx context.Context) (transport.Conn, error) {
	select {
	case c := <-ln.ch:
		return c, nil
	case <-ln.done:
		return nil, net.ErrClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Close stops listening.
func (ln *listener) Close() error {
	ln.once.Do(func() {
		close(ln.done)
		if ln.port != 0 {
			ln.x.prog.DeleteListen(ln.port)
		}
		for _, l := range ln.x.loops {
			q := l.q
			l.do(func() {
				if s := ln.stacks[q]; s != nil {
					s.Close()
					delete(ln.stacks, q)
				}
				if q.lns[ln.port] == ln {
					delete(q.lns, ln.port)
				}
			})
		}
		if ln.resv >= 0 {
			unix.Close(ln.resv)
		}
		for {
			select {
			case c := <-ln.ch:
				c.Close()
				continue
			default:
			}
			break
		}
	})
	return nil
}
