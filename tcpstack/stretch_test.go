package tcpstack_test

import (
	"testing"
	"time"

	"xrnic/tcpstack"
	"xrnic/tcpstack/sim"
)

// stretchRun moves total bytes A->B (Write in 64 KiB pieces, B consuming
// everything at once) with AckEvery on both ends and returns the virtual
// time it took, the data segments A sent and the frames B sent.
func stretchRun(t *testing.T, ackEvery int, f sim.Faults, total int) (time.Duration, uint64, uint64) {
	t.Helper()
	clock := &sim.Clock{}
	net := sim.New(clock, 7, 1500, f)
	sa, sb, a, l := dialPair(t, clock, net, func(i int, c *tcpstack.Config) {
		c.AckEvery, c.DelayedACK, c.MinRTO = ackEvery, 2*time.Millisecond, 20*time.Millisecond
	})
	var b *tcpstack.Conn
	src := make([]byte, 64<<10)
	sent, got := 0, 0
	var views [][]byte
	start := clock.Now()
	for step := 0; got < total; step++ {
		if step > 5_000_000 {
			t.Fatalf("AckEvery %d: stuck at %d of %d bytes", ackEvery, got, total)
		}
		net.Deliver()
		da := sa.Poll()
		db := sb.Poll()
		if b == nil {
			if b = l.Accept(); b != nil {
				start = clock.Now()
			}
		}
		if b == nil {
			goto next
		}
		for sent < total {
			k := min(len(src), total-sent)
			for i := range src[:k] {
				src[i] = byte((sent + i) * 7)
			}
			n, _ := a.Write(src[:k])
			sent += n
			if n < k {
				break
			}
		}
		sa.Flush()
		views = b.Views(views[:0])
		for _, v := range views {
			for i, c := range v {
				if c != byte((got+i)*7) {
					t.Fatalf("AckEvery %d: byte %d is %d, want %d", ackEvery, got+i, c, byte((got+i)*7))
				}
			}
			got += len(v)
			b.Release(len(v))
		}
		sb.Flush()
	next:
		nt := min(da, db)
		if x, ok := net.Next(); ok {
			nt = min(nt, x)
		}
		if nt != tcpstack.NoDeadline && nt > clock.Now() {
			clock.Set(nt)
		}
	}
	t.Logf("AckEvery %d: timeouts %d fast %d rexmit %d", ackEvery, sa.Stats.Timeouts, sa.Stats.FastRetransmits, sa.Stats.TxRetransmits)
	return clock.Now() - start, sa.Stats.TxSegments, sb.Stats.TxFrames
}

// TestStretchACKs: with AckEvery 16 the receiver of a bulk stream sends a
// fraction of the ACKs it sends with the default (every second segment),
// the data arrives intact, and the transfer takes no longer, also with
// loss (quick ACKs after out-of-order data keep the regrowing window
// ACK-clocked).
func TestStretchACKs(t *testing.T) {
	const total = 8 << 20
	for _, tc := range []struct {
		name string
		f    sim.Faults
	}{
		{"clean", sim.Faults{Delay: 20 * time.Microsecond, Rate: 1e9}},
		{"loss", sim.Faults{Delay: 20 * time.Microsecond, Rate: 1e9, Loss: 0.005}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d2, seg2, ack2 := stretchRun(t, 2, tc.f, total)
			d16, seg16, ack16 := stretchRun(t, 16, tc.f, total)
			t.Logf("AckEvery 2: %v, %d segments, %d frames back; AckEvery 16: %v, %d segments, %d frames back", d2, seg2, ack2, d16, seg16, ack16)
			if float64(ack2) < 0.3*float64(seg2) {
				t.Errorf("AckEvery 2: %d frames back for %d segments, want about one per two", ack2, seg2)
			}
			if tc.f.Loss == 0 && float64(ack16) > 0.15*float64(seg16) {
				t.Errorf("AckEvery 16: %d frames back for %d segments, want at most 15%%", ack16, seg16)
			}
			if d16 > d2+d2/4 {
				t.Errorf("AckEvery 16 took %v, AckEvery 2 %v", d16, d2)
			}
		})
	}
}
