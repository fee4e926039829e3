package afxdp

import (
	"errors"
	"fmt"

	xsk "xrnic/afxdp"
	"xrnic/bpf"
	"xrnic/tcpstack"
	"xrnic/transport"
)

// Scrape-time accessors of the transport's counters, for the daemon's
// metrics. Each costs syscalls or a round trip to the poll loops: call
// them when metrics are scraped, not per packet.

// SocketStats returns the XDP_STATISTICS (and wakeup counters) of each
// queue's AF_XDP socket, indexed by queue.
func (x *Transport) SocketStats() ([]xsk.Stats, error) {
	out := make([]xsk.Stats, len(x.loops))
	var errs []error
	for i, l := range x.loops {
		s, err := l.q.sock.Stats()
		if err != nil {
			errs = append(errs, fmt.Errorf("queue %d: %w", i, err))
			continue
		}
		out[i] = s
	}
	return out, errors.Join(errs...)
}

// TCPStats returns the user-space TCP's counters of each queue's stack,
// indexed by queue. They are read on the poll loops (the stacks are owned
// by them); a queue whose loop has stopped reports zeros and an error.
func (x *Transport) TCPStats() ([]tcpstack.Stats, error) {
	out := make([]tcpstack.Stats, len(x.loops))
	var errs []error
	for i, l := range x.loops {
		q := l.q
		if err := l.do(func() { out[i] = q.stack.Stats }); err != nil {
			errs = append(errs, fmt.Errorf("queue %d: %w", i, err))
		}
	}
	return out, errors.Join(errs...)
}

// LoopStats are a poll loop's own counters.
type LoopStats struct {
	Iterations uint64 // iterations the loop goroutine ran
	Sleeps     uint64 // waits for the socket, the eventfd or a timer
	// Drives: iterations run by Drive on a caller's goroutine;
	// Handovers: the loop's waits with its queue left to drivers.
	Drives, Handovers uint64
	// TakenBack: hand-overs ended because the drivers went quiet or
	// blocked; TakenBackStream: ... because the queue streamed.
	TakenBack, TakenBackStream uint64
	// SpinsCut: idle spins stopped because the loop kept losing its
	// core to other runnable threads (then it sleeps at once for a
	// while).
	SpinsCut uint64
}

// LoopStats returns each queue's poll loop counters, indexed by queue.
func (x *Transport) LoopStats() ([]LoopStats, error) {
	out := make([]LoopStats, len(x.loops))
	var errs []error
	for i, l := range x.loops {
		q := l.q
		if err := l.do(func() { out[i] = LoopStats(q.stats) }); err != nil {
			errs = append(errs, fmt.Errorf("queue %d: %w", i, err))
		}
	}
	return out, errors.Join(errs...)
}

// Counters returns the steering program's verdict counters.
func (x *Transport) Counters() (bpf.Counters, error) { return x.prog.Counters() }

// CountersPerCPU returns the steering program's verdict counters per
// possible CPU.
func (x *Transport) CountersPerCPU() ([]bpf.Counters, error) { return x.prog.CountersPerCPU() }

// SetFault sets fault injection on steered frames (tests).
func (x *Transport) SetFault(f bpf.Fault) error { return x.prog.SetFault(f) }

// Program returns the steering program (its kernel objects, for tests and
// tools).
func (x *Transport) Program() *bpf.Program { return x.prog }

// LinkDrops returns the received frames the queues' links dropped: parts of
// multi-buffer packets that could not be reassembled, and frames longer
// than the MTU.
func (x *Transport) LinkDrops() (fragments, tooLong uint64, err error) {
	var errs []error
	for i, l := range x.loops {
		k := l.q.link
		if e := l.do(func() { fragments += k.fragDrop; tooLong += k.mtuDrop }); e != nil {
			errs = append(errs, fmt.Errorf("queue %d: %w", i, e))
		}
	}
	return fragments, tooLong, errors.Join(errs...)
}

// ConnState is a snapshot of one connection's transmit side, for stall
// reports and tests.
type ConnState struct {
	FreeSegments int    // segments the TCP send queue can still take
	MSS          int    // the send MSS the transmit step is sized by
	Pending      int    // FPDU bytes waiting for a free segment
	Buffered     int    // received bytes not yet delivered
	TCP          string // the TCP state
	Kick         uint32 // kicks not yet run
	Detail       string // the TCP connection's sequence and timer state
	Queue        string // the queue's frames, rings and socket counters
}

// StateOf reads c's state on its poll loop; ok is false when c is not a
// connection of this transport or its loop has stopped.
func StateOf(c transport.Conn) (s ConnState, ok bool) {
	x, isX := c.(*xconn)
	if !isX {
		return ConnState{}, false
	}
	err := x.q.l.do(func() {
		s = ConnState{FreeSegments: x.c.FreeSegments(), MSS: x.mss, Pending: len(x.pend), Buffered: x.c.Buffered(),
			TCP: x.c.State().String(), Kick: x.kick.Load(), Detail: x.c.Debug()}
		k := x.q.sock
		st, err := k.Stats()
		s.Queue = fmt.Sprintf("free frames %d, TX ring room %d, socket %+v %v", k.FreeFrames(), k.TXRoom(), st, err)
	})
	return s, err == nil
}
