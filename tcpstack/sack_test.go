package tcpstack

import (
	"fmt"
	"testing"

	"xrnic/wire/eth"
	"xrnic/wire/ipv4"
	"xrnic/wire/tcp"
)

type wireSeg struct {
	seq   tcp.Seq
	n     int
	flags tcp.Flags
	opts  tcp.Options
}

func parseWire(tb testing.TB, f []byte) wireSeg {
	tb.Helper()
	ef, err := eth.Parse(f)
	if err != nil {
		tb.Fatal(err)
	}
	ip, err := ipv4.Parse(ef.Payload())
	if err != nil {
		tb.Fatal(err)
	}
	th, err := tcp.Parse(ip.Payload())
	if err != nil {
		tb.Fatal(err)
	}
	g := wireSeg{seq: th.Seq(), n: len(th.Payload()), flags: th.Flags()}
	if err := tcp.ParseOptions(th.Options(), &g.opts); err != nil {
		tb.Fatal(err)
	}
	return g
}

// TestSACKOnData: a data segment carries SACK blocks when the receiver holds
// out-of-order data, the block with the latest arrival first (RFC 2018 §4),
// as many as the option space (3 with timestamps, 4 without) and the
// peer's MSS leave room for; when that is fewer than a pure ACK would carry,
// and an ACK is owed, a pure ACK with every block follows the data.
func TestSACKOnData(t *testing.T) {
	tests := []struct {
		name    string
		variant byte
		payload func(mss int) int // B's data segment
		blocks  int               // SACK blocks on it
		ack     int               // SACK blocks of a following pure ACK, -1 for none
	}{
		{"timestamps", 0, func(int) int { return 100 }, 3, -1},
		{"no timestamps", 2, func(int) int { return 100 }, 4, -1},
		{"room for two", 0, func(mss int) int { return mss - 20 }, 2, 3},
		{"room for one", 0, func(mss int) int { return mss - 12 }, 1, 3},
		{"no room", 0, func(mss int) int { return mss - 11 }, 0, 3},
		{"full segment", 2, func(mss int) int { return mss }, 0, 4},
		{"no SACK", 1, func(int) int { return 100 }, 0, -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newFzWorld(t, tt.variant)
			w.deliverAll()
			a, b := w.conns[0][0], w.conns[1][0]
			for i := 0; i < 8; i++ {
				w.commit(a, 99) // 100-byte segments
			}
			w.poll()
			if len(w.net.wire[0]) != 8 || len(w.net.wire[1]) != 0 {
				t.Fatalf("wire holds %d and %d frames, want 8 and 0", len(w.net.wire[0]), len(w.net.wire[1]))
			}
			segs := make([]wireSeg, 8)
			for i, f := range w.net.wire[0] {
				segs[i] = parseWire(t, f)
			}
			rng := func(i int) tcp.SACKBlock {
				return tcp.SACKBlock{Left: segs[i].seq, Right: segs[i].seq.Add(uint32(segs[i].n))}
			}
			// B gets 1, 3 and 5 (0, 2, 4, 6 and 7 stay behind).
			q := w.net.wire[0]
			w.net.rx[1] = append(w.net.rx[1], q[1], q[3], q[5])
			w.net.wire[0] = []([]byte){q[0], q[2], q[4], q[6], q[7]}
			w.poll()
			for _, f := range w.net.wire[1] {
				if g := parseWire(t, f); g.n != 0 {
					t.Fatalf("B sent data before the test asked it to")
				}
			}
			w.net.wire[1] = w.net.wire[1][:0]
			// B sends data in the same poll in which segment 7 arrives.
			p := tt.payload(b.MSS())
			w.commit(b, p-1)
			w.net.rx[1] = append(w.net.rx[1], w.net.wire[0][4])
			w.net.wire[0] = w.net.wire[0][:4]
			w.poll()
			out := w.net.wire[1]
			if len(out) == 0 {
				t.Fatal("B sent nothing")
			}
			d := parseWire(t, out[0])
			if d.n != p {
				t.Fatalf("B's first segment has %d bytes, want its %d bytes of data", d.n, p)
			}
			want := []tcp.SACKBlock{rng(7), rng(5), rng(3), rng(1)}
			check := func(what string, g wireSeg, n int) {
				t.Helper()
				if g.opts.NumSACK != n {
					t.Fatalf("%s carries %d SACK blocks %v, want %d", what, g.opts.NumSACK, g.opts.SACK[:g.opts.NumSACK], n)
				}
				for i := 0; i < n; i++ {
					if g.opts.SACK[i] != want[i] {
						t.Fatalf("%s: SACK block %d is %v, want %v (all: %v)", what, i, g.opts.SACK[i], want[i], g.opts.SACK[:n])
					}
				}
			}
			check("data segment", d, tt.blocks)
			switch {
			case tt.ack < 0 && len(out) != 1:
				t.Fatalf("B sent %d segments, want only the data", len(out))
			case tt.ack >= 0:
				if len(out) != 2 {
					t.Fatalf("B sent %d segments, want the data and a pure ACK", len(out))
				}
				g := parseWire(t, out[1])
				if g.n != 0 {
					t.Fatal("second segment is not a pure ACK")
				}
				check("pure ACK", g, tt.ack)
			}
			w.finish()
		})
	}
}

// TestSACKRecovery: segments lost from the middle of a flight are resent
// once each, from the SACK scoreboard, without a timeout (RFC 6675); the
// receiver ends with every byte.
//
// With room for only 4 out-of-order segments at the receiver, what it
// drops beyond them is resent on partial ACKs (as NewReno would), still
// without a timeout.
func TestSACKRecovery(t *testing.T) {
	tests := []struct {
		drop    []int
		variant byte
		rexmits int
	}{
		{[]int{2}, 64, 1},
		{[]int{2, 5}, 64, 2},
		{[]int{0, 1, 2}, 64, 3},
		{[]int{1, 4, 7}, 64, 3},
		// One ACK answers the whole batch and has room for 3 of the 4
		// SACK ranges (timestamps): segment 1 goes unreported, is presumed
		// lost and is resent too.
		{[]int{0, 2, 4, 6}, 64, 5},
		{[]int{0, 2, 4, 6}, 64 | 2, 4}, // without timestamps all 4 fit
		{[]int{2}, 0, 1 + 3},           // 3..6 held, 7..9 dropped by the receiver
		{[]int{1, 4}, 0, 2 + 3},
	}
	for _, tt := range tests {
		drop := tt.drop
		t.Run(fmt.Sprint(drop, tt.variant), func(t *testing.T) {
			w := newFzWorld(t, tt.variant)
			w.deliverAll()
			a, b := w.conns[0][0], w.conns[1][0]
			b.Release(b.Buffered())
			w.deliverAll()
			st0 := w.st[0].Stats
			const nseg = 10
			for i := 0; i < nseg; i++ {
				w.commit(a, a.MSS()-1)
			}
			w.poll()
			if len(w.net.wire[0]) != nseg {
				t.Fatalf("%d segments on the wire, want %d", len(w.net.wire[0]), nseg)
			}
			for k := len(drop) - 1; k >= 0; k-- {
				w.deliver(0, drop[k])
				w.net.rx[1] = w.net.rx[1][:len(w.net.rx[1])-1] // lost
			}
			got := 0
			for round := 0; round < 50 && got < nseg*a.MSS(); round++ {
				w.deliverAll()
				got += b.Buffered()
				b.Release(b.Buffered())
			}
			st := w.st[0].Stats
			if got != nseg*a.MSS() {
				t.Fatalf("b got %d bytes, want %d", got, nseg*a.MSS())
			}
			if n := st.Timeouts - st0.Timeouts; n != 0 {
				t.Fatalf("%d timeouts, want recovery without one", n)
			}
			if n := st.TxRetransmits - st0.TxRetransmits; n != uint64(tt.rexmits) {
				t.Fatalf("%d retransmissions, want %d", n, tt.rexmits)
			}
			if st.FastRetransmits-st0.FastRetransmits != 1 {
				t.Fatalf("%d recovery episodes, want 1", st.FastRetransmits-st0.FastRetransmits)
			}
			w.finish()
		})
	}
}
