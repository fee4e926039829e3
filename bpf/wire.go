//go:build linux

package bpf

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

// Wire is the faulty-wire program (wire.c): attached to the tcx ingress
// of two devices of one network namespace, it forwards every frame that
// arrives on one to the egress of the other, like a cable, and injects
// the faults of WireFault into IPv4/TCP frames on the way. Tests put it
// in a middle namespace between two veth pairs, so that both directions
// of every transport cross it: frames sent from AF_XDP sockets skip the
// sender's tc egress hook (the generic AF_XDP transmit path calls
// __dev_direct_xmit), and frames steered by XDP never reach the
// receiver's tc ingress, but a middle namespace sees them all.
type Wire struct {
	objs  wireObjects
	links []link.Link
}

// WireFault is the fault configuration of a Wire, in parts per million of
// the IPv4/TCP frames of each direction; each frame gets at most one
// fault, drawn in this order.
type WireFault struct {
	DropPPM uint32
	// FlipPPM xors one random payload byte with 0xff (or the low byte of
	// the TCP checksum when there is no payload): the receiver's TCP
	// checksum catches it, provided the sender filled in the full
	// checksum (a kernel sender on veth leaves CHECKSUM_PARTIAL, which the
	// receiving kernel never verifies: turn off tx checksumming there).
	FlipPPM uint32
	// SwapPPM swaps two different 16-bit payload words at even offsets
	// from the TCP header: the ones' complement checksum stays valid, so
	// TCP accepts the segment and only the MPA CRC can catch it.
	SwapPPM uint32
	// DupPPM sends the frame twice.
	DupPPM uint32
	// ReorderPPM holds the frame back (one frame per direction at a time)
	// and sends it right after Gap later frames of the same direction
	// (default 1). A held frame waits for as long as no frame follows.
	ReorderPPM uint32
	Gap        uint32
}

// WireCounters are one direction's verdicts, summed over CPUs. Every frame
// counts under exactly one of Other (not IPv4/TCP), Forwarded, Dropped,
// Flipped, Swapped, SwapNoop (a swap was drawn but found no two different
// words), Duplicated, Held or RedirectFailed. Released counts held frames
// sent out later (each right after a later frame, which counts as
// Forwarded), HoldLost held frames lost because the skb of the later frame
// could not be rewritten.
type WireCounters struct {
	Other, Forwarded, Dropped, Flipped, Swapped, SwapNoop uint64
	Duplicated, Held, RedirectFailed, Released, HoldLost  uint64
}

// Total is the number of frames that arrived in this direction.
func (c WireCounters) Total() uint64 {
	return c.Other + c.Forwarded + c.Dropped + c.Flipped + c.Swapped + c.SwapNoop + c.Duplicated + c.Held + c.RedirectFailed
}

// TCP is the number of IPv4/TCP frames that arrived in this direction.
func (c WireCounters) TCP() uint64 { return c.Total() - c.Other }

// Add returns the field-wise sum.
func (c WireCounters) Add(o WireCounters) WireCounters {
	return WireCounters{c.Other + o.Other, c.Forwarded + o.Forwarded, c.Dropped + o.Dropped, c.Flipped + o.Flipped,
		c.Swapped + o.Swapped, c.SwapNoop + o.SwapNoop, c.Duplicated + o.Duplicated, c.Held + o.Held,
		c.RedirectFailed + o.RedirectFailed, c.Released + o.Released, c.HoldLost + o.HoldLost}
}

// Sub returns the field-wise difference c - o.
func (c WireCounters) Sub(o WireCounters) WireCounters {
	return WireCounters{c.Other - o.Other, c.Forwarded - o.Forwarded, c.Dropped - o.Dropped, c.Flipped - o.Flipped,
		c.Swapped - o.Swapped, c.SwapNoop - o.SwapNoop, c.Duplicated - o.Duplicated, c.Held - o.Held,
		c.RedirectFailed - o.RedirectFailed, c.Released - o.Released, c.HoldLost - o.HoldLost}
}

// LoadWire loads the faulty-wire program with faults off. It needs root
// (CAP_BPF and CAP_NET_ADMIN).
func LoadWire() (*Wire, error) {
	w := &Wire{}
	if err := loadWireObjects(&w.objs, nil); err != nil {
		if errors.Is(err, unix.EPERM) {
			return nil, fmt.Errorf("bpf: load wire program: %w (needs root or CAP_BPF and CAP_NET_ADMIN)", err)
		}
		return nil, fmt.Errorf("bpf: load wire program: %w", err)
	}
	return w, nil
}

// Join connects two devices of the calling thread's network namespace:
// frames arriving on a go out of b (direction 0) and those arriving on b
// go out of a (direction 1). It attaches with tcx (Linux 6.6).
func (w *Wire) Join(a, b int) error {
	for dir, d := range [][2]int{{a, b}, {b, a}} {
		if err := w.objs.Ports.Put(uint32(d[0]), wirePort{PeerIfindex: uint32(d[1]), Dir: uint32(dir)}); err != nil {
			return fmt.Errorf("bpf: wire: port %d: %w", d[0], err)
		}
	}
	for _, d := range []int{a, b} {
		l, err := link.AttachTCX(link.TCXOptions{Interface: d, Program: w.objs.XrnicWire, Attach: ebpf.AttachTCXIngress})
		if err != nil {
			return fmt.Errorf("bpf: wire: attach tcx ingress to ifindex %d: %w", d, err)
		}
		w.links = append(w.links, l)
	}
	return nil
}

// SetFault sets the faults; WireFault{} turns them off.
func (w *Wire) SetFault(f WireFault) error {
	v := wireFault{DropPpm: f.DropPPM, FlipPpm: f.FlipPPM, SwapPpm: f.SwapPPM, DupPpm: f.DupPPM, ReorderPpm: f.ReorderPPM, Gap: f.Gap}
	if err := w.objs.WireFaults.Put(uint32(0), v); err != nil {
		return fmt.Errorf("bpf: wire: set faults: %w", err)
	}
	return nil
}

// Counters returns the counters of both directions.
func (w *Wire) Counters() ([2]WireCounters, error) {
	var out [2]WireCounters
	for dir := range out {
		var per []wireCounters
		if err := w.objs.WireStats.Lookup(uint32(dir), &per); err != nil {
			return out, fmt.Errorf("bpf: wire: read counters: %w", err)
		}
		for _, v := range per {
			out[dir] = out[dir].Add(WireCounters{v.FramesOther, v.Forwarded, v.Dropped, v.Flipped, v.Swapped, v.SwapNoop,
				v.Duplicated, v.Held, v.RedirectFailed, v.Released, v.HoldLost})
		}
	}
	return out, nil
}

// Run runs the program once on frame with BPF_PROG_TEST_RUN as if it had
// arrived on ifindex (which must be a device of the calling thread's
// namespace in a Join or SetPort), and returns its tc verdict and the frame
// as it left. Tests use it.
func (w *Wire) Run(ifindex int, frame []byte) (uint32, []byte, error) {
	out := make([]byte, len(frame)+256)
	ctx := make([]byte, 192) // struct __sk_buff; ifindex at offset 40
	binary.NativeEndian.PutUint32(ctx[40:], uint32(ifindex))
	opts := ebpf.RunOptions{Data: frame, DataOut: out, Context: ctx}
	ret, err := w.objs.XrnicWire.Run(&opts)
	if err != nil {
		return 0, nil, fmt.Errorf("bpf: wire: test run: %w", err)
	}
	return ret, opts.DataOut, nil
}

// SetPort maps frames arriving on ifindex to peer under direction dir
// without attaching (Join does both); for Run.
func (w *Wire) SetPort(ifindex, peer, dir int) error {
	return w.objs.Ports.Put(uint32(ifindex), wirePort{PeerIfindex: uint32(peer), Dir: uint32(dir)})
}

// Close detaches the program and unloads it.
func (w *Wire) Close() error {
	var errs []error
	for _, l := range w.links {
		errs = append(errs, l.Close())
	}
	w.links = nil
	errs = append(errs, w.objs.Close())
	return errors.Join(errs...)
}
