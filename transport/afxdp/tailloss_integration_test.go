package afxdp

import (
	"context"
	"log/slog"
	"net/netip"
	"sync"
	"testing"
	"time"

	"xrnic/internal/netnstest"
	"xrnic/tcpstack"
	"xrnic/wire/eth"
	"xrnic/wire/ipv4"
	"xrnic/wire/tcp"
)

// TestIntegrationTailLoss loses the last data segment of a burst, or every
// ACK for its last byte, on the afxdp transport until the sender's timer
// fires, and requires the connection to recover. Nothing but the poll
// loop waking for the stack's timer can repair such a loss: no later
// segment makes duplicate ACKs and the peer (Linux TCP here) has nothing
// more to send. Under CI's load the loop once slept past that timer and
// the connection stalled for good (reliability issue, point 0).
func TestIntegrationTailLoss(t *testing.T) {
	netnstest.RequireRoot(t, true)
	ipA, ipB := netip.MustParseAddr("198.18.71.1"), netip.MustParseAddr("198.18.71.2")
	p := netnstest.NewPair(t, netnstest.PairOptions{Prefix: "xrnicaftl-", DevA: "aftla", DevB: "aftlb",
		AddrA: ipA, AddrB: ipB, LimitGSO: true})
	var x *Transport
	if err := netnstest.In(t, p.NSA, func() (err error) {
		x, err = Open(Config{Iface: p.DevA, Logger: slog.New(slog.DiscardHandler)})
		return err
	}); err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { x.Close() })
	for _, tc := range []struct {
		name    string
		lastACK bool
		probe   bool // the tail loss probe is lost too: the RTO must fire
	}{{"last-segment", false, false}, {"last-ack", true, false}, {"last-segment-and-probe", false, true}} {
		t.Run(tc.name, func(t *testing.T) {
			addr := netnstest.Serve(t, p.NSB, ipB.String()+":0", false)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			c, err := x.Dial(ctx, addr)
			if err != nil {
				t.Fatalf("dial %s: %v", addr, err)
			}
			defer c.Close()
			xc := c.(*xconn)
			l := xc.q.l
			// state reads the connection and its stack on the loop.
			state := func() (unacked int, rto time.Duration, fired uint64, debug string) {
				l.do(func() {
					st := xc.q.stack.Stats
					unacked, rto, fired, debug = xc.c.Unacked(), xc.c.RTO(), st.TailLossProbes+st.Timeouts, xc.c.Debug()
				})
				return
			}
			waitAcked := func(what string, d time.Duration) {
				t.Helper()
				for end := time.Now().Add(d); ; time.Sleep(time.Millisecond) {
					n, _, _, dbg := state()
					if n == 0 {
						return
					}
					if time.Now().After(end) {
						t.Fatalf("%s: %d bytes still unacknowledged after %v: %s", what, n, d, dbg)
					}
				}
			}
			// Warm up: RTT samples and an open window.
			if _, err := c.Write(make([]byte, 256<<10)); err != nil {
				t.Fatal(err)
			}
			waitAcked("warm-up", 20*time.Second)

			const total = 16 * 1448
			_, _, before, _ := state()
			lose := &tailLoser{lastACK: tc.lastACK, probe: tc.probe, total: total}
			l.do(func() {
				lose.stack, lose.conn = xc.q.stack, xc.c
				lose.before, lose.timeouts = before, xc.q.stack.Stats.Timeouts
				lose.port = xc.c.LocalPort()
				xc.q.link.lose = lose.lose
			})
			defer l.do(func() { xc.q.link.lose = nil })
			if _, err := c.Write(make([]byte, total)); err != nil {
				t.Fatal(err)
			}
			// Wait without touching the loop (a command would wake it and
			// run its timers, hiding a loop that sleeps through them): the
			// loser sees the ACK that ends the episode as the loop
			// receives it. The bound is generous, for a loaded CI machine;
			// a loop that misses its timer misses it for good.
			for end := time.Now().Add(30 * time.Second); !lose.done(); time.Sleep(time.Millisecond) {
				if time.Now().After(end) {
					_, _, _, dbg := state()
					t.Fatalf("not recovered 30 s after the tail loss: %s", dbg)
				}
			}
			lose.mu.Lock()
			lostAt, rto, dropped, ackedAt := lose.at, lose.rto, lose.dropped, lose.ackedAt
			lose.mu.Unlock()
			if dropped == 0 {
				t.Fatal("no frame was lost: the test checked nothing")
			}
			if n, _, after, dbg := state(); n != 0 || after == before {
				t.Fatalf("after the final ACK: %d bytes unacknowledged, %d probes or timeouts (want 0 and some): %s", n, after-before, dbg)
			}
			// One RTO from the (last) loss, the probe comes earlier; plus
			// slack for a loaded machine.
			took := ackedAt.Sub(lostAt)
			if bound := rto + time.Second; took > bound {
				t.Errorf("recovered %v after the loss; one RTO (%v) plus 1 s allows %v", took, rto, bound)
			}
			t.Logf("lost %d frames, recovered in %v (RTO %v)", dropped, took, rto)
		})
	}
}

// tailLoser loses, on the loop, the transmissions of the segment ending a
// burst of total bytes (or every ACK of its last byte) until the stack's
// probe or timeout counters move (with probe: until the timeout counter
// moves). at and rto are the last loss's.
type tailLoser struct {
	lastACK, probe   bool
	total            int
	stack            *tcpstack.Stack
	conn             *tcpstack.Conn
	before, timeouts uint64
	port             uint16

	first   tcp.Seq
	started bool

	mu      sync.Mutex // the test reads these
	dropped int
	at      time.Time // the last loss
	rto     time.Duration
	ackedAt time.Time // the ACK of the burst's end, after the losses
}

// done reports whether the ACK that ends the episode came in.
func (d *tailLoser) done() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return !d.ackedAt.IsZero()
}

func (d *tailLoser) lose(frame []byte, tx bool) bool {
	f, err := eth.Parse(frame)
	if err != nil {
		return false
	}
	ip, err := ipv4.ParseNoChecksum(f.Payload())
	if err != nil {
		return false
	}
	h, err := tcp.Parse(ip.Payload())
	if err != nil {
		return false
	}
	if (tx && h.SrcPort() != d.port) || (!tx && h.DstPort() != d.port) {
		return false
	}
	n := len(h.Payload())
	if tx && n > 0 && !d.started {
		d.first, d.started = h.Seq(), true
	}
	if !d.started {
		return false
	}
	end := d.first.Add(uint32(d.total))
	d.mu.Lock()
	defer d.mu.Unlock()
	st := d.stack.Stats
	if (d.probe && st.Timeouts != d.timeouts) || (!d.probe && st.TailLossProbes+st.Timeouts != d.before) {
		// The timer fired: the episode ends with the ACK of the end.
		if !tx && d.dropped > 0 && d.ackedAt.IsZero() && h.Flags()&tcp.FlagACK != 0 && !h.Ack().LessThan(end) {
			d.ackedAt = time.Now()
		}
		return false
	}
	switch {
	case !d.lastACK && tx && n > 0 && h.Seq().Add(uint32(n)) == end:
	case d.lastACK && !tx && h.Flags()&tcp.FlagACK != 0 && h.Ack() == end:
	default:
		return false
	}
	d.at, d.rto = time.Now(), d.conn.RTO()
	d.dropped++
	return true
}
