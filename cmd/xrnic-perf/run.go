package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	"xrnic/verbs"
)

// Masked atomics (--masked_atomics): FetchAdd adds 1 to each 32-bit half
// (carry boundaries at bits 31 and 63); CmpSwap compares and swaps the low
// half only.
const (
	maskedAdd     = 1 | 1<<32
	maskedAddMask = 1<<31 | 1<<63
	lowHalf       = 0xffff_ffff
)

// marker is the last byte of write_lat's i-th message (never 0, and
// consecutive markers differ).
func marker(i int) byte { return byte(i%251 + 1) }

// run runs one side: a client when p.server is set.
func run(ctx context.Context, p *params, out io.Writer) error {
	if p.test.name == "tcp_bw" || p.test.name == "tcp_lat" {
		return runTCP(ctx, p, out)
	}
	if p.server != "" {
		return runClient(ctx, p, out)
	}
	return runServer(ctx, p, out)
}

type sizeResult struct {
	bw  *BWResult
	lat *LatResult
}

func runClient(ctx context.Context, p *params, out io.Writer) error {
	if !p.test.bw && p.qps != 1 {
		return errors.New("-q: latency tests use one QP")
	}
	started := time.Now()
	s, err := newSession(p, true)
	if err != nil {
		return err
	}
	defer s.close()
	addr := hostPort(p.server, p.port)
	dctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	err = s.cqp.Dial(dctx, addr, verbs.ConnParam{PrivateData: ptr(p.hello()).put()})
	for err != nil && refused(err) && dctx.Err() == nil && time.Since(started) < 5*time.Second {
		// The server may still be starting: retry for a few seconds.
		time.Sleep(50 * time.Millisecond)
		if err := s.newCtlQP(); err != nil {
			return err
		}
		err = s.cqp.Dial(dctx, addr, verbs.ConnParam{PrivateData: ptr(p.hello()).put()})
	}
	if err != nil {
		var rej *verbs.RejectedError
		if errors.As(err, &rej) {
			if h, e := parseHello(rej.PrivateData); e == nil && h.Reject == 1 && int(h.Test) < len(tests) {
				return fmt.Errorf("the server at %s runs %s, not %s", addr, tests[h.Test].name, p.test.name)
			}
		}
		return fmt.Errorf("connect to %s: %w", addr, err)
	}
	if err := s.setupData(); err != nil {
		return err
	}
	for q, qp := range s.qps {
		if err := qp.Dial(dctx, addr, verbs.ConnParam{PrivateData: s.bufInfo(q).put(), ORD: p.outs, IRD: p.outs}); err != nil {
			return fmt.Errorf("connect data QP %d: %w", q, err)
		}
		bi, err := parseBufInfo(qp.ConnInfo().PeerPrivateData)
		if err != nil {
			return err
		}
		s.remote = append(s.remote, bi)
	}
	if err := s.postInitialRecvs(); err != nil {
		return err
	}
	if p.consumesRecv() && p.test.bw {
		s.initCredits(int(s.remote[0].RxD))
	}
	if !p.quiet {
		fmt.Fprintln(out, banner(p, "client", ifaceMTU(p.iface)))
		for q, qp := range s.qps {
			l, r := s.bufInfo(q), s.remote[q]
			fmt.Fprintf(out, " local address: QPN 0x%04x STag 0x%08x VAddr 0x%016x\n", qp.Num(), l.STag, l.RecvTO)
			fmt.Fprintf(out, " remote address: STag 0x%08x VAddr 0x%016x %s\n", r.STag, r.RecvTO, addr)
		}
		fmt.Fprintln(out, resultLine)
	}
	if p.test.bw {
		fmt.Fprintln(out, bwHeader(p.unit()))
	} else if p.duration > 0 {
		fmt.Fprintln(out, latDurHeader)
	} else {
		fmt.Fprintln(out, latHeader)
	}
	var results []any
	for _, size := range p.sizes() {
		if err := s.sendCtl(ctx, ctlMsg{Kind: msgStart, Size: uint32(size)}); err != nil {
			return err
		}
		if _, err := s.expectCtl(ctx, msgReady); err != nil {
			return err
		}
		rctx, cancel := context.WithTimeout(ctx, p.timeout+p.duration)
		res, count, verr := s.runSize(rctx, size)
		cancel()
		if verr != nil && !errors.Is(verr, errValidation) {
			writeResults(p, results) // the sizes done so far
			return fmt.Errorf("size %d: %w", size, verr)
		}
		if err := s.sendCtl(ctx, ctlMsg{Kind: msgDone, Count: count}); err != nil {
			return err
		}
		m, err := s.expectCtl(ctx, msgResult)
		if err != nil {
			return err
		}
		if !m.OK {
			return fmt.Errorf("size %d: data validation failed at the server (first bad value 0x%x)", size, m.Detail)
		}
		if verr != nil {
			return fmt.Errorf("size %d: %w", size, verr)
		}
		if res.bw != nil {
			if p.bidir {
				res.bw.Peak += m.Peak
				res.bw.Average += m.Avg
				res.bw.MsgRate += m.Rate
			}
			fmt.Fprintln(out, res.bw.line())
			results = append(results, *res.bw)
		} else {
			fmt.Fprintln(out, res.lat.line())
			results = append(results, *res.lat)
		}
	}
	s.bye(ctx)
	fmt.Fprintln(out, resultLine)
	if p.validate && !p.quiet {
		fmt.Fprintln(out, " Data validation: passed")
	}
	return writeResults(p, results)
}

func writeResults(p *params, results []any) error {
	if !p.outJSON {
		return nil
	}
	f, err := os.Create(p.jsonFile)
	if err != nil {
		return err
	}
	info := map[string]any{
		"test": p.test.verbName() + map[bool]string{true: " BW Test", false: " Latency Test"}[p.test.bw], "xrnic_test": p.test.name,
		"Dual_port": "OFF", "Device": "xrnic", "Number_of_qps": p.qps, "Transport_type": "IW", "Connection_type": "RC",
		"Using_SRQ": "OFF", "TX_depth": p.txDepth, "CQ_Moderation": p.cqMod, "Link_type": "Ethernet",
		"rdma_cm_QPs": "ON", "Data_ex_method": "MPA private data", "transport": p.transport, "iface": p.iface,
		"data_validation": p.validate, "bidirectional": p.bidir, "duration_s": p.duration.Seconds(),
	}
	if p.test.verb == verbRead || p.test.verb == verbAtomic {
		info["Outstand_reads"] = p.outs
	}
	if p.test.verb == verbAtomic {
		info["atomic_type"] = p.atomicType
		info["masked_atomics"] = p.masked
	}
	if mtu := ifaceMTU(p.iface); mtu > 0 {
		info["Mtu"] = mtu
	}
	werr := writeJSON(f, info, results)
	if err := f.Close(); werr == nil {
		werr = err
	}
	return werr
}

func ifaceMTU(name string) int {
	if name == "" {
		return 0
	}
	ifi, err := net.InterfaceByName(name)
	if err != nil {
		return 0
	}
	return ifi.MTU
}

func runServer(ctx context.Context, p *params, out io.Writer) error {
	p.qps = 256 // the device must take whatever the client asks
	s, err := newSession(p, false)
	if err != nil {
		return err
	}
	defer s.close()
	laddr := net.JoinHostPort(p.bind, fmt.Sprint(p.port))
	ln, err := s.dev.Listen("tcp", laddr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", laddr, err)
	}
	defer ln.Close()
	if !p.quiet {
		fmt.Fprintf(out, "\n************************************\n* Waiting for client to connect... *\n************************************\n")
	}
	want := p.test
	var req *verbs.ConnRequest
	for {
		if req, err = ln.Accept(ctx); err != nil {
			return err
		}
		h, err := parseHello(req.PrivateData)
		if err != nil {
			req.Reject(nil)
			continue
		}
		if int(h.Test) >= len(tests) || tests[h.Test] != want {
			req.Reject((&hello{Test: want.id(), Reject: 1}).put())
			return fmt.Errorf("a client asked for %s; this server runs %s", testName(h.Test), want.name)
		}
		if err := h.apply(p); err != nil {
			req.Reject(nil)
			continue
		}
		break
	}
	actx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	if err := req.Accept(actx, s.cqp, verbs.ConnParam{PrivateData: (&hello{Test: want.id()}).put()}); err != nil {
		return fmt.Errorf("accept the control QP: %w", err)
	}
	if err := s.setupData(); err != nil {
		return err
	}
	s.remote = make([]bufInfo, p.qps)
	seen := make([]bool, p.qps)
	for range p.qps {
		r, err := ln.Accept(actx)
		if err != nil {
			return fmt.Errorf("waiting for the data QPs: %w", err)
		}
		bi, err := parseBufInfo(r.PrivateData)
		if err != nil || int(bi.Index) >= p.qps || seen[bi.Index] {
			r.Reject(nil)
			return fmt.Errorf("bad data QP request: %v", err)
		}
		seen[bi.Index] = true
		s.remote[bi.Index] = bi
		if err := r.Accept(actx, s.qps[bi.Index], verbs.ConnParam{PrivateData: s.bufInfo(int(bi.Index)).put(), ORD: p.outs, IRD: p.outs}); err != nil {
			return fmt.Errorf("accept data QP %d: %w", bi.Index, err)
		}
	}
	ln.Close()
	if err := s.postInitialRecvs(); err != nil {
		return err
	}
	if !p.quiet {
		fmt.Fprintln(out, banner(p, "server", ifaceMTU(p.iface)))
	}
	var results []any
	for {
		m, err := s.recvCtl(ctx)
		if err != nil {
			return err
		}
		switch m.Kind {
		case msgBye:
			s.bye(ctx)
			if p.bidir {
				fmt.Fprintln(out, resultLine)
			}
			return writeResults(p, results)
		case msgStart:
		default:
			return fmt.Errorf("control QP: unexpected message %d", m.Kind)
		}
		size := int(m.Size)
		if size < 1 || size > s.slot {
			return fmt.Errorf("control QP: size %d out of the slot of %d bytes", size, s.slot)
		}
		s.prepare(size)
		sctx, stop := context.WithCancel(ctx)
		// A failed serve ends the run at once (closing the QPs tells the
		// client) instead of waiting for a done that will not come.
		cctx, abort := context.WithCancel(ctx)
		defer abort()
		var wg sync.WaitGroup
		var sr serveResult
		wg.Add(1)
		expect := make(chan uint64, 1)
		go func() {
			defer wg.Done()
			sr = s.serve(sctx, size, expect)
			if sr.err != nil {
				abort()
			}
		}()
		if err := s.sendCtl(ctx, ctlMsg{Kind: msgReady}); err != nil {
			stop()
			wg.Wait()
			return err
		}
		d, err := s.expectCtl(cctx, msgDone)
		if err != nil {
			stop()
			wg.Wait()
			if sr.err != nil {
				return sr.err
			}
			return err
		}
		expect <- d.Count
		if !p.consumesRecv() || !p.test.bw {
			if !p.bidir {
				stop()
			}
		}
		wg.Wait()
		stop()
		if sr.err != nil {
			return sr.err
		}
		r := ctlMsg{Kind: msgResult, OK: sr.ok, Detail: sr.detail, Count: sr.count}
		if sr.bw != nil {
			r.Peak, r.Avg, r.Rate = sr.bw.Peak, sr.bw.Average, sr.bw.MsgRate
			if p.bidir {
				if len(results) == 0 {
					fmt.Fprintln(out, bwHeader(p.unit()))
				}
				fmt.Fprintln(out, sr.bw.line())
			}
			results = append(results, *sr.bw)
		}
		if err := s.sendCtl(ctx, r); err != nil {
			return err
		}
	}
}

// bye ends a run in order: the client sends bye, both disconnect the
// control QP (waiting for the peer), so neither side's last Send is
// flushed by the other's close.
func (s *session) bye(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if s.client {
		s.sendCtl(ctx, ctlMsg{Kind: msgBye})
	}
	s.cqp.Disconnect(ctx)
}

func testName(id uint8) string {
	if int(id) < len(tests) {
		return tests[id].name
	}
	return fmt.Sprintf("test %d", id)
}

// postInitialRecvs posts the receives that stay posted across sizes:
// the server's rxD buffers per QP (send_bw, Write with Immediate), the
// client's credit buffers, and two per QP for ping-pong tests.
func (s *session) postInitialRecvs() error {
	p := s.p
	if !p.consumesRecv() {
		return nil
	}
	n, bl := s.rxD, s.slot
	if s.client && p.test.bw {
		n, bl = creditBufs, 64
	}
	for q, qp := range s.qps {
		for k := range n {
			if err := qp.PostRecvBuf(uint64(q)<<32|uint64(k), s.rmr.SGE((q*n+k)*bl, bl)); err != nil {
				return err
			}
		}
	}
	s.recvN, s.recvLen = n, bl
	return nil
}

func (s *session) repost(id uint64) error {
	q, k := int(id>>32), int(id&0xffff_ffff)
	return s.qps[q].PostRecvBuf(id, s.rmr.SGE((q*s.recvN+k)*s.recvLen, s.recvLen))
}

func (s *session) recvBuf(id uint64, n int) []byte {
	q, k := int(id>>32), int(id&0xffff_ffff)
	off := (q*s.recvN + k) * s.recvLen
	return s.rbuf[off : off+n]
}

func (s *session) initCredits(rxD int) {
	s.granted = make([]uint64, s.p.qps)
	s.sent = make([]uint64, s.p.qps)
	for q := range s.granted {
		s.granted[q] = uint64(rxD)
	}
}

// prepare readies the server's memory for a size: atomic targets back to
// 0, write_lat's source markers reset.
func (s *session) prepare(size int) {
	for q := range s.p.qps {
		store64(s.recvSlot(q), 0, 0)
		if !s.p.test.bw && s.p.test.verb == verbWrite {
			src := s.src(q)
			for j := range src {
				src[j] = pattern(q, j)
			}
			clear(s.recvSlot(q))
		}
	}
}

type serveResult struct {
	ok     bool
	detail uint64
	count  uint64
	bw     *BWResult
	err    error
}

var errValidation = errors.New("data validation failed")

// serve is the server's part of one size.
func (s *session) serve(ctx context.Context, size int, expect chan uint64) serveResult {
	p := s.p
	switch {
	case p.bidir:
		r, _, err := s.runBWChecked(context.WithoutCancel(ctx), size)
		if err != nil && !errors.Is(err, errValidation) {
			return serveResult{err: err}
		}
		return serveResult{ok: err == nil, bw: &r}
	case p.test.bw && p.consumesRecv():
		return s.sinkBW(ctx, size, expect)
	case !p.test.bw && (p.consumesRecv() || p.test.verb == verbWrite):
		return s.pong(ctx, size)
	}
	<-ctx.Done()
	return serveResult{ok: true}
}

// sinkBW receives send_bw's Sends (or Writes with Immediate), checks
// them, reposts the buffers and returns credits as Immediate Data.
func (s *session) sinkBW(ctx context.Context, size int, expect chan uint64) serveResult {
	p := s.p
	if s.reposted == nil {
		s.reposted = make([]uint64, p.qps)
		s.lastGrant = make([]uint64, p.qps)
	}
	batch := uint64(max(1, s.rxD/4))
	res := serveResult{ok: true}
	want := ^uint64(0)
	var got uint64
	pl := s.newPoller()
	idle := time.Now()
	first, last := int64(0), int64(0)
	base := time.Now()
	for got < want {
		if want == ^uint64(0) {
			select {
			case w := <-expect:
				want = w
				continue
			default:
			}
		}
		n := s.rcq.Poll(s.rwc)
		for _, c := range s.rwc[:n] {
			if c.Status != verbs.StatusSuccess {
				return serveResult{err: fmt.Errorf("receive failed: %s (%v)", c.Status, c.Err)}
			}
			if first == 0 {
				first = int64(time.Since(base))
			}
			got++
			q := int(c.ID >> 32)
			if p.validate && c.Op == verbs.OpRecv && res.ok {
				if int(c.ByteLen) != size {
					res.ok, res.detail = false, uint64(c.ByteLen)
				} else if j := badPattern(s.recvBuf(c.ID, size), q); j >= 0 {
					res.ok, res.detail = false, uint64(j)
				}
			}
			if err := s.repost(c.ID); err != nil {
				return serveResult{err: err}
			}
			s.reposted[q]++
			if s.reposted[q]-s.lastGrant[q] >= batch {
				s.lastGrant[q] = s.reposted[q]
				if err := s.qps[q].PostImm(uint64(q), uint64(s.rxD)+s.reposted[q], verbs.FlagSignaled); err != nil {
					return serveResult{err: fmt.Errorf("credit: %w", err)}
				}
			}
		}
		m := s.scq.Poll(s.wc)
		for _, c := range s.wc[:m] {
			if c.Status != verbs.StatusSuccess {
				return serveResult{err: fmt.Errorf("credit Immediate Data failed: %s", c.Status)}
			}
		}
		if n+m > 0 {
			idle = time.Now()
			last = int64(time.Since(base))
			continue
		}
		if want != ^uint64(0) && got >= want {
			break
		}
		wctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		err := pl.wait(wctx, s.rcq, idle)
		cancel()
		if ctx.Err() != nil {
			return serveResult{err: fmt.Errorf("receiving: got %d of %d messages: %w", got, want, ctx.Err())}
		}
		_ = err
	}
	r := durationBW(size, int(got), last-first, false, p.unit())
	res.bw, res.count = &r, got
	return res
}

func badPattern(b []byte, q int) int {
	for j, v := range b {
		if v != pattern(q, j) {
			return j
		}
	}
	return -1
}

// pong answers the ping-pong tests: a message in, the same message out.
func (s *session) pong(ctx context.Context, size int) serveResult {
	p := s.p
	res := serveResult{ok: true}
	pl := s.newPoller()
	qp := s.qps[0]
	// Replies still unpolled from the previous size count here too: each
	// holds an SQ and a CQ entry until polled.
	outstanding := &s.pongOut
	drain := func(block bool) error {
		for *outstanding > 0 {
			n := s.scq.Poll(s.wc)
			for _, c := range s.wc[:n] {
				if c.Status != verbs.StatusSuccess {
					return fmt.Errorf("reply failed: %s (%v)", c.Status, c.Err)
				}
			}
			*outstanding -= n
			if n == 0 {
				if !block {
					return nil
				}
				if err := s.scq.Wait(ctx); err != nil {
					return err
				}
			}
		}
		return nil
	}
	rs := s.remote[0]
	for i := 0; ; i++ {
		if p.test.verb == verbWrite && !p.writeImm {
			// perftest's method: poll the last byte of the buffer.
			slot := s.recvSlot(0)
			m := marker(i)
			idle := time.Now()
			for loadByte(slot, size-1) != m {
				if ctx.Err() != nil {
					return res
				}
				if time.Since(idle) > time.Millisecond {
					time.Sleep(5 * time.Microsecond)
				} else {
					runtime.Gosched()
				}
			}
			if p.validate && res.ok {
				if j := badPattern(slot[:size-1], 0); j >= 0 {
					res.ok, res.detail = false, uint64(j)
				}
			}
			src := s.src(0)
			src[size-1] = m
		} else {
			idle := time.Now()
			var c verbs.Completion
			for {
				if n := s.rcq.Poll(s.rwc[:1]); n == 1 {
					c = s.rwc[0]
					break
				}
				if err := pl.wait(ctx, s.rcq, idle); err != nil {
					return res
				}
			}
			if c.Status != verbs.StatusSuccess {
				if ctx.Err() != nil {
					return res
				}
				return serveResult{err: fmt.Errorf("receive failed: %s (%v)", c.Status, c.Err)}
			}
			if p.validate && res.ok && p.test.verb == verbSend {
				if j := badPattern(s.recvBuf(c.ID, int(c.ByteLen)), 0); j >= 0 || int(c.ByteLen) != size {
					res.ok, res.detail = false, uint64(j)
				}
			}
			if p.validate && res.ok && c.Imm != uint64(i) && (p.test.verb == verbImm || p.writeImm) {
				res.ok, res.detail = false, c.Imm
			}
			if err := s.repost(c.ID); err != nil {
				return serveResult{err: err}
			}
		}
		if err := drain(*outstanding >= 2); err != nil {
			return serveResult{err: err}
		}
		if err := s.postPing(qp, 0, i, size, rs); err != nil {
			return serveResult{err: err}
		}
		*outstanding++
	}
}

// postPing posts one ping-pong message (signalled).
func (s *session) postPing(qp *verbs.QP, q, i, size int, rs bufInfo) error {
	p := s.p
	sge := s.dmr.SGE(s.srcOff(q), size)
	switch {
	case p.test.verb == verbSend:
		return qp.PostSendBuf(uint64(i), sge, verbs.FlagSignaled)
	case p.test.verb == verbImm:
		return qp.PostImm(uint64(i), uint64(i), verbs.FlagSignaled)
	case p.writeImm:
		return qp.PostWriteImm(uint64(i), sge, rs.STag, rs.RecvTO, uint64(i), verbs.FlagSignaled)
	default:
		return qp.PostWrite(uint64(i), sge, rs.STag, rs.RecvTO, verbs.FlagSignaled)
	}
}

// runSize is the client's part of one size: the measurement, then its
// validation. count is the number of messages sent (all QPs).
func (s *session) runSize(ctx context.Context, size int) (sizeResult, uint64, error) {
	if s.p.test.bw {
		r, count, err := s.runBWChecked(ctx, size)
		return sizeResult{bw: &r}, count, err
	}
	r, count, err := s.runLat(ctx, size)
	return sizeResult{lat: &r}, count, err
}

// runBWChecked runs the bandwidth loop and the client-side validation
// (Read back of written data and atomic targets, check of read data).
func (s *session) runBWChecked(ctx context.Context, size int) (BWResult, uint64, error) {
	r, perQP, err := s.runBW(ctx, size)
	var total uint64
	for _, n := range perQP {
		total += n
	}
	if err != nil || !s.p.validate {
		return r, total, err
	}
	return r, total, s.validateAfter(ctx, size, perQP)
}

func (s *session) validateAfter(ctx context.Context, size int, perQP []uint64) error {
	p := s.p
	for q, qp := range s.qps {
		slot := s.recvSlot(q)
		rs := s.remote[q]
		switch p.test.verb {
		case verbWrite:
			if p.writeImm {
				continue
			}
			chk := s.check(q)
			clear(chk[:size])
			if err := qp.Read(ctx, s.dmr.SGE(s.checkOff(q), size), rs.STag, rs.RecvTO); err != nil {
				return fmt.Errorf("read back: %w", err)
			}
			if j := badPattern(chk[:size], q); j >= 0 {
				return fmt.Errorf("%w: QP %d: byte %d of the written data is 0x%02x, want 0x%02x", errValidation, q, j, chk[j], pattern(q, j))
			}
		case verbRead:
			if j := badPattern(slot[:size], q); j >= 0 {
				return fmt.Errorf("%w: QP %d: byte %d of the read data is 0x%02x, want 0x%02x", errValidation, q, j, slot[j], pattern(q, j))
			}
		case verbAtomic:
			if err := qp.Read(ctx, s.dmr.SGE(s.checkOff(q), 8), rs.STag, rs.RecvTO); err != nil {
				return fmt.Errorf("read back: %w", err)
			}
			got := load64(s.check(q), 0)
			want := expectAtomic(p, perQP[q])
			if got != want {
				return fmt.Errorf("%w: QP %d: the remote word is 0x%x after %d %s, want 0x%x", errValidation, q, got, perQP[q], p.atomicType, want)
			}
		}
	}
	return nil
}

// expectAtomic is the remote word after n atomics on a word that started
// at 0: n for FetchAdd of 1 and for the CmpSwap chain i -> i+1; with masks
// n in each 32-bit half (FetchAdd) or in the low half (CmpSwap).
func expectAtomic(p *params, n uint64) uint64 {
	switch {
	case p.atomicType == "CMP_AND_SWAP" && p.masked:
		return n & lowHalf
	case p.atomicType == "CMP_AND_SWAP":
		return n
	case p.masked:
		return (n & lowHalf) | (n&lowHalf)<<32
	}
	return n
}

// runBW is perftest's run_iter_bw: every QP keeps up to -t work requests
// outstanding, one in -Q is signalled, and the timestamps feed computeBW.
// It returns the messages completed per QP.
func (s *session) runBW(ctx context.Context, size int) (BWResult, []uint64, error) {
	p := s.p
	n, qps := p.iters, p.qps
	dur := p.duration > 0
	total := n * qps
	var posted, completed []int64
	if !dur {
		posted = make([]int64, total)
		completed = make([]int64, total)
	}
	scnt := make([]int, qps)
	ccnt := make([]int, qps)
	var totscnt, totccnt int
	credit := p.consumesRecv()
	pl := s.newPoller()
	base := time.Now()
	now := func() int64 { return int64(time.Since(base)) }
	var stopPosting bool
	var winStart, winEnd int64 = -1, -1
	var cntStart, cntEnd int
	sge := make([]verbs.SGE, 1)
	wr := verbs.SendWR{SGL: sge}
	idle := time.Now()
	for {
		progress := false
		if dur && !stopPosting {
			t := now()
			if winStart < 0 && t >= int64(p.margin) {
				winStart, cntStart = t, totccnt
			}
			if t >= int64(p.duration-p.margin) && winStart >= 0 {
				winEnd, cntEnd = t, totccnt
				stopPosting = true
			}
		}
		for q, qp := range s.qps {
			for {
				idx := scnt[q]
				if dur {
					if stopPosting && idx%p.cqMod == 0 {
						break
					}
				} else if idx >= n {
					break
				}
				if idx-ccnt[q] >= p.txDepth {
					break
				}
				if credit && s.sent[q] >= s.granted[q] {
					break
				}
				sig := (idx+1)%p.cqMod == 0 || (!dur && idx == n-1)
				s.buildWR(&wr, q, idx, size, sig)
				if err := qp.PostSend(&wr); err != nil {
					if errors.Is(err, verbs.ErrQueueFull) || errors.Is(err, verbs.ErrCQFull) {
						break
					}
					return BWResult{}, nil, fmt.Errorf("post: %w", err)
				}
				if !dur {
					posted[totscnt] = now()
				}
				if credit {
					s.sent[q]++
				}
				scnt[q]++
				totscnt++
				progress = true
			}
		}
		m := s.scq.Poll(s.wc)
		for _, c := range s.wc[:m] {
			if c.Status != verbs.StatusSuccess {
				return BWResult{}, nil, fmt.Errorf("work request failed: %s (%v)", c.Status, c.Err)
			}
			q, idx := int(c.ID>>32), int(c.ID&0xffff_ffff)
			done := idx + 1 - ccnt[q]
			ccnt[q] = idx + 1
			totccnt += done
			if !dur {
				completed[min(totccnt, total)-1] = now()
			}
		}
		if m > 0 {
			progress = true
		}
		if credit {
			k := s.rcq.Poll(s.rwc)
			for _, c := range s.rwc[:k] {
				if c.Status != verbs.StatusSuccess {
					return BWResult{}, nil, fmt.Errorf("credit receive failed: %s (%v)", c.Status, c.Err)
				}
				q := int(c.ID >> 32)
				s.granted[q] = max(s.granted[q], c.Imm)
				if err := s.repost(c.ID); err != nil {
					return BWResult{}, nil, err
				}
			}
			if k > 0 {
				progress = true
			}
		}
		finished := false
		if dur {
			finished = stopPosting
			for q := range qps {
				if ccnt[q] != scnt[q] {
					finished = false
				}
			}
		} else {
			finished = totccnt >= total
		}
		if finished {
			break
		}
		if progress {
			idle = time.Now()
			continue
		}
		if err := ctx.Err(); err != nil {
			return BWResult{}, nil, err
		}
		cq := s.scq
		if totscnt == totccnt && credit {
			cq = s.rcq
		}
		wctx, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
		pl.wait(wctx, cq, idle)
		cancel()
	}
	perQP := make([]uint64, qps)
	for q := range qps {
		perQP[q] = uint64(ccnt[q])
	}
	if dur {
		return durationBW(size, cntEnd-cntStart, winEnd-winStart, false, p.unit()), perQP, nil
	}
	return computeBW(BWSamples{Size: size, Iters: n, QPs: qps, CQMod: p.cqMod, PostList: 1,
		Posted: posted, Completed: completed}, p.unit()), perQP, nil
}

func (s *session) buildWR(wr *verbs.SendWR, q, idx, size int, sig bool) {
	p := s.p
	rs := s.remote[q]
	wr.ID = uint64(q)<<32 | uint64(idx)
	wr.Flags = 0
	if sig {
		wr.Flags = verbs.FlagSignaled
	}
	wr.RemoteSTag = rs.STag
	switch p.test.verb {
	case verbWrite:
		wr.Op = verbs.OpWrite
		if p.writeImm {
			wr.Op = verbs.OpWriteWithImm
			wr.Imm = uint64(idx)
		}
		wr.SGL[0] = s.dmr.SGE(s.srcOff(q), size)
		wr.RemoteTO = rs.RecvTO
	case verbRead:
		wr.Op = verbs.OpRead
		wr.SGL[0] = s.dmr.SGE(s.recvOff(q), size)
		wr.RemoteTO = rs.SrcTO
	case verbSend:
		wr.Op = verbs.OpSend
		wr.SGL[0] = s.dmr.SGE(s.srcOff(q), size)
	case verbAtomic:
		wr.SGL[0] = s.amr.SGE((q*p.txDepth+idx%p.txDepth)*8, 8)
		wr.RemoteTO = rs.RecvTO
		if p.atomicType == "CMP_AND_SWAP" {
			wr.Op = verbs.OpCmpSwap
			wr.CompareAdd, wr.Swap = uint64(idx), uint64(idx+1)
			wr.CompareMask, wr.SwapMask = verbs.CmpSwapAll, verbs.CmpSwapAll
			if p.masked {
				wr.CompareAdd, wr.Swap = uint64(idx)&lowHalf, uint64(idx+1)&lowHalf
				wr.CompareMask, wr.SwapMask = lowHalf, lowHalf
			}
		} else {
			wr.Op = verbs.OpFetchAdd
			wr.CompareAdd, wr.AddMask = 1, 0
			if p.masked {
				wr.CompareAdd, wr.AddMask = maskedAdd, maskedAddMask
			}
		}
	}
}

// runLat is the client's latency loop (perftest's run_iter_lat*): one
// message at a time, a timestamp at every post.
func (s *session) runLat(ctx context.Context, size int) (LatResult, uint64, error) {
	p := s.p
	qp := s.qps[0]
	rs := s.remote[0]
	dur := p.duration > 0
	n := p.iters
	var stamps []int64
	if !dur {
		stamps = make([]int64, n)
	}
	pl := s.newPoller()
	base := time.Now()
	now := func() int64 { return int64(time.Since(base)) }
	outstanding := 0
	slot := s.recvSlot(0)
	if p.test.verb == verbWrite && !p.writeImm {
		clear(slot)
		src := s.src(0)
		for j := range src {
			src[j] = pattern(0, j)
		}
	}
	sge := make([]verbs.SGE, 1)
	wr := verbs.SendWR{SGL: sge}
	var winStart, winEnd int64 = -1, -1
	var cntStart, cntEnd int
	var verr error
	i := 0
	for ; ; i++ {
		t := now()
		if dur {
			if winStart < 0 && t >= int64(p.margin) {
				winStart, cntStart = t, i
			}
			if t >= int64(p.duration-p.margin) && winStart >= 0 {
				winEnd, cntEnd = t, i
				break
			}
		} else {
			if i == n {
				break
			}
			stamps[i] = t
		}
		switch p.test.verb {
		case verbRead, verbAtomic:
			s.buildWR(&wr, 0, i, size, true)
			if err := qp.PostSend(&wr); err != nil {
				return LatResult{}, 0, fmt.Errorf("post: %w", err)
			}
			c, err := s.waitOne(ctx, s.scq, s.wc, pl)
			if err != nil {
				return LatResult{}, 0, err
			}
			if c.Status != verbs.StatusSuccess {
				return LatResult{}, 0, fmt.Errorf("work request failed: %s (%v)", c.Status, c.Err)
			}
			if p.validate && verr == nil {
				if p.test.verb == verbRead {
					if j := badPattern(slot[:size], 0); j >= 0 {
						verr = fmt.Errorf("%w: byte %d of read %d is 0x%02x", errValidation, j, i, slot[j])
					}
					clear(slot[:size])
				} else if p.atomicType == "CMP_AND_SWAP" && c.AtomicOrig&lowHalf != uint64(i)&lowHalf {
					verr = fmt.Errorf("%w: CmpSwap %d found 0x%x", errValidation, i, c.AtomicOrig)
				} else if p.atomicType == "FETCH_AND_ADD" && c.AtomicOrig != expectAtomic(p, uint64(i)) {
					verr = fmt.Errorf("%w: FetchAdd %d found 0x%x, want 0x%x", errValidation, i, c.AtomicOrig, expectAtomic(p, uint64(i)))
				}
			}
		default:
			for outstanding >= 2 {
				c, err := s.waitOne(ctx, s.scq, s.wc, pl)
				if err != nil {
					return LatResult{}, 0, err
				}
				if c.Status != verbs.StatusSuccess {
					return LatResult{}, 0, fmt.Errorf("work request failed: %s (%v)", c.Status, c.Err)
				}
				outstanding--
			}
			if p.test.verb == verbWrite && !p.writeImm {
				s.src(0)[size-1] = marker(i)
			}
			if err := s.postPing(qp, 0, i, size, rs); err != nil {
				return LatResult{}, 0, fmt.Errorf("post: %w", err)
			}
			outstanding++
			if p.test.verb == verbWrite && !p.writeImm {
				m := marker(i)
				idle := time.Now()
				for loadByte(slot, size-1) != m {
					if err := ctx.Err(); err != nil {
						return LatResult{}, 0, err
					}
					if time.Since(idle) > time.Millisecond {
						time.Sleep(5 * time.Microsecond)
					} else {
						runtime.Gosched()
					}
					if c := s.scq.Poll(s.wc); c > 0 {
						outstanding -= c
						for _, w := range s.wc[:c] {
							if w.Status != verbs.StatusSuccess {
								return LatResult{}, 0, fmt.Errorf("write failed: %s (%v)", w.Status, w.Err)
							}
						}
					}
				}
				if p.validate && verr == nil {
					if j := badPattern(slot[:size-1], 0); j >= 0 {
						verr = fmt.Errorf("%w: byte %d of write %d is 0x%02x", errValidation, j, i, slot[j])
					}
				}
			} else {
				c, err := s.waitOne(ctx, s.rcq, s.rwc, pl)
				if err != nil {
					return LatResult{}, 0, err
				}
				if c.Status != verbs.StatusSuccess {
					return LatResult{}, 0, fmt.Errorf("receive failed: %s (%v)", c.Status, c.Err)
				}
				if p.validate && verr == nil {
					if p.test.verb == verbSend {
						if j := badPattern(s.recvBuf(c.ID, int(c.ByteLen)), 0); j >= 0 || int(c.ByteLen) != size {
							verr = fmt.Errorf("%w: reply %d: byte %d (length %d)", errValidation, i, j, c.ByteLen)
						}
					} else if c.Imm != uint64(i) {
						verr = fmt.Errorf("%w: reply %d carried Immediate Data %d", errValidation, i, c.Imm)
					}
				}
				if err := s.repost(c.ID); err != nil {
					return LatResult{}, 0, err
				}
			}
		}
	}
	for outstanding > 0 {
		c, err := s.waitOne(ctx, s.scq, s.wc, pl)
		if err != nil {
			return LatResult{}, 0, err
		}
		if c.Status != verbs.StatusSuccess {
			return LatResult{}, 0, fmt.Errorf("work request failed: %s (%v)", c.Status, c.Err)
		}
		outstanding--
	}
	if verr == nil && p.validate && p.test.verb == verbAtomic {
		verr = s.validateAfter(ctx, size, []uint64{uint64(i)})
	}
	if dur {
		return durationLat(size, cntEnd-cntStart, winEnd-winStart, p.test.rttFactor()), uint64(i), verr
	}
	return computeLat(size, stamps, p.test.rttFactor()), uint64(i), verr
}

// waitOne polls one completion from cq.
func (s *session) waitOne(ctx context.Context, cq *verbs.CQ, wc []verbs.Completion, pl poller) (verbs.Completion, error) {
	idle := time.Now()
	for {
		if cq.Poll(wc[:1]) == 1 {
			return wc[0], nil
		}
		if err := pl.wait(ctx, cq, idle); err != nil {
			return verbs.Completion{}, err
		}
	}
}

// pickPort returns a TCP port that was free a moment ago.
func pickPort() int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 18515
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// refused: the server is not listening (yet): the kernel's or the
// user-space TCP's connection refused.
func refused(err error) bool {
	return errors.Is(err, syscall.ECONNREFUSED) || strings.Contains(err.Error(), "connection refused")
}
