//go:build linux

package bpf

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"testing"

	"golang.org/x/sys/unix"

	"xrnic/internal/netns"
	"xrnic/internal/netnstest"
	"xrnic/internal/require"
)

// tc verdicts the wire program returns.
const (
	tcShot     = 2
	tcRedirect = 7
)

// wireNS runs f on a locked thread in a fresh network namespace whose
// loopback is up (the wire program's clones go out of it there, where
// nothing listens); the namespace is removed afterwards, and leftovers of
// killed runs before.
func wireNS(t *testing.T, f func(lo int) error) {
	t.Helper()
	require.Root(t, "load a tc program and run it with BPF_PROG_TEST_RUN")
	netnstest.RequireRoot(t, false)
	topo := netnstest.New(t, netns.Options{Prefix: "xrnicbpf-", Namespaces: []string{"wire"}})
	if err := netnstest.In(t, topo.NS("wire"), func() error { return f(1) }); err != nil {
		t.Fatal(err)
	}
}

// tcpFrame builds an Ethernet/IPv4/TCP frame with a valid TCP checksum
// (computed here, independently of the program) and the given payload.
func tcpFrame(payload []byte) []byte {
	s := tcpTo(flowLocal)
	s.payload = 0
	b := s.build()
	b = append(b, payload...)
	binary.BigEndian.PutUint16(b[14+2:], uint16(20+20+len(payload)))
	binary.BigEndian.PutUint16(b[14+20+16:], 0)
	binary.BigEndian.PutUint16(b[14+20+16:], ^tcpSum(b))
	return b
}

// tcpSum is the ones' complement sum of the TCP pseudo-header and segment
// of an untagged frame; a valid segment sums to 0xffff.
func tcpSum(f []byte) uint16 {
	ip := f[14:]
	seg := ip[20:binary.BigEndian.Uint16(ip[2:])]
	var s uint32
	add := func(b []byte) {
		for i := 0; i+1 < len(b); i += 2 {
			s += uint32(binary.BigEndian.Uint16(b[i:]))
		}
		if len(b)%2 == 1 {
			s += uint32(b[len(b)-1]) << 8
		}
	}
	add(ip[12:20])
	s += unix.IPPROTO_TCP + uint32(len(seg))
	add(seg)
	for s>>16 != 0 {
		s = s&0xffff + s>>16
	}
	return uint16(s)
}

func newWire(t *testing.T) *Wire {
	t.Helper()
	return mustLoad(t, LoadWire)
}

func TestWireRun(t *testing.T) {
	wireNS(t, func(lo int) error {
		w := newWire(t)
		if err := w.SetPort(lo, lo, 1); err != nil {
			return err
		}
		payload := make([]byte, 200)
		for i := range payload {
			payload[i] = byte(i*7 + 1)
		}
		frame := tcpFrame(payload)
		if tcpSum(frame) != 0xffff {
			return errors.New("test frame: bad checksum")
		}
		arp := (frameSpec{etherType: 0x0806}).build()
		step := func(name string, f WireFault, in []byte, want uint32, wantC WireCounters, check func(out []byte) error) error {
			if err := w.SetFault(f); err != nil {
				return err
			}
			before, err := w.Counters()
			if err != nil {
				return err
			}
			ret, out, err := w.Run(lo, in)
			if err != nil {
				return err
			}
			after, _ := w.Counters()
			if ret != want {
				return fmt.Errorf("%s: verdict %d, want %d", name, ret, want)
			}
			if d := after[1].Sub(before[1]); d != wantC {
				return fmt.Errorf("%s: counters moved by %+v, want %+v", name, d, wantC)
			}
			if d := after[0].Sub(before[0]); d != (WireCounters{}) {
				return fmt.Errorf("%s: direction 0 moved: %+v", name, d)
			}
			if check != nil {
				if err := check(out); err != nil {
					return fmt.Errorf("%s: %w", name, err)
				}
			}
			return nil
		}
		same := func(out []byte) error {
			if !bytes.Equal(out, frame) {
				return errors.New("frame changed")
			}
			return nil
		}
		const all = 1_000_000
		if err := step("arp", WireFault{DropPPM: all}, arp, tcRedirect, WireCounters{Other: 1}, nil); err != nil {
			return err
		}
		if err := step("forward", WireFault{}, frame, tcRedirect, WireCounters{Forwarded: 1}, same); err != nil {
			return err
		}
		if err := step("drop", WireFault{DropPPM: all}, frame, tcShot, WireCounters{Dropped: 1}, nil); err != nil {
			return err
		}
		for range 20 {
			if err := step("flip", WireFault{FlipPPM: all}, frame, tcRedirect, WireCounters{Flipped: 1}, func(out []byte) error {
				diff := 0
				for i := range out {
					if out[i] != frame[i] {
						diff++
						if i < len(frame)-len(payload) || out[i] != frame[i]^0xff {
							return fmt.Errorf("byte %d: %#x -> %#x", i, frame[i], out[i])
						}
					}
				}
				if diff != 1 || tcpSum(out) == 0xffff {
					return fmt.Errorf("%d bytes differ, checksum valid %v", diff, tcpSum(out) == 0xffff)
				}
				return nil
			}); err != nil {
				return err
			}
		}
		// Without payload the checksum's low byte flips.
		bare := tcpFrame(nil)
		if err := step("flip-bare", WireFault{FlipPPM: all}, bare, tcRedirect, WireCounters{Flipped: 1}, func(out []byte) error {
			if out[14+20+17] != bare[14+20+17]^0xff || tcpSum(out) == 0xffff {
				return errors.New("checksum not flipped")
			}
			return nil
		}); err != nil {
			return err
		}
		for range 20 {
			if err := step("swap", WireFault{SwapPPM: all}, frame, tcRedirect, WireCounters{Swapped: 1}, func(out []byte) error {
				var at []int
				for i := len(frame) - len(payload); i < len(frame); i += 2 {
					if !bytes.Equal(out[i:i+2], frame[i:i+2]) {
						at = append(at, i)
					}
				}
				if len(at) != 2 || !bytes.Equal(out[at[0]:at[0]+2], frame[at[1]:at[1]+2]) || !bytes.Equal(out[at[1]:at[1]+2], frame[at[0]:at[0]+2]) {
					return fmt.Errorf("words differ at %v", at)
				}
				if !bytes.Equal(out[:len(frame)-len(payload)], frame[:len(frame)-len(payload)]) {
					return errors.New("headers changed")
				}
				if tcpSum(out) != 0xffff {
					return errors.New("swap broke the TCP checksum")
				}
				return nil
			}); err != nil {
				return err
			}
		}
		flat := tcpFrame(bytes.Repeat([]byte{0x55}, 64))
		if err := step("swap-flat", WireFault{SwapPPM: all}, flat, tcRedirect, WireCounters{SwapNoop: 1}, func(out []byte) error {
			if !bytes.Equal(out, flat) {
				return errors.New("changed")
			}
			return nil
		}); err != nil {
			return err
		}
		if err := step("dup", WireFault{DupPPM: all}, frame, tcRedirect, WireCounters{Duplicated: 1}, same); err != nil {
			return err
		}
		// Reordering: A is held, B passes (gap 2), C leaves as a clone
		// and its skb carries A.
		fa, fb, fc := tcpFrame([]byte("frame A....")), tcpFrame([]byte("frame B....")), tcpFrame([]byte("frame C....."))
		if err := step("hold", WireFault{ReorderPPM: all, Gap: 2}, fa, tcShot, WireCounters{Held: 1}, nil); err != nil {
			return err
		}
		if err := step("hold-busy", WireFault{ReorderPPM: all, Gap: 2}, fb, tcRedirect, WireCounters{Forwarded: 1}, nil); err != nil {
			return err
		}
		return step("release", WireFault{Gap: 2}, fc, tcRedirect, WireCounters{Forwarded: 1, Released: 1}, func(out []byte) error {
			if !bytes.Equal(out, fa) {
				return fmt.Errorf("released %x, want frame A %x", out, fa)
			}
			return nil
		})
	})
}
