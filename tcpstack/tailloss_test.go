package tcpstack_test

import (
	"testing"
	"time"

	"xrnic/tcpstack/sim"
	"xrnic/wire/eth"
	"xrnic/wire/ipv4"
	"xrnic/wire/tcp"
)

// segOf parses a simulated frame's TCP header and payload length.
func segOf(frame []byte) (h tcp.Header, payload int, ok bool) {
	f, err := eth.Parse(frame)
	if err != nil {
		return nil, 0, false
	}
	ip, err := ipv4.ParseNoChecksum(f.Payload())
	if err != nil {
		return nil, 0, false
	}
	h, err = tcp.Parse(ip.Payload())
	if err != nil {
		return nil, 0, false
	}
	return h, len(h.Payload()), true
}

// TestTailLossRecoversWithinOneRTO loses the last data segment of a burst,
// or the last ACK for it (with its window updates), and requires the
// sender's timer (tail loss probe or RTO) to repair it within one RTO of
// the loss, in virtual time; when the probe is lost as well, within one RTO
// of the probe.
// Nothing else would: no later segment produces duplicate ACKs, and the
// receiver has nothing more to say. This is the loss that stalled afxdp
// connections under load (reliability issue, point 0).
func TestTailLossRecoversWithinOneRTO(t *testing.T) {
	const delay = 200 * time.Microsecond
	const delayedACK = 40 * time.Millisecond // Config.DelayedACK's default
	for _, tc := range []struct {
		name    string
		lastACK bool
		// probe: the tail loss probe is lost too, so the RTO must fire.
		probe bool
	}{{"last-segment", false, false}, {"last-ack", true, false}, {"last-segment-and-probe", false, true}} {
		t.Run(tc.name, func(t *testing.T) {
			p := newPair(t, sim.Faults{Delay: delay})
			push := func(n int) {
				t.Helper()
				buf := make([]byte, n)
				for left := n; left > 0; {
					k, _ := p.a.Write(buf[n-left:])
					left -= k
					p.sa.Flush()
					p.step()
				}
			}
			settle := func() {
				t.Helper()
				for i := 0; p.a.Unacked() > 0; i++ {
					if i > 100_000 {
						t.Fatalf("warm-up never acknowledged: %s", p.a.Debug())
					}
					p.step()
				}
			}
			// Warm up: RTT samples, an open window.
			push(256 << 10)
			settle()

			const burst = 16
			total := burst * p.a.MSS()
			var (
				first         tcp.Seq // the burst's first byte (from its first segment)
				armed         bool
				dropped       bool
				droppedAt     time.Duration
				rtoAtDrop     time.Duration
				received      int
				timersBefore  = p.sa.Stats.TailLossProbes + p.sa.Stats.Timeouts
				firstDataSeen bool
			)
			fired := func() uint64 { return p.sa.Stats.TailLossProbes + p.sa.Stats.Timeouts - timersBefore }
			timeoutsBefore := p.sa.Stats.Timeouts
			losing := func() bool {
				if tc.probe {
					return p.sa.Stats.Timeouts == timeoutsBefore
				}
				return fired() == 0
			}
			// Every matching frame is lost until the sender's timer fires:
			// the final ACK's window updates carry the same ACK number.
			p.net.Drop = func(from int, frame []byte) bool {
				if !armed || !losing() {
					return false
				}
				h, n, ok := segOf(frame)
				if !ok {
					return false
				}
				if from == 0 && n > 0 && !firstDataSeen {
					first, firstDataSeen = h.Seq(), true
				}
				if !firstDataSeen {
					return false
				}
				end := first.Add(uint32(total))
				switch {
				case !tc.lastACK && from == 0 && n > 0 && h.Seq().Add(uint32(n)) == end:
				case tc.lastACK && from == 1 && h.Flags()&tcp.FlagACK != 0 && h.Ack() == end:
				default:
					return false
				}
				// The recovery is timed from the last loss: the probe's, when
				// it is lost too (the RTO restarts when the probe is sent).
				dropped, droppedAt, rtoAtDrop = true, p.clock.Now(), p.a.RTO()
				return true
			}
			armed = true
			if k, err := p.a.Write(make([]byte, total)); k != total {
				t.Fatalf("burst write took %d of %d: %v", k, total, err)
			}
			p.sa.Flush()
			for i := 0; p.a.Unacked() > 0 || received < total; i++ {
				if i > 100_000 {
					t.Fatalf("not recovered after %d steps (at %v, loss at %v, dropped %v): %s", i, p.clock.Now(), droppedAt, dropped, p.a.Debug())
				}
				received += p.step()
			}
			if !dropped {
				t.Fatal("the loss was never injected: the test checked nothing")
			}
			took := p.clock.Now() - droppedAt
			// One RTO from the loss, plus the retransmission's and the
			// ACK's trip and the receiver's delayed ACK.
			bound := rtoAtDrop + 2*delay + delayedACK
			if took > bound {
				t.Fatalf("recovered %v after the loss; one RTO (%v) allows %v", took, rtoAtDrop, bound)
			}
			if fired() == 0 {
				t.Fatalf("recovered without a probe or timeout: the loss was not a tail loss")
			}
			t.Logf("recovered in %v (RTO %v, probes %d, timeouts %d)", took, rtoAtDrop, p.sa.Stats.TailLossProbes, p.sa.Stats.Timeouts)
		})
	}
}
