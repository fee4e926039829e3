// Command xrnic-perf measures xrnic the way perftest measures an RDMA
// device: the tests write_bw, write_lat, read_bw, read_lat, send_bw,
// send_lat, atomic_bw, atomic_lat and imm_lat (RFC 7306 Immediate Data
// ping-pong; write_bw/write_lat --write_with_imm use Write with Immediate),
// with perftest's flags where they apply (its common ones that do not,
// -d, -i, -x, -m, -F and -R, are accepted with a note on stderr; the
// command line is parsed with github.com/spf13/pflag, --version prints
// the module version), its
// banner, columns and arithmetic (see report.go) and its JSON keys and
// test names (--out_json).
//
//	xrnic-perf write_bw [options]               # server
//	xrnic-perf write_bw [options] 198.18.0.1    # client, same options
//
// Client and server exchange parameters and STags without a side channel:
// in MPA private data of the connection requests and replies, then in
// Sends on a control QP (proto.go). Send bandwidth is paced by credits the
// receiver returns as Immediate Data, because an iWARP Send that finds no
// posted receive is a fatal error (there is no RNR retry as in
// InfiniBand).
//
// The same binary carries the kernel TCP baseline (tcp_bw, tcp_lat, in
// tcp.go), the raw AF_XDP frame ping-pong (xdp_lat, in xdp.go) and
// stream (xdp_bw, in xdpbw.go), and dispatches two orchestration commands
// to internal/perfsuite:
// the guided tour behind `make demo` (demo) and the sweep behind
// `make bench` (bench). They run this binary as separate processes.
//
// Files by role: main.go and params.go the command line, client.go and
// server.go the two sides, bw.go and lat.go the measurement loops, wr.go
// the work requests, recv.go posted receives and credits, validate.go
// data validation, session.go and proto.go the resources and the
// exchange, report.go perftest's arithmetic and output.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/pflag"

	"xrnic/internal/perfsuite"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(mainCtx(ctx, os.Args[1:]))
}

func mainCtx(ctx context.Context, args []string) int {
	if len(args) > 0 {
		switch args[0] {
		case "demo":
			return perfsuite.Demo(ctx, args[1:])
		case "bench":
			return perfsuite.Bench(ctx, args[1:])
		}
	}
	p, err := parseParams(args, os.Stderr)
	if err != nil {
		switch {
		case errors.Is(err, errVersion):
			printVersion(os.Stdout)
			return 0
		case errors.Is(err, errUsage), errors.Is(err, pflag.ErrHelp):
			return 2
		}
		fmt.Fprintln(os.Stderr, "xrnic-perf:", err)
		return 2
	}
	if err := run(ctx, p, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "xrnic-perf:", err)
		return 1
	}
	return 0
}

// run runs one side: a client when p.server is set.
func run(ctx context.Context, p *params, out io.Writer) error {
	if p.test.name == "tcp_bw" || p.test.name == "tcp_lat" {
		return runTCP(ctx, p, out)
	}
	if p.test.name == "xdp_lat" || p.test.name == "xdp_bw" {
		return runXDP(ctx, p, out)
	}
	if p.server != "" {
		return runClient(ctx, p, out)
	}
	return runServer(ctx, p, out)
}
