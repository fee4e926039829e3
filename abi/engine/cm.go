package main

import (
	"context"
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"os"
	"strconv"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"xrnic/verbs"
)

const (
	afInet  = 2
	afInet6 = 10
)

// sockaddrIn reads a struct sockaddr_in or sockaddr_in6.
func sockaddrIn(p unsafe.Pointer) (netip.AddrPort, bool) {
	if p == nil {
		return netip.AddrPort{}, false
	}
	fam := *(*uint16)(p)
	b := unsafe.Slice((*byte)(p), 28)
	switch fam {
	case afInet:
		return netip.AddrPortFrom(netip.AddrFrom4([4]byte(b[4:8])), binary.BigEndian.Uint16(b[2:4])), true
	case afInet6:
		a := netip.AddrFrom16([16]byte(b[8:24]))
		if scope := binary.NativeEndian.Uint32(b[24:28]); scope != 0 {
			a = a.WithZone(strconv.Itoa(int(scope)))
		}
		return netip.AddrPortFrom(a, binary.BigEndian.Uint16(b[2:4])), true
	}
	return netip.AddrPort{}, false
}

// putSockaddr writes ap as a sockaddr_in (IPv4 and IPv4-mapped) or
// sockaddr_in6; an invalid ap leaves the family 0.
func putSockaddr(s *sockaddrStorage, ap netip.AddrPort) {
	*s = sockaddrStorage{}
	a := ap.Addr()
	if !a.IsValid() {
		return
	}
	binary.BigEndian.PutUint16(s[2:4], ap.Port())
	if a.Is4() || a.Is4In6() {
		binary.NativeEndian.PutUint16(s[0:2], afInet)
		v := a.Unmap().As4()
		copy(s[4:8], v[:])
		return
	}
	binary.NativeEndian.PutUint16(s[0:2], afInet6)
	v := a.As16()
	copy(s[8:24], v[:])
	if z := a.Zone(); z != "" {
		if ifi, err := net.InterfaceByName(z); err == nil {
			binary.NativeEndian.PutUint32(s[24:28], uint32(ifi.Index))
		} else if n, err := strconv.Atoi(z); err == nil {
			binary.NativeEndian.PutUint32(s[24:28], uint32(n))
		}
	}
}

func addrPortOf(a net.Addr) netip.AddrPort {
	if t, ok := a.(*net.TCPAddr); ok {
		return t.AddrPort()
	}
	if a != nil {
		if ap, err := netip.ParseAddrPort(a.String()); err == nil {
			return ap
		}
	}
	return netip.AddrPort{}
}

const (
	cmIdle = iota
	cmBound
	cmAddrResolved
	cmRouteResolved
	cmListening
	cmConnecting
	cmRequest // a CONNECT_REQUEST not yet answered
	cmAccepting
	cmConnected
	cmDone // rejected, failed or disconnected
)

type cmID struct {
	mu          sync.Mutex
	ch          *channel
	cookie      uint64
	destroyed   bool
	state       int
	local, peer netip.AddrPort

	ctx    context.Context
	cancel context.CancelFunc

	ln       *verbs.Listener
	backlog  chan struct{}
	children map[*cmID]struct{}

	parent  *cmID
	req     *verbs.ConnRequest
	slot    bool // holds a backlog slot of parent
	qp      *qpObj
	discSet bool // DISCONNECTED queued
}

func createID(chh, cookie uint64, out *uint64) int {
	if device() == nil {
		return fail(syscall.ENODEV, "xrnic_cm_create_id: the device is not open")
	}
	var ch *channel
	if chh != 0 {
		if ch = getT[channel](chh); ch == nil {
			return fail(syscall.EBADF, "xrnic_cm_create_id: no such channel")
		}
	}
	id := newID(ch, cookie)
	h := handles.add(id)
	if h == 0 {
		return fail(syscall.ENOMEM, "xrnic_cm_create_id: too many objects")
	}
	*out = h
	return 0
}

func newID(ch *channel, cookie uint64) *cmID {
	id := &cmID{ch: ch, cookie: cookie}
	id.ctx, id.cancel = context.WithCancel(context.Background())
	return id
}

// emitLocked queues an rdma_cm event for the id unless it was destroyed;
// fill completes it. Called with mu held, which makes destroy's "no
// events after return" hold.
func (id *cmID) emitLocked(code uint32, status int32, fill func(*eventT)) {
	if id.destroyed {
		return
	}
	ev := eventT{Kind: xEvCM, Code: code, Status: status, Cookie: id.cookie}
	putSockaddr(&ev.Local, id.local)
	putSockaddr(&ev.Peer, id.peer)
	if fill != nil {
		fill(&ev)
	}
	debugf("cm id %p: event %d status %d", id, code, status)
	id.ch.push(&ev)
}

func setPrivate(ev *eventT, pd []byte) {
	ev.PrivateDataLen = uint16(copy(ev.PrivateData[:], pd))
}

func lookupID(h uint64, op string) (*cmID, int) {
	id := getT[cmID](h)
	if id == nil {
		return nil, fail(syscall.EBADF, "%s: no such rdma_cm id", op)
	}
	return id, 0
}

func setCookie(h, cookie uint64) int {
	id, e := lookupID(h, "xrnic_cm_set_cookie")
	if id == nil {
		return e
	}
	id.mu.Lock()
	id.cookie = cookie
	id.mu.Unlock()
	return 0
}

func migrateID(h, chh uint64) int {
	id, e := lookupID(h, "xrnic_cm_migrate_id")
	if id == nil {
		return e
	}
	ch := getT[channel](chh)
	if ch == nil {
		return fail(syscall.EBADF, "xrnic_cm_migrate_id: no such channel")
	}
	id.mu.Lock()
	id.ch = ch
	id.mu.Unlock()
	return 0
}

func destroyID(h uint64) int {
	id, e := lookupID(h, "xrnic_cm_destroy_id")
	if id == nil {
		return e
	}
	if !handles.remove(h) {
		return fail(syscall.EBADF, "xrnic_cm_destroy_id: no such rdma_cm id")
	}
	id.mu.Lock()
	id.destroyed = true
	id.cancel()
	ln, req, children := id.ln, id.req, id.children
	id.ln, id.req, id.children = nil, nil, nil
	id.mu.Unlock()
	if ln != nil {
		ln.Close()
	}
	if req != nil {
		req.Close()
	}
	id.releaseSlot()
	for c := range children {
		c.mu.Lock()
		r := c.req
		if c.state == cmRequest {
			c.req, c.state = nil, cmDone
		} else {
			r = nil
		}
		c.mu.Unlock()
		if r != nil {
			r.Close()
		}
		c.releaseSlot()
	}
	return 0
}

// releaseSlot gives back the backlog slot of a request, once.
func (id *cmID) releaseSlot() {
	id.mu.Lock()
	p, had := id.parent, id.slot
	id.slot = false
	id.mu.Unlock()
	if !had || p == nil {
		return
	}
	<-p.backlog
	p.mu.Lock()
	delete(p.children, id)
	p.mu.Unlock()
}

// checkLocal tries the address on the kernel's stack: it must be ours and,
// with a port, free; port 0 gets a free one.
func checkLocal(ap netip.AddrPort) (netip.AddrPort, error) {
	l, err := net.ListenTCP("tcp", net.TCPAddrFromAddrPort(ap))
	if err != nil {
		return ap, err
	}
	got := l.Addr().(*net.TCPAddr).AddrPort()
	l.Close()
	return netip.AddrPortFrom(ap.Addr(), got.Port()), nil
}

func errnoOf(err error, def syscall.Errno) syscall.Errno {
	var en syscall.Errno
	switch {
	case errors.As(err, &en):
		return en
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded):
		return syscall.ETIMEDOUT
	case errors.Is(err, context.Canceled):
		return syscall.ECANCELED
	}
	// The afxdp transport's errors match the errnos they stand for.
	for _, en := range []syscall.Errno{syscall.ECONNREFUSED, syscall.ECONNRESET, syscall.ETIMEDOUT, syscall.EHOSTUNREACH, syscall.ENETUNREACH} {
		if errors.Is(err, en) {
			return en
		}
	}
	return def
}

func bindID(h uint64, addr unsafe.Pointer) int {
	id, e := lookupID(h, "xrnic_cm_bind")
	if id == nil {
		return e
	}
	ap, ok := sockaddrIn(addr)
	if !ok {
		return fail(syscall.EAFNOSUPPORT, "xrnic_cm_bind: only AF_INET and AF_INET6 addresses")
	}
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.state != cmIdle {
		return fail(syscall.EINVAL, "xrnic_cm_bind: the id is already bound")
	}
	got, err := checkLocal(ap)
	if err != nil {
		en := errnoOf(err, syscall.EADDRNOTAVAIL)
		return fail(en, "xrnic_cm_bind %v: %v", ap, err)
	}
	id.local, id.state = got, cmBound
	return 0
}

// routeSource picks our address towards dst from the kernel's routes (a
// connected UDP socket: no packet is sent).
func routeSource(dst netip.AddrPort) (netip.Addr, error) {
	port := dst.Port()
	if port == 0 {
		port = 9
	}
	c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(dst.Addr(), port)))
	if err != nil {
		return netip.Addr{}, err
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).AddrPort().Addr(), nil
}

func resolveAddr(h uint64, src, dst unsafe.Pointer, srcOut *sockaddrStorage) int {
	id, e := lookupID(h, "xrnic_cm_resolve_addr")
	if id == nil {
		return e
	}
	d, ok := sockaddrIn(dst)
	if !ok {
		return fail(syscall.EAFNOSUPPORT, "xrnic_cm_resolve_addr: the destination must be AF_INET or AF_INET6")
	}
	s, haveSrc := sockaddrIn(src)
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.state != cmIdle && id.state != cmBound && id.state != cmAddrResolved {
		return fail(syscall.EINVAL, "xrnic_cm_resolve_addr: the id is listening or connected")
	}
	if !haveSrc || !s.Addr().IsValid() || s.Addr().IsUnspecified() {
		if id.state == cmBound && !id.local.Addr().IsUnspecified() {
			s, haveSrc = id.local, true
		} else {
			port := id.local.Port()
			a, err := routeSource(d)
			if err != nil {
				en := errnoOf(err, syscall.EHOSTUNREACH)
				id.emitLocked(RDMA_CM_EVENT_ADDR_ERROR, -int32(en), nil)
				return 0
			}
			s = netip.AddrPortFrom(a, port)
		}
	}
	id.local, id.peer, id.state = s, d, cmAddrResolved
	if srcOut != nil {
		putSockaddr(srcOut, s)
	}
	id.emitLocked(RDMA_CM_EVENT_ADDR_RESOLVED, 0, nil)
	return 0
}

func resolveRoute(h uint64) int {
	id, e := lookupID(h, "xrnic_cm_resolve_route")
	if id == nil {
		return e
	}
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.state != cmAddrResolved && id.state != cmRouteResolved {
		return fail(syscall.EINVAL, "xrnic_cm_resolve_route: resolve the address first")
	}
	id.state = cmRouteResolved
	id.emitLocked(RDMA_CM_EVENT_ROUTE_RESOLVED, 0, nil)
	return 0
}

const defaultBacklog = 1024

func listenID(h uint64, backlog int32) int {
	id, e := lookupID(h, "xrnic_cm_listen")
	if id == nil {
		return e
	}
	d := device()
	if d == nil {
		return fail(syscall.ENODEV, "xrnic_cm_listen: the device is not open")
	}
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.state != cmBound {
		return fail(syscall.EINVAL, "xrnic_cm_listen: bind the id first (rdma_bind_addr)")
	}
	network := "tcp4"
	if id.local.Addr().Is6() && !id.local.Addr().Is4In6() {
		network = "tcp"
	}
	ln, err := d.Listen(network, id.local.String())
	if err != nil {
		return fail(errnoOf(err, syscall.EADDRINUSE), "xrnic_cm_listen %v: %v", id.local, err)
	}
	if backlog <= 0 || backlog > defaultBacklog {
		backlog = defaultBacklog
	}
	id.ln, id.state = ln, cmListening
	id.local = netip.AddrPortFrom(id.local.Addr(), addrPortOf(ln.Addr()).Port())
	id.backlog = make(chan struct{}, backlog)
	id.children = map[*cmID]struct{}{}
	debugf("listening on %v", ln.Addr()) // tests wait for it: afxdp listeners are not in ss
	go id.acceptLoop(ln)
	return 0
}

// acceptLoop turns the listener's requests into CONNECT_REQUEST events,
// at most backlog of them unanswered.
func (id *cmID) acceptLoop(ln *verbs.Listener) {
	for {
		select {
		case id.backlog <- struct{}{}:
		case <-id.ctx.Done():
			return
		}
		req, err := ln.Accept(id.ctx)
		if err != nil {
			<-id.backlog
			if id.ctx.Err() != nil || errors.Is(err, verbs.ErrClosed) {
				return
			}
			debugf("listener %v: %v", id.local, err)
			time.Sleep(10 * time.Millisecond)
			continue
		}
		id.mu.Lock()
		if id.destroyed {
			id.mu.Unlock()
			req.Close()
			<-id.backlog
			return
		}
		c := newID(id.ch, 0)
		c.parent, c.req, c.slot, c.state = id, req, true, cmRequest
		c.peer = addrPortOf(req.RemoteAddr)
		c.local = id.local
		if c.local.Addr().IsUnspecified() && c.peer.IsValid() {
			if a, err := routeSource(c.peer); err == nil {
				c.local = netip.AddrPortFrom(a, c.local.Port())
			}
		}
		hc := handles.add(c)
		if hc == 0 {
			id.mu.Unlock()
			req.Reject(nil)
			<-id.backlog
			continue
		}
		id.children[c] = struct{}{}
		ird, ord := defaultIRDORD(req.HasPeerIRDORD, req.PeerIRD), defaultIRDORD(req.HasPeerIRDORD, req.PeerORD)
		id.emitLocked(RDMA_CM_EVENT_CONNECT_REQUEST, 0, func(ev *eventT) {
			ev.NewID = hc
			ev.ResponderResources, ev.InitiatorDepth = ird, ord
			setPrivate(ev, req.PrivateData)
			putSockaddr(&ev.Local, c.local)
			putSockaddr(&ev.Peer, c.peer)
		})
		id.mu.Unlock()
	}
}

// defaultIRDORD is a peer's IRD or ORD for an event: its RFC 6581 value,
// else (MPA revision 1, or "not negotiated") the device's.
func defaultIRDORD(has bool, v int) uint8 {
	if !has || v >= 0x3FFF {
		return uint8(min(dev.a.MaxIRD, maxIRDORD8))
	}
	return uint8(min(v, maxIRDORD8))
}

func connParam(p *connParamT) (verbs.ConnParam, int) {
	var cp verbs.ConnParam
	if p == nil {
		return cp, 0
	}
	if p.PrivateDataLen < 0 || p.PrivateDataLen > privateDataMax || (p.PrivateDataLen > 0 && p.PrivateData == nil) {
		return cp, fail(syscall.EINVAL, "private_data_len %d: at most %d", p.PrivateDataLen, privateDataMax)
	}
	if p.PrivateDataLen > 0 {
		cp.PrivateData = append([]byte(nil), unsafe.Slice((*byte)(p.PrivateData), p.PrivateDataLen)...)
	}
	// 0 takes the QP's default, as IB applications that do not set them
	// expect Reads to work.
	cp.IRD, cp.ORD = int(max(p.ResponderResources, 0)), int(max(p.InitiatorDepth, 0))
	return cp, 0
}

// dialParam is connParam for the initiator: RFC 6581 peer-to-peer mode,
// as iWARP's rdma_cm uses, so the responder may send first (InfiniBand
// applications do: ib_write_lat's server writes first), which plain MPA
// forbids until the initiator's first FPDU.
func dialParam(p *connParamT) (verbs.ConnParam, int) {
	cp, e := connParam(p)
	cp.PeerToPeer = true
	return cp, e
}

func connectID(h, qph uint64, p *connParamT) int {
	id, e := lookupID(h, "xrnic_cm_connect")
	if id == nil {
		return e
	}
	q := getT[qpObj](qph)
	if q == nil {
		return fail(syscall.EBADF, "xrnic_cm_connect: no such QP")
	}
	cp, e := dialParam(p)
	if e != 0 {
		return e
	}
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.state != cmRouteResolved && id.state != cmAddrResolved {
		return fail(syscall.EINVAL, "xrnic_cm_connect: resolve the address and route first")
	}
	if q.qp.State() != verbs.QPInit {
		return fail(syscall.EINVAL, "xrnic_cm_connect: the QP is not fresh (state %v)", q.qp.State())
	}
	id.state, id.qp = cmConnecting, q
	addr := id.peer.String()
	turn, done := dialOrder.take(addr)
	go func() {
		turn(id.ctx)
		err := q.qp.Dial(id.ctx, addr, cp)
		done()
		if err == nil {
			id.established(q, true)
			return
		}
		id.mu.Lock()
		id.state = cmDone
		var rej *verbs.RejectedError
		switch {
		case errors.As(err, &rej):
			id.emitLocked(RDMA_CM_EVENT_REJECTED, -int32(syscall.ECONNREFUSED), func(ev *eventT) { setPrivate(ev, rej.PrivateData) })
		case errnoOf(err, 0) == syscall.ECONNREFUSED:
			// Nobody listens (a TCP reset): REJECTED, as iWARP RNICs
			// report it through the kernel's rdma_cm.
			id.emitLocked(RDMA_CM_EVENT_REJECTED, -int32(syscall.ECONNREFUSED), nil)
		default:
			en := errnoOf(err, syscall.ECONNABORTED)
			code := uint32(RDMA_CM_EVENT_CONNECT_ERROR)
			switch en {
			case syscall.ETIMEDOUT, syscall.EHOSTUNREACH, syscall.ENETUNREACH:
				code = RDMA_CM_EVENT_UNREACHABLE
			}
			id.emitLocked(code, -int32(en), nil)
		}
		id.mu.Unlock()
		debugf("connect %s: %v", addr, err)
	}()
	return 0
}

// established queues ESTABLISHED and then, once the connection ends,
// DISCONNECTED.
func (id *cmID) established(q *qpObj, initiator bool) {
	ci := q.qp.ConnInfo()
	id.mu.Lock()
	id.state = cmConnected
	if ap := addrPortOf(ci.LocalAddr); ap.IsValid() {
		id.local = ap
	}
	if ap := addrPortOf(ci.RemoteAddr); ap.IsValid() {
		id.peer = ap
	}
	id.emitLocked(RDMA_CM_EVENT_ESTABLISHED, 0, func(ev *eventT) {
		// The peer's IRD and ORD: its RFC 6581 values, else what the
		// negotiation implies (our ORD fits its IRD, and so on).
		ev.ResponderResources = uint8(min(ci.ORD, maxIRDORD8))
		ev.InitiatorDepth = uint8(min(ci.IRD, maxIRDORD8))
		if ci.HasPeerIRDORD {
			ev.ResponderResources, ev.InitiatorDepth = defaultIRDORD(true, ci.PeerIRD), defaultIRDORD(true, ci.PeerORD)
		}
		if initiator {
			setPrivate(ev, ci.PeerPrivateData)
		}
	})
	id.mu.Unlock()
	select {
	case <-q.qp.Done():
	case <-id.ctx.Done():
		return
	}
	debugf("cm id %p: QP %d ended: state %v, error %v, peer closed %v", id, q.qp.Num(), q.qp.State(), q.qp.Err(), q.qp.Disconnected())
	id.disconnected()
}

func (id *cmID) disconnected() {
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.discSet {
		return
	}
	id.discSet, id.state = true, cmDone
	id.emitLocked(RDMA_CM_EVENT_DISCONNECTED, 0, nil)
}

func acceptID(h, qph uint64, p *connParamT) int {
	id, e := lookupID(h, "xrnic_cm_accept")
	if id == nil {
		return e
	}
	q := getT[qpObj](qph)
	if q == nil {
		return fail(syscall.EBADF, "xrnic_cm_accept: no such QP")
	}
	cp, e := connParam(p)
	if e != 0 {
		return e
	}
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.state != cmRequest || id.req == nil {
		return fail(syscall.EINVAL, "xrnic_cm_accept: the id is not an unanswered connection request")
	}
	req := id.req
	id.req, id.state, id.qp = nil, cmAccepting, q
	go func() {
		id.releaseSlot() // answered
		err := req.Accept(id.ctx, q.qp, cp)
		if err == nil {
			id.established(q, false)
			return
		}
		debugf("accept: %v", err)
		id.mu.Lock()
		id.state = cmDone
		id.emitLocked(RDMA_CM_EVENT_CONNECT_ERROR, -int32(errnoOf(err, syscall.ECONNABORTED)), nil)
		id.mu.Unlock()
	}()
	return 0
}

func rejectID(h uint64, pd unsafe.Pointer, n int32) int {
	id, e := lookupID(h, "xrnic_cm_reject")
	if id == nil {
		return e
	}
	if n < 0 || n > privateDataMax || (n > 0 && pd == nil) {
		return fail(syscall.EINVAL, "xrnic_cm_reject: private data length %d: at most %d", n, privateDataMax)
	}
	var data []byte
	if n > 0 {
		data = append(data, unsafe.Slice((*byte)(pd), n)...)
	}
	id.mu.Lock()
	if id.state != cmRequest || id.req == nil {
		id.mu.Unlock()
		return fail(syscall.EINVAL, "xrnic_cm_reject: the id is not an unanswered connection request")
	}
	req := id.req
	id.req, id.state = nil, cmDone
	id.mu.Unlock()
	err := req.Reject(data)
	id.releaseSlot()
	if err != nil {
		return fail(syscall.ECONNABORTED, "xrnic_cm_reject: %v", err)
	}
	return 0
}

func disconnectID(h uint64) int {
	id, e := lookupID(h, "xrnic_cm_disconnect")
	if id == nil {
		return e
	}
	id.mu.Lock()
	q, st := id.qp, id.state
	id.mu.Unlock()
	if q == nil || (st != cmConnected && st != cmDone) {
		return fail(syscall.EINVAL, "xrnic_cm_disconnect: the id is not connected")
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		q.qp.Disconnect(ctx)
		cancel()
		// The peer did not close in time (or the QP was never
		// connected): end it here, which also flushes what is left.
		select {
		case <-q.qp.Done():
		default:
			q.qp.ToError()
		}
	}()
	return 0
}

func addrsID(h uint64, local, peer *sockaddrStorage) int {
	id, e := lookupID(h, "xrnic_cm_addrs")
	if id == nil {
		return e
	}
	id.mu.Lock()
	defer id.mu.Unlock()
	if local != nil {
		putSockaddr(local, id.local)
	}
	if peer != nil {
		putSockaddr(peer, id.peer)
	}
	return 0
}

// dialOrder keeps rdma_connect's order per destination: a connection is
// dialled once the one before it to the same address is established (or
// failed), so the responder's CONNECT_REQUEST events come in the order
// the application connected. rdma_cm programs pair QPs by that order
// (perftest -q N numbers both sides' QPs by event order); racing dials,
// and the responder's concurrent MPA handshakes, would pair them at
// random. A predecessor that is not accepted holds the next at most
// dialOrderWait (a responder that waits for several requests before it
// accepts any is served, only slower).
var dialOrder = dialQueue{last: map[string]chan struct{}{}}

const dialOrderWait = 2 * time.Second

type dialQueue struct {
	mu   sync.Mutex
	last map[string]chan struct{} // closed when the latest dial to the address is over
}

// take queues a dial to addr: turn waits for the predecessor, done
// releases the successor (idempotent).
func (q *dialQueue) take(addr string) (turn func(context.Context), done func()) {
	gate := make(chan struct{})
	q.mu.Lock()
	prev := q.last[addr]
	q.last[addr] = gate
	q.mu.Unlock()
	var once sync.Once
	done = func() {
		once.Do(func() {
			close(gate)
			q.mu.Lock()
			if q.last[addr] == gate {
				delete(q.last, addr)
			}
			q.mu.Unlock()
		})
	}
	turn = func(ctx context.Context) {
		if prev == nil {
			return
		}
		t := time.NewTimer(dialOrderWait)
		defer t.Stop()
		select {
		case <-prev:
		case <-t.C:
		case <-ctx.Done():
		}
	}
	return turn, done
}
