package siw

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"xrnic/internal/netns"
	"xrnic/verbs"
)

// TestRping runs Debian's unmodified rping against xrnic's rping
// (rping.go) in both roles, data verified on both sides (-V), on both
// transports.
func TestRping(t *testing.T) {
	needGuest(t)
	const count = 20
	for _, tr := range transports {
		for _, size := range []int{64, 4096} {
			t.Run(fmt.Sprintf("%s/xrnic-client/%d", tr, size), func(t *testing.T) {
				g := needGuest(t)
				ctx := ctxT(t, 2*time.Minute)
				h := newHost(t, g, tr)
				capt := startCapture(t, g)
				p, err := g.Start(ctx, Cmd{Args: []string{"rping", "-s", "-a", g.GuestAddr.String(), "-p", "7174", "-S", fmt.Sprint(size), "-V", "-C", fmt.Sprint(count)}, Timeout: time.Minute})
				if err != nil {
					t.Fatal(err)
				}
				waitPort(ctx, t, g, 7174)
				var n int
				err = netns.Do(g.NS, func() (err error) {
					n, err = RpingClient(ctx, h.dev, net.JoinHostPort(g.GuestAddr.String(), "7174"), RpingConfig{Count: count, Size: size, Verify: true})
					return err
				})
				r, werr := p.Wait(ctx)
				if err != nil || n != count || werr != nil {
					t.Fatalf("xrnic client: %d iterations, %v; rping -s: %v %v", n, err, r, werr)
				}
				rpingOK(t, r)
				capt.check(ctx, true, false)
			})
			t.Run(fmt.Sprintf("%s/xrnic-server/%d", tr, size), func(t *testing.T) {
				g := needGuest(t)
				ctx := ctxT(t, 2*time.Minute)
				h := newHost(t, g, tr)
				capt := startCapture(t, g)
				var ln *verbs.Listener
				if err := netns.Do(g.NS, func() (err error) {
					ln, err = h.dev.Listen("tcp", net.JoinHostPort(g.HostAddr.String(), "7174"))
					return err
				}); err != nil {
					t.Fatal(err)
				}
				defer ln.Close()
				p, err := g.Start(ctx, Cmd{Args: []string{"rping", "-c", "-a", g.HostAddr.String(), "-p", "7174", "-S", fmt.Sprint(size), "-V", "-v", "-C", fmt.Sprint(count)}, Timeout: time.Minute})
				if err != nil {
					t.Fatal(err)
				}
				n, err := RpingServer(ctx, h.dev, ln, RpingConfig{Size: size, Verify: true})
				r, werr := p.Wait(ctx)
				if err != nil || n != count || werr != nil {
					t.Fatalf("xrnic server: %d iterations, %v; rping -c: %v %v", n, err, r, werr)
				}
				if got := strings.Count(r.Stdout, "ping data: "); got != count {
					t.Fatalf("rping -c -v printed %d pings, want %d:\n%s", got, count, r)
				}
				rpingOK(t, r)
				capt.check(ctx, true, false)
			})
		}
	}
}

// rpingOK accepts rping's exit: 0, or 255 with only rping 44's own
// teardown race ("rdma_get_cm_event: Bad file descriptor", fixed in later
// rdma-core) after a complete run.
func rpingOK(t *testing.T, r Result) {
	t.Helper()
	if r.OK() {
		return
	}
	if r.Exit == 255 && strings.TrimSpace(r.Stderr) != "" && !strings.Contains(strings.ReplaceAll(r.Stderr, "rdma_get_cm_event: Bad file descriptor", ""), "rdma") {
		t.Logf("rping exit 255 at teardown (rping 44's own race): %q", r.Stderr)
		return
	}
	t.Fatalf("rping: %v", r)
}

// waitPort waits until something listens on TCP port in the guest.
func waitPort(ctx context.Context, t *testing.T, g *Guest, port int) {
	t.Helper()
	for {
		r, err := g.Sh(ctx, fmt.Sprintf("netstat -ltn | grep -q ':%d '", port))
		if err == nil && r.OK() {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("nothing listened on %d in the guest", port)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
