package main

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"xrnic/internal/daemontest"
)

// notifySocket is a fake systemd notification socket: a unix datagram
// socket whose messages arrive on a channel.
func notifySocket(t *testing.T, name string) (*net.UnixConn, <-chan string) {
	t.Helper()
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: name, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	ch := make(chan string, 16)
	go func() {
		defer close(ch)
		buf := make([]byte, 4096)
		for {
			n, err := c.Read(buf)
			if err != nil {
				return
			}
			ch <- string(buf[:n])
		}
	}()
	return c, ch
}

func receive(t *testing.T, ch <-chan string, within time.Duration) (string, bool) {
	t.Helper()
	select {
	case m, ok := <-ch:
		return m, ok
	case <-time.After(within):
		return "", false
	}
}

func TestSdNotify(t *testing.T) {
	t.Setenv("NOTIFY_SOCKET", "")
	if err := sdNotify("READY=1"); err != nil {
		t.Errorf("without NOTIFY_SOCKET: %v, want nil (nothing to notify)", err)
	}

	path := filepath.Join(t.TempDir(), "notify")
	_, ch := notifySocket(t, path)
	t.Setenv("NOTIFY_SOCKET", path)
	for _, want := range []string{"READY=1", "STOPPING=1"} {
		if err := sdNotify(want); err != nil {
			t.Fatalf("sdNotify(%q) to %s: %v", want, path, err)
		}
		if got, _ := receive(t, ch, 5*time.Second); got != want {
			t.Errorf("socket %s received %q, want %q", path, got, want)
		}
	}

	// systemd also hands out abstract names, written with a leading '@'.
	abstract := fmt.Sprintf("@xrnic-notify-test-%d", os.Getpid())
	_, ach := notifySocket(t, abstract)
	t.Setenv("NOTIFY_SOCKET", abstract)
	if err := sdNotify("READY=1"); err != nil {
		t.Fatalf("sdNotify to %s: %v", abstract, err)
	}
	if got, _ := receive(t, ach, 5*time.Second); got != "READY=1" {
		t.Errorf("abstract socket %s received %q, want READY=1", abstract, got)
	}

	t.Setenv("NOTIFY_SOCKET", filepath.Join(t.TempDir(), "nobody-listens"))
	if err := sdNotify("READY=1"); err == nil {
		t.Error("a NOTIFY_SOCKET nobody listens on: no error")
	}
	t.Setenv("NOTIFY_SOCKET", "vsock:2:1234")
	if err := sdNotify("READY=1"); err == nil {
		t.Error("NOTIFY_SOCKET vsock:2:1234: no error, want unsupported")
	}
}

// TestNotifyReady runs xrnicd as systemd runs a Type=notify unit: READY=1
// must come only once the daemon serves (its control socket answers and
// says ready, the listener is up), STOPPING=1 when SIGTERM starts the
// shutdown, and nothing else.
func TestNotifyReady(t *testing.T) {
	b := daemontest.Build(t)
	dir := t.TempDir()
	_, ch := notifySocket(t, filepath.Join(dir, "notify"))
	sock := filepath.Join(dir, "xrnicd.sock")
	cmd := exec.Command(b.Xrnicd, "--listen", "127.0.0.1:0", "--metrics", "off", "--socket", sock, "--region", "counter:4K:rwa", "--hugepages", "off")
	cmd.Env = append(os.Environ(), "NOTIFY_SOCKET="+filepath.Join(dir, "notify"))
	log := &daemontest.Buffer{}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	defer func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("xrnicd log:\n%s", log.String())
		}
	}()

	var msg string
	select {
	case msg = <-ch:
	case err := <-done:
		t.Fatalf("xrnicd exited before notifying: %v", err)
	case <-time.After(15 * time.Second):
		t.Fatal("no notification within 15 s of the start")
	}
	if msg != "READY=1" {
		t.Fatalf("first notification %q, want READY=1", msg)
	}
	// At READY=1 the daemon serves already: no waiting, no retry.
	ctl := daemontest.Ctl{Socket: sock}
	out, err := ctl.Run("status", "-j")
	if err != nil {
		t.Fatalf("status right after READY=1: %v %s", err, out)
	}
	var st struct {
		Ready  bool   `json:"ready"`
		Listen string `json:"listen"`
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil || !st.Ready {
		t.Fatalf("status right after READY=1: %s (%v), want ready", out, err)
	}
	c, err := net.DialTimeout("tcp", st.Listen, 5*time.Second)
	if err != nil {
		t.Fatalf("MPA listener %s right after READY=1: %v", st.Listen, err)
	}
	c.Close()
	if !strings.Contains(log.String(), "xrnicd ready") {
		// The log line precedes the notification; the pipe copy may trail.
		time.Sleep(time.Second)
		if !strings.Contains(log.String(), "xrnicd ready") {
			t.Error(`READY=1 without the "xrnicd ready" log line`)
		}
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if msg, _ := receive(t, ch, 15*time.Second); msg != "STOPPING=1" {
		t.Errorf("after SIGTERM: notification %q, want STOPPING=1", msg)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("xrnicd after SIGTERM: %v, want exit 0", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("xrnicd did not exit within 20 s of SIGTERM")
	}
	select {
	case m := <-ch:
		t.Errorf("notification after STOPPING=1: %q", m)
	default:
	}
}
