package control

import (
	"xrnic/datapath"
)

// DeviceSources returns the TCP and XDP sources of a device on the afxdp
// transport, for Options.TCP and Options.XDP (nil, nil over kernel TCP,
// whose TCP is the kernel's and has no XDP). iface labels the XDP
// families. Every read happens at scrape time: the AF_XDP sockets'
// XDP_STATISTICS (a getsockopt per queue), the steering program's per-CPU
// counters (one map lookup), and the user-space TCP's counters (read on
// each queue's poll loop, which owns them).
func DeviceSources(dev *datapath.Device, iface string) (TCPSource, XDPSource) {
	if _, ok := dev.XDPInfo(); !ok {
		return nil, nil
	}
	s := &deviceSource{dev: dev, iface: iface}
	return s, s
}

type deviceSource struct {
	dev   *datapath.Device
	iface string
}

// TCPStats sums the queues' stacks. RTT samples are not recorded by the
// user-space TCP, so the RTT histogram stays empty (not exported).
func (s *deviceSource) TCPStats() TCPStats {
	per, _ := s.dev.TCPStats()
	var t TCPStats
	for _, q := range per {
		t.SegmentsIn += q.RxSegments
		t.SegmentsOut += q.TxSegments
		t.Retransmits += q.TxRetransmits
		t.RTOEvents += q.Timeouts
		t.OutOfOrder += q.RxOOO
	}
	return t
}

func (s *deviceSource) XDPSocketStats() []XDPSocketStats {
	per, _ := s.dev.XDPSocketStats()
	out := make([]XDPSocketStats, len(per))
	for q, st := range per {
		out[q] = XDPSocketStats{Interface: s.iface, Queue: q,
			RxDropped: st.RXDropped, RxInvalidDescs: st.RXInvalidDescs, TxInvalidDescs: st.TXInvalidDescs,
			RxRingFull: st.RXRingFull, RxFillRingEmptyDescs: st.RXFillRingEmptyDescs, TxRingEmptyDescs: st.TXRingEmptyDescs}
	}
	return out
}

// xdpCounterNames are the steering program's verdicts, as the counter
// label values.
var xdpCounterNames = [...]string{"redirected", "passed", "malformed", "no_socket", "fault_dropped", "fault_corrupted"}

func (s *deviceSource) XDPProgramCounters() []XDPProgramCounter {
	per, err := s.dev.XDPCountersPerCPU()
	if err != nil {
		return nil
	}
	out := make([]XDPProgramCounter, len(xdpCounterNames))
	for i, name := range xdpCounterNames {
		out[i] = XDPProgramCounter{Interface: s.iface, Name: name, PerCPU: make([]uint64, len(per))}
	}
	for cpu, c := range per {
		for i, v := range [...]uint64{c.Redirected, c.Passed, c.Malformed, c.NoSocket, c.FaultDropped, c.FaultCorrupted} {
			out[i].PerCPU[cpu] = v
		}
	}
	return out
}
