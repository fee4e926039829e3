package abitest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"xrnic/internal/netns"
	"xrnic/internal/netnstest"
	"xrnic/internal/require"
)

// The topology: namespace "a" (198.18.70.1, the servers) and "b"
// (198.18.70.2, the clients) joined by a veth pair.
const nsPrefix = "xrabi-"

var (
	ipA = netip.MustParseAddr("198.18.70.1")
	ipB = netip.MustParseAddr("198.18.70.2")
)

// libNames are what `make abi` builds into bin/lib.
var libNames = []string{"libxrnic.so", "libibverbs.so.1", "librdmacm.so.1", "libmlx5.so.1", "libefa.so.1"}

// aptPackages hold the Debian binaries and headers the suite runs.
const aptInstall = "apt-get install -y libibverbs-dev librdmacm-dev perftest rdmacm-utils ibverbs-utils libpci3"

// skipOrFail skips, except under CI=true: CI must never skip silently.
func skipOrFail(t testing.TB, format string, args ...any) {
	t.Helper()
	require.Unavailable(t, format, args...)
}

var rootOnce struct {
	sync.Once
	dir string
	err error
}

// moduleRoot is the directory holding go.mod, walking up from here.
func moduleRoot(t testing.TB) string {
	t.Helper()
	rootOnce.Do(func() {
		dir, err := os.Getwd()
		if err != nil {
			rootOnce.err = err
			return
		}
		for {
			if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
				rootOnce.dir = dir
				return
			}
			up := filepath.Dir(dir)
			if up == dir {
				rootOnce.err = errors.New("no go.mod above the working directory")
				return
			}
			dir = up
		}
	})
	if rootOnce.err != nil {
		t.Fatal(rootOnce.err)
	}
	return rootOnce.dir
}

// requireLibs returns bin/lib, or skips (fails under CI) if make abi has
// not run.
func requireLibs(t testing.TB) string {
	t.Helper()
	lib := filepath.Join(moduleRoot(t), "bin", "lib")
	for _, n := range libNames {
		if _, err := os.Stat(filepath.Join(lib, n)); err != nil {
			skipOrFail(t, "%s missing: run make abi first", filepath.Join(lib, n))
		}
	}
	return lib
}

// requireBins skips (fails under CI) unless the Debian binaries are
// installed.
func requireBins(t testing.TB, names ...string) {
	t.Helper()
	for _, n := range append(names, "stdbuf") {
		if _, err := exec.LookPath(n); err != nil {
			skipOrFail(t, "%s not installed: %s", n, aptInstall)
		}
	}
}

// transport is one lower layer of the engine.
type transport struct {
	name  string
	afxdp bool
}

var transports = []transport{{"kernel", false}, {"afxdp", true}}

// env is one namespace pair with a transport: where the binaries run.
type env struct {
	lib  string
	tr   transport
	pair *netnstest.Pair
	port int // the next free port (ports: unique per run)
}

// forEachTransport runs f as a subtest per transport, each on a fresh
// namespace pair (removed when it ends, also on failure).
func forEachTransport(t *testing.T, bins []string, f func(t *testing.T, e *env)) {
	lib := requireLibs(t)
	requireBins(t, bins...)
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			netnstest.RequireRoot(t, tr.afxdp)
			netnstest.RemoveStale(nsPrefix)
			// GSO limited: a single-buffer AF_XDP socket cannot take the
			// 64 KiB GSO frames a kernel TCP peer sends over veth.
			p := netnstest.NewPair(t, netnstest.PairOptions{Prefix: nsPrefix, DevA: "xra", DevB: "xrb",
				AddrA: ipA, AddrB: ipB, LimitGSO: tr.afxdp})
			e := &env{lib: lib, tr: tr, pair: p, port: 20000}
			e.waitRunning(t)
			f(t, e)
		})
	}
}

// waitRunning waits until both veth ends are operationally up
// (IFF_RUNNING): the kernel's linkwatch sets that up to a second after
// "link set up", and the device reports PORT_DOWN until then, which
// perftest refuses ("Port number 1 state is Down").
func (e *env) waitRunning(t testing.TB) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for _, ns := range []string{e.pair.NSA, e.pair.NSB} {
		for {
			var flags net.Flags
			netnstest.Do(t, ns, func() {
				if ifi, err := net.InterfaceByName(e.dev(ns)); err == nil {
					flags = ifi.Flags
				}
			})
			if flags&net.FlagRunning != 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s in %s not running after 5 s (flags %v)", e.dev(ns), ns, flags)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// nextPort is a port no earlier run of this env used.
func (e *env) nextPort() int {
	e.port++
	return e.port
}

// dev is the veth end in namespace ns.
func (e *env) dev(ns string) string {
	if ns == e.pair.NSA {
		return e.pair.DevA
	}
	return e.pair.DevB
}

// environ is the environment a binary runs with in ns.
func (e *env) environ(ns string, extra ...string) []string {
	v := []string{"LD_LIBRARY_PATH=" + e.lib}
	// The kernel transport is the default, and so is the interface it
	// reports (the first up one with an IPv4 address: the veth end).
	if e.tr.afxdp {
		v = append(v, "XRNIC_TRANSPORT=afxdp", "XRNIC_IFACE="+e.dev(ns))
	}
	return append(v, extra...)
}

// syncBuf is a bytes.Buffer safe for a writer and readers.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// proc is a binary running in a namespace.
type proc struct {
	name   string
	cmd    *exec.Cmd
	out    syncBuf // stdout and stderr, line-buffered (stdbuf)
	done   chan struct{}
	err    error
	cancel context.CancelFunc
}

// start runs name args in ns with the env's environment, killed after
// timeout. Line buffering (stdbuf -oL) lets the test see a server's
// "waiting" line before the process ends.
func (e *env) start(t testing.TB, ns string, timeout time.Duration, extraEnv []string, name string, args ...string) *proc {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	argv := append(e.environ(ns, extraEnv...), "stdbuf", "-oL", "-eL", name)
	argv = append(argv, args...)
	p := &proc{name: name + " " + strings.Join(args, " "), done: make(chan struct{}), cancel: cancel}
	p.cmd = netns.CommandContext(ctx, ns, "env", argv...)
	p.cmd.Stdout = &p.out
	p.cmd.Stderr = &p.out
	p.cmd.WaitDelay = 2 * time.Second
	if err := p.cmd.Start(); err != nil {
		cancel()
		t.Fatalf("start %s: %v", p.name, err)
	}
	go func() {
		p.err = p.cmd.Wait()
		cancel()
		close(p.done)
	}()
	t.Cleanup(func() { p.cancel(); <-p.done })
	return p
}

// wait waits for the process to end and returns its error (nil: exit 0).
func (p *proc) wait() error {
	<-p.done
	return p.err
}

// waitAfter waits for the server once the client ended: if the client
// failed, the server gets 5 s to end before it is killed (a server
// waiting for a client that is gone would otherwise use the whole
// timeout).
func (p *proc) waitAfter(cli *proc) error {
	if cli.wait() != nil {
		select {
		case <-p.done:
		case <-time.After(5 * time.Second):
			p.cancel()
		}
	}
	return p.wait()
}

// exited tells whether the process has ended.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// waitFor waits until the output contains s; false if the process ended
// or d passed first.
func (p *proc) waitFor(s string, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if strings.Contains(p.out.String(), s) {
			return true
		}
		if p.exited() {
			return strings.Contains(p.out.String(), s)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return false
}

// run runs a binary to its end and returns its output and error.
func (e *env) run(t testing.TB, ns string, timeout time.Duration, name string, args ...string) (string, error) {
	t.Helper()
	p := e.start(t, ns, timeout, nil, name, args...)
	err := p.wait()
	return p.out.String(), err
}

// describe is a process's command line, result and output for a failure
// message.
func (p *proc) describe() string {
	return fmt.Sprintf("%s: %v\n--- output ---\n%s--- end ---", p.name, p.err, p.out.String())
}

// startServer starts a server in namespace A and waits until its engine
// listens on port: XRNIC_DEBUG=1 makes the engine log "listening on
// ADDR:PORT" once rdma_listen's listener runs (over afxdp it is in user
// space, invisible to ss). Servers print their own "waiting" lines
// before they listen, so those cannot tell.
func (e *env) startServer(t testing.TB, timeout time.Duration, port int, name string, args ...string) *proc {
	t.Helper()
	srv := e.start(t, e.pair.NSA, timeout, []string{"XRNIC_DEBUG=1"}, name, args...)
	deadline := time.Now().Add(15 * time.Second)
	for !srv.listens(port) {
		if srv.exited() || time.Now().After(deadline) {
			t.Fatalf("server never listened on port %d\n%s", port, srv.describe())
		}
		time.Sleep(10 * time.Millisecond)
	}
	return srv
}

// listens tells whether the engine logged a listener on port.
func (p *proc) listens(port int) bool {
	suffix := fmt.Sprintf(":%d", port)
	for _, l := range strings.Split(p.out.String(), "\n") {
		if _, a, ok := strings.Cut(l, "xrnic: listening on "); ok && strings.HasSuffix(strings.TrimSpace(a), suffix) {
			return true
		}
	}
	return false
}
