//go:build !linux

package engine

import "sync/atomic"

// futexWake: without Linux futexes no poller sleeps on a PushCounter.
func futexWake(*atomic.Uint64) {}
