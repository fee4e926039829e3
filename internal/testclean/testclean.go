// Package testclean is the TestMain of xrnic's privileged test packages:
// it removes what test binaries killed by go test's -timeout left behind,
// before the package's own tests run.
//
// A killed binary runs no cleanup, and what it started keeps running:
// daemons, peers, soak clients, dumpcap, perftest, QEMU; its namespaces
// stay too. Children started through internal/netns die with the binary
// (Pdeathsig), but a grandchild or a child started otherwise would not.
// So Main marks the process: XRNIC_TEST_PIDS lists the PIDs of the test
// binaries a process descends from (every child inherits it), and the
// next Main of any package kills the processes whose list names a test
// binary that is gone, and removes the namespaces (xr...PID-...) of dead
// processes. Hugepage reservations are internal/hugetest's to restore.
package testclean

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"xrnic/internal/netns"
)

// Env is the variable that carries the test binaries' PIDs.
const Env = "XRNIC_TEST_PIDS"

// Main is Prepare, then the tests.
func Main(m *testing.M) {
	Prepare()
	os.Exit(m.Run())
}

// Prepare sweeps what earlier runs left (as root, saying what it did on
// stderr) and marks this process; a package with a TestMain of its own
// calls it first.
func Prepare() {
	if os.Geteuid() == 0 {
		for _, err := range Sweep() {
			fmt.Fprintln(os.Stderr, "testclean:", err)
		}
	}
	Mark()
}

// Mark adds this process's PID to Env, for its children to inherit.
func Mark() {
	pids := os.Getenv(Env)
	if pids != "" {
		pids += ","
	}
	os.Setenv(Env, pids+strconv.Itoa(os.Getpid()))
}

// Sweep kills the leftover processes of dead test binaries and removes
// the namespaces of dead processes; it returns what it did (and what
// failed), one line each.
func Sweep() []error {
	var out []error
	for _, pid := range Orphans() {
		err := syscall.Kill(pid, syscall.SIGKILL)
		if err == nil {
			err = errors.New("killed")
		}
		out = append(out, fmt.Errorf("process %d (%s) left by a killed test binary: %w", pid, comm(pid), err))
	}
	if err := netns.RemoveStaleFamily("xr"); err != nil {
		out = append(out, err)
	}
	return out
}

// Orphans lists the processes whose Env names a test binary that is gone.
func Orphans() []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		env, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if err != nil {
			continue
		}
		for _, kv := range bytes.Split(env, []byte{0}) {
			v, ok := bytes.CutPrefix(kv, []byte(Env+"="))
			if !ok {
				continue
			}
			for _, p := range strings.Split(string(v), ",") {
				if n, err := strconv.Atoi(p); err == nil && !alive(n) {
					out = append(out, pid)
					break
				}
			}
			break
		}
	}
	return out
}

func alive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

func comm(pid int) string {
	b, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "comm"))
	return strings.TrimSpace(string(b))
}
