package control

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// TCPStats are the user-space TCP's counters (summed over connections) as
// the AF_XDP transport will report them.
type TCPStats struct {
	SegmentsIn, SegmentsOut uint64
	Retransmits             uint64 // retransmitted segments
	RTOEvents               uint64 // retransmission timer expiries
	OutOfOrder              uint64 // segments received out of order and queued
	// RTT is a histogram of RTT samples: RTTBuckets[i] is the cumulative
	// count of samples <= RTTBounds[i] (seconds).
	RTTBounds     []float64
	RTTBuckets    []uint64
	RTTCount      uint64
	RTTSumSeconds float64
}

// TCPSource provides TCP counters at scrape time. The kernel transport has
// none (the kernel's own TCP MIB covers it); the user-space TCP of the
// AF_XDP transport will implement it.
type TCPSource interface {
	TCPStats() TCPStats
}

// XDPSocketStats are the fields of struct xdp_statistics (getsockopt
// XDP_STATISTICS) of one AF_XDP socket.
type XDPSocketStats struct {
	Interface            string
	Queue                int
	RxDropped            uint64
	RxInvalidDescs       uint64
	TxInvalidDescs       uint64
	RxRingFull           uint64
	RxFillRingEmptyDescs uint64
	TxRingEmptyDescs     uint64
	// TxBusy is xrnic's own: kicks that left frames on the TX ring because
	// the kernel or driver was busy (retried on the next poll iteration).
	TxBusy uint64
}

// XDPProgramCounter is one counter of the XDP steering program, per CPU
// (a BPF per-CPU array); the collector exports the sum.
type XDPProgramCounter struct {
	Interface string
	Name      string // e.g. "redirected", "passed", "dropped"
	PerCPU    []uint64
}

// XDPSource provides the AF_XDP and XDP program counters at scrape time.
// The AF_XDP transport will implement it.
type XDPSource interface {
	XDPSocketStats() []XDPSocketStats
	XDPProgramCounters() []XDPProgramCounter
}

var (
	descTCPSegs    = desc("xrnic_tcp_segments_total", "Segments of the user-space TCP by direction (rx, tx).", "direction")
	descTCPRetrans = desc("xrnic_tcp_retransmitted_segments_total", "Segments retransmitted by the user-space TCP.")
	descTCPRTO     = desc("xrnic_tcp_rto_events_total", "Retransmission timeouts of the user-space TCP.")
	descTCPOOO     = desc("xrnic_tcp_out_of_order_segments_total", "Segments received out of order by the user-space TCP.")
	descTCPRTT     = desc("xrnic_tcp_rtt_seconds", "RTT samples of the user-space TCP.")

	xdpLabels      = []string{"interface", "queue"}
	descXDPRxDrop  = prometheus.NewDesc("xrnic_xdp_rx_dropped_total", "AF_XDP: frames dropped for reasons other than invalid descriptors (XDP_STATISTICS rx_dropped).", xdpLabels, nil)
	descXDPRxInv   = prometheus.NewDesc("xrnic_xdp_rx_invalid_descriptors_total", "AF_XDP: invalid RX descriptors (rx_invalid_descs).", xdpLabels, nil)
	descXDPTxInv   = prometheus.NewDesc("xrnic_xdp_tx_invalid_descriptors_total", "AF_XDP: invalid TX descriptors (tx_invalid_descs).", xdpLabels, nil)
	descXDPRxFull  = prometheus.NewDesc("xrnic_xdp_rx_ring_full_total", "AF_XDP: frames dropped because the RX ring was full (rx_ring_full).", xdpLabels, nil)
	descXDPFillEmp = prometheus.NewDesc("xrnic_xdp_fill_ring_empty_total", "AF_XDP: times the fill ring was empty (rx_fill_ring_empty_descs).", xdpLabels, nil)
	descXDPTxEmpty = prometheus.NewDesc("xrnic_xdp_tx_ring_empty_total", "AF_XDP: times the TX ring was empty (tx_ring_empty_descs).", xdpLabels, nil)
	descXDPProgram = desc("xrnic_xdp_program_packets_total", "Packets by verdict of the XDP steering program (its per-CPU counters summed).", "interface", "counter")
	tcpDescs       = []*prometheus.Desc{descTCPSegs, descTCPRetrans, descTCPRTO, descTCPOOO, descTCPRTT}
	descXDPTxBusy  = prometheus.NewDesc("xrnic_xdp_tx_busy_total", "AF_XDP: TX wakeups that left frames on the ring because the kernel or driver was busy (retried on the next poll iteration).", xdpLabels, nil)
	xdpDescs       = []*prometheus.Desc{descXDPRxDrop, descXDPRxInv, descXDPTxInv, descXDPRxFull, descXDPFillEmp, descXDPTxEmpty, descXDPTxBusy, descXDPProgram}
)

func describeTCP(ch chan<- *prometheus.Desc) {
	for _, d := range tcpDescs {
		ch <- d
	}
}

func describeXDP(ch chan<- *prometheus.Desc) {
	for _, d := range xdpDescs {
		ch <- d
	}
}

func collectTCP(ch chan<- prometheus.Metric, src TCPSource) {
	t := src.TCPStats()
	counter(ch, descTCPSegs, t.SegmentsIn, "rx")
	counter(ch, descTCPSegs, t.SegmentsOut, "tx")
	counter(ch, descTCPRetrans, t.Retransmits)
	counter(ch, descTCPRTO, t.RTOEvents)
	counter(ch, descTCPOOO, t.OutOfOrder)
	if len(t.RTTBounds) == 0 {
		return // no RTT samples recorded by this source
	}
	buckets := make(map[float64]uint64, len(t.RTTBounds))
	for i, b := range t.RTTBounds {
		if i < len(t.RTTBuckets) {
			buckets[b] = t.RTTBuckets[i]
		}
	}
	ch <- prometheus.MustNewConstHistogram(descTCPRTT, t.RTTCount, t.RTTSumSeconds, buckets)
}

func collectXDP(ch chan<- prometheus.Metric, src XDPSource) {
	for _, s := range src.XDPSocketStats() {
		q := strconv.Itoa(s.Queue)
		counter(ch, descXDPRxDrop, s.RxDropped, s.Interface, q)
		counter(ch, descXDPRxInv, s.RxInvalidDescs, s.Interface, q)
		counter(ch, descXDPTxInv, s.TxInvalidDescs, s.Interface, q)
		counter(ch, descXDPRxFull, s.RxRingFull, s.Interface, q)
		counter(ch, descXDPFillEmp, s.RxFillRingEmptyDescs, s.Interface, q)
		counter(ch, descXDPTxEmpty, s.TxRingEmptyDescs, s.Interface, q)
		counter(ch, descXDPTxBusy, s.TxBusy, s.Interface, q)
	}
	// One series per counter and interface: a label per CPU would
	// multiply the series by the host's CPUs and move with scheduling,
	// not with anything an operator acts on.
	type key struct{ iface, name string }
	sums := map[key]uint64{}
	var order []key
	for _, c := range src.XDPProgramCounters() {
		k := key{c.Interface, c.Name}
		if _, ok := sums[k]; !ok {
			order = append(order, k)
		}
		for _, v := range c.PerCPU {
			sums[k] += v
		}
	}
	for _, k := range order {
		counter(ch, descXDPProgram, sums[k], k.iface, k.name)
	}
}
