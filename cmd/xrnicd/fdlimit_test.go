package main

import (
	"io"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func defaults(t *testing.T) config {
	t.Helper()
	c, err := parseArgs(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestServerFlagDefaults: the bounds of the metrics server and the
// control socket have the documented defaults and must be positive.
func TestServerFlagDefaults(t *testing.T) {
	c := defaults(t)
	if c.HTTPMaxConns != 64 || c.SocketMaxConns != 32 || c.HTTPReadTimeout.String() != "10s" || c.HTTPWriteTimeout.String() != "30s" ||
		c.HTTPIdle.String() != "1m0s" || c.SocketReadTimeout.String() != "10s" || c.SocketWriteTimeout.String() != "30s" || c.SocketIdle.String() != "1m0s" {
		t.Fatalf("defaults %+v", c)
	}
	for _, args := range [][]string{{"--http-max-conns", "0"}, {"--socket-max-conns", "-1"}, {"--http-idle-timeout", "0s"}, {"--socket-read-timeout", "0s"}} {
		c, err := parseArgs(args, io.Discard)
		if err == nil {
			err = c.validate()
		}
		if err == nil {
			t.Errorf("%v accepted", args)
		}
	}
}

// TestPlanFDs: the MPA bounds fit in what the descriptor limit leaves
// after the open descriptors, the reserve and the server caps; they are
// kept when they fit, lowered in proportion when not, and start-up fails
// when the limit leaves no room.
func TestPlanFDs(t *testing.T) {
	c := defaults(t)
	b, err := planFDs(&c, 20000, 10)
	if err != nil || b.Lowered || c.MaxSetup != 1024 || c.MaxQPs != 1024 || b.MPA != 20000-10-64-64-32 {
		t.Fatalf("20000: %+v %v; setup %d qps %d", b, err, c.MaxSetup, c.MaxQPs)
	}
	c = defaults(t)
	c.MaxQPsPerPeer = 1000
	b, err = planFDs(&c, 1024, 10)
	if err != nil || !b.Lowered {
		t.Fatalf("1024: %+v %v", b, err)
	}
	if got := 10 + fdReserve + c.HTTPMaxConns + c.SocketMaxConns + c.MaxSetup + c.MaxQPs; got > 1024 {
		t.Fatalf("1024: bounds need %d descriptors (setup %d, qps %d)", got, c.MaxSetup, c.MaxQPs)
	}
	if c.MaxSetup != 427 || c.MaxQPs != 427 || c.MaxSetupPeer != 256 || c.MaxQPsPerPeer != 427 {
		t.Fatalf("1024: setup %d qps %d per peer %d/%d; want 427 427 256 427", c.MaxSetup, c.MaxQPs, c.MaxSetupPeer, c.MaxQPsPerPeer)
	}
	// Without the metrics server its cap is not reserved.
	c = defaults(t)
	c.Metrics = "off"
	if b, _ := planFDs(&c, 1024, 10); b.MPA != 1024-10-64-32 {
		t.Fatalf("metrics off: %d for MPA", b.MPA)
	}
	c = defaults(t)
	if _, err := planFDs(&c, 150, 10); err == nil || !strings.Contains(err.Error(), "RLIMIT_NOFILE 150 is too low") {
		t.Fatalf("150: %v", err)
	}
}

// TestRaiseNoFile: the soft limit ends at the hard limit.
func TestRaiseNoFile(t *testing.T) {
	var orig unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &orig); err != nil {
		t.Fatal(err)
	}
	defer unix.Setrlimit(unix.RLIMIT_NOFILE, &orig)
	low := orig
	low.Cur = min(orig.Max, 256)
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &low); err != nil {
		t.Fatal(err)
	}
	before, after, err := raiseNoFile()
	if err != nil || before.Cur != low.Cur || after.Cur != orig.Max || after.Max != orig.Max {
		t.Fatalf("before %+v after %+v err %v; want soft %d raised to %d", before, after, err, low.Cur, orig.Max)
	}
	var now unix.Rlimit
	unix.Getrlimit(unix.RLIMIT_NOFILE, &now)
	if now.Cur != orig.Max {
		t.Fatalf("soft limit now %d, want %d", now.Cur, orig.Max)
	}
}
