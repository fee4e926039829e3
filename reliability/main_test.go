package reliability

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
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
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// bins builds xrnicd and xrnicctl once per test binary.
var (
	binOnce          sync.Once
	binDir, binErr   string
	xrnicd, xrnicctl string
)

func buildBins(t testing.TB) {
	t.Helper()
	binOnce.Do(func() {
		d, err := os.MkdirTemp("", "xrnic-rel-bins-")
		if err != nil {
			binErr = err.Error()
			return
		}
		os.Chmod(d, 0o755) // the control-socket test runs xrnicctl as nobody
		binDir = d
		xrnicd, xrnicctl = filepath.Join(d, "xrnicd"), filepath.Join(d, "xrnicctl")
		for _, b := range [][2]string{{xrnicd, "xrnic/cmd/xrnicd"}, {xrnicctl, "xrnic/cmd/xrnicctl"}} {
			if out, err := exec.Command("go", "build", "-o", b[0], b[1]).CombinedOutput(); err != nil {
				binErr = fmt.Sprintf("go build %s: %v\n%s", b[1], err, out)
				return
			}
		}
	})
	if binErr != "" {
		t.Fatal(binErr)
	}
}

// syncBuf collects a process's output.
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

func (s *syncBuf) Bytes() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return bytes.Clone(s.b.Bytes())
}

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

type regionInfo struct {
	Name   string `json:"name"`
	STag   string `json:"stag"`
	TO     string `json:"to"`
	Length uint64 `json:"length"`
	Access string `json:"access"`
}

func (r regionInfo) stag(t testing.TB) uint32 {
	v, err := strconv.ParseUint(strings.TrimPrefix(r.STag, "0x"), 16, 32)
	if err != nil {
		t.Fatalf("region %s: STag %q: %v", r.Name, r.STag, err)
	}
	return uint32(v)
}

func (r regionInfo) to(t testing.TB) uint64 {
	v, err := strconv.ParseUint(strings.TrimPrefix(r.TO, "0x"), 16, 64)
	if err != nil {
		t.Fatalf("region %s: TO %q: %v", r.Name, r.TO, err)
	}
	return v
}

// startDaemon starts xrnicd with the kernel transport on 127.0.0.1 and
// ephemeral ports, and waits until it is ready.
func startDaemon(t testing.TB, extra ...string) *daemon {
	t.Helper()
	buildBins(t)
	dir := t.TempDir()
	d := &daemon{dir: dir, socket: filepath.Join(dir, "run", "xrnicd.sock"), log: &syncBuf{}, done: make(chan error, 1)}
	args := append([]string{"--transport", "kernel", "--listen", "127.0.0.1:0", "--metrics", "127.0.0.1:0", "--socket", d.socket,
		"--hugepages", "off"}, extra...)
	d.cmd = exec.Command(xrnicd, args...)
	d.cmd.Stdout, d.cmd.Stderr = d.log, d.log
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { d.done <- d.cmd.Wait() }()
	t.Cleanup(func() {
		if d.cmd.ProcessState == nil {
			d.cmd.Process.Kill()
			<-d.done
		}
		if t.Failed() {
			l := d.log.String()
			if len(l) > 20000 {
				l = "...\n" + l[len(l)-20000:]
			}
			t.Logf("xrnicd log:\n%s", l)
		}
	})
	deadline := time.Now().Add(15 * time.Second)
	for {
		var st struct {
			Ready   bool   `json:"ready"`
			Listen  string `json:"listen"`
			Metrics string `json:"metrics"`
		}
		out, err := d.ctl("status", "-j")
		if err == nil && json.Unmarshal([]byte(out), &st) == nil && st.Ready {
			d.listen, d.metrics = st.Listen, st.Metrics
			break
		}
		select {
		case err := <-d.done:
			t.Fatalf("xrnicd exited during start-up: %v\n%s", err, d.log.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("xrnicd not ready: %v %s\n%s", err, out, d.log.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	var rs []regionInfo
	out, err := d.ctl("region", "list", "-j")
	if err != nil {
		t.Fatalf("region list: %v", err)
	}
	if err := json.Unmarshal([]byte(out), &rs); err != nil {
		t.Fatalf("region list -j: %v\n%s", err, out)
	}
	d.regions = map[string]regionInfo{}
	for _, r := range rs {
		d.regions[r.Name] = r
	}
	return d
}

// ctl runs xrnicctl against this daemon; err carries stderr.
func (d *daemon) ctl(args ...string) (string, error) {
	cmd := exec.Command(xrnicctl, append([]string{"--socket", d.socket, "--timeout", "10s"}, args...)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("xrnicctl %s: %v: %s", strings.Join(args, " "), err, errb.String())
	}
	return out.String(), nil
}

func (d *daemon) mustCtl(t testing.TB, args ...string) string {
	t.Helper()
	out, err := d.ctl(args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
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
