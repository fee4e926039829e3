package abitest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestSignalMask: in a process using the ABI (Debian's rping -s, waiting
// on loopback), the engine's threads block the asynchronous signals and
// the application's main thread does not, so that a handler installed
// without SA_ONSTACK (perftest -D's SIGALRM) never runs on a goroutine
// stack: the kernel delivers such signals to the application's threads.
func TestSignalMask(t *testing.T) {
	lib := requireLibs(t)
	requireBins(t, "rping")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "rping", "-s", "-a", "127.0.0.1", "-p", strconv.Itoa(port))
	cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+lib)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	pid := cmd.Process.Pid
	alrm := uint64(1) << (syscall.SIGALRM - 1)
	usr1 := uint64(1) << (syscall.SIGUSR1 - 1)
	var blocked, free []string
	for deadline := time.Now().Add(10 * time.Second); ; {
		blocked, free = nil, nil
		tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*", pid))
		var mainMask uint64
		for _, task := range tasks {
			m, err := sigBlk(filepath.Join(task, "status"))
			if err != nil {
				continue
			}
			tid := filepath.Base(task)
			if tid == strconv.Itoa(pid) {
				mainMask = m
				continue
			}
			if m&alrm != 0 && m&usr1 != 0 {
				blocked = append(blocked, tid)
			} else {
				free = append(free, fmt.Sprintf("%s:%x", tid, m))
			}
		}
		// While the libraries load, the runtime's thread creation
		// blocks every signal on the main thread for a moment; only a
		// mask that stays blocked is the bug. The Go runtime runs
		// several threads once the device is open.
		if len(blocked) >= 3 && mainMask&alrm == 0 {
			break
		}
		if time.Now().After(deadline) {
			if mainMask&alrm != 0 {
				t.Fatalf("the main thread still blocks SIGALRM after 10 s (SigBlk %x): the loading thread's mask was not given back", mainMask)
			}
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("threads blocking SIGALRM and SIGUSR1: %v; others (the application's): %v", blocked, free)
	if len(blocked) < 3 {
		t.Fatalf("only %d threads block SIGALRM (want the engine's, at least 3); others %v", len(blocked), free)
	}
}

// sigBlk reads the SigBlk mask of a /proc status file.
func sigBlk(path string) (uint64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "SigBlk:"); ok {
			return strconv.ParseUint(strings.TrimSpace(v), 16, 64)
		}
	}
	return 0, fmt.Errorf("%s: no SigBlk", path)
}

// TestSignalOnStack: a handler the application installs without
// SA_ONSTACK, with signal() or sigaction(), gets it (abi/ibverbs/signals.c),
// and still runs.
func TestSignalOnStack(t *testing.T) {
	lib := requireLibs(t)
	bin := buildC(t, "sigonstack")
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+lib)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", bin, err, out)
	}
	for _, want := range []string{"SIGALRM onstack 1", "SIGUSR2 onstack 1", "handled 1"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("no %q in:\n%s", want, out)
		}
	}
}
