package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"time"

	"xrnic/afxdp"
	"xrnic/wire/ipv4"
	"xrnic/wire/tcp"
)

// xdp_bw is the physical-limit baseline below write_bw: a one-way stream
// of full-size raw frames between two AF_XDP sockets of the afxdp package,
// with neither kernel TCP nor iWARP in the data path, set up as xdp_lat
// (the steering program on --iface of both ends, TCP-shaped frames to the
// data port -p + 1, the control connection on -p).
//
// The client blasts: it writes the frame template into every UMEM chunk
// of its socket once, then only queues descriptors, as fast as the TX
// ring and the kernel take them, for -n frames or -D seconds; nothing is
// paced. The payload is not rewritten per frame (the receiver counts, it
// does not check), so the stream measures the AF_XDP path itself: the
// descriptor rings, the wakeups and the kernel's copy-mode transmission
// and reception. Frames larger than a 4096-byte chunk (MTU 9000) are
// multi-buffer packets (XDP_USE_SG): a run of chunks, every one but the
// last with XDP_PKT_CONTD (afxdp.OptMore); where the kernel refuses
// multi-buffer sockets the default frame is the largest single-buffer one
// and the banner and JSON say so.
//
// The server counts the packets and bytes that arrive and, when the
// client says it is done (and how many it sent), drains the RX ring until
// it has them all or the ring stayed empty for xdpBWQuiet, and reports
// its counts, the time from its first to its last frame and the socket's
// drop counters. The bandwidth (MiB/s of TCP payload, #bytes per frame,
// as write_bw counts payload) and the frame rate (MsgRate, Mpps) are the
// receiver's, over that window; #iterations is the frames sent.

// xdpBWQuiet is how long the server waits for more frames after the
// client's done before it reports.
const xdpBWQuiet = 100 * time.Millisecond

// xdpIPTCP is the IPv4 and TCP headers of a frame: the MTU less this is
// the payload of a full-size frame.
const xdpIPTCP = ipv4.MinHeaderLen + tcp.MinHeaderLen

// xdpBWDefaultFrames is -n's default for xdp_bw.
const xdpBWDefaultFrames = 1000000

// XDPBWResult is one line of xdp_bw: perftest's bandwidth keys (BW_peak
// is not measured: 0) measured at the receiver, and the counts behind
// them.
type XDPBWResult struct {
	Size       int     `json:"MsgSize"`      // TCP payload of a frame
	Iters      int     `json:"n_iterations"` // frames sent
	Peak       float64 `json:"BW_peak"`
	Average    float64 `json:"BW_average"` // payload received, in Unit
	MsgRate    float64 `json:"MsgRate"`    // frames received, Mpps
	Unit       string  `json:"unit"`
	Received   int     `json:"frames_received"`
	FrameLen   int     `json:"frame_bytes"`       // Ethernet frame (no FCS)
	Buffers    int     `json:"buffers_per_frame"` // UMEM chunks per frame
	MultiBuf   bool    `json:"multi_buffer"`
	TXRate     float64 `json:"tx_MsgRate"` // frames the client queued per second until the last completion, Mpps
	RXRingFull uint64  `json:"rx_ring_full"`
	FillEmpty  uint64  `json:"rx_fill_ring_empty"`
	RXDropped  uint64  `json:"rx_dropped"`
}

func (r XDPBWResult) line() string {
	return BWResult{Size: r.Size, Iters: r.Iters, Peak: r.Peak, Average: r.Average, MsgRate: r.MsgRate}.line()
}

// xdpBWFrame sizes xdp_bw's frames on the link: the payload of a frame
// (-s, or a full-size frame of the MTU) and whether it needs
// multi-buffer sockets. Without multi-buffer a frame must fit a chunk.
func xdpBWFrame(p *params, mtu int, multiBuffer bool, chunk int) (size int, err error) {
	limit := mtu - xdpIPTCP
	if !multiBuffer {
		limit = min(limit, chunk-xdpHeaders)
	}
	switch {
	case mtu <= xdpIPTCP:
		return 0, fmt.Errorf("xdp_bw: --iface %s: no MTU", p.iface)
	case !p.set["size"]:
		return limit, nil
	case p.size > limit && p.size <= mtu-xdpIPTCP:
		return 0, fmt.Errorf("-s %d: single-buffer AF_XDP frames carry at most %d bytes (the socket has no XDP_USE_SG)", p.size, limit)
	case p.size > limit:
		return 0, fmt.Errorf("-s %d: the MTU of %s (%d) carries at most %d bytes of TCP payload", p.size, p.iface, mtu, limit)
	}
	return p.size, nil
}

func runXDPBW(ctx context.Context, p *params, out io.Writer) error {
	// Multi-buffer sockets only where a full-size frame needs them: the
	// single-buffer path is the one every kernel has.
	o := xdpOpenOptions{reserve: 64, multiBuffer: ifaceMTU(p.iface)+14 > 4096}
	if p.server == "" {
		return xdpBWServe(ctx, p, out, o)
	}
	o.reserve = xdpSockOpts.Frames - 64 // the client only transmits
	x, err := dialXDP(ctx, p, xdpBWHello, o)
	if err != nil {
		return err
	}
	defer x.close()
	s := x.e.socks[0]
	chunk := x.e.umem.FrameSize()
	size, err := xdpBWFrame(p, ifaceMTU(p.iface), s.MultiBuffer(), chunk)
	if err != nil {
		return err
	}
	x.banner(out, p, "XDP BW Test")
	if !p.quiet && o.multiBuffer && !s.MultiBuffer() {
		fmt.Fprintf(out, " xdp_bw: the kernel refused XDP_USE_SG: single-buffer frames of at most %d bytes of payload\n", chunk-xdpHeaders)
	}
	fmt.Fprintln(out, bwHeader(p.unit()))
	f, err := x.flow(size)
	if err != nil {
		return err
	}
	if err := x.header('W', size, p.iters, 0); err != nil {
		return err
	}
	var ack [1]byte
	if _, err := io.ReadFull(x.c, ack[:]); err != nil { // the server is ready
		return err
	}
	sent, ns, err := x.e.blast(ctx, f, p.iters, p.duration)
	if err != nil {
		return err
	}
	var msg [8]byte
	binary.BigEndian.PutUint64(msg[:], uint64(sent))
	if _, err := x.c.Write(msg[:]); err != nil {
		return err
	}
	var rep [48]byte
	if _, err := io.ReadFull(x.c, rep[:]); err != nil {
		return fmt.Errorf("xdp_bw: the server's count: %w", err)
	}
	c := xdpCount{
		frames: binary.BigEndian.Uint64(rep[0:]), bytes: binary.BigEndian.Uint64(rep[8:]), ns: int64(binary.BigEndian.Uint64(rep[16:])),
		ringFull: binary.BigEndian.Uint64(rep[24:]), fillEmpty: binary.BigEndian.Uint64(rep[32:]), dropped: binary.BigEndian.Uint64(rep[40:]),
	}
	r := c.result(size, sent, len(f.tmpl), chunk, s.MultiBuffer(), p.unit())
	if ns > 0 {
		r.TXRate = float64(sent) / (float64(ns) / 1e9) / 1e6
	}
	fmt.Fprintln(out, r.line())
	x.bye()
	fmt.Fprintln(out, resultLine)
	if !p.quiet {
		fmt.Fprintf(out, " Frames          : %d sent (%.3f Mpps queued), %d received, %d bytes each in %d buffer(s); receiver drops: RX ring full %d, fill ring empty %d, other %d\n",
			r.Iters, r.TXRate, r.Received, r.FrameLen, r.Buffers, r.RXRingFull, r.FillEmpty, r.RXDropped)
	}
	return writeResults(p, []any{r})
}

// xdpCount is what the server counted.
type xdpCount struct {
	frames, bytes                uint64
	ns                           int64 // first to last frame
	ringFull, fillEmpty, dropped uint64
}

func (c xdpCount) result(size, sent, frameLen, chunk int, multiBuffer bool, unit float64) XDPBWResult {
	r := XDPBWResult{Size: size, Iters: sent, Unit: unitName(unit), Received: int(c.frames), FrameLen: frameLen,
		Buffers: (frameLen + chunk - 1) / chunk, MultiBuf: multiBuffer, RXRingFull: c.ringFull, FillEmpty: c.fillEmpty, RXDropped: c.dropped}
	if c.ns > 0 && c.frames > 1 {
		// The window from the first frame to the last holds frames-1
		// inter-arrival gaps.
		sec := float64(c.ns) / 1e9
		r.Average = float64(size) * float64(c.frames-1) / sec / unit
		r.MsgRate = float64(c.frames-1) / sec / 1e6
	}
	return r
}

// blast sends frames of f for iters frames or, with dur > 0, for dur,
// and returns how many it sent and the time from the first queued to the
// last completed (ns).
func (e *xdpEnd) blast(ctx context.Context, f *xdpFlow, iters int, dur time.Duration) (int, int64, error) {
	s := e.socks[0]
	chunk := e.umem.FrameSize()
	frameLen := len(f.tmpl)
	segs := (frameLen + chunk - 1) / chunk
	if segs > 1 && !s.MultiBuffer() {
		return 0, 0, fmt.Errorf("xdp_bw: a %d-byte frame needs %d chunks and the socket is single-buffer", frameLen, segs)
	}
	// The template goes into every chunk once (its first chunk's worth;
	// continuation chunks carry whatever follows: the receiver counts).
	// Alloc hands out descriptors over whole chunks.
	all := make([]afxdp.Desc, s.FreeFrames())
	all = all[:s.Alloc(all)]
	for _, d := range all {
		copy(s.Frame(d), f.tmpl)
	}
	s.Free(all)
	perBatch := len(e.tx) / segs
	descs := e.tx[:perBatch*segs]
	start := time.Now()
	var deadline time.Time
	if dur > 0 {
		deadline = start.Add(dur)
		iters = int(^uint(0) >> 1)
	}
	sent := 0
	for spins := 0; sent < iters; spins++ {
		if spins%64 == 0 {
			if err := ctx.Err(); err != nil {
				return sent, 0, err
			}
			if dur > 0 && time.Now().After(deadline) {
				break
			}
		}
		s.Complete()
		k := min(perBatch, iters-sent, s.TXRoom()/segs, s.FreeFrames()/segs)
		if k == 0 {
			s.Kick()
			continue
		}
		n := s.Alloc(descs[:k*segs])
		for j := range k {
			left := frameLen
			for i := range segs {
				d := &descs[j*segs+i]
				d.Len = uint32(min(left, chunk))
				left -= int(d.Len)
				d.Options = 0
				if i < segs-1 {
					d.Options = afxdp.OptMore
				}
			}
		}
		transmit(s, descs[:n]) // whole packets fit: k was bounded by TXRoom
		sent += k
	}
	// Every frame back from the kernel: the stream has left this end.
	for idle := time.Now(); s.FreeFrames() < len(all); {
		if s.Complete() > 0 {
			idle = time.Now()
			continue
		}
		s.Kick()
		if err := ctx.Err(); err != nil {
			return sent, 0, err
		}
		if time.Since(idle) > time.Second {
			return sent, 0, fmt.Errorf("xdp_bw: %d of %d frames not completed by the kernel", len(all)-s.FreeFrames(), len(all))
		}
	}
	return sent, int64(time.Since(start)), nil
}

func xdpBWServe(ctx context.Context, p *params, out io.Writer, o xdpOpenOptions) error {
	c, e, done, err := acceptXDP(ctx, p, out, xdpBWHello, o)
	if err != nil {
		return err
	}
	defer done()
	for {
		_, _, _, ok, err := readHeader(c, 'W')
		if err != nil || !ok {
			return err
		}
		// The client's done (the frames it sent) arrives while we count.
		sent := make(chan uint64, 1)
		rerr := make(chan error, 1)
		go func() {
			var msg [8]byte
			if _, err := io.ReadFull(c, msg[:]); err != nil {
				rerr <- err
				return
			}
			sent <- binary.BigEndian.Uint64(msg[:])
		}()
		if _, err := c.Write([]byte{1}); err != nil {
			return err
		}
		n, err := e.count(ctx, sent, rerr, p.timeout)
		if err != nil {
			return err
		}
		var rep [48]byte
		for i, v := range []uint64{n.frames, n.bytes, uint64(n.ns), n.ringFull, n.fillEmpty, n.dropped} {
			binary.BigEndian.PutUint64(rep[8*i:], v)
		}
		if _, err := c.Write(rep[:]); err != nil {
			return err
		}
	}
}

// count counts the packets and bytes arriving on the sockets until the
// client's done has come and the RX rings have all it sent or stayed
// empty for xdpBWQuiet. Before the done, --timeout without a frame is an
// error.
func (e *xdpEnd) count(ctx context.Context, sent <-chan uint64, rerr <-chan error, timeout time.Duration) (xdpCount, error) {
	var c xdpCount
	var first, last time.Time
	want := ^uint64(0) // unknown until the done
	quiet := timeout
	idle := time.Now()
	for spin := 0; c.frames < want; spin++ {
		got := false
		for _, s := range e.socks {
			n := s.Receive(e.batch)
			if n == 0 {
				continue
			}
			got = true
			now := time.Now()
			if first.IsZero() {
				first = now
			}
			last, idle = now, now
			for _, d := range e.batch[:n] {
				c.bytes += uint64(d.Len)
				if !d.More() {
					c.frames++
				}
			}
			e.recycle(s, e.batch[:n])
		}
		if got {
			spin = 0
			continue
		}
		select {
		case n := <-sent:
			want, quiet = n, xdpBWQuiet
			idle = time.Now()
		case err := <-rerr:
			return c, fmt.Errorf("xdp_bw: control connection: %w", err)
		default:
		}
		if spin < 2000 {
			continue
		}
		spin = 0
		if err := ctx.Err(); err != nil {
			return c, err
		}
		if time.Since(idle) > quiet {
			if want == ^uint64(0) {
				return c, fmt.Errorf("xdp_bw: %w", errXDPIdle)
			}
			break
		}
		if len(e.socks) == 1 {
			e.socks[0].Poll(1)
		} else {
			time.Sleep(50 * time.Microsecond)
		}
	}
	c.ns = int64(last.Sub(first))
	for _, s := range e.socks {
		if st, err := s.Stats(); err == nil {
			c.ringFull += st.RXRingFull
			c.fillEmpty += st.RXFillRingEmptyDescs
			c.dropped += st.RXDropped
		}
	}
	return c, nil
}
