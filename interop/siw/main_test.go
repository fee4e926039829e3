package siw

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"xrnic/internal/require"
	"xrnic/internal/testclean"
)

// guest is the one guest the tests share (booting takes seconds under
// TCG); bootErr says why there is none.
var (
	guest   *Guest
	bootErr error
)

// errNotAsked: the suite runs only when asked for (XRNIC_INTEROP=1, as
// make interop does); make unit's go test ./... skips it, also under CI.
var errNotAsked = errors.New("set XRNIC_INTEROP=1 or run `make interop` (boots a QEMU guest)")

func TestMain(m *testing.M) {
	testclean.Prepare()
	code := func() int {
		switch {
		case os.Getenv("XRNIC_INTEROP") == "":
			bootErr = errNotAsked
		case os.Geteuid() != 0:
			bootErr = fmt.Errorf("needs root (network namespaces, a tap; CI runs it as root)")
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
	t.Cleanup(func() { reboot(t) })
}

func reboot(t *testing.T) {
	guest.Close()
	if err := boot(); err != nil {
		guest = nil
		rebootErr = err
		t.Errorf("reboot the siw guest: %v", err)
	}
}

// rebootErr is why the guest could not be booted anew.
var rebootErr error

// needGuest skips the test when no guest could be booted for a reason
// other than a failure (fails it under CI=true, except when the suite was
// not asked for: package require). A guest that stopped answering is booted anew
// first (the case that found it so logged its post-mortem): one dead
// guest fails one case, not every case after it.
func needGuest(t *testing.T) *Guest {
	t.Helper()
	if rebootErr != nil {
		t.Fatalf("no siw guest: booting it anew failed: %v", rebootErr)
	}
	if guest == nil {
		if bootErr == errNotAsked {
			// An opt-in, not about the machine: make interop asks for it.
			t.Skipf("siw interop: %v", bootErr)
		}
		require.Unavailable(t, "siw interop: %v", bootErr)
	}
	if guest.Dead() {
		t.Logf("booting the siw guest anew after an earlier case's post-mortem")
		reboot(t)
	} else if err := guest.Alive(context.Background(), 20*time.Second); err != nil {
		t.Logf("the siw guest stopped answering (%v): booting it anew; what became of it:\n%s", err, guest.PostMortem())
		reboot(t)
	}
	if guest == nil {
		t.FailNow()
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

// TestPostMortem: a guest that stops answering (here its eth0 goes down)
// gets a post-mortem that says what became of it, and the next case gets
// a fresh guest.
func TestPostMortem(t *testing.T) {
	g := needGuest(t)
	if _, err := g.Start(ctxT(t, time.Minute), Cmd{Args: []string{"sh", "-c", "sleep 1; ip link set eth0 down"}}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	var err error
	for err == nil && time.Now().Before(deadline) {
		time.Sleep(500 * time.Millisecond)
		err = g.Alive(context.Background(), 5*time.Second)
	}
	if err == nil {
		t.Fatal("the guest still answers with its eth0 down")
	}
	pm := g.PostMortem()
	t.Logf("Alive: %v; post-mortem:\n%s", err, pm)
	// The guest's eth0 is down, not the tap: QEMU still holds it.
	want := []string{"info status:\nVM status: running", "RIP=", "NMI received for unknown reason", "Kernel panic",
		"carrier_changes: ", "qemu's descriptors of " + g.Tap + ": fd "}
	for _, want := range want {
		if !strings.Contains(pm, want) {
			t.Errorf("the post-mortem lacks %q", want)
		}
	}
	if g2 := needGuest(t); g2 == g || g2.Alive(context.Background(), 20*time.Second) != nil {
		t.Fatalf("needGuest did not boot a fresh guest")
	}
}
