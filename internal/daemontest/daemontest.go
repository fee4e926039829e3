// Package daemontest is the harness of the tests that run the xrnicd and
// xrnicctl binaries (cmd/xrnicd, deploy, reliability): it builds both
// once per test binary, starts xrnicd (also inside a network namespace)
// with its log in a buffer the test may read while the daemon writes,
// waits until the daemon reports ready, reads its regions, runs xrnicctl
// against it, and stops it with SIGTERM checking the exit.
//
// A test binary built with -race (make unit, CI) builds the two binaries
// with -race as well; XRNIC_DAEMON_RACE=1 or =0 forces it on or off. A
// race-built xrnicd prints "WARNING: DATA RACE" when it finds one and
// exits with status 66: Start's cleanup and Stop fail the test on either.
package daemontest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"xrnic/internal/netns"
	"xrnic/internal/testclean"
)

// Bins are the paths of the built binaries.
type Bins struct{ Xrnicd, Xrnicctl string }

var (
	buildOnce sync.Once
	binDir    string
	bins      Bins
	buildErr  error
)

// Race reports whether Build builds with the race detector: when this
// test binary has it, unless XRNIC_DAEMON_RACE is 1 (on) or 0 (off).
func Race() bool {
	switch os.Getenv("XRNIC_DAEMON_RACE") {
	case "1":
		return true
	case "0":
		return false
	}
	return raceBuild
}

// raceReport is what a race-built Go program prints for each data race;
// raceExit is its exit status when it found one (GORACE exitcode).
const (
	raceReport = "WARNING: DATA RACE"
	raceExit   = 66
)

// CheckRaces fails the test if log, the output of a binary Build made,
// holds a race detector report. Start's cleanup calls it for its daemons;
// a test that runs xrnicd by other means calls it with that log.
func CheckRaces(t testing.TB, what, log string) {
	t.Helper()
	if i := strings.Index(log, raceReport); i >= 0 {
		t.Errorf("%s reported a data race (built with -race):\n%s", what, log[i:])
	}
}

// Build builds xrnicd and xrnicctl into a temporary directory, once per
// test binary, and fails the test if that fails. Main removes them. They
// are built with -race when Race says so.
func Build(t testing.TB) Bins {
	t.Helper()
	buildOnce.Do(func() {
		d, err := os.MkdirTemp("", "xrnic-bins-")
		if err != nil {
			buildErr = err
			return
		}
		binDir = d
		os.Chmod(d, 0o755) // tests run xrnicctl as another user (nobody)
		args := []string{"build"}
		if Race() {
			args = append(args, "-race")
		}
		args = append(args, "-o", d+string(filepath.Separator), "xrnic/cmd/xrnicd", "xrnic/cmd/xrnicctl")
		out, err := exec.Command("go", args...).CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, out)
			return
		}
		bins = Bins{Xrnicd: filepath.Join(d, "xrnicd"), Xrnicctl: filepath.Join(d, "xrnicctl")}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return bins
}

// Main runs the tests and removes what Build made; call it from TestMain.
func Main(m *testing.M) {
	testclean.Prepare()
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	if locks != "" {
		os.RemoveAll(locks)
	}
	os.Exit(code)
}

var (
	locksOnce sync.Once
	locks     string // the --lock-dir of every daemon this binary starts
)

// LockDir returns the --lock-dir Start gives every daemon of this test
// binary (made on first use, removed by Main): an xrnicd a test starts by
// other means passes it too, to meet the others' owner locks.
func LockDir(t testing.TB) string {
	t.Helper()
	locksOnce.Do(func() {
		if d, err := os.MkdirTemp("", "xrnic-locks-"); err == nil {
			os.Chmod(d, 0o755)
			locks = d
		}
	})
	if locks == "" {
		t.Fatal("daemontest: cannot make a lock directory")
	}
	return locks
}

// Buffer collects a process's output while the test reads it.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

var _ io.Writer = (*Buffer)(nil)

func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns everything written so far.
func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Bytes returns a copy of everything written so far.
func (s *Buffer) Bytes() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return bytes.Clone(s.b.Bytes())
}

// tail is the last n bytes of the log (all with n <= 0).
func (s *Buffer) tail(n int) string {
	l := s.String()
	if n > 0 && len(l) > n {
		l = "...\n" + l[len(l)-n:]
	}
	return l
}

// Region is one element of `xrnicctl region list -j`.
type Region struct {
	Name   string `json:"name"`
	STag   string `json:"stag"` // "0x%08x"
	TO     string `json:"to"`   // "0x%016x"
	Length uint64 `json:"length"`
	Access string `json:"access"` // letters r, w, a
}

// STagValue parses STag.
func (r Region) STagValue() (uint32, error) {
	v, err := strconv.ParseUint(strings.TrimPrefix(r.STag, "0x"), 16, 32)
	if err != nil {
		return 0, fmt.Errorf("region %s: STag %q: %w", r.Name, r.STag, err)
	}
	return uint32(v), nil
}

// TOValue parses TO.
func (r Region) TOValue() (uint64, error) {
	v, err := strconv.ParseUint(strings.TrimPrefix(r.TO, "0x"), 16, 64)
	if err != nil {
		return 0, fmt.Errorf("region %s: TO %q: %w", r.Name, r.TO, err)
	}
	return v, nil
}

// ParseRegions reads the output of `xrnicctl region list -j` by name.
func ParseRegions(out string) (map[string]Region, error) {
	var rs []Region
	if err := json.Unmarshal([]byte(out), &rs); err != nil {
		return nil, fmt.Errorf("region list -j: %w\n%s", err, out)
	}
	m := map[string]Region{}
	for _, r := range rs {
		m[r.Name] = r
	}
	return m, nil
}

// Ctl runs the xrnicctl that Build made against one daemon.
type Ctl struct {
	Socket  string        // the daemon's control socket
	Timeout time.Duration // xrnicctl --timeout; 5 s when zero
	Netns   string        // run xrnicctl in this namespace when set
}

// Run runs xrnicctl with args; the error carries its stderr.
func (c Ctl) Run(args ...string) (string, error) {
	if bins.Xrnicctl == "" {
		return "", errors.New("daemontest: Build has not run")
	}
	timeout := c.Timeout
	if timeout == 0 {
		timeout = 5 * time.Second
	}
	cmd := netns.Command(c.Netns, bins.Xrnicctl, append([]string{"--socket", c.Socket, "--timeout", timeout.String()}, args...)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("xrnicctl %s: %v: %s", strings.Join(args, " "), err, errb.String())
	}
	return out.String(), nil
}

// Must is Run failing the test on error.
func (c Ctl) Must(t testing.TB, args ...string) string {
	t.Helper()
	out, err := c.Run(args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// Options describe how to start xrnicd.
type Options struct {
	// Args are xrnicd's flags; Start adds only --socket.
	Args []string
	// Netns runs xrnicd in this namespace (ip netns exec, so the pid is
	// the daemon's); CtlNetns runs xrnicctl in that one.
	Netns, CtlNetns string
	CtlTimeout      time.Duration // xrnicctl --timeout; 5 s when zero
	ReadyTimeout    time.Duration // how long start-up may take; 15 s when zero
	LogTail         int           // bytes of log shown when the test failed; 0: all
}

// Daemon is a running xrnicd.
type Daemon struct {
	Cmd    *exec.Cmd
	Dir    string // the daemon's temporary directory
	Socket string // its control socket, Dir/run/xrnicd.sock
	Log    *Buffer
	// From `xrnicctl status -j` once ready.
	Transport, Listen, Metrics string
	Regions                    map[string]Region // from `xrnicctl region list -j`
	// Done receives the result of Cmd.Wait once (buffered: a test that
	// takes it to look may put it back).
	Done chan error
	Ctl  Ctl

	exited chan struct{}
}

// WaitLog waits (5 s at most) until the daemon's log contains want: the
// log is copied from a pipe and may trail what the daemon already
// reported through its control socket.
func (d *Daemon) WaitLog(t testing.TB, want string) bool {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !strings.Contains(d.Log.String(), want); {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
	return true
}

// Start builds the binaries, starts xrnicd and waits until it is ready.
// A cleanup kills it if the test did not stop it, and logs its output if
// the test failed.
func Start(t testing.TB, o Options) *Daemon {
	t.Helper()
	b := Build(t)
	dir := t.TempDir()
	d := &Daemon{Dir: dir, Socket: filepath.Join(dir, "run", "xrnicd.sock"), Log: &Buffer{},
		Done: make(chan error, 1), exited: make(chan struct{})}
	d.Ctl = Ctl{Socket: d.Socket, Timeout: o.CtlTimeout, Netns: o.CtlNetns}
	args := []string{"--socket", d.Socket}
	if !slices.Contains(o.Args, "--lock-dir") {
		// The afxdp owner locks of this test binary's daemons live in one
		// directory of their own, removed at the end: a daemon a test
		// kills leaves no lock file in /run/xrnic.
		args = append(args, "--lock-dir", LockDir(t))
	}
	d.Cmd = netns.Command(o.Netns, b.Xrnicd, append(args, o.Args...)...)
	d.Cmd.Stdout, d.Cmd.Stderr = d.Log, d.Log
	if err := d.Cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		d.Done <- d.Cmd.Wait()
		close(d.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-d.exited:
		default:
			d.Cmd.Process.Kill()
			<-d.exited
		}
		// The log is complete: Wait has copied all of it.
		CheckRaces(t, "xrnicd", d.Log.String())
		if t.Failed() {
			t.Logf("xrnicd log:\n%s", d.Log.tail(o.LogTail))
		}
	})
	ready := o.ReadyTimeout
	if ready == 0 {
		ready = 15 * time.Second
	}
	deadline := time.Now().Add(ready)
	for {
		var st struct {
			Ready     bool   `json:"ready"`
			Transport string `json:"transport"`
			Listen    string `json:"listen"`
			Metrics   string `json:"metrics"`
		}
		out, err := d.Ctl.Run("status", "-j")
		if err == nil && json.Unmarshal([]byte(out), &st) == nil && st.Ready {
			d.Transport, d.Listen, d.Metrics = st.Transport, st.Listen, st.Metrics
			break
		}
		select {
		case <-d.exited:
			t.Fatalf("xrnicd exited during start-up: %v\n%s", <-d.Done, d.Log.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("xrnicd not ready: %v %s\n%s", err, out, d.Log.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	out, err := d.Ctl.Run("region", "list", "-j")
	if err != nil {
		t.Fatalf("region list: %v", err)
	}
	if d.Regions, err = ParseRegions(out); err != nil {
		t.Fatal(err)
	}
	return d
}

// MustCtl runs xrnicctl against the daemon, failing the test on error.
func (d *Daemon) MustCtl(t testing.TB, args ...string) string {
	t.Helper()
	return d.Ctl.Must(t, args...)
}

// Stop sends SIGTERM and fails the test unless xrnicd exits with status 0
// within the bound; it reports a control socket left behind.
func (d *Daemon) Stop(t testing.TB, within time.Duration) {
	t.Helper()
	d.Cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-d.Done:
		d.Done <- err
		var ee *exec.ExitError
		if errors.As(err, &ee) && ee.ExitCode() == raceExit && Race() {
			t.Fatalf("xrnicd after SIGTERM: %v: the race detector found a data race\n%s", err, d.Log.String())
		}
		if err != nil {
			t.Fatalf("xrnicd after SIGTERM: %v\n%s", err, d.Log.String())
		}
	case <-time.After(within):
		t.Fatalf("xrnicd did not exit after SIGTERM\n%s", d.Log.String())
	}
	if _, err := os.Stat(d.Socket); !os.IsNotExist(err) {
		t.Errorf("control socket left behind: %v", err)
	}
}
