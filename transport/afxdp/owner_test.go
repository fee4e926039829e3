package afxdp

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"xrnic/internal/require"
)

// The owner lock on its own (no root needed): a temporary directory, this
// process's network namespace, a made-up ifindex.
func TestOwnerLock(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	ns, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	require.NoError(t, err, "needs /proc/thread-self/ns/net (Linux 3.17 or later with network namespaces, /proc mounted)")
	defer unix.Close(ns)
	l1, err := lockIface(dir, "eth9", ns, 9)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(l1.path)
	if err != nil || strings.TrimSpace(string(b)) != fmt.Sprint(os.Getpid()) {
		t.Fatalf("lock file %s: %q %v: want our pid", l1.path, b, err)
	}
	// A second lock (another open file, as another process has) fails
	// naming us; another ifindex is independent.
	_, err = lockIface(dir, "eth9", ns, 9)
	comm, _ := os.ReadFile("/proc/self/comm")
	want := fmt.Sprintf("another xrnic process (pid %d, %s) holds eth9", os.Getpid(), strings.TrimSpace(string(comm)))
	if !errors.Is(err, ErrInUse) || !strings.Contains(err.Error(), want) {
		t.Fatalf("second lock: %v: want ErrInUse saying %q", err, want)
	}
	l2, err := lockIface(dir, "eth8", ns, 8)
	if err != nil {
		t.Fatalf("lock of another interface: %v", err)
	}
	l2.release()
	// Release removes the file; the next lock succeeds.
	l1.release()
	l1.release()
	if _, err := os.Stat(l1.path); !os.IsNotExist(err) {
		t.Fatalf("lock file after release: %v", err)
	}
	l3, err := lockIface(dir, "eth9", ns, 9)
	if err != nil {
		t.Fatalf("lock after release: %v", err)
	}
	l3.release()
	// A file left by a dead owner (its pid, no lock) is taken over.
	if err := os.WriteFile(l1.path, []byte("999999999\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	l4, err := lockIface(dir, "eth9", ns, 9)
	if err != nil {
		t.Fatalf("lock over a dead owner's file: %v", err)
	}
	b, _ = os.ReadFile(l4.path)
	if strings.TrimSpace(string(b)) != fmt.Sprint(os.Getpid()) {
		t.Errorf("lock file after taking it over: %q", b)
	}
	l4.release()
}

// A device without ETHTOOL_GCHANNELS (loopback) is not refused by the
// queue check.
func TestCheckQueuesNoChannels(t *testing.T) {
	if err := checkQueues("lo", 4); err != nil {
		t.Fatalf("checkQueues(lo): %v", err)
	}
}
