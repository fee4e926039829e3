package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/user"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"xrnic/control"
	"xrnic/mem"
	"xrnic/transport/afxdp"
	"xrnic/verbs"
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
		if why := notEthernet(c.Iface); why != "" {
			return "", "", false, fmt.Errorf("--transport afxdp --iface %s: %s", c.Iface, why)
		}
		if err := afxdpAllowed(c); err != nil {
			return "", "", false, fmt.Errorf("--transport afxdp: %w", err)
		}
		return "afxdp", "asked with --transport afxdp --iface " + c.Iface, false, nil
	case "":
		if c.Iface == "" {
			return "kernel", "no --iface given", false, nil
		}
		if why := notEthernet(c.Iface); why != "" {
			return "kernel", "--iface " + c.Iface + " given but " + why, false, nil
		}
		if err := afxdpAllowed(c); err != nil {
			return "kernel", "--iface " + c.Iface + " given but this process may not use afxdp: " + err.Error(), false, nil
		}
		return "afxdp", "--iface " + c.Iface + " given and the process has the privileges (root or CAP_NET_ADMIN, CAP_BPF, CAP_PERFMON, CAP_NET_RAW)", true, nil
	}
	return "", "", false, fmt.Errorf("--transport %q: want kernel or afxdp", c.Transport)
}

// notEthernet says why iface cannot carry the afxdp transport when it is
// not an Ethernet device (ARPHRD_ETHER in /sys/class/net/IF/type): the
// user-space TCP sends Ethernet frames. "" when it is, or when unknown
// (the afxdp device then decides).
func notEthernet(iface string) string {
	b, err := os.ReadFile("/sys/class/net/" + iface + "/type")
	if err != nil {
		return ""
	}
	typ := strings.TrimSpace(string(b))
	if typ == "1" { // ARPHRD_ETHER
		return ""
	}
	kind := "link type " + typ
	if typ == "772" { // ARPHRD_LOOPBACK
		kind = "the loopback device"
	}
	return fmt.Sprintf("%s is not an Ethernet device (%s), and the afxdp transport needs one (use the kernel transport on loopback: --transport kernel, or leave out --iface)", iface, kind)
}

// afxdpAllowed checks the privileges and the locked-memory limit the afxdp
// transport needs.
func afxdpAllowed(c *config) error {
	if err := afxdp.Privileges(); err != nil {
		return err
	}
	return afxdp.Memlock(afxdp.Config{Iface: c.Iface, Queues: c.Queues, Mode: c.XDPMode})
}

func xdpConfig(c *config, log *slog.Logger) verbs.XDPConfig {
	return verbs.XDPConfig{Iface: c.Iface, Queues: c.Queues, Mode: c.XDPMode, Logger: log, LockDir: c.LockDir}
}

type region struct {
	spec regionSpec
	reg  *mem.Region
	mr   *verbs.MR
}

// daemon is a running xrnicd.
type daemon struct {
	cfg   config
	log   *slog.Logger
	dev   *verbs.Device
	pd    *verbs.PD
	state *control.State

	regions []region
	ln      *verbs.Listener
	httpSrv *control.HTTPServer
	httpLn  net.Listener
	sock    *control.SocketServer

	// rlog writes what peers can cause at will (refusals, accept errors)
	// at a bounded rate; the counters stay exact.
	rlog                           *rateLog
	httpStats, sockStats, mpaStats *control.ServerStats

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

	d = &daemon{cfg: cfg, log: log, rlog: newRateLog(log, logBurst, logWindow),
		httpStats: &control.ServerStats{Name: "metrics"}, sockStats: &control.ServerStats{Name: "control"}, mpaStats: &control.ServerStats{Name: "mpa"}}
	defer func() {
		if err != nil {
			d.release()
			d = nil
		}
	}()
	if err := d.planFDs(); err != nil {
		return d, err
	}
	cfg = d.cfg
	dc := verbs.DeviceConfig{Transport: transport, MaxQPs: cfg.MaxQPs, MaxORD: cfg.MaxORD, MaxIRD: cfg.MaxIRD, ConnTimeout: cfg.ConnTimeout,
		FPDUTimeout: cfg.FPDUTimeout, RequestTimeout: cfg.RequestTimeout, RxSpin: cfg.RxSpin}
	if transport == "afxdp" {
		dc.XDP = xdpConfig(&cfg, log)
		d.dev, err = verbs.Open(dc)
		// Another xrnic process on the interface, or more queues than it
		// has, are the operator's to resolve: no silent fallback.
		owned := errors.Is(err, verbs.ErrInUse) || errors.Is(err, verbs.ErrBadAttr)
		if err != nil && auto && !owned {
			log.Warn("afxdp unavailable; falling back to the kernel transport (--transport afxdp makes this fatal)", "iface", cfg.Iface, "err", err)
			transport, reason = "kernel", "afxdp chosen for --iface "+cfg.Iface+" but it failed: "+err.Error()
			dc.Transport, dc.XDP = "kernel", verbs.XDPConfig{}
		} else if owned {
			return d, fmt.Errorf("open the afxdp device on %s: %w", cfg.Iface, err)
		} else if err != nil {
			return d, fmt.Errorf("open the afxdp device on %s: %w (check `ip link show %s` for another XDP program; try --xdp-mode generic; or run with --transport kernel)", cfg.Iface, err, cfg.Iface)
		}
	}
	log.Info("transport chosen", "transport", transport, "reason", reason)
	if d.dev == nil {
		if d.dev, err = verbs.Open(dc); err != nil {
			return d, fmt.Errorf("open device: %w", err)
		}
	}
	if xi := d.dev.Attributes().XDP; xi != nil {
		log.Info("XDP attached", "iface", cfg.Iface, "ifindex", xi.Ifindex, "mode", xi.Mode, "mode_reason", xi.Reason,
			"zero_copy", xi.ZeroCopy, "queues", xi.Queues, "addr", xi.Addr.String(), "mtu", xi.MTU, "replaced", xi.Replaced)
	}
	if d.pd, err = d.dev.AllocPD(); err != nil {
		return d, fmt.Errorf("allocate the daemon's PD: %w", err)
	}
	d.state = control.NewState(d.dev)
	d.state.ReadyCheck = d.dev.Healthy // /readyz fails when the afxdp device lost its XDP attachment
	d.state.Transport = transport
	d.state.Version = version()
	d.ctx, d.cancel = context.WithCancel(context.Background())

	if err := d.allocRegions(); err != nil {
		return d, err
	}

	// Both transports listen through the engine: --allow is applied to
	// each connection before anything is read, and MPA Requests are read
	// in parallel, bounded by --conn-timeout each.
	network, where := "tcp", "--listen "+cfg.Listen
	if transport == "afxdp" {
		// The user-space TCP listens: the port is reserved in the kernel
		// and steered to our AF_XDP sockets.
		network, where = "tcp4", "--listen "+cfg.Listen+" (afxdp on "+cfg.Iface+")"
	}
	if d.ln, err = d.dev.ListenConfig(network, cfg.Listen, verbs.ListenConfig{Admit: d.allowed, OnSetupError: d.setupFailed,
		MaxSetup: cfg.MaxSetup, MaxSetupPerPeer: cfg.MaxSetupPeer}); err != nil {
		return d, startError(where, err)
	}
	d.state.Listen = d.ln.Addr().String()
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
		"crc", !cfg.NoCRC, "markers", cfg.Markers, "max_qps", cfg.MaxQPs, "max_setup", cfg.MaxSetup, "max_ord", cfg.MaxORD, "max_ird", cfg.MaxIRD)

	if cfg.Metrics != "" && cfg.Metrics != "off" {
		// A bad web config file fails start-up, not every scrape.
		if err := control.ValidateWebConfig(cfg.WebConfigFile); err != nil {
			return d, fmt.Errorf("--web.config.file %s: %w", cfg.WebConfigFile, err)
		}
		if d.httpLn, err = net.Listen("tcp", cfg.Metrics); err != nil {
			return d, startError("--metrics "+cfg.Metrics, err)
		}
		d.state.Metrics = d.httpLn.Addr().String()
		tcpSrc, xdpSrc := control.TransportSources(d.dev.Transport(), cfg.Iface)
		reg := control.NewRegistry(d.state, control.Options{TCP: tcpSrc, XDP: xdpSrc, Servers: []*control.ServerStats{d.httpStats, d.sockStats, d.mpaStats}})
		d.httpSrv = control.NewHTTPServer(d.httpLn, control.HTTPHandler(d.state, reg), control.ServerConfig{
			MaxConns: cfg.HTTPMaxConns, ReadTimeout: cfg.HTTPReadTimeout, WriteTimeout: cfg.HTTPWriteTimeout, IdleTimeout: cfg.HTTPIdle,
			Stats: d.httpStats, Log: d.rlog.Log})
		go d.httpSrv.ServeWebConfig(cfg.WebConfigFile, log.With("server", "metrics"))
		log.Info("serving metrics", "addr", d.state.Metrics, "paths", "/metrics /healthz /readyz", "max_conns", cfg.HTTPMaxConns,
			"read_timeout", cfg.HTTPReadTimeout, "write_timeout", cfg.HTTPWriteTimeout, "idle_timeout", cfg.HTTPIdle, "web_config", cfg.WebConfigFile)
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
	go d.sock.ServeConfig(control.APIHandler(d.state), control.DefaultPolicy(policyGID), control.ServerConfig{
		MaxConns: cfg.SocketMaxConns, ReadTimeout: cfg.SocketReadTimeout, WriteTimeout: cfg.SocketWriteTimeout, IdleTimeout: cfg.SocketIdle,
		Stats: d.sockStats, Log: d.rlog.Log})
	log.Info("control socket", "path", cfg.Socket, "mode", "0660", "max_conns", cfg.SocketMaxConns,
		"read_timeout", cfg.SocketReadTimeout, "write_timeout", cfg.SocketWriteTimeout, "idle_timeout", cfg.SocketIdle)

	d.wg.Add(1)
	go d.runAccept()
	d.state.SetReady(true)
	log.Info("xrnicd ready", "pid", os.Getpid(), "version", d.state.Version)
	d.notify("READY=1") // Type=notify: systemd starts the units after us now
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
	if d.cfg.Hugepages == "require" {
		// All regions at once: region by region, each error would name
		// only its own shortfall.
		size := mem.Size2M
		if ps == mem.Page1G {
			size = mem.Size1G
		}
		if err := hugepagesFor(d.cfg.Regions, size); err != nil {
			return err
		}
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
		mr, err := d.pd.RegMR(reg.Bytes()[:spec.Size], verbsAccess(spec.Access)|verbs.AccessLocalWrite|verbs.AccessZeroBased)
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

// hugepagesFor checks that the free hugepages of size page cover every
// region; nil when they do or the counts cannot be read (mem.Alloc then
// explains).
func hugepagesFor(regions []regionSpec, page int) error {
	need := 0
	for _, r := range regions {
		need += (r.Size + page - 1) / page
	}
	pool, err := mem.Hugepages(page)
	if err != nil {
		return nil
	}
	return hugepageShortfall(need, pool.Free, pool.Total, page, pool.NrFile)
}

// hugepageShortfall is the error of need pages against free of total
// reserved: the total to reserve, in the command that reserves it.
func hugepageShortfall(need, free, total, page int, nrFile string) error {
	if need <= free {
		return nil
	}
	name := "2 MiB"
	if page == mem.Size1G {
		name = "1 GiB"
	}
	free = max(free, 0)
	want := total + need - free
	fix := fmt.Sprintf("echo %d > %s", want, nrFile)
	if nrFile == "/proc/sys/vm/nr_hugepages" {
		fix += fmt.Sprintf(" (sysctl -w vm.nr_hugepages=%d)", want)
	}
	return fmt.Errorf("--hugepages require: the regions need %d %s pages, %d are free: %s, or start with --hugepages prefer to fall back to smaller pages",
		need, name, free, fix)
}

// verbsAccess maps --region rights (package mem) to verbs access flags.
func verbsAccess(a mem.Access) verbs.Access {
	var v verbs.Access
	if a&mem.RemoteRead != 0 {
		v |= verbs.AccessRemoteRead
	}
	if a&mem.RemoteWrite != 0 {
		v |= verbs.AccessRemoteWrite
	}
	if a&mem.RemoteAtomic != 0 {
		v |= verbs.AccessRemoteAtomic
	}
	return v
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

// runAccept takes the valid MPA Requests the listener has read and
// serves each on a goroutine of its own.
func (d *daemon) runAccept() {
	defer d.wg.Done()
	for {
		req, err := d.ln.Accept(d.ctx)
		if err != nil {
			if d.ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return
			}
			d.rlog.Log(slog.LevelWarn, "mpa-accept", "MPA accept failed", "err", err)
			time.Sleep(50 * time.Millisecond)
			continue
		}
		peer := fmt.Sprint(req.RemoteAddr)
		d.wg.Add(1)
		go func() {
			defer d.wg.Done()
			d.serveRequest(req, peer)
		}()
	}
}

// setupFailed counts and logs a connection that did not become an MPA
// Request (the listener's OnSetupError). The counts are exact; the log
// is rate-limited per kind (rateLog), since a peer causes these at will.
func (d *daemon) setupFailed(remote net.Addr, err error) {
	switch {
	case errors.Is(err, verbs.ErrRefused):
		d.state.CountRefused()
		d.rlog.Log(slog.LevelInfo, "mpa-refused-allow", "connection refused by --allow", "peer", addrString(remote))
	case errors.Is(err, verbs.ErrSetupFull):
		d.state.CountRefused()
		d.rlog.Log(slog.LevelWarn, "mpa-setup-full", "connection refused: too many connections in MPA setup, all with valid Requests",
			"peer", addrString(remote), "max_setup", d.cfg.MaxSetup, "max_setup_per_peer", d.cfg.MaxSetupPeer)
	case errors.Is(err, verbs.ErrSetupEvicted):
		d.state.CountRefused()
		d.rlog.Log(slog.LevelWarn, "mpa-setup-evicted", "connection reset in MPA setup: a newer connection took its slot (no Request yet)",
			"peer", addrString(remote), "max_setup", d.cfg.MaxSetup, "max_setup_per_peer", d.cfg.MaxSetupPeer)
	case remote == nil:
		d.mpaStats.CountAcceptError()
		d.rlog.Log(slog.LevelWarn, "mpa-accept", "MPA accept failed; retrying", "err", err)
	default:
		o := control.MPAMalformed
		if setupOutcome(err) == control.MPATimeout {
			o = control.MPATimeout
		}
		d.state.CountMPA(o)
		d.rlog.Log(slog.LevelInfo, "mpa-"+o.String(), "MPA request refused", "peer", addrString(remote), "outcome", o.String(), "err", err)
	}
}

// addrString formats a peer address without fmt's reflection ("" when
// unknown).
func addrString(a net.Addr) string {
	if a == nil {
		return ""
	}
	return a.String()
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
	qp       *verbs.QP
	scq, rcq *verbs.CQ
	mr       *verbs.MR
	sink     []byte // the receive buffers: mapped, not Go heap (newConn)
	state    *control.State
	// posted[i] is when buffer i was last (re)posted: written by post
	// before PostRecv, and by sunk, on the engine's receive path under
	// the QP's lock, for the buffer it reposts.
	posted []time.Time
	bufLen int
	sge    [1]verbs.SGE
	wr     verbs.RecvWR
}

// serveRequest answers a valid MPA Request: accept it onto a new QP in the
// daemon's PD and run its sink until the QP ends.
func (d *daemon) serveRequest(req *verbs.ConnRequest, peer string) {
	log := d.log.With("peer", peer)
	if (d.cfg.MPARev == "1" && req.MPARev != 1) || (d.cfg.MPARev == "2" && req.MPARev != 2) {
		req.Reject(nil)
		d.state.CountMPA(control.MPARejected)
		d.rlog.Log(slog.LevelInfo, "mpa-rejected-rev", "MPA request rejected", "peer", peer, "reason", "revision not accepted (--mpa-rev "+d.cfg.MPARev+")", "rev", req.MPARev)
		return
	}
	release, ok := d.peers.acquire(peer, d.cfg.MaxQPsPerPeer)
	if !ok {
		req.Reject(nil)
		d.state.CountMPA(control.MPARejected)
		d.rlog.Log(slog.LevelWarn, "mpa-rejected-peer-qps", "MPA request rejected", "peer", peer, "reason", "the peer has --max-qps-per-peer QPs", "max_qps_per_peer", d.cfg.MaxQPsPerPeer)
		return
	}
	defer release()
	c, err := d.newConn()
	if err != nil {
		req.Reject(nil)
		d.state.CountMPA(control.MPARejected)
		d.rlog.Log(slog.LevelWarn, "mpa-rejected-resources", "MPA request rejected", "peer", peer, "reason", err)
		return
	}
	d.state.AddQP(c.qp, peer)
	defer d.closeConn(c)
	err = req.Accept(d.ctx, c.qp, verbs.ConnParam{NoCRC: d.cfg.NoCRC, Markers: d.cfg.Markers, RTR: d.cfg.RTR, RequiredORD: d.cfg.RequiredORD})
	if err != nil {
		o := setupOutcome(err)
		d.state.CountMPA(o)
		d.rlog.Log(slog.LevelInfo, "mpa-setup-failed", "MPA setup failed", "peer", peer, "outcome", o.String(), "err", err)
		return
	}
	d.state.CountMPA(control.MPAAccepted)
	ci := c.qp.ConnInfo()
	log.Info("QP established", "qp", c.qp.Num(), "mpa_rev", ci.MPARev, "crc", ci.CRC, "ird", ci.IRD, "ord", ci.ORD, "peer_to_peer", ci.PeerToPeer)
	d.runSink(c, log)
}

// newConn creates a QP in the daemon's PD with its receive buffers posted.
//
// The receive queue is a sink that reposts itself (verbs.QPAttr.RecvSink):
// the engine hands each Send, Immediate Data and Write with Immediate to
// sunk and puts its buffer back at once, on its receive path, before it
// looks at the next message. So --sink-depth receives stay posted whether
// or not any goroutine of ours is scheduled, and a peer that keeps at most
// --sink-depth messages unacknowledged (SECURITY.md) never meets an empty
// queue: no Terminate DDP 1/2/0x02 because the daemon fell behind.
func (d *daemon) newConn() (*conn, error) {
	c := &conn{bufLen: d.cfg.SinkBuffer, posted: make([]time.Time, d.cfg.SinkDepth), state: d.state}
	var err error
	if c.scq, err = d.dev.CreateCQ(4); err != nil {
		return nil, err
	}
	if c.rcq, err = d.dev.CreateCQ(d.cfg.SinkDepth); err != nil {
		c.scq.Close()
		return nil, err
	}
	c.qp, err = d.pd.CreateQP(verbs.QPAttr{SendCQ: c.scq, RecvCQ: c.rcq, SQDepth: 4, RQDepth: d.cfg.SinkDepth, MaxSGE: 1,
		RecvSink: c.sunk})
	if err != nil {
		c.rcq.Close()
		c.scq.Close()
		return nil, err
	}
	// Anonymous memory, not the Go heap: pages nobody writes to cost no
	// RSS either way, but 256 KiB of them per QP in the heap (the defaults)
	// would raise the GC's goal by as much, and thousands of idle QPs
	// would let that much garbage pile up, all of it touched.
	if c.sink, err = unix.Mmap(-1, 0, d.cfg.SinkDepth*d.cfg.SinkBuffer, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS); err != nil {
		c.qp.Close()
		c.rcq.Close()
		c.scq.Close()
		return nil, fmt.Errorf("map the sink buffers: %w", err)
	}
	if c.mr, err = d.pd.RegMRForQP(c.sink, verbs.AccessLocalWrite|verbs.AccessZeroBased, c.qp); err != nil {
		c.qp.Close()
		unix.Munmap(c.sink)
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
	c.sge[0] = c.mr.SGE(int(id)*c.bufLen, c.bufLen)
	c.wr = verbs.RecvWR{ID: id, SGL: c.sge[:]}
	return c.qp.PostRecv(&c.wr)
}

// sunk counts a message the sink received (the QP's RecvSink: called on
// the engine's receive path under the QP's lock, the buffer already
// reposted; it takes no lock of ours and allocates nothing).
func (c *conn) sunk(e verbs.Completion) {
	c.count(&e, time.Now())
}

// count records a received message: its kind and bytes, and how long its
// buffer waited posted; buffer e.ID is posted again from now.
func (c *conn) count(e *verbs.Completion, now time.Time) {
	if e.ID < uint64(len(c.posted)) {
		c.state.Latency.Observe(control.QueueRecv, e.Op, now.Sub(c.posted[e.ID]))
		c.posted[e.ID] = now
	}
	switch e.Op {
	case verbs.OpRecvImm:
		c.state.CountSink(control.SinkImmediate, e.ByteLen)
	case verbs.OpRecvWriteImm:
		c.state.CountSink(control.SinkWriteImmediate, e.ByteLen)
	default:
		c.state.CountSink(control.SinkSend, e.ByteLen)
	}
}

// runSink waits until the QP stops (a flushed or failed receive) or the
// daemon shuts down. The messages themselves are counted, and their
// buffers reposted, by the engine's receive path (newConn, sunk); what
// reaches the receive CQ is each buffer's last completion (flushed, or
// failed: the QP ends) and, in principle, a receive the engine does not
// repost itself (one reporting a remote invalidation, which the daemon's
// registrations never allow), reposted here.
func (d *daemon) runSink(c *conn, log *slog.Logger) {
	wc := make([]verbs.Completion, 32)
	for {
		if err := c.rcq.Wait(d.ctx); err != nil {
			return
		}
		n := c.rcq.Poll(wc)
		dead := false
		for i := range wc[:n] {
			e := &wc[i]
			if e.Status != verbs.StatusSuccess {
				if !dead && e.Status != verbs.StatusWRFlushErr {
					log.Info("QP receive failed", "qp", c.qp.Num(), "status", e.Status.String(), "err", e.Err)
				}
				dead = true
				continue
			}
			c.count(e, time.Now())
			if !dead && c.post(e.ID) != nil {
				dead = true
			}
		}
		if dead {
			var te *term.Error
			if err := c.qp.Err(); errors.As(err, &te) && te != term.MPAConnectionLost {
				// (closeConn's QP.Close lets tx deliver a Terminate we
				// send before the connection is closed.)
				log.Info("QP closed by error", "qp", c.qp.Num(), "terminate", te.String())
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
	if c.mr.Dereg() == nil {
		unix.Munmap(c.sink) // the engine no longer touches it
	}
	c.rcq.Close()
	c.scq.Close()
}

// shutdown stops accepting, closes every QP, releases memory and removes
// the control socket.
func (d *daemon) shutdown() {
	d.state.SetReady(false)
	d.log.Info("shutting down: no new connections; closing QPs")
	d.notify("STOPPING=1")
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
	d.rlog.Flush()
	d.log.Info("xrnicd stopped")
}

func (d *daemon) closeListener() {
	if d.ln != nil {
		d.ln.Close()
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
		r.mr.Dereg()
		r.reg.Close()
	}
	d.regions = nil
	if d.state != nil {
		d.state.ClearRegions()
	}
}
