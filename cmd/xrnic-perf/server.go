package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"

	"xrnic/verbs"
)

// The server side of a run: accept the client's QPs, learn the run's
// parameters from its hello, and serve each size until bye.

// runServer waits for one client and serves its run.
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
		if err := r.Accept(actx, s.qps[bi.Index], verbs.ConnParam{PrivateData: s.bufInfo(int(bi.Index)).put(), ORD: p.outs, IRD: p.outs, NoCRC: p.noCRC}); err != nil {
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

// testName names the test of a hello (for the wrong-test error).
func testName(id uint8) string {
	if int(id) < len(tests) {
		return tests[id].name
	}
	return fmt.Sprintf("test %d", id)
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
