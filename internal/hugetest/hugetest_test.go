package hugetest

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"xrnic/internal/require"
)

const size2M = 2 << 20

const sample = `55d0c0a00000-55d0c0a21000 rw-p 00000000 00:00 0                          [heap]
Size:                132 kB
KernelPageSize:        4 kB
MMUPageSize:           4 kB
Rss:                   8 kB
AnonHugePages:         0 kB
Private_Hugetlb:       0 kB
THPeligible:    0
VmFlags: rd wr mr mw me ac sd
7f3a40000000-7f3a40600000 rw-p 00000000 00:10 1038                       /anon_hugepage (deleted)
Size:               6144 kB
KernelPageSize:     2048 kB
MMUPageSize:        2048 kB
Rss:                   0 kB
AnonHugePages:         0 kB
ShmemPmdMapped:        0 kB
Shared_Hugetlb:        0 kB
Private_Hugetlb:    4096 kB
VmFlags: rd wr mr mw me de ht sd
7f3a50000000-7f3a50800000 rw-s 00000000 00:01 2051                       /memfd:xrnic test (deleted)
KernelPageSize:        4 kB
ShmemPmdMapped:     4096 kB
VmFlags: rd wr sh mr mw me ms hg sd
7f3a60000000-7f3a60001000 r--p 00000000 00:00 0 
KernelPageSize:        4 kB
VmFlags: rd mr mw me sd
`

func TestParseSmaps(t *testing.T) {
	ms, err := ParseSmaps([]byte(sample))
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 4 {
		t.Fatalf("%d mappings: %v", len(ms), ms)
	}
	h := ms[1]
	if h.Start != 0x7f3a40000000 || h.Size() != 6<<20 || h.Path != "/anon_hugepage (deleted)" || !h.Hugetlb() ||
		h.KernelPageSize != size2M || h.HugetlbBytes() != 4<<20 || h.Rss != 0 {
		t.Errorf("hugetlb mapping %v", h)
	}
	if ms[0].Path != "[heap]" || ms[0].Hugetlb() || ms[0].Rss != 8<<10 {
		t.Errorf("heap %v", ms[0])
	}
	if m := ms[2]; m.Path != "/memfd:xrnic test (deleted)" || !m.Flag("hg") || m.THPBytes() != 4<<20 {
		t.Errorf("memfd %v", m)
	}
	if ms[3].Path != "" || ms[3].Perms != "r--p" {
		t.Errorf("anonymous %v", ms[3])
	}
	ft := &fakeT{TB: t}
	if AssertHugetlb(ft, h, size2M, 6<<20) || !strings.Contains(ft.msg, "4096 kB of hugetlb pages faulted in, want 6144 kB") {
		t.Errorf("AssertHugetlb of a partly faulted mapping: %q", ft.msg)
	}
	ft = &fakeT{TB: t}
	if !AssertHugetlb(ft, h, size2M, 4<<20) || ft.msg != "" {
		t.Errorf("AssertHugetlb: %q", ft.msg)
	}
	ft = &fakeT{TB: t}
	if AssertNotHugetlb(ft, h) || !AssertTHP(ft, ms[2], true) || AssertTHP(ft, ms[0], false) {
		t.Errorf("AssertNotHugetlb/AssertTHP: %q", ft.msg)
	}
	for _, bad := range []string{"Size: 4 kB\n", "zz-yy rw-p 0 0 0\n"} {
		if _, err := ParseSmaps([]byte(bad)); err == nil {
			t.Errorf("ParseSmaps(%q) accepted", bad)
		}
	}
}

// fakeT records Errorf instead of failing.
type fakeT struct {
	testing.TB
	msg string
}

func (f *fakeT) Helper() {}
func (f *fakeT) Errorf(format string, args ...any) {
	f.msg += fmt.Sprintf(format, args...) + "\n"
}

// TestHugetlbMappingOracle: what the assertions read from smaps for a
// hugetlb mapping this test makes itself, before and after faulting and
// after unmapping; MAP_NORESERVE shows as the nr VmFlag.
func TestHugetlbMappingOracle(t *testing.T) {
	Reserve(t, size2M, 3)
	b, err := unix.Mmap(-1, 0, 2*size2M, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_HUGETLB|unix.MAP_HUGE_2MB)
	if err != nil {
		t.Fatalf("mmap 2 hugetlb pages after reserving 3: %v", err)
	}
	m := MappingOf(t, b)
	if m.Size() != 2*size2M {
		t.Errorf("VMA %v, want 4 MiB", m)
	}
	AssertHugetlb(t, m, size2M, 0)
	b[0], b[size2M] = 1, 1
	AssertHugetlb(t, MappingOf(t, b), size2M, 2*size2M)
	if err := unix.Munmap(b); err != nil {
		t.Fatal(err)
	}
	AssertReleased(t, 0, m)

	nr, err := unix.Mmap(-1, 0, size2M, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_HUGETLB|unix.MAP_HUGE_2MB|unix.MAP_NORESERVE)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(nr)
	if m := MappingOf(t, nr); !m.Hugetlb() || !m.Flag("nr") {
		t.Errorf("MAP_NORESERVE hugetlb mapping: %v", m)
	}
	ft := &fakeT{TB: t}
	if AssertHugetlb(ft, MappingOf(t, nr), size2M, 0) {
		t.Error("AssertHugetlb accepted a MAP_NORESERVE mapping")
	}
}

func TestMappingStartingWith(t *testing.T) {
	require.Root(t, "read /proc/PID/mem of a child")
	cmd := exec.Command(os.Args[0], "-test.run=^TestChildMarker$")
	cmd.Env = append(os.Environ(), "HUGETEST_CHILD=marker")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	if l := readLine(t, out); l != "ready" {
		t.Fatalf("child: %q", l)
	}
	m := MappingStartingWith(t, cmd.Process.Pid, []byte("xrnic-hugetest-marker"))
	if m.Size() != 64<<10 || m.Hugetlb() {
		t.Errorf("child's marked mapping %v", m)
	}
	cmd.Process.Kill()
	cmd.Wait()
	if !AssertReleased(t, cmd.Process.Pid, m) {
		t.Error("a reaped process still has mappings")
	}
}

func TestChildMarker(t *testing.T) {
	if os.Getenv("HUGETEST_CHILD") != "marker" {
		t.Skip("the child of TestMappingStartingWith")
	}
	// Shared: a VMA of its own, never merged with a neighbour.
	b, err := unix.Mmap(-1, 0, 64<<10, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	copy(b, "xrnic-hugetest-marker")
	os.Stdout.WriteString("ready\n")
	time.Sleep(time.Minute)
}

func readLine(t *testing.T, r interface{ Read([]byte) (int, error) }) string {
	t.Helper()
	lines := make(chan string, 1)
	go func() {
		s := bufio.NewScanner(r)
		s.Scan()
		lines <- s.Text()
	}()
	select {
	case l := <-lines:
		return l
	case <-time.After(30 * time.Second):
		t.Fatal("child did not report")
		return ""
	}
}

// TestLockReentrant: a second Lock in the test and a Lock in a subtest
// return at once.
func TestLockReentrant(t *testing.T) {
	Lock(t)
	done := make(chan bool)
	go func() {
		Lock(t)
		t.Run("sub", func(t *testing.T) { Lock(t) })
		done <- true
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Lock is not reentrant")
	}
}

// TestShare: the shared lock admits other sharers, not an exclusive
// holder; Share inside a holder of Lock returns at once.
func TestShare(t *testing.T) {
	t.Run("shared", func(t *testing.T) {
		Share(t)
		Share(t)
		f, err := os.Open(LockPath())
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); !errors.Is(err, unix.EWOULDBLOCK) {
			t.Errorf("exclusive flock while shared: %v, want EWOULDBLOCK", err)
		}
		if err := unix.Flock(int(f.Fd()), unix.LOCK_SH|unix.LOCK_NB); err != nil {
			t.Errorf("shared flock while shared: %v", err)
		}
	})
	t.Run("inside Lock", func(t *testing.T) {
		Lock(t)
		done := make(chan bool)
		go func() {
			Share(t)
			done <- true
		}()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("Share inside Lock blocks")
		}
	})
}

// TestStaleChangesRestored is the go test -timeout case: a test process
// that raised a pool and changed a THP mode is killed while it holds the
// lock; the next Lock restores both from the state file.
func TestStaleChangesRestored(t *testing.T) {
	require.Root(t, "change hugepage pools")
	if _, err := ReadPool(size2M); err != nil {
		require.Unavailable(t, "%v", err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestChildReserve$")
	cmd.Env = append(os.Environ(), "HUGETEST_CHILD=reserve")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	// The child may wait for the lock behind other test processes.
	if l := readLine(t, out); l != "ready" {
		t.Fatalf("child: %q", l)
	}
	// While the child runs, the lock is taken and its changes recorded.
	f, err := os.Open(LockPath())
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); !errors.Is(err, unix.EWOULDBLOCK) {
		t.Errorf("flock of the lock held by the child: %v, want EWOULDBLOCK", err)
	}
	f.Close()
	cs, err := readState(heldDirOf())
	if err != nil {
		t.Fatal(err)
	}
	var mine []change
	for _, c := range cs {
		if c.pid == cmd.Process.Pid {
			mine = append(mine, c)
		}
	}
	if len(mine) != 2 || !strings.HasSuffix(mine[0].file, "hugepages-2048kB/nr_hugepages") || !strings.HasSuffix(mine[1].file, "shmem_enabled") {
		t.Fatalf("state file entries of the child: %v", mine)
	}
	if got := THPMode("shmem_enabled"); got != "within_size" {
		t.Errorf("shmem_enabled %q while the child runs", got)
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()

	Lock(t) // restores
	wantNr, _ := strconv.Atoi(mine[0].old)
	if p := mustReadPool(t, size2M); p.Persistent() != wantNr {
		t.Errorf("after the killed child: %v, want nr_hugepages %d", p, wantNr)
	}
	if got := THPMode("shmem_enabled"); got != mine[1].old {
		t.Errorf("shmem_enabled %q after the killed child, want %q", got, mine[1].old)
	}
	cs, _ = readState(heldDirOf())
	for _, c := range cs {
		if c.pid == cmd.Process.Pid {
			t.Errorf("state entry of the killed child left: %v", c)
		}
	}
}

func heldDirOf() string {
	if d := heldDir(); d != "" {
		return d
	}
	return strings.TrimSuffix(LockPath(), "/"+lockName)
}

func TestChildReserve(t *testing.T) {
	if os.Getenv("HUGETEST_CHILD") != "reserve" {
		t.Skip("the child of TestStaleChangesRestored")
	}
	Reserve(t, size2M, 1)
	SetTHP(t, "shmem_enabled", "within_size")
	os.Stdout.WriteString("ready\n")
	time.Sleep(time.Minute)
}
