package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"time"

	"golang.org/x/sys/unix"

	"xrnic/afxdp"
	"xrnic/bpf"
	"xrnic/wire/eth"
	"xrnic/wire/ipv4"
	"xrnic/wire/tcp"
)

// xdp_lat is the physical-limit baseline below tcp_lat: a ping-pong of raw
// frames between two AF_XDP sockets of the afxdp package, with neither
// kernel TCP nor iWARP in the data path. Each side loads the steering
// program (bpf/xdp.c) on --iface, which redirects IPv4/TCP frames to a
// listen port in its map to the AF_XDP socket of the receive queue; the
// frames are TCP-shaped (Ethernet, IPv4, a 20-byte TCP header with valid
// checksums, -s bytes of payload) from and to the data port, -p + 1, on
// both sides, and the TCP sequence number carries the iteration. The
// server echoes each frame from its own socket (addresses and ports
// swapped, which keeps the checksums valid). A kernel TCP connection on -p
// carries the parameters and the server's MAC, never a measured frame.
//
// The report is tcp_lat's: with -o 1 perftest's latency columns, half a
// round trip (rtt_factor 2); with -o N, N frames in flight, the frame rate
// (MsgRate, Mops/s) and the mean full round trip (rtt_factor 1). #bytes is
// the TCP payload of a frame.

// xdpReserve frames of an xdp_lat socket stay out of the fill ring, for
// transmission.
const xdpReserve = 1024

var xdpSockOpts = afxdp.SocketOptions{RXSize: 2048, FillSize: 2048, TXSize: 1024, CompletionSize: 2048, Frames: 2048 + xdpReserve}

// xdpHeaders is Ethernet + IPv4 + TCP without options.
const xdpHeaders = eth.HeaderLen + ipv4.MinHeaderLen + tcp.MinHeaderLen

// xdpMaxPayload bounds -s: a frame fits one 4096-byte chunk.
const xdpMaxPayload = 4096 - xdpHeaders

// xdpEnd is one side's steering program, attachment and sockets.
type xdpEnd struct {
	prog    *bpf.Program
	att     *bpf.Attachment
	umem    *afxdp.UMEM
	socks   []*afxdp.Socket
	mac     eth.MAC
	batch   []afxdp.Desc
	tx      []afxdp.Desc
	reserve int           // frames of a socket kept out of the fill ring
	spin    time.Duration // wait spins at least this long before it sleeps
}

// xdpPingSpin is how long the ends of xdp_lat -o 1 spin before they
// sleep.
const xdpPingSpin = time.Millisecond

// xdpOpenOptions say how an end uses its sockets.
type xdpOpenOptions struct {
	// reserve frames of each socket stay out of the fill ring, for
	// transmission (the rest wait there for received frames).
	reserve int
	// multiBuffer asks for XDP_USE_SG: frames may span several UMEM
	// chunks (the socket falls back to single-buffer where the kernel
	// refuses; Socket.MultiBuffer tells).
	multiBuffer bool
}

// openXDP attaches the steering program to iface, steering TCP port
// port to one AF_XDP socket per receive queue; test names the test in the
// error without root. close undoes all of it.
func openXDP(test, iface string, port uint16, o xdpOpenOptions) (_ *xdpEnd, err error) {
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("%s needs root: it attaches an XDP program and opens AF_XDP sockets (CAP_NET_ADMIN, CAP_NET_RAW and CAP_BPF)", test)
	}
	ifi, err := net.InterfaceByName(iface)
	if err != nil {
		return nil, fmt.Errorf("--iface %s: %w", iface, err)
	}
	e := &xdpEnd{batch: make([]afxdp.Desc, 64), tx: make([]afxdp.Desc, 64), reserve: o.reserve}
	copy(e.mac[:], ifi.HardwareAddr)
	defer func() {
		if err != nil {
			e.close()
		}
	}()
	queues := rxQueues(iface)
	if e.prog, err = bpf.Load(bpf.Options{MaxQueues: max(queues, 1)}); err != nil {
		return nil, err
	}
	if e.umem, err = afxdp.NewUMEM(afxdp.UMEMOptions{Frames: queues * xdpSockOpts.Frames}); err != nil {
		return nil, err
	}
	so := xdpSockOpts
	so.MultiBuffer = o.multiBuffer
	for q := range queues {
		s, err := e.umem.Open(ifi.Index, q, so)
		// The kernel releases the queue of a closed AF_XDP socket a
		// little later (deferred work): a run right after another one
		// may find it busy for a moment.
		for start := time.Now(); errors.Is(err, unix.EBUSY) && time.Since(start) < 3*time.Second; {
			time.Sleep(20 * time.Millisecond)
			s, err = e.umem.Open(ifi.Index, q, so)
		}
		if err != nil {
			return nil, err
		}
		e.socks = append(e.socks, s)
		if err := e.prog.SetSocket(q, s.Fd()); err != nil {
			return nil, err
		}
		s.Refill(s.FreeFrames() - e.reserve)
	}
	if err := e.prog.AddListen(port); err != nil {
		return nil, err
	}
	if e.att, err = e.prog.Attach(bpf.AttachOptions{Ifindex: ifi.Index, Logger: slog.New(slog.DiscardHandler)}); err != nil {
		return nil, err
	}
	return e, nil
}

// rxQueues counts the receive queues of iface (1 when sysfs does not say).
func rxQueues(iface string) int {
	m, _ := filepath.Glob(filepath.Join("/sys/class/net", iface, "queues", "rx-*"))
	return max(len(m), 1)
}

// close detaches the program first, then closes the sockets and memory.
func (e *xdpEnd) close() {
	if e.att != nil {
		e.att.Close()
	}
	for _, s := range e.socks {
		s.Close()
	}
	if e.umem != nil {
		e.umem.Close()
	}
	if e.prog != nil {
		e.prog.Close()
	}
}

// describe is the banner's line on the data path.
func (e *xdpEnd) describe() string {
	return fmt.Sprintf("XDP %v (%s), %d AF_XDP socket(s), zero-copy=%v, multi-buffer=%v", e.att.Mode, e.att.Reason, len(e.socks), e.socks[0].ZeroCopy(), e.socks[0].MultiBuffer())
}

// errXDPIdle: no frame arrived for --timeout.
var errXDPIdle = errors.New("no frame for the --timeout (lost frames?)")

// wait spins on the RX rings, then sleeps in poll, until a frame arrives,
// ctx ends or deadline passes; it returns the socket with frames and how
// many are in e.batch. It spins 2000 polls, and at least e.spin: the
// ping-pong (-o 1) spins xdpPingSpin on both ends, so that in a running
// ping-pong it never sleeps (sleeping in poll(2) after 2000 polls
// measured the wake-up, ~15 µs of every half round trip between two
// processes here). The pipeline (-o N) keeps the short spin: with a
// long one, frames went missing at -o 16 on this veth (not understood
// yet; see docs/PERFORMANCE.md).
func (e *xdpEnd) wait(ctx context.Context, deadline time.Time) (*afxdp.Socket, int, error) {
	start := time.Now()
	for spin := 0; ; spin++ {
		for _, s := range e.socks {
			if n := s.Receive(e.batch); n > 0 {
				return s, n, nil
			}
			s.Complete()
		}
		if spin < 2000 {
			continue
		}
		for _, s := range e.socks {
			// Frames the kernel completed after the last recycle go
			// to the fill ring here: only a received frame triggers a
			// recycle, and a drained fill ring receives none.
			s.Refill(s.FreeFrames() - e.reserve)
		}
		if err := ctx.Err(); err != nil {
			return nil, 0, err
		}
		now := time.Now()
		if now.After(deadline) {
			return nil, 0, errXDPIdle
		}
		if now.Sub(start) < e.spin {
			runtime.Gosched()
			spin = 0
			continue
		}
		if len(e.socks) == 1 {
			e.socks[0].Poll(1)
		} else {
			time.Sleep(50 * time.Microsecond)
		}
		spin = 0
	}
}

// recycle gives the frames of d back and refills.
func (e *xdpEnd) recycle(s *afxdp.Socket, d []afxdp.Desc) {
	s.Free(d)
	s.Refill(s.FreeFrames() - e.reserve)
}

// transmit queues d whole on s, completing and kicking while the ring is
// full.
func transmit(s *afxdp.Socket, d []afxdp.Desc) {
	for len(d) > 0 {
		k := s.Transmit(d)
		d = d[k:]
		if len(d) > 0 {
			s.Complete()
			s.Kick()
		}
	}
}

// echo sends back the steered frames as they come, until stop is
// closed (the client is done) or no frame came for timeout.
func (e *xdpEnd) echo(ctx context.Context, stop <-chan struct{}, timeout time.Duration) error {
	lastRx := time.Now()
	for {
		s, n, err := e.wait(ctx, time.Now().Add(xdpLossWait))
		if errors.Is(err, errXDPIdle) {
			select {
			case <-stop:
				return nil
			default:
			}
			if time.Since(lastRx) > timeout {
				return err
			}
			continue
		}
		if err != nil {
			return err
		}
		lastRx = time.Now()
		s.Complete()
		k := 0
		for _, d := range e.batch[:n] {
			in := s.Frame(d)
			if len(in) < xdpHeaders {
				continue
			}
			for s.Alloc(e.tx[k:k+1]) == 0 {
				s.Kick()
				s.Complete()
			}
			out := s.Frame(e.tx[k])
			copy(out, in)
			swapAddrs(out)
			e.tx[k].Len = uint32(len(in))
			k++
		}
		e.recycle(s, e.batch[:n])
		transmit(s, e.tx[:k])
	}
}

// swapAddrs turns a frame around: MACs, IPv4 addresses and TCP ports
// (the one's complement sums do not change).
func swapAddrs(b []byte) {
	var m [6]byte
	copy(m[:], b[0:6])
	copy(b[0:6], b[6:12])
	copy(b[6:12], m[:])
	ip := b[eth.HeaderLen:]
	var a [4]byte
	copy(a[:], ip[12:16])
	copy(ip[12:16], ip[16:20])
	copy(ip[16:20], a[:])
	th := ip[ipv4.MinHeaderLen:]
	sp := binary.BigEndian.Uint16(th[0:])
	copy(th[0:2], th[2:4])
	binary.BigEndian.PutUint16(th[2:], sp)
}

// xdpFlow is the client's frame template.
type xdpFlow struct {
	tmpl     []byte
	src, dst [4]byte
}

// newXDPFlow builds the template of a frame of size payload bytes.
func newXDPFlow(srcMAC, dstMAC eth.MAC, src, dst [4]byte, port uint16, size int) (*xdpFlow, error) {
	b := make([]byte, xdpHeaders+size)
	n, err := eth.Put(b, dstMAC, srcMAC, eth.TypeIPv4)
	if err != nil {
		return nil, err
	}
	seg := tcp.MinHeaderLen + size
	ih, err := ipv4.Put(b[n:], &ipv4.Fields{TotalLen: uint16(ipv4.MinHeaderLen + seg), TTL: 64, Flags: ipv4.FlagDF, Protocol: ipv4.ProtoTCP, Src: src, Dst: dst})
	if err != nil {
		return nil, err
	}
	n += ih
	if _, err := tcp.Put(b[n:], &tcp.Fields{SrcPort: port, DstPort: port, Flags: tcp.FlagACK, Window: 65535}, nil); err != nil {
		return nil, err
	}
	for j := range size {
		b[xdpHeaders+j] = pattern(0, j)
	}
	return &xdpFlow{tmpl: b, src: src, dst: dst}, nil
}

// put writes frame seq into b and returns its length.
func (f *xdpFlow) put(b []byte, seq uint32) uint32 {
	copy(b, f.tmpl)
	th := tcp.Header(b[eth.HeaderLen+ipv4.MinHeaderLen : len(f.tmpl)])
	th.SetSeq(tcp.Seq(seq))
	th.UpdateChecksum(tcp.PseudoHeaderSum(f.src, f.dst, len(th)))
	return uint32(len(f.tmpl))
}

// xdpSeq is the sequence number of an echoed frame of the flow (false:
// not one).
func xdpSeq(b []byte, size int) (uint32, bool) {
	if len(b) != xdpHeaders+size || binary.BigEndian.Uint16(b[12:]) != uint16(eth.TypeIPv4) {
		return 0, false
	}
	return binary.BigEndian.Uint32(b[eth.HeaderLen+ipv4.MinHeaderLen+4:]), true
}

// pingPong is -o 1: stamps[i] is when frame i was sent.
func (e *xdpEnd) pingPong(ctx context.Context, f *xdpFlow, size, iters int, timeout time.Duration) ([]int64, error) {
	stamps := make([]int64, iters)
	s := e.socks[0]
	base := time.Now()
	for i := range iters {
		for s.Alloc(e.tx[:1]) == 0 {
			s.Kick()
			s.Complete()
		}
		e.tx[0].Len = f.put(s.Frame(e.tx[0]), uint32(i))
		stamps[i] = int64(time.Since(base))
		transmit(s, e.tx[:1])
		got := false
		for !got {
			rs, n, err := e.wait(ctx, time.Now().Add(timeout))
			if err != nil {
				return nil, fmt.Errorf("frame %d of %d: %w", i, iters, err)
			}
			for _, d := range e.batch[:n] {
				if seq, ok := xdpSeq(rs.Frame(d), size); ok {
					if seq != uint32(i) {
						return nil, fmt.Errorf("xdp_lat: echo of frame %d while waiting for %d", seq, i)
					}
					got = true
				}
			}
			e.recycle(rs, e.batch[:n])
		}
	}
	return stamps, nil
}

// pipeline is -o N: up to outs frames in flight, one goroutine (the
// sockets' owner) sending and receiving.
func (e *xdpEnd) pipeline(ctx context.Context, f *xdpFlow, size, iters, outs int, timeout time.Duration) (TCPPipeResult, error) {
	sent := make([]int64, iters)
	done := make([]int64, iters)
	s := e.socks[0]
	base := time.Now()
	next, got, lost := 0, 0, 0
	lastRx := time.Now()
	for got+lost < iters {
		if k := min(outs-(next-got-lost), iters-next, len(e.tx)); k > 0 {
			k = s.Alloc(e.tx[:k])
			now := int64(time.Since(base))
			for j := range k {
				e.tx[j].Len = f.put(s.Frame(e.tx[j]), uint32(next+j))
				sent[next+j] = now
			}
			transmit(s, e.tx[:k])
			next += k
		}
		rs, n, err := e.wait(ctx, time.Now().Add(xdpLossWait))
		if errors.Is(err, errXDPIdle) {
			// Raw frames have no retransmission: the ones not back
			// by now are lost (a late echo is ignored); their slots
			// go back to the window. Nothing back for --timeout is
			// an error.
			if time.Since(lastRx) > timeout {
				return TCPPipeResult{}, fmt.Errorf("%d of %d frames echoed: %w", got, iters, err)
			}
			for i := range next {
				if done[i] == 0 {
					done[i], lost = -1, lost+1
				}
			}
			continue
		}
		if err != nil {
			return TCPPipeResult{}, fmt.Errorf("%d of %d frames echoed: %w", got, iters, err)
		}
		lastRx = time.Now()
		now := int64(time.Since(base))
		for _, d := range e.batch[:n] {
			seq, ok := xdpSeq(rs.Frame(d), size)
			if !ok {
				continue
			}
			if int(seq) >= next || done[seq] > 0 {
				return TCPPipeResult{}, fmt.Errorf("xdp_lat: unexpected echo of frame %d (%d sent)", seq, next)
			}
			if done[seq] < 0 {
				continue // counted lost already
			}
			done[seq] = now
			got++
		}
		e.recycle(rs, e.batch[:n])
	}
	// The arithmetic over the frames that came back.
	var okSent, okDone []int64
	last := int64(0)
	for i, d := range done {
		if d > 0 {
			okSent, okDone = append(okSent, sent[i]), append(okDone, d)
			last = max(last, d)
		}
	}
	r := computePipe(size, outs, okSent, okDone)
	r.Iters, r.Lost = iters, lost
	if total := last - sent[0]; total > 0 { // frames of several queues may come back out of order
		r.MsgRate = float64(got) / (float64(total) / 1e9) / 1e6
	}
	return r, nil
}

// xdpLossWait: a pipelined frame not echoed this long after the last
// echo is lost.
const xdpLossWait = 5 * time.Millisecond

// The control exchange of xdp_lat and xdp_bw on the kernel TCP connection
// of -p: the client sends its test's 8-byte hello, the server answers it
// with its MAC (16 bytes); then per size a 24-byte header (kind, size,
// count) and the test's own replies; a header of kind 0 ends the run.
var (
	xdpLatHello = [8]byte{'X', 'D', 'P', 'L', 'A', 'T', '1', 0}
	xdpBWHello  = [8]byte{'X', 'D', 'P', 'B', 'W', '1', 0, 0}
)

// xdpClient is the client's end after the control exchange.
type xdpClient struct {
	c        net.Conn
	e        *xdpEnd
	src, dst net.IP // our and the server's IPv4 address
	srvMAC   eth.MAC
	port     uint16 // the data port
}

// dialXDP connects to the server's control port, opens this end and
// learns the server's MAC.
func dialXDP(ctx context.Context, p *params, hello [8]byte, o xdpOpenOptions) (_ *xdpClient, err error) {
	c, err := dialControl(ctx, p)
	if err != nil {
		return nil, err
	}
	x := &xdpClient{c: c, port: uint16(p.port + 1)}
	defer func() {
		if err != nil {
			x.close()
		}
	}()
	x.src, x.dst = c.LocalAddr().(*net.TCPAddr).IP.To4(), c.RemoteAddr().(*net.TCPAddr).IP.To4()
	if x.src == nil || x.dst == nil {
		return nil, fmt.Errorf("%s: %v: IPv4 only", p.test.name, c.RemoteAddr())
	}
	if x.e, err = openXDP(p.test.name, p.iface, x.port, o); err != nil {
		return nil, err
	}
	if _, err := c.Write(hello[:]); err != nil {
		return nil, err
	}
	var reply [16]byte
	if _, err := io.ReadFull(c, reply[:]); err != nil {
		return nil, fmt.Errorf("%s: server setup: %w", p.test.name, err)
	}
	if [8]byte(reply[:8]) != hello {
		return nil, fmt.Errorf("%s: the server is not an %s server", p.test.name, p.test.name)
	}
	x.srvMAC = eth.MAC(reply[8:14])
	return x, nil
}

func (x *xdpClient) close() {
	if x.e != nil {
		x.e.close()
	}
	x.c.Close()
}

// flow is the frame template of size payload bytes from us to the server.
func (x *xdpClient) flow(size int) (*xdpFlow, error) {
	return newXDPFlow(x.e.mac, x.srvMAC, [4]byte(x.src), [4]byte(x.dst), x.port, size)
}

// banner prints the test's title and the flow unless --quiet.
func (x *xdpClient) banner(out io.Writer, p *params, title string) {
	if p.quiet {
		return
	}
	fmt.Fprintf(out, "%s\n                    %s (raw AF_XDP frames, no TCP or iWARP)\n", resultLine, title)
	fmt.Fprintf(out, " Flow            : %v -> %v, TCP port %d, %s -> %s\n", x.src, x.dst, x.port, net.HardwareAddr(x.e.mac[:]), net.HardwareAddr(x.srvMAC[:]))
	fmt.Fprintf(out, " Data path       : %s\n", x.e.describe())
	if mtu := ifaceMTU(p.iface); mtu > 0 {
		fmt.Fprintf(out, " Mtu             : %d[B]\n", mtu)
	}
	fmt.Fprintln(out, resultLine)
}

// header sends the header of one size (kind 'X' or 'W'): the size, the
// count and the frames in flight.
func (x *xdpClient) header(kind byte, size, count, outs int) error {
	var hdr [24]byte
	hdr[0] = kind
	binary.BigEndian.PutUint32(hdr[4:], uint32(size))
	binary.BigEndian.PutUint64(hdr[8:], uint64(count))
	binary.BigEndian.PutUint64(hdr[16:], uint64(outs))
	_, err := x.c.Write(hdr[:])
	return err
}

// bye ends the run.
func (x *xdpClient) bye() { x.c.Write(make([]byte, 24)) }

// acceptXDP is the server's side of the exchange: it opens this end,
// accepts one client on -p and answers its hello. done closes all of it;
// ctx ending closes the listener and the connection.
func acceptXDP(ctx context.Context, p *params, out io.Writer, hello [8]byte, o xdpOpenOptions) (net.Conn, *xdpEnd, func(), error) {
	e, err := openXDP(p.test.name, p.iface, uint16(p.port+1), o)
	if err != nil {
		return nil, nil, nil, err
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(p.bind, fmt.Sprint(p.port)))
	if err != nil {
		e.close()
		return nil, nil, nil, err
	}
	var c net.Conn
	stop := make(chan struct{})
	done := func() {
		close(stop)
		ln.Close()
		if c != nil {
			c.Close()
		}
		e.close()
	}
	fail := func(err error) (net.Conn, *xdpEnd, func(), error) {
		done()
		if ctx.Err() != nil {
			err = ctx.Err()
		}
		return nil, nil, nil, err
	}
	if !p.quiet {
		fmt.Fprintf(out, " %s server: control on %v, frames to TCP port %d on %s (%s)\n", p.test.name, ln.Addr(), p.port+1, p.iface, e.describe())
	}
	go func() {
		select {
		case <-ctx.Done():
		case <-stop:
		}
		ln.Close()
	}()
	if c, err = ln.Accept(); err != nil {
		return fail(err)
	}
	go func(c net.Conn) {
		select {
		case <-ctx.Done():
		case <-stop:
		}
		c.Close()
	}(c)
	var h [16]byte
	if _, err := io.ReadFull(c, h[:8]); err != nil {
		return fail(err)
	}
	if [8]byte(h[:8]) != hello {
		return fail(fmt.Errorf("%s: the client is not an %s client", p.test.name, p.test.name))
	}
	copy(h[8:], e.mac[:])
	if _, err := c.Write(h[:]); err != nil {
		return fail(err)
	}
	return c, e, done, nil
}

// readHeader reads the next per-size header: ok false at the end of the
// run.
func readHeader(c net.Conn, kind byte) (size, count, outs int, ok bool, err error) {
	var hdr [24]byte
	if _, err := io.ReadFull(c, hdr[:]); err != nil {
		return 0, 0, 0, false, err
	}
	switch hdr[0] {
	case 0:
		return 0, 0, 0, false, nil
	case kind:
	default:
		return 0, 0, 0, false, errors.New("xdp: bad header")
	}
	return int(binary.BigEndian.Uint32(hdr[4:])), int(binary.BigEndian.Uint64(hdr[8:])), int(binary.BigEndian.Uint64(hdr[16:])), true, nil
}

func runXDP(ctx context.Context, p *params, out io.Writer) error {
	if p.test.name == "xdp_bw" {
		return runXDPBW(ctx, p, out)
	}
	if p.duration > 0 {
		return errors.New("xdp_lat: -D is not supported (use -n)")
	}
	o := xdpOpenOptions{reserve: xdpReserve}
	if p.server == "" {
		return xdpServe(ctx, p, out, o)
	}
	x, err := dialXDP(ctx, p, xdpLatHello, o)
	if err != nil {
		return err
	}
	defer x.close()
	x.banner(out, p, "XDP Latency Test")
	pipe := p.outs > 1
	if pipe {
		fmt.Fprintln(out, pipeHeader)
	} else {
		fmt.Fprintln(out, latHeader)
		x.e.spin = xdpPingSpin
	}
	var results []any
	for _, size := range p.sizes() {
		f, err := x.flow(size)
		if err != nil {
			return err
		}
		if err := x.header('X', size, p.iters, p.outs); err != nil {
			return err
		}
		var ack [1]byte
		if _, err := io.ReadFull(x.c, ack[:]); err != nil { // the server is ready
			return err
		}
		if pipe {
			r, err := x.e.pipeline(ctx, f, size, p.iters, p.outs, p.timeout)
			if err != nil {
				return err
			}
			fmt.Fprintln(out, r.line())
			if r.Lost > 0 {
				fmt.Fprintf(out, " Lost frames     : %d of %d (not echoed within %v; the rate and round trip count the others)\n", r.Lost, r.Iters, xdpLossWait)
			}
			results = append(results, r)
		} else {
			stamps, err := x.e.pingPong(ctx, f, size, p.iters, p.timeout)
			if err != nil {
				return err
			}
			r := computeLat(size, stamps, 2)
			fmt.Fprintln(out, r.line())
			results = append(results, r)
		}
		if _, err := x.c.Write(ack[:]); err != nil { // done
			return err
		}
		if _, err := io.ReadFull(x.c, ack[:]); err != nil { // the server stopped echoing
			return err
		}
	}
	x.bye()
	fmt.Fprintln(out, resultLine)
	return writeResults(p, results)
}

func xdpServe(ctx context.Context, p *params, out io.Writer, o xdpOpenOptions) error {
	c, e, done, err := acceptXDP(ctx, p, out, xdpLatHello, o)
	if err != nil {
		return err
	}
	defer done()
	for {
		_, _, outs, ok, err := readHeader(c, 'X')
		if err != nil || !ok {
			return err
		}
		e.spin = 0
		if outs <= 1 {
			e.spin = xdpPingSpin
		}
		if _, err := c.Write([]byte{1}); err != nil {
			return err
		}
		// The client's done arrives on the control connection while
		// we echo: frames may be lost, so the count does not say it.
		stop, rerr := make(chan struct{}), make(chan error, 1)
		go func() {
			var b [1]byte
			_, err := io.ReadFull(c, b[:])
			close(stop)
			rerr <- err
		}()
		if err := e.echo(ctx, stop, p.timeout); err != nil {
			return err
		}
		if err := <-rerr; err != nil {
			return err
		}
		if _, err := c.Write([]byte{1}); err != nil {
			return err
		}
	}
}
