package reliability

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"xrnic/internal/daemontest"
	"xrnic/internal/netns"
	"xrnic/internal/require"
)

// unitCapabilities reads AmbientCapabilities from the shipped systemd
// unit: the set the test grants is the one the documentation promises.
func unitCapabilities(t *testing.T) []string {
	t.Helper()
	f, err := os.Open("../deploy/systemd/xrnicd.service")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for sc := bufio.NewScanner(f); sc.Scan(); {
		if v, ok := strings.CutPrefix(sc.Text(), "AmbientCapabilities="); ok {
			var caps []string
			for _, c := range strings.Fields(v) {
				caps = append(caps, strings.ToLower(strings.TrimPrefix(c, "CAP_")))
			}
			return caps
		}
	}
	t.Fatal("the unit has no AmbientCapabilities line")
	return nil
}

// TestIntegrationDocumentedCapabilities (issue 15): xrnicd runs the afxdp
// transport as a user that is not root, holding exactly the capabilities
// of deploy/systemd/xrnicd.service (setpriv), in a network namespace, and
// serves a FetchAdd from the other host. It once failed with "operation
// not permitted": the transport moved its threads into the namespace
// with setns (CAP_SYS_ADMIN) even when they were there already, and the
// unit lacked CAP_PERFMON, without which the verifier refuses the XDP
// program to a process that is not root.
func TestIntegrationDocumentedCapabilities(t *testing.T) {
	require.Tool(t, "setpriv", "util-linux")
	e := newWireEnv(t, false)
	bins := daemontest.Build(t)
	// A directory user nobody may use: the binary, the socket, the locks.
	dir, err := os.MkdirTemp("", "xrnic-caps-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	bin := filepath.Join(dir, "xrnicd")
	b, err := os.ReadFile(bins.Xrnicd)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	os.Chmod(dir, 0o755)
	os.Chown(dir, 65534, 65534)
	caps := "-all"
	for _, c := range unitCapabilities(t) {
		caps += ",+" + c
	}
	sock := filepath.Join(dir, "xrnicd.sock")
	listen := rlIPA.String() + ":7306"
	cmd := netns.Command(e.nsA, "setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
		"--inh-caps="+caps, "--ambient-caps="+caps, "--bounding-set="+caps, "--",
		bin, "--transport", "afxdp", "--iface", e.devA, "--listen", listen, "--metrics", "off",
		"--socket", sock, "--lock-dir", filepath.Join(dir, "lock"), "--region", "counter:4K:rwa", "--hugepages", "off")
	var log daemontest.Buffer
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(20 * time.Second):
			cmd.Process.Kill()
		}
	})
	ctl := daemontest.Ctl{Socket: sock}
	var st struct {
		Ready     bool   `json:"ready"`
		Transport string `json:"transport"`
	}
	for deadline := time.Now().Add(20 * time.Second); ; {
		out, err := ctl.Run("status", "-j")
		if err == nil && json.Unmarshal([]byte(out), &st) == nil && st.Ready {
			break
		}
		select {
		case err := <-exited:
			t.Fatalf("xrnicd with the unit's capabilities (%s) exited: %v\n%s", caps, err, log.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("xrnicd not ready: %v\n%s", err, log.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if st.Transport != "afxdp" {
		t.Fatalf("transport %q, want afxdp\n%s", st.Transport, log.String())
	}
	out, err := ctl.Run("region", "list", "-j")
	if err != nil {
		t.Fatal(err)
	}
	regs, err := daemontest.ParseRegions(out)
	if err != nil {
		t.Fatal(err)
	}
	peer := daemontest.Ctl{Socket: sock, Netns: e.nsB}
	for want := range 3 {
		out, err := peer.Run("fetchadd", listen, regs["counter"].STag, "0", "1")
		if err != nil || !strings.Contains(out, fmt.Sprintf("original 0x%016x (%d)", want, want)) {
			t.Fatalf("fetchadd %d from the other host: %q %v\n%s", want, out, err, log.String())
		}
	}
	// The daemon runs as nobody with just those capabilities.
	status, err := os.ReadFile("/proc/" + strconv.Itoa(cmd.Process.Pid) + "/status")
	if err == nil && !bytes.Contains(status, []byte("Uid:\t65534")) {
		t.Errorf("xrnicd is not running as nobody:\n%s", status)
	}
	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("xrnicd on SIGTERM: %v\n%s", err, log.String())
		}
	case <-time.After(20 * time.Second):
		t.Error("xrnicd did not stop on SIGTERM")
	}
}
