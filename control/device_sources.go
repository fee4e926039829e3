package control

import (
	"xrnic/tcpstack"
	"xrnic/transport"
	"xrnic/transport/afxdp"
)

// TransportSources returns the TCP and XDP sources of a device's
// transport when it is afxdp, for Options.TCP and Options.XDP (nil, nil
// over kernel TCP, whose TCP is the kernel's and has no XDP). iface labels the XDP
// families. Every read happens at scrape time: the AF_XDP sockets'
// XDP_STATISTICS (a getsockopt per queue), the steering program's per-CPU
// counters (one map lookup), and the user-space TCP's counters (read on
// each queue's poll loop, which owns them).
func TransportSources(tr transport.Transport, iface string) (TCPSource, XDPSource) {
	x, ok := tr.(*afxdp.Transport)
	if !ok {
		return nil, nil
	}
	s := &deviceSource{tr: x, iface: iface}
	return s, s
}

type deviceSource struct {
	tr    *afxdp.Transport
	iface string
}

// TCPStats sums the queues' stacks, including their RTT histograms.
func (s *deviceSource) TCPStats() TCPStats {
	per, _ := s.tr.TCPStats()
	var t TCPStats
	var rtt tcpstack.RTTHistogram
	for _, q := range per {
		t.SegmentsIn += q.RxSegments
		t.SegmentsOut += q.TxSegments
		t.Retransmits += q.TxRetransmits
		t.RTOEvents += q.Timeouts
		t.OutOfOrder += q.RxOOO
		rtt.Add(&q.RTT)
	}
	if len(per) > 0 {
		t.RTTBounds, t.RTTBuckets, t.RTTCount, t.RTTSumSeconds = rttHistogram(&rtt)
	}
	return t
}

// rttHistogram converts tcpstack's per-bucket counts into the cumulative
// form Prometheus histograms use.
func rttHistogram(h *tcpstack.RTTHistogram) (bounds []float64, cum []uint64, count uint64, sum float64) {
	bounds = make([]float64, len(tcpstack.RTTBounds))
	cum = make([]uint64, len(tcpstack.RTTBounds))
	var run uint64
	for i, b := range tcpstack.RTTBounds {
		run += h.Counts[i]
		bounds[i] = b.Seconds()
		cum[i] = run
	}
	return bounds, cum, h.Count, h.Sum.Seconds()
}

func (s *deviceSource) XDPSocketStats() []XDPSocketStats {
	per, _ := s.tr.SocketStats()
	out := make([]XDPSocketStats, len(per))
	for q, st := range per {
		out[q] = XDPSocketStats{Interface: s.iface, Queue: q,
			RxDropped: st.RXDropped, RxInvalidDescs: st.RXInvalidDescs, TxInvalidDescs: st.TXInvalidDescs,
			RxRingFull: st.RXRingFull, RxFillRingEmptyDescs: st.RXFillRingEmptyDescs, TxRingEmptyDescs: st.TXRingEmptyDescs, TxBusy: st.TXBusy}
	}
	return out
}

// xdpCounterNames are the steering program's verdicts, as the counter
// label values.
var xdpCounterNames = [...]string{"redirected", "passed", "malformed", "no_socket", "fault_dropped", "fault_corrupted"}

func (s *deviceSource) XDPProgramCounters() []XDPProgramCounter {
	per, err := s.tr.CountersPerCPU()
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
