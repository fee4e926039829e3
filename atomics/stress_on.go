//go:build atomics_stress

package atomics

import (
	"runtime"
	"sync/atomic"
)

var stressCalls atomic.Uint32

// stressYield yields on every third call, letting other goroutines write
// the word between a load and its CompareAndSwap.
func stressYield() {
	if stressCalls.Add(1)%3 == 0 {
		runtime.Gosched()
	}
}
