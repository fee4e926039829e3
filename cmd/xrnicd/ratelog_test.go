package main

import (
	"bytes"
	"log/slog"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// fakeClock drives a rateLog: now is set by the test, scheduled
// summaries run when the test says.
type fakeClock struct {
	now     time.Time
	pending []func()
	delays  []time.Duration
}

func newTestRateLog(level slog.Level, burst int) (*rateLog, *bytes.Buffer, *fakeClock) {
	var buf bytes.Buffer
	clk := &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	r := newRateLog(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: level})), burst, time.Second)
	r.now = func() time.Time { return clk.now }
	r.after = func(d time.Duration, f func()) {
		clk.delays = append(clk.delays, d)
		clk.pending = append(clk.pending, f)
	}
	return r, &buf, clk
}

func (c *fakeClock) fire() {
	p := c.pending
	c.pending = nil
	for _, f := range p {
		f()
	}
}

var suppressedRE = regexp.MustCompile(`suppressed=(\d+)`)

// lines counts the lines of msg and the events the summaries stand for.
func tally(t *testing.T, out, msg string) (lines int, suppressed int) {
	t.Helper()
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if l == "" {
			continue
		}
		if m := suppressedRE.FindStringSubmatch(l); m != nil {
			if !strings.Contains(l, `msg="suppressed `+m[1]+` similar messages"`) || !strings.Contains(l, `message="`+msg+`"`) {
				t.Fatalf("summary line %q", l)
			}
			n, _ := strconv.Atoi(m[1])
			suppressed += n
			continue
		}
		if strings.Contains(l, `msg="`+msg+`"`) {
			lines++
		}
	}
	return lines, suppressed
}

// TestRateLog: per key, burst lines in a window; the rest become one
// summary at the end of the window, so lines plus summaries account for
// every event exactly; keys are independent; a new window writes again.
func TestRateLog(t *testing.T) {
	r, buf, clk := newTestRateLog(slog.LevelInfo, 3)
	for i := range 10 {
		r.Log(slog.LevelInfo, "refused", "connection refused", "peer", "10.0.0."+strconv.Itoa(i))
	}
	r.Log(slog.LevelWarn, "other", "other event")
	if n, s := tally(t, buf.String(), "connection refused"); n != 3 || s != 0 {
		t.Fatalf("within the window: %d lines, %d summarised; want 3, 0:\n%s", n, s, buf)
	}
	if len(clk.pending) != 1 || clk.delays[0] != time.Second {
		t.Fatalf("scheduled summaries %d (delays %v), want one after 1s", len(clk.pending), clk.delays)
	}
	clk.now = clk.now.Add(time.Second)
	clk.fire()
	if n, s := tally(t, buf.String(), "connection refused"); n != 3 || s != 7 {
		t.Fatalf("after the window: %d lines, %d summarised; want 3, 7:\n%s", n, s, buf)
	}
	if !strings.Contains(buf.String(), `msg="other event"`) {
		t.Fatal("another key was suppressed")
	}
	// The next window writes again; Flush writes what is pending.
	clk.now = clk.now.Add(100 * time.Millisecond)
	for range 5 {
		r.Log(slog.LevelInfo, "refused", "connection refused")
	}
	r.Flush()
	if n, s := tally(t, buf.String(), "connection refused"); n != 6 || s != 9 {
		t.Fatalf("second window: %d lines, %d summarised; want 6, 9:\n%s", n, s, buf)
	}
	clk.fire() // the summary already written: nothing more
	if n, s := tally(t, buf.String(), "connection refused"); n != 6 || s != 9 {
		t.Fatalf("after a late timer: %d lines, %d summarised; want 6, 9", n, s)
	}
	// Still in the second window, with its burst spent: suppressed. A
	// message after the window ended writes that window's summary first,
	// even before its timer ran.
	for range 4 {
		r.Log(slog.LevelInfo, "refused", "connection refused")
	}
	clk.now = clk.now.Add(2 * time.Second)
	r.Log(slog.LevelInfo, "refused", "connection refused")
	if n, s := tally(t, buf.String(), "connection refused"); n != 7 || s != 13 || n+s != 10+5+4+1 {
		t.Fatalf("third window: %d lines, %d summarised; want 7, 13 (20 events):\n%s", n, s, buf)
	}
}

// TestRateLogDisabledLevel: below the logger's level nothing is written
// or scheduled.
func TestRateLogDisabledLevel(t *testing.T) {
	r, buf, clk := newTestRateLog(slog.LevelInfo, 1)
	for range 100 {
		r.Log(slog.LevelDebug, "k", "debug event")
	}
	r.Flush()
	if buf.Len() != 0 || len(clk.pending) != 0 {
		t.Fatalf("debug events at info: %q, %d scheduled", buf, len(clk.pending))
	}
}
