//go:build linux

package engine

import (
	"bytes"
	"fmt"
	"os"
	"runtime"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// TestCQPushWakesFutexWaiter: a poller asleep on the PushCounter (as the C
// ABI's ibv_poll_cq sleeps after spinning) is woken by the next push, not
// by its timeout.
func TestCQPushWakesFutexWaiter(t *testing.T) {
	cq, pc := countedCQ(t)
	addr := uintptr(unsafe.Pointer(&pc.Pushed))
	for round := range 3 {
		res := make(chan error, 1)
		tids := make(chan int, 1)
		pc.Waiters.Add(1)
		go func() {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			tids <- unix.Gettid()
			v := uint32(pc.Pushed.Load())
			ts := unix.NsecToTimespec(int64(5 * time.Second))
			for {
				_, _, e := unix.Syscall6(unix.SYS_FUTEX, addr,
					0 /* FUTEX_WAIT */ |futexPrivateFlag, uintptr(v), uintptr(unsafe.Pointer(&ts)), 0, 0)
				switch e {
				case unix.EINTR:
					continue
				case 0: // woken
					res <- nil
				default:
					// EAGAIN too: the waiter was seen asleep before the
					// push, so EAGAIN means a retry after EINTR, no wake.
					res <- e
				}
				return
			}
		}()
		tid := <-tids
		// Push only once the waiter is seen blocked in FUTEX_WAIT on
		// Pushed, so that the pass can only come from a wake.
		if err := awaitFutexSleep(tid, addr, 10*time.Second); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		if !cq.reserve() {
			t.Fatal("reserve")
		}
		start := time.Now()
		cq.push(&Completion{ID: uint64(round)})
		if err := <-res; err != nil {
			t.Fatalf("round %d: the sleeping waiter was not woken by the push: %v after %v", round, err, time.Since(start))
		}
		pc.Waiters.Add(^uint32(0))
		if cq.Poll(make([]Completion, 1)) != 1 {
			t.Fatal("no completion")
		}
	}
	if got := pc.Pushed.Load(); got != 3 {
		t.Fatalf("pushed %d, want 3", got)
	}
}

// awaitFutexSleep waits until thread tid of this process sleeps in
// futex(addr, FUTEX_WAIT|FUTEX_PRIVATE_FLAG, ...), as the kernel reports
// it in /proc (proc(5): /proc/pid/task/tid/stat state S, and the
// syscall file's number and first two arguments).
func awaitFutexSleep(tid int, addr uintptr, within time.Duration) error {
	dir := fmt.Sprintf("/proc/self/task/%d/", tid)
	want := fmt.Sprintf("%d %#x %#x ", unix.SYS_FUTEX, addr, futexPrivateFlag)
	var last string
	for deadline := time.Now().Add(within); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		sc, err := os.ReadFile(dir + "syscall")
		if err != nil {
			return err
		}
		st, err := os.ReadFile(dir + "stat")
		if err != nil {
			return err
		}
		// stat: "pid (comm) state ...", comm may hold spaces or ')'.
		i := bytes.LastIndexByte(st, ')')
		if i < 0 || i+2 >= len(st) {
			return fmt.Errorf("%sstat: %q", dir, st)
		}
		state := st[i+2]
		last = fmt.Sprintf("state %c, syscall %q", state, bytes.TrimSpace(sc))
		if state == 'S' && bytes.HasPrefix(sc, []byte(want)) {
			return nil
		}
	}
	return fmt.Errorf("thread %d not seen asleep in futex wait on %#x (want syscall %q) within %v; last: %s",
		tid, addr, want, within, last)
}
