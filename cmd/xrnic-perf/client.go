package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"syscall"
	"time"

	"xrnic/verbs"
)

// The client side of a run: connect the control QP and the data QPs,
// then for each message size start it, measure it and collect the
// server's verdict and numbers.

// sizeResult is one size's report line, bandwidth or latency.
type sizeResult struct {
	bw  *BWResult
	lat *LatResult
}

// runClient runs the client side against p.server.
// onOff is perftest's spelling of a switch.
func onOff(b bool) string {
	if b {
		return "ON"
	}
	return "OFF"
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
		if err := qp.Dial(dctx, addr, verbs.ConnParam{PrivateData: s.bufInfo(q).put(), ORD: p.outs, IRD: p.outs, NoCRC: p.noCRC}); err != nil {
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
		fmt.Fprintf(out, " MPA CRC         : %s\n", onOff(s.qps[0].ConnInfo().CRC))
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

// refused: the server is not listening (yet): the kernel's or the
// user-space TCP's connection refused.
func refused(err error) bool {
	return errors.Is(err, syscall.ECONNREFUSED) || strings.Contains(err.Error(), "connection refused")
}
