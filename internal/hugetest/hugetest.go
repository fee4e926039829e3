// Package hugetest is the one place where xrnic's tests touch the host's
// hugepage state. `go test ./...` runs packages in parallel processes, and
// every engine region takes 2 MiB pages when some are free, so a test that
// raises a pool and then reads HugePages_Free or free_hugepages races the
// other packages' tests. Here:
//
//   - [Lock] serialises the tests that change or depend on the pools, in
//     this process and across processes: an exclusive flock(2) on
//     /run/xrnic-hugepages.lock (os.TempDir() when /run is not usable),
//     held until the test's cleanup. [Share] takes it shared, for tests
//     that only map memory that may land on free hugepages: they run
//     together, but not while a test has pages reserved for itself.
//   - [Set], [Reserve], [TryReserve] and [SetTHP] change a pool or a
//     transparent hugepage mode under the lock and restore the old value
//     at cleanup, also when the test fails. Each change is first recorded
//     in a state file next to the lock (xrnic-hugepages.state: PID, the
//     process's start time, the file, the old value), so a test binary
//     killed by the go test -timeout is undone by the next Lock of any
//     test process, before it does anything else.
//   - [Mappings], [MappingOf] and [MappingStartingWith] read a process's
//     own mappings (/proc/PID/smaps), and [AssertHugetlb], [AssertTHP],
//     [AssertNotHugetlb] and [AssertReleased] prove from them what backs a
//     region: the oracle is the process's VMA (the ht VmFlag,
//     KernelPageSize, Private_Hugetlb + Shared_Hugetlb, AnonHugePages),
//     never a host-wide counter another test may move.
//
// Tests that need root or a pool the kernel lacks go through package
// require: they skip on a developer's machine and fail under CI=true.
package hugetest

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"xrnic/internal/require"
)

const (
	lockName  = "xrnic-hugepages.lock"
	stateName = "xrnic-hugepages.state"
	sysPools  = "/sys/kernel/mm/hugepages/"
	sysTHP    = "/sys/kernel/mm/transparent_hugepage/"
)

// The lock of this process: procMu keeps this process's tests apart the
// way the flock keeps processes apart (a second flock on another
// descriptor of this process would deadlock against our own), and excl
// and shared name the tests that hold it, so that their subtests and a
// second call need nothing more.
var (
	procMu sync.RWMutex
	heldMu sync.Mutex
	excl   struct{ test, dir string }
	shared = map[string]bool{}
)

// LockPath returns the lock file the tests of this process use.
func LockPath() string {
	if os.Geteuid() == 0 {
		if fi, err := os.Stat("/run"); err == nil && fi.IsDir() && unix.Access("/run", unix.W_OK) == nil {
			return filepath.Join("/run", lockName)
		}
	} else if _, err := os.Stat(filepath.Join("/run", lockName)); err == nil {
		// Root's lock exists: a non-root test takes it too (flock needs
		// only a read-only descriptor).
		return filepath.Join("/run", lockName)
	}
	return filepath.Join(os.TempDir(), lockName)
}

// StatePath returns the state file next to the lock.
func StatePath() string { return filepath.Join(filepath.Dir(LockPath()), stateName) }

// within reports whether test name is holder or one of its subtests.
func within(name, holder string) bool {
	return holder != "" && (name == holder || strings.HasPrefix(name, holder+"/"))
}

// holding returns whether name (or a test it is a subtest of) holds the
// lock exclusively, and shared.
func holding(name string) (ex, sh bool) {
	heldMu.Lock()
	defer heldMu.Unlock()
	for h := range shared {
		sh = sh || within(name, h)
	}
	return within(name, excl.test), sh
}

// Lock takes the host-wide hugepage lock exclusively for the rest of t,
// released at t's cleanup; it waits while a test of this or another
// process holds it. Take it before changing a pool or reading one that a
// decision depends on. It first restores what tests of killed processes
// left changed. Calling it again in t or a subtest of the holder does
// nothing; after Share in the same test it fails (take Lock alone).
func Lock(t testing.TB) {
	t.Helper()
	name := t.Name()
	ex, sh := holding(name)
	if ex {
		return
	}
	if sh {
		t.Fatalf("hugetest: Lock in %s, which holds the lock shared: an upgrade would deadlock; call Lock instead of Share", name)
	}
	procMu.Lock()
	path := LockPath()
	f, err := acquire(t, path, unix.LOCK_EX)
	if err != nil {
		procMu.Unlock()
		t.Fatal(err)
	}
	// Who holds it, for the log of a test that waits (read-only for a
	// non-root test, which then leaves the previous holder's line).
	if err := f.Truncate(0); err == nil {
		f.WriteAt([]byte(fmt.Sprintf("pid %d %s %s since %s\n", os.Getpid(), filepath.Base(os.Args[0]), name, time.Now().Format(time.RFC3339))), 0)
	}
	heldMu.Lock()
	excl.test, excl.dir = name, filepath.Dir(path)
	heldMu.Unlock()
	t.Cleanup(func() {
		heldMu.Lock()
		excl.test, excl.dir = "", ""
		heldMu.Unlock()
		flock(f, unix.LOCK_UN)
		f.Close()
		procMu.Unlock()
	})
	restoreStale(t)
}

// Share takes the hugepage lock shared for the rest of t: tests that only
// map memory that may land on hugepages (a daemon with --hugepages prefer)
// run together, but never while a test holds it exclusively, whose
// reserved pages they would take. Inside a holder of Lock it does nothing.
func Share(t testing.TB) {
	t.Helper()
	name := t.Name()
	if ex, sh := holding(name); ex || sh {
		return
	}
	procMu.RLock()
	f, err := acquire(t, LockPath(), unix.LOCK_SH)
	if err != nil {
		procMu.RUnlock()
		t.Fatal(err)
	}
	heldMu.Lock()
	shared[name] = true
	heldMu.Unlock()
	t.Cleanup(func() {
		heldMu.Lock()
		delete(shared, name)
		heldMu.Unlock()
		flock(f, unix.LOCK_UN)
		f.Close()
		procMu.RUnlock()
	})
}

// acquire opens the lock file and flocks it (how: LOCK_EX or LOCK_SH),
// logging when it has to wait.
func acquire(t testing.TB, path string, how int) (*os.File, error) {
	t.Helper()
	f, err := openLock(path)
	if err != nil {
		return nil, fmt.Errorf("hugetest: open the hugepage lock: %w", err)
	}
	if err := flock(f, how|unix.LOCK_NB); err == nil {
		return f, nil
	}
	last, _ := os.ReadFile(path)
	t.Logf("hugetest: waiting for %s (last exclusive holder: %s)", path, strings.TrimSpace(string(last)))
	start := time.Now()
	if err := flock(f, how); err != nil {
		f.Close()
		return nil, fmt.Errorf("hugetest: flock %s: %w", path, err)
	}
	t.Logf("hugetest: got %s after %v", path, time.Since(start).Round(time.Millisecond))
	return f, nil
}

func heldDir() string {
	heldMu.Lock()
	defer heldMu.Unlock()
	return excl.dir
}

func flock(f *os.File, how int) error {
	for {
		err := unix.Flock(int(f.Fd()), how)
		if !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}

// openLock opens (root: creates) the lock file. In a sticky world-writable
// directory (the os.TempDir() fallback) an existing file of another user
// is opened without O_CREAT, which fs.protected_regular would refuse.
func openLock(path string) (*os.File, error) {
	for range 3 {
		f, err := os.OpenFile(path, os.O_RDWR|syscall.O_NOFOLLOW, 0)
		if errors.Is(err, fs.ErrPermission) {
			f, err = os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return f, err
		}
		f, err = os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o644)
		if errors.Is(err, fs.ErrExist) {
			continue // made by another process meanwhile
		}
		if err == nil && os.Geteuid() != 0 {
			f.Chmod(0o666) // past the umask: root may take it after us
		}
		return f, err
	}
	return nil, fmt.Errorf("%s keeps appearing and disappearing", path)
}

// State file: one change per line, "PID START FILE OLD", START being the
// process's start time (field 22 of /proc/PID/stat), so that a reused PID
// is not mistaken for the process that made the change.

type change struct {
	pid   int
	start string
	file  string
	old   string
}

func (c change) String() string { return fmt.Sprintf("%d %s %s %s", c.pid, c.start, c.file, c.old) }

// Only these files are ever written, and only such values: a state file
// line that does not match is ignored.
var (
	changeFile = regexp.MustCompile(`^(` + regexp.QuoteMeta(sysPools) + `hugepages-[0-9]+kB/(nr_hugepages|nr_overcommit_hugepages)|` +
		regexp.QuoteMeta(sysTHP) + `(enabled|shmem_enabled|defrag))$`)
	changeValue = regexp.MustCompile(`^[0-9]+$|^[a-z][a-z+_]*$`)
)

// startTime returns field 22 of /proc/PID/stat, or "" if there is no such
// process.
func startTime(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ""
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return ""
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 {
		return ""
	}
	return f[19] // field 22; f[0] is field 3
}

var myStart = sync.OnceValue(func() string { return startTime(os.Getpid()) })

// readState returns the recorded changes. Lines that are not a change of
// an allowed file are dropped; a state file that root did not write alone
// is ignored (the changes are written by root).
func readState(dir string) ([]change, error) {
	path := filepath.Join(dir, stateName)
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return nil, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG || st.Uid != 0 || st.Mode&0o022 != 0 {
		return nil, fmt.Errorf("%s is not a regular file that only root may write: ignored", path)
	}
	var b bytes.Buffer
	if _, err := b.ReadFrom(f); err != nil {
		return nil, err
	}
	var cs []change
	for _, l := range strings.Split(b.String(), "\n") {
		fl := strings.Fields(l)
		if len(fl) != 4 {
			continue
		}
		pid, err := strconv.Atoi(fl[0])
		if err != nil || pid <= 0 || !changeFile.MatchString(fl[2]) || !changeValue.MatchString(fl[3]) {
			continue
		}
		cs = append(cs, change{pid, fl[1], fl[2], fl[3]})
	}
	return cs, nil
}

// writeState replaces the state file (a new file renamed over it, so a
// kill leaves the old or the new list); no changes remove it.
func writeState(dir string, cs []change) error {
	path := filepath.Join(dir, stateName)
	if len(cs) == 0 {
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		return nil
	}
	var b strings.Builder
	for _, c := range cs {
		b.WriteString(c.String() + "\n")
	}
	tmp := fmt.Sprintf("%s.%d.tmp", path, os.Getpid())
	os.Remove(tmp)
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o644)
	if err != nil {
		return err
	}
	_, err = f.WriteString(b.String())
	if e := f.Sync(); err == nil {
		err = e
	}
	if e := f.Close(); err == nil {
		err = e
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
	}
	return err
}

// restoreStale undoes, newest first, the changes of processes that are
// gone (a test binary killed before its cleanup ran). Only root changes
// pools, so only root restores.
func restoreStale(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		return
	}
	dir := heldDir()
	cs, err := readState(dir)
	if err != nil {
		t.Logf("hugetest: %v", err)
		return
	}
	var keep []change
	restored := false
	for i := len(cs) - 1; i >= 0; i-- {
		c := cs[i]
		if st := startTime(c.pid); st != "" && st == c.start {
			keep = append([]change{c}, keep...)
			continue
		}
		if err := os.WriteFile(c.file, []byte(c.old), 0); err != nil {
			t.Errorf("hugetest: restore %s to %s, left changed by the killed test process %d: %v", c.file, c.old, c.pid, err)
			keep = append([]change{c}, keep...)
			continue
		}
		t.Logf("hugetest: restored %s to %s, left changed by the killed test process %d", c.file, c.old, c.pid)
		restored = true
	}
	if restored || len(keep) != len(cs) {
		if err := writeState(dir, keep); err != nil {
			t.Errorf("hugetest: rewrite %s: %v", filepath.Join(dir, stateName), err)
		}
	}
}

// write writes value into file (one of changeFile) under the lock, after
// recording the old value in the state file, and restores old at t's
// cleanup.
func write(t testing.TB, file, value, old string) {
	t.Helper()
	if !changeFile.MatchString(file) || !changeValue.MatchString(old) {
		t.Fatalf("hugetest: refusing to change %s (old value %q)", file, old)
	}
	Lock(t)
	dir := heldDir()
	c := change{os.Getpid(), myStart(), file, old}
	cs, err := readState(dir)
	if err != nil {
		t.Fatalf("hugetest: %v", err)
	}
	if err := writeState(dir, append(cs, c)); err != nil {
		t.Fatalf("hugetest: record the change of %s in %s: %v", file, filepath.Join(dir, stateName), err)
	}
	t.Cleanup(func() {
		if err := os.WriteFile(file, []byte(old), 0); err != nil {
			t.Errorf("hugetest: restore %s to %s: %v (the next Lock retries)", file, old, err)
			return
		}
		cs, err := readState(dir)
		if err == nil {
			for i := len(cs) - 1; i >= 0; i-- {
				if cs[i] == c {
					cs = append(cs[:i], cs[i+1:]...)
					break
				}
			}
			err = writeState(dir, cs)
		}
		if err != nil {
			t.Errorf("hugetest: drop the change of %s from the state file: %v", file, err)
		}
	})
	if err := os.WriteFile(file, []byte(value), 0); err != nil {
		require.NoError(t, err, "write "+value+" to "+file)
	}
}

// Pool is the kernel's pool of one hugepage size
// (/sys/kernel/mm/hugepages/hugepages-<kB>kB).
type Pool struct {
	PageSize   int    // bytes
	Dir        string // the pool's sysfs directory
	Total      int    // nr_hugepages: persistent and surplus pages
	Free       int    // free_hugepages, including reserved ones
	Resv       int    // resv_hugepages: free pages promised to mappings
	Surplus    int    // surplus_hugepages: overcommitted pages in use
	Overcommit int    // nr_overcommit_hugepages
}

// Persistent is the pool size that nr_hugepages was set to (the value
// vm.nr_hugepages reads for the default size).
func (p Pool) Persistent() int { return p.Total - p.Surplus }

// Available is the number of pages a new mapping may still get.
func (p Pool) Available() int { return p.Free - p.Resv }

func (p Pool) String() string {
	return fmt.Sprintf("%s pool: nr_hugepages %d, free %d, reserved %d, surplus %d, overcommit %d",
		SizeName(p.PageSize), p.Total, p.Free, p.Resv, p.Surplus, p.Overcommit)
}

// SizeName is "2 MiB" for 2<<20.
func SizeName(pageSize int) string {
	switch {
	case pageSize >= 1<<30 && pageSize%(1<<30) == 0:
		return strconv.Itoa(pageSize>>30) + " GiB"
	case pageSize >= 1<<20 && pageSize%(1<<20) == 0:
		return strconv.Itoa(pageSize>>20) + " MiB"
	}
	return strconv.Itoa(pageSize>>10) + " KiB"
}

// PoolDir is the sysfs directory of the pool of pageSize pages.
func PoolDir(pageSize int) string {
	return sysPools + "hugepages-" + strconv.Itoa(pageSize>>10) + "kB"
}

// Supported reports whether the kernel has a pool of pageSize pages (1 GiB
// pages need the CPU flag pdpe1gb).
func Supported(pageSize int) bool {
	_, err := os.Stat(PoolDir(pageSize))
	return err == nil
}

// ReadPool reads the pool of pageSize pages. Its numbers are host-wide:
// decide with them under Lock, never assert on them.
func ReadPool(pageSize int) (Pool, error) {
	p := Pool{PageSize: pageSize, Dir: PoolDir(pageSize)}
	for _, f := range []struct {
		name string
		v    *int
	}{{"nr_hugepages", &p.Total}, {"free_hugepages", &p.Free}, {"resv_hugepages", &p.Resv},
		{"surplus_hugepages", &p.Surplus}, {"nr_overcommit_hugepages", &p.Overcommit}} {
		b, err := os.ReadFile(filepath.Join(p.Dir, f.name))
		if err != nil {
			return p, fmt.Errorf("no %s hugepage pool: %w", SizeName(pageSize), err)
		}
		if *f.v, err = strconv.Atoi(strings.TrimSpace(string(b))); err != nil {
			return p, fmt.Errorf("%s/%s: %w", p.Dir, f.name, err)
		}
	}
	return p, nil
}

// pool reads the pool for a test that changes it: root, the lock, and a
// pool the kernel has (else the test skips, or fails under CI).
func pool(t testing.TB, pageSize int) Pool {
	t.Helper()
	require.Root(t, "change the "+SizeName(pageSize)+" hugepage pool")
	Lock(t)
	p, err := ReadPool(pageSize)
	require.NoError(t, err, "hugepage pool")
	return p
}

func mustReadPool(t testing.TB, pageSize int) Pool {
	t.Helper()
	p, err := ReadPool(pageSize)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// Set makes the pool of pageSize pages exactly n persistent pages with no
// overcommit, under the lock, until t's cleanup restores both. Pages in
// use by mappings stay (as surplus) until unmapped, but none beyond n is
// free afterwards: Set(t, size, 0) leaves no page of that size for a new
// mapping. It returns the pool after the change.
func Set(t testing.TB, pageSize, n int) Pool {
	t.Helper()
	p := pool(t, pageSize)
	if p.Overcommit != 0 {
		write(t, filepath.Join(p.Dir, "nr_overcommit_hugepages"), "0", strconv.Itoa(p.Overcommit))
	}
	write(t, filepath.Join(p.Dir, "nr_hugepages"), strconv.Itoa(n), strconv.Itoa(p.Persistent()))
	after := mustReadPool(t, pageSize)
	if after.Persistent() != n {
		t.Logf("hugetest: set %s nr_hugepages to %d: the kernel made it %d (%v)", SizeName(pageSize), n, after.Persistent(), after)
	}
	return after
}

// TryReserve adds n pages of pageSize to the pool under the lock, until
// t's cleanup restores its size; it returns how many pages the kernel
// added (fewer when memory is too fragmented) and the pool after. Use it
// where a shortfall may skip the test (1 GiB pages), else Reserve.
func TryReserve(t testing.TB, pageSize, n int) (int, Pool) {
	t.Helper()
	p := pool(t, pageSize)
	// Writing Total+n turns the surplus pages in use into persistent ones
	// and allocates n new pages; restoring the persistent size returns
	// both.
	write(t, filepath.Join(p.Dir, "nr_hugepages"), strconv.Itoa(p.Total+n), strconv.Itoa(p.Persistent()))
	after := mustReadPool(t, pageSize)
	return max(after.Persistent()-p.Total, 0), after
}

// Reserve adds n pages of pageSize to the pool under the lock, until t's
// cleanup restores it. When the kernel cannot provide them all the test
// skips, or fails under CI. Tests that take Share wait, but any other
// process may map the added pages while they are free: reserve a spare
// page or two, and decide on what a mapping got from its own smaps, not
// from the pool.
func Reserve(t testing.TB, pageSize, n int) Pool {
	t.Helper()
	got, p := TryReserve(t, pageSize, n)
	if got < n {
		require.Unavailable(t, "the kernel added only %d of %d %s hugepages (%v): memory too fragmented or limited", got, n, SizeName(pageSize), p)
	}
	return p
}

// THPMode returns the selected mode of /sys/kernel/mm/transparent_hugepage/
// name (enabled, shmem_enabled, defrag), or "" when the kernel has none.
func THPMode(name string) string {
	b, err := os.ReadFile(sysTHP + name)
	if err != nil {
		return ""
	}
	s := string(b)
	i, j := strings.IndexByte(s, '['), strings.IndexByte(s, ']')
	if i < 0 || j < i {
		return strings.TrimSpace(s)
	}
	return s[i+1 : j]
}

// SetTHP sets the transparent hugepage mode name (enabled, shmem_enabled,
// defrag) to mode under the lock, until t's cleanup restores it; it needs
// root and a kernel with the setting (else skip, or fail under CI).
func SetTHP(t testing.TB, name, mode string) {
	t.Helper()
	require.Root(t, "set "+sysTHP+name)
	old := THPMode(name)
	if old == "" {
		require.Unavailable(t, "no %s%s (a kernel without CONFIG_TRANSPARENT_HUGEPAGE)", sysTHP, name)
	}
	if !changeValue.MatchString(mode) {
		t.Fatalf("hugetest: THP mode %q", mode)
	}
	write(t, sysTHP+name, mode, old)
}
