package siw

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"xrnic/verbs"
)

// rpingPair runs RpingServer and RpingClient against each other between
// two kernel-transport devices over loopback and returns both outcomes.
func rpingPair(t *testing.T, sc, cc RpingConfig) (sn, cn int, serr, cerr error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	open := func() *verbs.Device {
		d, err := verbs.Open(verbs.DeviceConfig{Transport: "kernel", ConnTimeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close() })
		return d
	}
	sdev, cdev := open(), open()
	ln, err := sdev.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	type result struct {
		n   int
		err error
	}
	done := make(chan result, 1)
	go func() {
		n, err := RpingServer(ctx, sdev, ln, sc)
		done <- result{n, err}
	}()
	cn, cerr = RpingClient(ctx, cdev, ln.Addr().String(), cc)
	r := <-done
	return r.n, cn, r.err, cerr
}

func TestRpingLoopback(t *testing.T) {
	for _, size := range []int{RpingMinSize, 0, 4096, RpingMaxSize} {
		t.Run(fmt.Sprintf("size%d", size), func(t *testing.T) {
			var lines []string
			logf := func(f string, a ...any) { lines = append(lines, f) }
			count := 50
			if size == RpingMaxSize {
				count = 5
			}
			c := RpingConfig{Count: count, Size: size, Verify: true, Verbose: true, Log: logf}
			s := RpingConfig{Size: size, Verify: true}
			sn, cn, serr, cerr := rpingPair(t, s, c)
			if cerr != nil {
				t.Fatalf("client: %v", cerr)
			}
			if serr != nil {
				t.Fatalf("server: %v", serr)
			}
			if cn != count || sn != count {
				t.Fatalf("iterations: client %d, server %d, want %d", cn, sn, count)
			}
			if len(lines) != count {
				t.Fatalf("verbose client logged %d lines, want %d", len(lines), count)
			}
		})
	}
}

func TestRpingCorrupt(t *testing.T) {
	s := RpingConfig{Size: 64, corrupt: func(i int, buf []byte) {
		if i == 3 {
			buf[40] ^= 1
		}
	}}
	sn, cn, serr, cerr := rpingPair(t, s, RpingConfig{Count: 10, Size: 64, Verify: true})
	var me *RpingMismatchError
	if !errors.As(cerr, &me) {
		t.Fatalf("client: %v, want a data mismatch", cerr)
	}
	if me.Iteration != 3 || me.Offset != 40 || me.Want^me.Got != 1 {
		t.Fatalf("mismatch %+v, want iteration 3 offset 40", me)
	}
	if cn != 3 {
		t.Fatalf("client completed %d iterations, want 3", cn)
	}
	if serr != nil || sn != 4 {
		t.Fatalf("server: %d, %v; want 4 iterations and the client's disconnect", sn, serr)
	}
	t.Logf("client: %v", cerr)

	// Without Verify the corruption goes unnoticed, as with rping.
	_, cn, _, cerr = rpingPair(t, s, RpingConfig{Count: 10, Size: 64})
	if cerr != nil || cn != 10 {
		t.Fatalf("client without Verify: %d, %v", cn, cerr)
	}
}

// A client whose buffer is larger than the server's is refused with a
// clear error (rping's server would fail its Read).
func TestRpingSizeMismatch(t *testing.T) {
	_, _, serr, cerr := rpingPair(t, RpingConfig{Size: 64}, RpingConfig{Count: 2, Size: 128, Verify: true})
	if serr == nil || !strings.Contains(serr.Error(), "larger than ours") {
		t.Fatalf("server: %v", serr)
	}
	if cerr == nil {
		t.Fatal("client succeeded")
	}
	t.Logf("server: %v\nclient: %v", serr, cerr)
}

func TestRpingConfig(t *testing.T) {
	for _, size := range []int{RpingMinSize - 1, RpingMaxSize + 1, -5} {
		c := RpingConfig{Size: size}
		if err := c.norm(); err == nil {
			t.Errorf("Size %d accepted", size)
		}
	}
	c := RpingConfig{}
	if err := c.norm(); err != nil || c.Count != 10 || c.Size != 64 {
		t.Fatalf("defaults: %+v %v", c, err)
	}
}

// The start buffer is rping_test_client's: header, rolling letters, NUL.
func TestRpingFill(t *testing.T) {
	b := make([]byte, 32)
	rpingFill(b, 0)
	if got := string(b); got != "rdma-ping-0: ABCDEFGHIJKLMNOPQR\x00" {
		t.Fatalf("ping 0: %q", got)
	}
	rpingFill(b, 57)
	if got := string(b); got != "rdma-ping-57: zABCDEFGHIJKLMNOP\x00" {
		t.Fatalf("ping 57: %q", got)
	}
	rpingFill(b, 58)
	if got := string(b[:16]); got != "rdma-ping-58: AB" {
		t.Fatalf("ping 58: %q", got)
	}
	m := make([]byte, RpingMinSize)
	rpingFill(m, 2147483647)
	if got := string(m); got != "rdma-ping-2147483647: \x00" {
		t.Fatalf("min size, INT_MAX: %q", got)
	}
}

// A server slow to answer the first start advertisement gets the client's
// wakes (zero-length RDMA Writes to STag 1, for siw) and ignores them.
func TestRpingWake(t *testing.T) {
	var woke []string
	c := RpingConfig{Count: 5, Verify: true, Log: func(f string, a ...any) { woke = append(woke, fmt.Sprintf(f, a...)) }}
	sn, cn, serr, cerr := rpingPair(t, RpingConfig{Verify: true, stall: 250 * time.Millisecond}, c)
	if cerr != nil || serr != nil || cn != 5 || sn != 5 {
		t.Fatalf("client %d, %v; server %d, %v", cn, cerr, sn, serr)
	}
	if len(woke) != 1 || !strings.Contains(woke[0], "woke the server") {
		t.Fatalf("client log %q, want wakes", woke)
	}
	t.Log(woke[0])
}
