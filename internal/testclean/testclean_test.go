package testclean

import (
	"os"
	"os/exec"
	"slices"
	"strconv"
	"testing"
	"time"

	"xrnic/internal/netns"
	"xrnic/internal/require"
)

// deadPID returns the PID of a process that has exited and been reaped.
func deadPID(t *testing.T) int {
	t.Helper()
	c := exec.Command("true")
	if err := c.Run(); err != nil {
		t.Fatal(err)
	}
	return c.Process.Pid
}

// TestSweepKillsOrphans: a process marked by a dead test binary is found
// and killed; one marked only by live ones (this process) is not.
func TestSweepKillsOrphans(t *testing.T) {
	dead := deadPID(t)
	start := func(pids string) *exec.Cmd {
		c := exec.Command("sleep", "60")
		c.Env = append(os.Environ(), Env+"="+pids)
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Process.Kill(); c.Wait() })
		return c
	}
	me := strconv.Itoa(os.Getpid())
	orphan := start(me + "," + strconv.Itoa(dead)) // a grandchild of a killed binary
	kept := start(me)
	// Until exec, /proc shows the parent's environment.
	got := Orphans()
	for deadline := time.Now().Add(10 * time.Second); !slices.Contains(got, orphan.Process.Pid) && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
		got = Orphans()
	}
	if !slices.Contains(got, orphan.Process.Pid) || slices.Contains(got, kept.Process.Pid) {
		t.Fatalf("orphans %v: want %d (marked by dead PID %d) and not %d", got, orphan.Process.Pid, dead, kept.Process.Pid)
	}
	Sweep()
	if err := orphan.Wait(); err == nil {
		t.Fatal("the orphan exited cleanly: not killed")
	}
	if kept.ProcessState != nil {
		t.Fatal("the live binary's child is gone")
	}
}

// TestSweepRemovesStaleNamespaces: a namespace named for a dead process
// goes, one of a live process (this one, made here) stays.
func TestSweepRemovesStaleNamespaces(t *testing.T) {
	require.Root(t, "create network namespaces")
	stale := "xrnicclean-" + strconv.Itoa(deadPID(t)) + "-1-a"
	if err := netns.IP("netns", "add", stale); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { netns.IP("netns", "del", stale) })
	if err := netns.RemoveStaleFamily("xr"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat("/run/netns/" + stale); !os.IsNotExist(err) {
		t.Fatalf("%s still there: %v", stale, err)
	}
}
