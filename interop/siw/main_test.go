package siw

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// guest is the one guest the tests share (booting takes seconds under
// TCG); bootErr says why there is none.
var (
	guest   *Guest
	bootErr error
)

func TestMain(m *testing.M) {
	code := func() int {
		switch {
		case os.Geteuid() != 0:
			bootErr = fmt.Errorf("needs root (network namespaces, a tap)")
		case os.Getenv("XRNIC_INTEROP") == "":
			bootErr = fmt.Errorf("set XRNIC_INTEROP=1 or run `make interop` (boots a QEMU guest)")
		default:
			if _, err := exec.LookPath("qemu-system-x86_64"); err != nil {
				bootErr = ErrNoQEMU
				break
			}
			if bootErr = boot(); bootErr != nil {
				fmt.Fprintf(os.Stderr, "siw guest: %v\n", bootErr)
				return 1
			}
			defer func() { guest.Close() }()
			defer os.Remove(peerBin)
		}
		return m.Run()
	}()
	os.Exit(code)
}

func boot() (err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	guest, err = Boot(ctx, Options{Log: func(f string, a ...any) { fmt.Fprintf(os.Stderr, f+"\n", a...) }}, peerFiles)
	return err
}

// rebootAfter boots the shared guest anew when t ends: for cases that
// leave the guest kernel broken.
func rebootAfter(t *testing.T) {
	t.Cleanup(func() {
		guest.Close()
		if err := boot(); err != nil {
			t.Errorf("reboot the siw guest: %v", err)
		}
	})
}

// needGuest skips the test when no guest could be booted for a reason
// other than a failure.
func needGuest(t *testing.T) *Guest {
	t.Helper()
	if guest == nil {
		t.Skipf("siw interop: %v", bootErr)
	}
	return guest
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// peerFiles compiles the C peer against the guest's rdma-core.
func peerFiles(dir string) (map[string]string, error) {
	rc := filepath.Join(dir, "rdma-core")
	lib := filepath.Join(rc, "usr/lib/x86_64-linux-gnu")
	out := filepath.Join(os.TempDir(), fmt.Sprintf("xrnic-peer-%d", os.Getpid()))
	cmd := exec.Command("gcc", "-O2", "-Wall", "-Werror", "-Wno-unused-parameter", "-o", out, "peer/peer.c",
		"-I"+filepath.Join(rc, "usr/include"), "-L"+lib, "-Wl,-rpath-link,"+lib, "-libverbs", "-lrdmacm")
	if b, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("compile the C peer: %v\n%s", err, b)
	}
	peerBin = out
	return map[string]string{"/usr/bin/xrnic-peer": out}, nil
}

var peerBin string

func TestDevinfo(t *testing.T) {
	g := needGuest(t)
	r, err := g.Run(ctxT(t, time.Minute), Cmd{Args: []string{"ibv_devinfo", "-v"}})
	if err != nil {
		t.Fatal(err)
	}
	if !r.OK() {
		t.Fatalf("ibv_devinfo: %v", r)
	}
	t.Logf("%s", r.Stdout)
}
