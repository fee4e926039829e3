package main

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// Log rate: at most logBurst lines per logWindow for one message key,
// then one summary line for the rest of the window.
const (
	logBurst  = 5
	logWindow = time.Second
)

// rateLog bounds the log lines of events a peer can cause at will
// (refused connections, malformed MPA Requests, accept errors): per
// message key at most burst lines in a window; the lines beyond are
// counted and written as one "suppressed K similar messages" line when
// the window ends, so printed lines plus the suppressed counts equal the
// events. Keys are constants of the code (never peer data), so the map
// stays small. The counters of those events are kept elsewhere, exactly.
type rateLog struct {
	log    *slog.Logger
	burst  int
	window time.Duration
	now    func() time.Time
	after  func(time.Duration, func()) // schedules the end-of-window summary

	mu   sync.Mutex
	keys map[string]*rateKey
}

type rateKey struct {
	start      time.Time // of the current window
	n          int       // lines written in it
	suppressed uint64    // lines not written in it
	level      slog.Level
	msg        string
	pending    bool // a summary is scheduled
}

func newRateLog(log *slog.Logger, burst int, window time.Duration) *rateLog {
	return &rateLog{log: log, burst: burst, window: window, now: time.Now,
		after: func(d time.Duration, f func()) { time.AfterFunc(d, f) }, keys: map[string]*rateKey{}}
}

// Log writes msg with args at level unless key has had burst lines in
// the current window.
func (r *rateLog) Log(level slog.Level, key, msg string, args ...any) {
	ctx := context.Background()
	if !r.log.Enabled(ctx, level) {
		return
	}
	now := r.now()
	r.mu.Lock()
	k := r.keys[key]
	if k == nil {
		k = &rateKey{start: now}
		r.keys[key] = k
	}
	if now.Sub(k.start) >= r.window {
		r.summaryLocked(key, k)
		k.start, k.n = now, 0
	}
	if k.n < r.burst {
		k.n++
		r.mu.Unlock()
		r.log.Log(ctx, level, msg, args...)
		return
	}
	k.suppressed++
	k.level, k.msg = level, msg
	if !k.pending {
		k.pending = true
		r.after(k.start.Add(r.window).Sub(now), func() { r.flush(key) })
	}
	r.mu.Unlock()
}

// summaryLocked writes the summary of key's window, if any line was
// suppressed in it (r.mu held: summaries keep their order).
func (r *rateLog) summaryLocked(key string, k *rateKey) {
	if k.suppressed == 0 {
		return
	}
	r.log.Log(context.Background(), k.level, fmt.Sprintf("suppressed %d similar messages", k.suppressed),
		"message", k.msg, "key", key, "suppressed", k.suppressed, "interval", r.window.String())
	k.suppressed = 0
}

// flush writes key's pending summary (at the end of its window).
func (r *rateLog) flush(key string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if k := r.keys[key]; k != nil {
		k.pending = false
		r.summaryLocked(key, k)
	}
}

// Flush writes every pending summary now (at shutdown).
func (r *rateLog) Flush() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for key, k := range r.keys {
		r.summaryLocked(key, k)
	}
}
