//go:build linux

package engine

import (
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
	for round := range 3 {
		res := make(chan error, 1)
		pc.Waiters.Add(1)
		go func() {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			v := uint32(pc.Pushed.Load())
			ts := unix.NsecToTimespec(int64(5 * time.Second))
			for {
				_, _, e := unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(&pc.Pushed)),
					0 /* FUTEX_WAIT */ |futexPrivateFlag, uintptr(v), uintptr(unsafe.Pointer(&ts)), 0, 0)
				switch e {
				case unix.EINTR:
					continue
				case 0, unix.EAGAIN: // woken, or pushed before the wait began
					res <- nil
				default:
					res <- e
				}
				return
			}
		}()
		time.Sleep(20 * time.Millisecond) // most likely asleep by now
		if !cq.reserve() {
			t.Fatal("reserve")
		}
		start := time.Now()
		cq.push(&Completion{ID: uint64(round)})
		if err := <-res; err != nil {
			t.Fatalf("round %d: the waiter was not woken by the push: %v after %v", round, err, time.Since(start))
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
