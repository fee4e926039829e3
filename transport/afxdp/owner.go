package afxdp

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// One owner per interface.
//
// Open takes an exclusive lock for the interface before it touches it: an
// flock(2) on the file DefaultLockDir/afxdp-netns<I>-if<N>.lock, where I
// is the inode of the device's network namespace (nsfs: the same for every
// process in it, however it entered) and N the interface's ifindex. The
// holder writes its pid into the file. The lock belongs to the open file
// (O_CLOEXEC, so children never inherit it) and is released by Close, and
// by the kernel when the process dies however it dies, so a crashed owner
// never blocks its successor. Close removes the file while still holding
// the lock; a locker checks that the inode it locked is still the one at
// the path, else it starts again, so two processes never hold locks on
// different files of the same name. A file left by a dead owner is locked
// and its pid overwritten.
//
// Holding the lock is what makes an xrnic program found attached to the
// interface stale: every live xrnic process on the interface holds the
// lock, so the one that gets it knows the program's owner is gone and
// replaces it (replaceStale). One that does not get it refuses, naming the
// holder (ErrInUse), and leaves the interface alone.
//
// The lock is per mount namespace's view of DefaultLockDir: processes that
// share the interface must share that directory (containers: mount the
// host's /run/xrnic, as deploy/kubernetes does).

// DefaultLockDir is the directory of the per-interface lock files (the
// systemd unit's RuntimeDirectory).
const DefaultLockDir = "/run/xrnic"

// ifaceLock is a held owner lock.
type ifaceLock struct {
	f    *os.File
	path string
}

// lockPath is the lock file of ifindex in the network namespace whose
// nsfs inode is nsIno.
func lockPath(dir string, nsIno uint64, ifindex int) string {
	return filepath.Join(dir, fmt.Sprintf("afxdp-netns%d-if%d.lock", nsIno, ifindex))
}

// nsInode is the inode of the network namespace file ns.
func nsInode(ns int) (uint64, error) {
	var st unix.Stat_t
	if err := unix.Fstat(ns, &st); err != nil {
		return 0, fmt.Errorf("network namespace: %w", err)
	}
	return st.Ino, nil
}

// lockIface takes the owner lock of iface (ifindex in namespace ns), or
// fails with ErrInUse naming the holder.
func lockIface(dir, iface string, ns, ifindex int) (*ifaceLock, error) {
	ino, err := nsInode(ns)
	if err != nil {
		return nil, err
	}
	path := lockPath(dir, ino, ifindex)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("lock directory: %w (it must be writable by this process: run as root, or systemd RuntimeDirectory=xrnic)", err)
	}
	for range 10 {
		f, err := openLocked(path)
		if errors.Is(err, unix.EWOULDBLOCK) {
			holder := lockHolder(f)
			f.Close()
			return nil, fmt.Errorf("%w (%s) holds %s (lock file %s)", ErrInUse, holder, iface, path)
		}
		if err != nil {
			return nil, err
		}
		if f != nil {
			return writePID(f, path)
		}
		// The previous owner removed the file between our open and our
		// lock: ours is a dead inode; again.
	}
	return nil, fmt.Errorf("lock %s: the file keeps being replaced", path)
}

// openLocked opens (creating) the lock file and locks it. It returns the
// file and EWOULDBLOCK when another process holds it, and a nil file
// without error when what it locked is no longer the file at path (its
// owner removed it on release; see ifaceLock.release).
func openLocked(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW, 0o644)
	if err != nil {
		return nil, fmt.Errorf("lock file: %w (%s must be writable by this process: run as root, or systemd RuntimeDirectory=xrnic)", err, filepath.Dir(path))
	}
	for {
		err = unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err != unix.EINTR {
			break
		}
	}
	if errors.Is(err, unix.EWOULDBLOCK) {
		return f, err
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	var fst, pst unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &fst); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	if err := unix.Lstat(path, &pst); err != nil || pst.Ino != fst.Ino || pst.Dev != fst.Dev {
		f.Close()
		return nil, nil
	}
	return f, nil
}

// writePID records the owner's pid in its locked file.
func writePID(f *os.File, path string) (*ifaceLock, error) {
	err := f.Truncate(0)
	if err == nil {
		_, err = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: write the pid: %w", path, err)
	}
	return &ifaceLock{f: f, path: path}, nil
}

// lockHolder describes the process that holds the lock of f: "pid N,
// comm". The holder writes its pid right after taking the lock, so an
// empty file is read again briefly.
func lockHolder(f *os.File) string {
	var pid int
	for range 50 {
		b := make([]byte, 32)
		n, _ := f.ReadAt(b, 0)
		if p, err := strconv.Atoi(strings.TrimSpace(string(b[:n]))); err == nil && p > 0 {
			pid = p
			break
		}
		time.Sleep(2 * time.Millisecond)
	}
	if pid == 0 {
		return "pid unknown"
	}
	comm, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm")
	if err != nil {
		// Another pid namespace, or gone since it wrote the file.
		return fmt.Sprintf("pid %d, not visible in /proc here", pid)
	}
	return fmt.Sprintf("pid %d, %s", pid, strings.TrimSpace(string(comm)))
}

// release removes the lock file and drops the lock. Removing it while
// holding the lock is safe because a locker checks that what it locked is
// still the file at the path (openLocked). Safe on nil.
func (l *ifaceLock) release() {
	if l == nil || l.f == nil {
		return
	}
	os.Remove(l.path)
	l.f.Close() // releases the flock
	l.f = nil
}

// Healthy reports whether the transport still owns its interface: nil
// while our XDP program is the one attached to it; an error wrapping
// ErrNotAttached when it was detached or replaced behind our back (by
// BPF_LINK_DETACH: `bpftool link detach`, or an older xrnic that replaced
// "stale" attachments without the owner lock), after which no frame
// reaches our sockets; ErrClosed-like errors after Close. It costs
// one rtnetlink request (RTM_GETLINK), cheap enough for every readiness
// probe.
func (x *Transport) Healthy() error {
	x.hmu.Lock()
	defer x.hmu.Unlock()
	if x.closed {
		return errLoopClosed
	}
	ids, multi, err := attachedXDP(x.nl, x.ifindex)
	if err != nil {
		return fmt.Errorf("afxdp transport on %s: read the XDP attachment: %w", x.cfg.Iface, err)
	}
	switch {
	case multi:
		return fmt.Errorf("afxdp transport on %s: %w: programs in several modes are attached", x.cfg.Iface, ErrNotAttached)
	case len(ids) == 0:
		return fmt.Errorf("afxdp transport on %s: %w: no XDP program is attached (detached behind our back: restart xrnic to reattach)", x.cfg.Iface, ErrNotAttached)
	case ids[0] != x.progID:
		return fmt.Errorf("afxdp transport on %s: %w: XDP program %d is attached, ours is %d (replaced behind our back: restart xrnic to reattach)", x.cfg.Iface, ErrNotAttached, ids[0], x.progID)
	}
	return nil
}
