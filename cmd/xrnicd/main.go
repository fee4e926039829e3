// Command xrnicd is the xrnic daemon: a software iWARP RNIC (MPA RFC 5044
// and RFC 6581, DDP RFC 5041, RDMAP RFC 5040, RFC 7306 atomics and Immediate
// Data) that owns registered memory regions and accepts connections from
// remote peers.
//
// Each --region NAME:SIZE:ACCESS maps daemon-owned hugepage memory and
// registers it with remote Read (r), Write (w) and atomic (a) access, so
// peers can use it by STag without any application code: a shared counter
// (FetchAdd) or a lock (CmpSwap). Every accepted connection becomes a QP in
// the daemon's protection domain; the daemon keeps receive buffers posted
// on it and counts the Sends and Immediate Data it receives (a sink), so every
// RDMAP operation can be exercised against a bare daemon.
//
// Metrics are served on --metrics (/metrics, /healthz, /readyz) and a JSON
// control API on the unix socket --socket (xrnicctl talks to it). SIGTERM or
// SIGINT: stop accepting, close every QP (a FIN after draining, or the
// Terminate of a QP in error), release the memory, remove the socket, exit 0.
//
// Transports: kernel (kernel TCP sockets, no privileges) and afxdp (kernel
// bypass on --iface: an XDP program steers our flows to AF_XDP sockets
// served by the user-space TCP; root, or CAP_NET_ADMIN, CAP_BPF, CAP_PERFMON, CAP_NET_RAW
// and CAP_IPC_LOCK). Without --transport, --iface selects afxdp when the
// process has the privileges, else kernel; the choice and the reason are
// logged, and an afxdp chosen that way falls back to kernel (with a
// warning) when the interface refuses it. On afxdp, /metrics adds the
// user-space TCP counters and the AF_XDP and XDP program counters, and
// shutdown detaches the program and closes the sockets.
//
// Resources are bounded against floods: the metrics server and the control
// socket hold at most --http-max-conns and --socket-max-conns connections
// with read, write and idle timeouts; the control socket closes a refused
// user at accept; the RLIMIT_NOFILE soft limit is raised to the hard limit
// and the MPA bounds are fitted into it; refusals and accept errors are
// logged at a bounded rate (SECURITY.md, "Bounds on the daemon's
// resources").
//
// Run xrnicd -h for the options (xrnicd --version for the version); see deploy/README.md for a walk-through.
package main

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"

	"github.com/spf13/pflag"
)

func version() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		return bi.Main.Version
	}
	return "(devel)"
}

func newLogger(c *config, w io.Writer) *slog.Logger {
	o := &slog.HandlerOptions{Level: c.LogLevel}
	if c.LogFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, o))
	}
	return slog.New(slog.NewTextHandler(w, o))
}

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	cfg, err := parseArgs(args, os.Stderr)
	if errors.Is(err, pflag.ErrHelp) {
		return 0
	}
	if errors.Is(err, errVersion) {
		fmt.Println("xrnicd", version())
		return 0
	}
	if err == nil {
		err = cfg.validate()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "xrnicd:", err)
		fmt.Fprintln(os.Stderr, "run xrnicd --help for the options")
		return 2
	}
	log := newLogger(&cfg, os.Stderr)
	// Signals are caught before start so a SIGTERM during start-up still
	// shuts down cleanly.
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	d, err := start(cfg, log)
	if err != nil {
		log.Error("start-up failed", "err", err)
		return 1
	}
	s := <-sig
	log.Info("signal received", "signal", s.String())
	signal.Stop(sig)
	d.shutdown()
	return 0
}
