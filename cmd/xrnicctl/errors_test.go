package main

import (
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"xrnic/internal/daemontest"
	"xrnic/internal/require"
)

// TestErrorsNameTheFix: against a real xrnicd on loopback (unprivileged),
// a misaligned atomic says the TO must be aligned, and a port that is not
// iWARP says so quickly, well within --timeout.
func TestErrorsNameTheFix(t *testing.T) {
	if testing.Short() { // -short: not about the machine
		t.Skip("starts xrnicd")
	}
	d := daemontest.Start(t, daemontest.Options{Args: []string{"--listen", "127.0.0.1:0", "--metrics", "off",
		"--region", "counter:4K:rwa", "--hugepages", "off"}, CtlTimeout: 10 * time.Second})
	defer d.Stop(t, 20*time.Second)
	r := d.Regions["counter"]
	failsWith := func(want string, args ...string) time.Duration {
		t.Helper()
		start := time.Now()
		out, err := d.Ctl.Run(args...)
		if err == nil {
			t.Fatalf("xrnicctl %v succeeded (%q); want %q", args, out, want)
		}
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("xrnicctl %v: %v; want it to say %q", args, err, want)
		}
		return time.Since(start)
	}

	// RFC 7306 §8.2: the Terminate RDMAP / Remote Operation / 0x07.
	d.Ctl.Must(t, "fetchadd", d.Listen, r.STag, "8", "1")
	failsWith("fetchadd: TO must be 8-byte aligned: the peer refused TO 0x3", "fetchadd", d.Listen, r.STag, "3", "1")
	failsWith("RDMAP/0x2/0x07", "fetchadd", d.Listen, r.STag, "3", "1")
	failsWith("cmpswap: TO must be 8-byte aligned: the peer refused TO 0xc", "cmpswap", d.Listen, r.STag, "0xc", "0", "1")

	// Plain TCP servers: one silent, one closing at once, one answering
	// in another protocol.
	const noReply = "no MPA reply: not an iWARP endpoint?"
	for _, mode := range []string{"silent", "close", "http"} {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				switch mode {
				case "close":
					c.Close()
				case "http":
					c.Write([]byte("HTTP/1.1 400 Bad Request\r\nConnection: close\r\n\r\n"))
					c.Close()
				default:
					defer c.Close()
				}
			}
		}()
		// --timeout is 10 s; the MPA Reply is awaited --mpa-timeout (3 s):
		// the message, not the time taken, shows which ended the wait.
		took := failsWith(noReply, "probe", ln.Addr().String())
		t.Logf("%s port: xrnicctl said %q after %v", mode, noReply, took.Round(time.Millisecond))
		failsWith(noReply, "fetchadd", ln.Addr().String(), r.STag, "0", "1")
	}
}

// TestIntegrationSocketPermission: a user who may not use the control
// socket is told the fix, both when the file permissions refuse the
// connection (EACCES) and when the daemon closes a refused user at once.
// Root only (runs xrnicctl as nobody).
func TestIntegrationSocketPermission(t *testing.T) {
	require.Root(t, "run xrnicctl as another user (nobody)")
	u, err := user.Lookup("nobody")
	require.NoError(t, err, "needs the user nobody (Debian's base-passwd has it)")
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	d := daemontest.Start(t, daemontest.Options{Args: []string{"--listen", "127.0.0.1:0", "--metrics", "off", "--hugepages", "off"}})
	defer d.Stop(t, 20*time.Second)
	for p := d.Socket; p != "/" && p != "."; p = filepath.Dir(p) {
		if p != d.Socket {
			if fi, err := os.Stat(p); err == nil {
				os.Chmod(p, fi.Mode().Perm()|0o111) // nobody may reach the socket
			}
		}
	}
	asNobody := func() string {
		cmd := exec.Command(daemontest.Build(t).Xrnicctl, "--socket", d.Socket, "--timeout", "5s", "status")
		cmd.Dir = "/"
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}}
		out, err := cmd.CombinedOutput()
		if err == nil {
			t.Fatalf("xrnicctl as nobody succeeded:\n%s", out)
		}
		return string(out)
	}
	// Mode 0660, owned by root: connect fails with EACCES.
	want := "permission denied on " + d.Socket + ": run as root or as a member of the socket's group (xrnicd --socket-group)"
	if out := asNobody(); !strings.Contains(out, want) || strings.Contains(out, "is it running?") {
		t.Errorf("EACCES: %s\nwant %q", out, want)
	}
	// Open to everybody: the daemon closes the refused user at accept.
	os.Chmod(d.Socket, 0o666)
	want = "run as root, as the daemon's user, or as a member of the socket's group: xrnicd --socket-group"
	if out := asNobody(); !strings.Contains(out, want) || !strings.Contains(out, d.Socket) || strings.Contains(out, "is it running?") {
		t.Errorf("refused user: %s\nwant %q and the socket", out, want)
	}
}
