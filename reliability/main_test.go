package reliability

import (
	"flag"
	"io"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"strconv"
	"testing"
	"time"

	"xrnic/internal/daemontest"
	"xrnic/internal/require"
)

var (
	flagLong = flag.Bool("long", false, "long mode: a million STag guesses, 10,000 against the daemon (or set XRNIC_LONG=1)")
	flagSoak = flag.Bool("soak", false, "long soak: 60 s, 4 x 250 QPs (or set XRNIC_SOAK=1)")
)

func long() bool { return *flagLong || os.Getenv("XRNIC_LONG") == "1" }

func TestMain(m *testing.M) {
	if os.Getenv(soakClientEnv) != "" {
		os.Exit(soakClientMain())
	}
	flag.Parse()
	daemontest.Main(m)
}

// The built binaries (buildBins).
var xrnicd, xrnicctl string

func buildBins(t testing.TB) {
	t.Helper()
	b := daemontest.Build(t)
	xrnicd, xrnicctl = b.Xrnicd, b.Xrnicctl
}

// syncBuf collects a process's output.
type syncBuf = daemontest.Buffer

// daemon is a running xrnicd on loopback.
type daemon struct {
	cmd     *exec.Cmd
	dir     string
	socket  string
	log     *syncBuf
	listen  string
	metrics string
	regions map[string]regionInfo
	done    chan error
}

type regionInfo daemontest.Region

func (r regionInfo) stag(t testing.TB) uint32 {
	v, err := daemontest.Region(r).STagValue()
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func (r regionInfo) to(t testing.TB) uint64 {
	v, err := daemontest.Region(r).TOValue()
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// startDaemon starts xrnicd with the kernel transport on 127.0.0.1 and
// ephemeral ports, and waits until it is ready.
func startDaemon(t testing.TB, extra ...string) *daemon {
	t.Helper()
	return startDaemonIn(t, "", extra...)
}

// startDaemonIn is startDaemon in network namespace netns ("": this one).
func startDaemonIn(t testing.TB, netns string, extra ...string) *daemon {
	t.Helper()
	buildBins(t)
	x := daemontest.Start(t, daemontest.Options{Netns: netns, CtlTimeout: 10 * time.Second, LogTail: 20000, Args: append([]string{
		"--transport", "kernel", "--listen", "127.0.0.1:0", "--metrics", "127.0.0.1:0", "--hugepages", "off"}, extra...)})
	d := &daemon{cmd: x.Cmd, dir: x.Dir, socket: x.Socket, log: x.Log, listen: x.Listen, metrics: x.Metrics,
		regions: map[string]regionInfo{}, done: x.Done}
	for name, r := range x.Regions {
		d.regions[name] = regionInfo(r)
	}
	return d
}

// ctl runs xrnicctl against this daemon; err carries stderr.
func (d *daemon) ctl(args ...string) (string, error) { return d.control().Run(args...) }

func (d *daemon) mustCtl(t testing.TB, args ...string) string {
	t.Helper()
	return d.control().Must(t, args...)
}

func (d *daemon) control() daemontest.Ctl {
	return daemontest.Ctl{Socket: d.socket, Timeout: 10 * time.Second}
}

func (d *daemon) pid() int { return d.cmd.Process.Pid }

// alive fails the test if the daemon has exited.
func (d *daemon) alive(t testing.TB) {
	t.Helper()
	select {
	case err := <-d.done:
		d.done <- err
		t.Fatalf("xrnicd exited: %v", err)
	default:
	}
}

func httpGet(url string) (string, error) {
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// nobody skips the test (fails it under CI: package require) unless it
// runs as root and the user nobody exists, and returns nobody's uid and
// gid, for a test that must why.
func nobody(t *testing.T, why string) (uid, gid int) {
	t.Helper()
	require.Root(t, why)
	u, err := user.Lookup("nobody")
	require.NoError(t, err, "needs the user nobody (Debian's base-passwd has it)")
	uid, _ = strconv.Atoi(u.Uid)
	gid, _ = strconv.Atoi(u.Gid)
	return uid, gid
}
