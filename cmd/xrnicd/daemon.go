package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/user"
	"strconv"
	"sync"
	"syscall"
	"time"

	"xrnic/control"
	"xrnic/internal/engine"
	"xrnic/mem"
	"xrnic/transport/afxdp"
	"xrnic/transport/kernel"
	"xrnic/wire/term"
)

// chooseTransport resolves --transport and says why. An afxdp chosen by
// default (not asked for) may still fall back to kernel in start when the
// interface refuses it; auto reports that case.
func chooseTransport(c *config) (transport, reason string, auto bool, err error) {
	if c.Iface != "" {
		if _, err := net.InterfaceByName(c.Iface); err != nil {
			return "", "", false, fmt.Errorf("--iface %s: unknown interface (`ip link` lists them): %w", c.Iface, err)
		}
	}
	switch c.Transport {
	case "kernel":
		return "kernel", "asked with --transport kernel", false, nil
	case "afxdp":
		if c.Iface == "" {
			return "", "", false, errors.New("--transport afxdp needs --iface (the interface whose queues xrnicd takes over)")
		}
		if err := afxdpAllowed(c); err != nil {
			return "", "", false, fmt.Errorf("--transport afxdp: %w", err)
		}
		return "afxdp", "asked with --transport afxdp --iface " + c.Iface, false, nil
	case "":
		if c.Iface == "" {
			return "kernel", "no --iface given", false, nil
		}
		if err := afxdpAllowed(c); err != nil {
			return "kernel", "--iface " + c.Iface + " given but this process may not use afxdp: " + err.Error(), false, nil
		}
		return "afxdp", "--iface " + c.Iface + " given and the process has the privileges (root or CAP_NET_ADMIN, CAP_BPF, CAP_NET_RAW)", true, nil
	}
	return "", "", false, fmt.Errorf("--transport %q: want kernel or afxdp", c.Transport)
}

// afxdpAllowed checks the privileges and the locked-memory limit the afxdp
// transport needs.
func afxdpAllowed(c *config) error {
	if err := afxdp.Privileges(); err != nil {
		return err
	}
	return afxdp.Memlock(xdpConfig(c, nil))
}

func xdpConfig(c *config, log *slog.Logger) afxdp.Config {
	return afxdp.Config{Iface: c.Iface, Queues: c.Queues, Mode: c.XDPMode, Logger: log}
}

type region struct {
	spec regionSpec
	reg  *mem.Region
	mr   *mem.MR
}

// daemon is a running xrnicd.
type daemon struct {
	cfg   config
	log   *slog.Logger
	dev   *engine.Device
	pd    mem.PD
	state *control.State

	regions []region
	ln      net.Listener     // kernel transport
	xln     *engine.Listener // afxdp transport
	httpSrv *http.Server
	httpLn  net.Listener
	sock    *control.SocketServer

	ctx    context.Context // cancelled at shutdown: stops accepting and the sinks
	cancel context.CancelFunc
	wg     sync.WaitGroup // connection handlers
	peers  peerQPs        // QPs per peer address (--max-qps-per-peer)
}

// startError decorates start-up errors with what to do.
func startError(what string, err error) error {
	switch {
	case errors.Is(err, syscall.EADDRINUSE):
		return fmt.Errorf("%s: the port is in use (another xrnicd? `ss -ltnp` shows who holds it; choose another address): %w", what, err)
	case errors.Is(err, syscall.EACCES):
		return fmt.Errorf("%s: permission denied (ports below 1024 need CAP_NET_BIND_SERVICE; use a higher port): %w", what, err)
	case errors.Is(err, syscall.EADDRNOTAVAIL):
		return fmt.Errorf("%s: the address is not on this host (`ip addr` lists them): %w", what, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// start brings the daemon up; on error everything acquired is released.
func start(cfg config, log *slog.Logger) (d *daemon, err error) {
	transport, reason, auto, err := chooseTransport(&cfg)
	if err != nil {
		return nil, err
	}

	d = &daemon{cfg: cfg, log: log}
	defer func() {
		if err != nil {
			d.release()
			d = nil
		}
	}()
	dc := engine.Config{MaxQPs: cfg.MaxQPs, MaxORD: cfg.MaxORD, MaxIRD: cfg.MaxIRD, ConnTimeout: cfg.ConnTimeout}
	if transport == "afxdp" {
		var tr *afxdp.Transport
		if tr, err = afxdp.Open(xdpConfig(&cfg, log)); err == nil {
			dc.Transport = tr
			if d.dev, err = engine.Open(dc); err != nil {
				tr.Close()
			}
		}
		if err != nil && auto {
			log.Warn("afxdp unavailable; falling back to the kernel transport (--transport afxdp makes this fatal)", "iface", cfg.Iface, "err", err)
			transport, reason = "kernel", "afxdp chosen for --iface "+cfg.Iface+" but it failed: "+err.Error()
			dc.Transport = nil
		} else if err != nil {
			return d, fmt.Errorf("open the afxdp device on %s: %w (check `ip link show %s` for another XDP program; try --xdp-mode generic; or run with --transport kernel)", cfg.Iface, err, cfg.Iface)
		}
	}
	log.Info("transport chosen", "transport", transport, "reason", reason)
	if d.dev == nil {
		if d.dev, err = engine.Open(dc); err != nil {
			return d, fmt.Errorf("open device: %w", err)
		}
	}
	if x, ok := d.dev.Transport().(*afxdp.Transport); ok {
		xi := x.Info()
		log.Info("XDP attached", "iface", cfg.Iface, "ifindex", xi.Ifindex, "mode", xi.Mode, "mode_reason", xi.Reason,
			"zero_copy", xi.ZeroCopy, "queues", xi.Queues, "addr", xi.Addr.String(), "mtu", xi.MTU, "replaced", xi.Replaced)
	}
	d.pd = d.dev.AllocPD()
	d.state = control.NewState(d.dev)
	d.state.Transport = transport
	d.state.Version = version()
	d.ctx, d.cancel = context.WithCancel(context.Background())

	if err := d.allocRegions(); err != nil {
		return d, err
	}

	if transport == "afxdp" {
		// The user-space TCP listens: the port is reserved in the kernel
		// and steered to our AF_XDP sockets.
		if d.xln, err = d.dev.Listen("tcp4", cfg.Listen); err != nil {
			return d, startError("--listen "+cfg.Listen+" (afxdp on "+cfg.Iface+")", err)
		}
		d.state.Listen = d.xln.Addr().String()
	} else {
		if d.ln, err = net.Listen("tcp", cfg.Listen); err != nil {
			return d, startError("--listen "+cfg.Listen, err)
		}
		d.state.Listen = d.ln.Addr().String()
	}
	allow := "all peers (no --allow given)"
	if len(cfg.Allow) > 0 {
		allow = ""
		for i, p := range cfg.Allow {
			if i > 0 {
				allow += ", "
			}
			allow += p.String()
			d.state.Allow = append(d.state.Allow, p.String())
		}
	}
	log.Info("listening for MPA connections", "addr", d.state.Listen, "allow", allow, "mpa_rev", cfg.MPARev,
		"crc", !cfg.NoCRC, "markers", cfg.Markers, "max_qps", cfg.MaxQPs, "max_ord", cfg.MaxORD, "max_ird", cfg.MaxIRD)

	if cfg.Metrics != "" && cfg.Metrics != "off" {
		if d.httpLn, err = net.Listen("tcp", cfg.Metrics); err != nil {
			return d, startError("--metrics "+cfg.Metrics, err)
		}
		d.state.Metrics = d.httpLn.Addr().String()
		tcpSrc, xdpSrc := control.TransportSources(d.dev.Transport(), cfg.Iface)
		reg := control.NewRegistry(d.state, control.Options{TCP: tcpSrc, XDP: xdpSrc})
		d.httpSrv = &http.Server{Handler: control.HTTPHandler(d.state, reg), ReadHeaderTimeout: 5 * time.Second}
		go d.httpSrv.Serve(d.httpLn)
		log.Info("serving metrics", "addr", d.state.Metrics, "paths", "/metrics /healthz /readyz")
	}

	gid := -1
	if cfg.SocketGroup != "" {
		g, err := user.LookupGroup(cfg.SocketGroup)
		if err != nil {
			return d, fmt.Errorf("--socket-group %s: %w (create the group or leave the option out)", cfg.SocketGroup, err)
		}
		gid, _ = strconv.Atoi(g.Gid)
	}
	if d.sock, err = control.ListenSocket(cfg.Socket, gid); err != nil {
		return d, err
	}
	policyGID := gid
	if policyGID < 0 {
		policyGID = os.Getgid()
	}
	go d.sock.Serve(control.APIHandler(d.state), control.DefaultPolicy(policyGID))
	log.Info("control socket", "path", cfg.Socket, "mode", "0660")

	d.wg.Add(1)
	if d.xln != nil {
		go d.runAcceptXDP()
	} else {
		go d.runAccept()
	}
	d.state.SetReady(true)
	log.Info("xrnicd ready", "pid", os.Getpid(), "version", d.state.Version)
	return d, nil
}

// allocRegions maps and registers the --region memory.
func (d *daemon) allocRegions() error {
	ps := mem.Page2M
	if d.cfg.PageSize == "1G" {
		ps = mem.Page1G
	}
	if d.cfg.Hugepages == "off" {
		ps = mem.Page4K
	}
	for _, spec := range d.cfg.Regions {
		reg, err := mem.Alloc(spec.Size, mem.AllocOptions{PageSize: ps, NoFallback: d.cfg.Hugepages == "require", Prefault: true, Name: "xrnic-" + spec.Name})
		if err != nil {
			if errors.Is(err, mem.ErrNoHugepages) {
				return fmt.Errorf("region %s: %w (or start with --hugepages prefer to fall back to smaller pages)", spec.Name, err)
			}
			return fmt.Errorf("region %s: %w", spec.Name, err)
		}
		if w := reg.Warning(); w != "" {
			d.log.Warn("region did not get hugepages", "region", spec.Name, "backing", reg.Backing().String(), "fix", w)
		}
		mr, err := d.dev.RegMR(reg.Bytes()[:spec.Size], mem.MROptions{PD: d.pd, Access: spec.Access | mem.LocalWrite, TO: mem.TOZeroBased})
		if err != nil {
			reg.Close()
			return fmt.Errorf("region %s: register: %w", spec.Name, err)
		}
		d.regions = append(d.regions, region{spec: spec, reg: reg, mr: mr})
		d.state.AddRegion(control.Region{Name: spec.Name, MR: mr, Backing: reg.Backing(), PageSize: reg.PageSize(), Access: spec.Access})
		d.log.Info("region registered", "region", spec.Name, "stag", fmt.Sprintf("0x%08x", mr.STag()),
			"to", fmt.Sprintf("0x%016x", mr.BaseTO()), "length", spec.Size, "access", control.AccessLetters(spec.Access),
			"page_size", control.PageSizeLabel(reg.PageSize()), "backing", reg.Backing().String())
	}
	return nil
}

func (d *daemon) allowed(addr net.Addr) bool {
	if len(d.cfg.Allow) == 0 {
		return true
	}
	ta, ok := addr.(*net.TCPAddr)
	if !ok {
		return false
	}
	ip, ok := netip.AddrFromSlice(ta.IP)
	if !ok {
		return false
	}
	ip = ip.Unmap()
	for _, p := range d.cfg.Allow {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

func (d *daemon) runAccept() {
	defer d.wg.Done()
	for {
		c, err := d.ln.Accept()
		if err != nil {
			if d.ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return
			}
			d.log.Warn("accept", "err", err)
			time.Sleep(50 * time.Millisecond)
			continue
		}
		if !d.allowed(c.RemoteAddr()) {
			d.state.CountRefused()
			d.log.Debug("connection refused by --allow", "peer", c.RemoteAddr().String())
			c.Close()
			continue
		}
		d.wg.Add(1)
		go d.runConn(c.(*net.TCPConn))
	}
}

// runAcceptXDP accepts on the afxdp listener: the engine performs the
// TCP handshake and reads the MPA Request (one at a time, each bounded by
// --conn-timeout), and counts malformed Requests, which are folded into
// the MPA outcome counters here.
func (d *daemon) runAcceptXDP() {
	defer d.wg.Done()
	malformed := 0
	for {
		req, err := d.xln.Accept(d.ctx)
		if m := d.xln.Malformed(); m > malformed {
			for range m - malformed {
				d.state.CountMPA(control.MPAMalformed)
			}
			malformed = m
		}
		if err != nil {
			if d.ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return
			}
			d.log.Warn("accept", "err", err)
			time.Sleep(50 * time.Millisecond)
			continue
		}
		peer := req.RemoteAddr()
		if peer == nil || !d.allowed(peer) {
			d.state.CountRefused()
			d.log.Debug("connection refused by --allow", "peer", fmt.Sprint(peer))
			req.Close()
			continue
		}
		d.wg.Add(1)
		go func() {
			defer d.wg.Done()
			d.serveRequest(req, peer.String())
		}()
	}
}

// setupOutcome classifies a failed connection setup.
func setupOutcome(err error) control.MPAOutcome {
	var ne net.Error
	switch {
	case errors.Is(err, term.MPAInsufficientIRD), errors.Is(err, term.MPANoMatchingRTR):
		return control.MPANegotiationFailed
	case errors.Is(err, os.ErrDeadlineExceeded), errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return control.MPATimeout
	}
	return control.MPAFailed
}

// conn is one accepted connection: its QP, CQs and sink buffers.
type conn struct {
	qp       *engine.QP
	scq, rcq *engine.CQ
	mr       *mem.MR
	posted   []time.Time
	bufLen   int
}

func (d *daemon) runConn(tc *net.TCPConn) {
	defer d.wg.Done()
	peer := tc.RemoteAddr().String()
	log := d.log.With("peer", peer)
	req, err := d.dev.ReadConnRequest(d.ctx, kernel.NewConn(tc))
	if err != nil {
		o := control.MPAMalformed
		if setupOutcome(err) == control.MPATimeout {
			o = control.MPATimeout
		}
		d.state.CountMPA(o)
		log.Info("MPA request refused", "outcome", o.String(), "err", err)
		return
	}
	d.serveRequest(req, peer)
}

// serveRequest answers a valid MPA Request: accept it onto a new QP in the
// daemon's PD and run its sink until the QP ends.
func (d *daemon) serveRequest(req *engine.ConnRequest, peer string) {
	log := d.log.With("peer", peer)
	if (d.cfg.MPARev == "1" && req.Rev != 1) || (d.cfg.MPARev == "2" && req.Rev != 2) {
		req.Reject(nil)
		d.state.CountMPA(control.MPARejected)
		log.Info("MPA request rejected", "reason", "revision not accepted (--mpa-rev "+d.cfg.MPARev+")", "rev", req.Rev)
		return
	}
	release, ok := d.peers.acquire(peer, d.cfg.MaxQPsPerPeer)
	if !ok {
		req.Reject(nil)
		d.state.CountMPA(control.MPARejected)
		log.Warn("MPA request rejected", "reason", "the peer has --max-qps-per-peer QPs", "max_qps_per_peer", d.cfg.MaxQPsPerPeer)
		return
	}
	defer release()
	c, err := d.newConn()
	if err != nil {
		req.Reject(nil)
		d.state.CountMPA(control.MPARejected)
		log.Warn("MPA request rejected", "reason", err)
		return
	}
	d.state.AddQP(c.qp, peer)
	defer d.closeConn(c)
	err = req.Accept(d.ctx, c.qp, engine.ConnParams{NoCRC: d.cfg.NoCRC, Markers: d.cfg.Markers, RTR: d.cfg.RTR, RequiredORD: uint16(d.cfg.RequiredORD)})
	if err != nil {
		o := setupOutcome(err)
		d.state.CountMPA(o)
		log.Info("MPA setup failed", "outcome", o.String(), "err", err)
		return
	}
	d.state.CountMPA(control.MPAAccepted)
	ci := c.qp.ConnInfo()
	log.Info("QP established", "qp", c.qp.Num(), "mpa_rev", ci.Rev, "crc", ci.CRC, "ird", ci.IRD, "ord", ci.ORD, "peer_to_peer", ci.PeerToPeer)
	d.runSink(c, log)
}

// newConn creates a QP in the daemon's PD with its receive buffers posted.
func (d *daemon) newConn() (*conn, error) {
	c := &conn{bufLen: d.cfg.SinkBuffer, posted: make([]time.Time, d.cfg.SinkDepth)}
	var err error
	if c.scq, err = d.dev.CreateCQ(4); err != nil {
		return nil, err
	}
	if c.rcq, err = d.dev.CreateCQ(d.cfg.SinkDepth); err != nil {
		c.scq.Close()
		return nil, err
	}
	c.qp, err = d.dev.CreateQP(engine.QPAttr{PD: d.pd, SendCQ: c.scq, RecvCQ: c.rcq, SQDepth: 4, RQDepth: d.cfg.SinkDepth, MaxSGE: 1})
	if err != nil {
		c.rcq.Close()
		c.scq.Close()
		return nil, err
	}
	buf := make([]byte, d.cfg.SinkDepth*d.cfg.SinkBuffer)
	if c.mr, err = d.dev.RegMR(buf, mem.MROptions{PD: d.pd, Access: mem.LocalWrite, Stream: c.qp.Num(), TO: mem.TOZeroBased}); err != nil {
		c.qp.Close()
		c.rcq.Close()
		c.scq.Close()
		return nil, err
	}
	for i := range d.cfg.SinkDepth {
		if err := c.post(uint64(i)); err != nil {
			d.closeConnObjects(c)
			return nil, err
		}
	}
	return c, nil
}

func (c *conn) post(id uint64) error {
	c.posted[id] = time.Now()
	return c.qp.PostRecv(&engine.RecvWR{ID: id, SGL: []engine.SGE{{Addr: id * uint64(c.bufLen), Length: uint32(c.bufLen), LKey: c.mr.STag()}}})
}

// runSink counts the Sends and Immediate Data that arrive and keeps the
// buffers posted until the QP stops (a flushed or failed receive) or the
// daemon shuts down.
func (d *daemon) runSink(c *conn, log *slog.Logger) {
	wc := make([]engine.Completion, 32)
	for {
		if err := c.rcq.Wait(d.ctx); err != nil {
			return
		}
		n := c.rcq.Poll(wc)
		dead := false
		for _, e := range wc[:n] {
			if e.Status != engine.StatusSuccess {
				if !dead && e.Status != engine.StatusWRFlushErr {
					log.Info("QP receive failed", "qp", c.qp.Num(), "status", e.Status.String(), "err", e.Err)
				}
				dead = true
				continue
			}
			if e.ID < uint64(len(c.posted)) {
				d.state.Latency.Observe(control.QueueRecv, e.Op, time.Since(c.posted[e.ID]))
			}
			switch e.Op {
			case engine.OpRecvImm:
				d.state.CountSink(control.SinkImmediate, e.ByteLen)
			case engine.OpRecvWriteImm:
				d.state.CountSink(control.SinkWriteImmediate, e.ByteLen)
			default:
				d.state.CountSink(control.SinkSend, e.ByteLen)
			}
			if !dead && c.post(e.ID) != nil {
				dead = true
			}
		}
		if dead {
			if err := c.qp.Err(); err != nil && err != term.MPAConnectionLost {
				// (closeConn's QP.Close lets tx deliver a Terminate we
				// send before the connection is closed.)
				log.Info("QP closed by error", "qp", c.qp.Num(), "terminate", err.String())
			} else {
				log.Debug("QP closed", "qp", c.qp.Num())
			}
			return
		}
	}
}

// closeConn closes the QP (an orderly FIN when still connected, after a
// Terminate when in error), folds its counters and frees its resources.
func (d *daemon) closeConn(c *conn) {
	d.closeConnObjects(c)
	d.state.RetireQP(c.qp)
}

func (d *daemon) closeConnObjects(c *conn) {
	c.qp.Close()
	d.dev.DeregMR(c.mr)
	c.rcq.Close()
	c.scq.Close()
}

// shutdown stops accepting, closes every QP, releases memory and removes
// the control socket.
func (d *daemon) shutdown() {
	d.state.SetReady(false)
	d.log.Info("shutting down: no new connections; closing QPs")
	d.closeListener()
	d.cancel()
	done := make(chan struct{})
	go func() { d.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(d.cfg.ShutdownTimout):
		d.log.Warn("shutdown: QPs did not close in time; closing the device", "timeout", d.cfg.ShutdownTimout)
	}
	d.release()
	d.log.Info("xrnicd stopped")
}

func (d *daemon) closeListener() {
	if d.ln != nil {
		d.ln.Close()
	}
	if d.xln != nil {
		d.xln.Close()
	}
}

// release frees whatever start acquired (also after a failed start).
func (d *daemon) release() {
	if d.cancel != nil {
		d.cancel()
	}
	d.closeListener()
	if d.sock != nil {
		d.sock.Close()
	}
	if d.httpSrv != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		d.httpSrv.Shutdown(ctx)
		cancel()
	} else if d.httpLn != nil {
		d.httpLn.Close()
	}
	if d.dev != nil {
		d.dev.Close()
	}
	for _, r := range d.regions {
		d.dev.DeregMR(r.mr)
		r.reg.Close()
	}
	d.regions = nil
	if d.state != nil {
		d.state.ClearRegions()
	}
}
