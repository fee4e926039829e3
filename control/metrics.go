package control

import (
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"xrnic/mem"
	"xrnic/verbs"
	"xrnic/wire/term"
)

// rdmapOpLabels name the RDMAP opcodes (RFC 5040 §4.1, RFC 7306 §4.1) in
// labels; opcodes 0xC-0xF are reserved and never counted.
var rdmapOpLabels = [12]string{
	"write", "read_request", "read_response", "send", "send_invalidate", "send_se",
	"send_se_invalidate", "terminate", "immediate", "immediate_se", "atomic_request", "atomic_response",
}

var memOpLabels = [...]string{"write", "read_response", "read_source", "atomic", "remote_invalidate"}

var reasonLabels = [mem.NumReasons]string{"invalid_stag", "not_associated", "access", "to_wrap", "bounds", "misaligned"}

var pageSizeLabels = map[int]string{mem.Size4K: "4KiB", mem.Size2M: "2MiB", mem.Size1G: "1GiB"}

// PageSizeLabel is the label value of a page size in bytes.
func PageSizeLabel(n int) string {
	if s, ok := pageSizeLabels[n]; ok {
		return s
	}
	return strconv.Itoa(n)
}

// pageSizeMetricLabel is the page_size label value of a page size in
// bytes: lower case, as backing's ("4k", "2m", "1g").
func pageSizeMetricLabel(n int) string {
	switch n {
	case mem.Size4K:
		return "4k"
	case mem.Size2M:
		return "2m"
	case mem.Size1G:
		return "1g"
	}
	return strconv.Itoa(n)
}

var qpStates = []verbs.QPState{verbs.QPInit, verbs.QPConnecting, verbs.QPRTS, verbs.QPClosing, verbs.QPError, verbs.QPClosed}

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(name, help, labels, nil)
}

// The metric families of the engine collector. Names are listed in the
// package documentation.
var (
	descBuild      = desc("xrnic_build_info", "Build information of the xrnic binary (value 1).", "version", "revision", "goversion")
	descTransport  = desc("xrnic_transport_info", "The transport the daemon runs on (value 1).", "transport")
	descMsgs       = desc("xrnic_rdmap_messages_total", "RDMAP messages by direction and opcode, summed over all QPs.", "direction", "opcode")
	descBytes      = desc("xrnic_rdmap_bytes_total", "DDP payload bytes of RDMAP messages by direction and opcode.", "direction", "opcode")
	descFPDUs      = desc("xrnic_mpa_fpdus_total", "MPA FPDUs by direction.", "direction")
	descLLPWrites  = desc("xrnic_llp_writes_total", "Batched writes to the lower layer (each carries one or more FPDUs).")
	descAtomics    = desc("xrnic_atomics_total", "RFC 7306 atomics executed for peers by operation and result (cmp_swap: matched or not_matched).", "operation", "result")
	descAtomicErrs = desc("xrnic_atomic_errors_total", "Atomic Requests refused before execution (the target check failed), by reason.", "reason")
	descCheckFails = desc("xrnic_memory_check_failures_total", "Remote memory accesses refused by the STag check, by access kind and reason.", "access", "reason")
	descTerms      = desc("xrnic_terminates_total", "Terminate messages by direction (tx: sent, rx: received), layer, error type, error code (as on the wire) and reason; every predeclared error has a series.", "direction", "layer", "type", "code", "reason")
	descMPA        = desc("xrnic_mpa_negotiations_total", "Incoming MPA connection setups by outcome.", "outcome")
	descRefused    = desc("xrnic_connections_refused_total", "TCP connections reset before MPA: the peer is not in the --allow list, or --max-setup / --max-setup-per-peer connections are already in MPA setup (the oldest without a Request is evicted for a new one; counted here too).")
	descQPs        = desc("xrnic_qps", "QPs of the daemon by state.", "state")
	descRegBytes   = desc("xrnic_registered_memory_bytes", "Bytes of the daemon's remotely accessible regions by page size.", "page_size")
	descRegions    = desc("xrnic_memory_regions", "Live memory registrations (STags) of the device.")
	descMapped     = desc("xrnic_mapped_memory_bytes", "Memory mapped by the process for registration, by backing.", "backing")
	descFallbacks  = desc("xrnic_memory_page_fallbacks_total", "Allocations that got smaller pages than they asked for.")
	descSinkMsgs   = desc("xrnic_sink_messages_total", "Untagged messages consumed by the daemon's receive sink, by kind.", "kind")
	descSinkBytes  = desc("xrnic_sink_bytes_total", "Bytes consumed by the daemon's receive sink, by kind.", "kind")
)

// Collector reads the engine's counters at scrape time: it sums the
// per-QP counters (plain atomics), reads the STag table's check failure
// counters and the daemon's own counters. Nothing is counted per packet by
// the collector itself.
type Collector struct {
	s       *State
	tcp     TCPSource
	xdp     XDPSource
	version string
	rev     string
}

// NewCollector returns the engine collector over s. tcp and xdp may be nil
// (kernel transport): their families are then not exported.
func NewCollector(s *State, tcp TCPSource, xdp XDPSource) *Collector {
	c := &Collector{s: s, tcp: tcp, xdp: xdp, version: s.Version, rev: "unknown"}
	if bi, ok := debug.ReadBuildInfo(); ok {
		if c.version == "" {
			c.version = bi.Main.Version
		}
		for _, st := range bi.Settings {
			if st.Key == "vcs.revision" {
				c.rev = st.Value
			}
		}
	}
	if c.version == "" {
		c.version = "(devel)"
	}
	return c
}

var allDescs = []*prometheus.Desc{descBuild, descTransport, descMsgs, descBytes, descFPDUs, descLLPWrites, descAtomics,
	descAtomicErrs, descCheckFails, descTerms, descMPA, descRefused, descQPs, descRegBytes, descRegions, descMapped,
	descFallbacks, descSinkMsgs, descSinkBytes}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range allDescs {
		ch <- d
	}
	if c.tcp != nil {
		describeTCP(ch)
	}
	if c.xdp != nil {
		describeXDP(ch)
	}
}

func counter(ch chan<- prometheus.Metric, d *prometheus.Desc, v uint64, lv ...string) {
	ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), lv...)
}

func gauge(ch chan<- prometheus.Metric, d *prometheus.Desc, v float64, lv ...string) {
	ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, lv...)
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	s := c.s
	gauge(ch, descBuild, 1, c.version, c.rev, runtime.Version())
	gauge(ch, descTransport, 1, s.Transport)

	t := s.Totals()
	for op, name := range rdmapOpLabels {
		counter(ch, descMsgs, t.TxMsgs[op], "tx", name)
		counter(ch, descMsgs, t.RxMsgs[op], "rx", name)
		counter(ch, descBytes, t.TxBytes[op], "tx", name)
		counter(ch, descBytes, t.RxBytes[op], "rx", name)
	}
	counter(ch, descFPDUs, t.TxFPDUs, "tx")
	counter(ch, descFPDUs, t.RxFPDUs, "rx")
	counter(ch, descLLPWrites, t.TxBatches)
	counter(ch, descAtomics, t.FetchAdds, "fetch_add", "ok")
	counter(ch, descAtomics, t.CmpSwapMatched, "cmp_swap", "matched")
	counter(ch, descAtomics, t.CmpSwaps-t.CmpSwapMatched, "cmp_swap", "not_matched")

	cc, liveMRs := s.Dev.MemStats()
	for op := range cc.Fails {
		for r := range cc.Fails[op] {
			if op < len(memOpLabels) {
				counter(ch, descCheckFails, cc.Fails[op][r], memOpLabels[op], reasonLabels[r])
			}
			if op == int(mem.OpAtomic) {
				counter(ch, descAtomicErrs, cc.Fails[op][r], reasonLabels[r])
			}
		}
	}

	termMetrics(ch, "tx", t.TermsSent)
	termMetrics(ch, "rx", t.TermsRecv)

	for o := MPAOutcome(0); o < numMPAOutcomes; o++ {
		counter(ch, descMPA, s.mpa[o].Load(), o.String())
	}
	counter(ch, descRefused, s.refused.Load())

	var byState [8]int
	for _, e := range s.QPs() {
		if st := e.QP.State(); int(st) < len(byState) {
			byState[st]++
		}
	}
	for _, st := range qpStates {
		gauge(ch, descQPs, float64(byState[st]), strings.ToLower(st.String()))
	}

	reg := map[string]uint64{"4k": 0, "2m": 0, "1g": 0}
	for _, r := range s.Regions() {
		reg[pageSizeMetricLabel(r.PageSize)] += uint64(r.MR.Len())
	}
	for ps, n := range reg {
		gauge(ch, descRegBytes, float64(n), ps)
	}
	gauge(ch, descRegions, float64(liveMRs))
	ms := mem.Stats()
	for b := mem.Backing(0); b < mem.NumBackings; b++ {
		gauge(ch, descMapped, float64(ms.Bytes[b]), backingLabel(b))
	}
	counter(ch, descFallbacks, ms.Fallbacks)
	for k := SinkKind(0); k < numSinkKinds; k++ {
		counter(ch, descSinkMsgs, s.sinkMsg[k].Load(), k.String())
		counter(ch, descSinkBytes, s.sinkB[k].Load(), k.String())
	}
	if c.tcp != nil {
		collectTCP(ch, c.tcp)
	}
	if c.xdp != nil {
		collectXDP(ch, c.xdp)
	}
}

func backingLabel(b mem.Backing) string {
	switch b {
	case mem.Backing4K:
		return "4k"
	case mem.BackingTHP:
		return "thp"
	case mem.BackingHugeTLB2M:
		return "hugetlb_2m"
	case mem.BackingHugeTLB1G:
		return "hugetlb_1g"
	}
	return "unknown"
}

// TermLabels returns the numeric layer, type and code of a Terminate error
// as the control API shows them ("unknown" for triples that are not
// predeclared). The metrics label them with termSeries instead.
func TermLabels(e *term.Error) (layer, etype, code string) {
	if e == nil {
		return "unknown", "unknown", "unknown"
	}
	var l string
	switch e.Layer {
	case term.LayerRDMAP:
		l = "rdmap"
	case term.LayerDDP:
		l = "ddp"
	case term.LayerLLP:
		l = "mpa"
	default:
		l = "unknown"
	}
	return l, "0x" + strconv.FormatUint(uint64(e.EType), 16), "0x" + hex2(e.Code)
}

func hex2(b uint8) string {
	const digits = "0123456789abcdef"
	return string([]byte{digits[b>>4], digits[b&0xF]})
}

// termSeries are the label values of xrnic_terminates_total for one
// error: the layer and error type by name, the code as on the wire
// (RFC 5040 §4.8) and a reason naming the error in words.
type termSeries struct{ layer, etype, code, reason string }

var termUnknown = termSeries{"unknown", "unknown", "unknown", "unknown"}

// termTypeNames name the error types per layer (RFC 5040 §7.2, RFC 5041
// §7.2, RFC 5044 §8).
var termTypeNames = map[term.Layer][]string{
	term.LayerRDMAP: {"local_catastrophic", "remote_protection", "remote_operation"},
	term.LayerDDP:   {"local_catastrophic", "tagged", "untagged"},
	term.LayerLLP:   {"llp"},
}

// termReasons name every predeclared error; TestTerminateSeries fails when
// term gains one that is missing here.
var termReasons = map[*term.Error]string{
	term.RDMAPLocalCatastrophic:      "rdmap_local_catastrophic",
	term.RDMAPInvalidSTag:            "rdmap_invalid_stag",
	term.RDMAPBaseBounds:             "rdmap_base_bounds",
	term.RDMAPAccessRights:           "rdmap_access_rights",
	term.RDMAPSTagNotAssociated:      "rdmap_stag_not_associated",
	term.RDMAPTOWrap:                 "rdmap_to_wrap",
	term.RDMAPProtectionNoInvalidate: "rdmap_protection_cannot_invalidate",
	term.RDMAPProtectionUnspecified:  "rdmap_protection_unspecified",
	term.RDMAPInvalidVersion:         "rdmap_invalid_version",
	term.RDMAPUnexpectedOpCode:       "rdmap_unexpected_opcode",
	term.RDMAPCatastrophicStream:     "rdmap_catastrophic_stream",
	term.RDMAPCatastrophicGlobal:     "rdmap_catastrophic_global",
	term.RDMAPOperationNoInvalidate:  "rdmap_operation_cannot_invalidate",
	term.RDMAPOperationUnspecified:   "rdmap_operation_unspecified",
	term.DDPLocalCatastrophic:        "ddp_local_catastrophic",
	term.DDPTaggedInvalidSTag:        "ddp_tagged_invalid_stag",
	term.DDPTaggedBaseBounds:         "ddp_tagged_base_bounds",
	term.DDPTaggedSTagNotAssociated:  "ddp_tagged_stag_not_associated",
	term.DDPTaggedTOWrap:             "ddp_tagged_to_wrap",
	term.DDPTaggedInvalidVersion:     "ddp_tagged_invalid_version",
	term.DDPUntaggedInvalidQN:        "ddp_untagged_invalid_qn",
	term.DDPUntaggedNoBuffer:         "ddp_untagged_no_buffer",
	term.DDPUntaggedMSNRange:         "ddp_untagged_msn_range",
	term.DDPUntaggedInvalidMO:        "ddp_untagged_invalid_mo",
	term.DDPUntaggedTooLong:          "ddp_untagged_too_long",
	term.DDPUntaggedInvalidVersion:   "ddp_untagged_invalid_version",
	term.MPAConnectionLost:           "mpa_connection_lost",
	term.MPACRCError:                 "mpa_crc_error",
	term.MPAMarkerError:              "mpa_marker_error",
	term.MPAInvalidFrame:             "mpa_invalid_frame",
	term.MPALocalCatastrophic:        "mpa_local_catastrophic",
	term.MPAInsufficientIRD:          "mpa_insufficient_ird",
	term.MPANoMatchingRTR:            "mpa_no_matching_rtr",
}

// termSeriesOf returns the labels of e (termUnknown for nil, a triple
// that is not predeclared).
func termSeriesOf(e *term.Error) termSeries {
	r, ok := termReasons[e]
	if e == nil || !ok {
		return termUnknown
	}
	l, _, _ := TermLabels(e)
	t := "0x" + strconv.FormatUint(uint64(e.EType), 16)
	if names := termTypeNames[e.Layer]; int(e.EType) < len(names) {
		t = names[e.EType]
	}
	return termSeries{l, t, "0x" + hex2(e.Code), r}
}

// termKnown is every predeclared error followed by nil (the unknown ones):
// each has a series in both directions from the first scrape on, so
// rate() sees the first Terminate.
var termKnown = append(term.Known(), nil)

func termMetrics(ch chan<- prometheus.Metric, dir string, m map[*term.Error]uint64) {
	for _, e := range termKnown {
		k := termSeriesOf(e)
		counter(ch, descTerms, m[e], dir, k.layer, k.etype, k.code, k.reason)
	}
}

// Options configure NewRegistry.
type Options struct {
	TCP TCPSource // nil: TCP families absent (kernel transport)
	XDP XDPSource // nil: XDP families absent (kernel transport)
	// NoProcess leaves out the Go runtime and process collectors (tests).
	NoProcess bool
	// Servers are the counters of the daemon's servers (metrics, control,
	// mpa): the xrnic_server_* families.
	Servers []*ServerStats
}

// NewRegistry returns a registry with the engine collector, the completion
// latency histograms, and the Go runtime and process collectors.
func NewRegistry(s *State, o Options) *prometheus.Registry {
	r := prometheus.NewRegistry()
	r.MustRegister(NewCollector(s, o.TCP, o.XDP))
	r.MustRegister(s.Latency.Collector())
	if len(o.Servers) > 0 {
		r.MustRegister(serverCollector(o.Servers))
	}
	if !o.NoProcess {
		r.MustRegister(collectors.NewGoCollector())
		r.MustRegister(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	return r
}
