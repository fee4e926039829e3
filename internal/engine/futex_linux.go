package engine

import (
	"math"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// futex(2) operations (linux/futex.h).
const (
	futexWakeOp      = 1
	futexPrivateFlag = 128
)

// futexWake wakes every thread of this process futex-waiting on the low
// 32 bits of *w (little-endian: the word at its address). A wake never
// blocks, so it is a raw system call.
func futexWake(w *atomic.Uint64) {
	unix.RawSyscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(w)),
		futexWakeOp|futexPrivateFlag, math.MaxInt32, 0, 0, 0)
}
