package control

import (
	"errors"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"xrnic/mem"
	"xrnic/verbs"
	"xrnic/wire/term"
)

// Region is a daemon-owned memory region that remote peers reach by STag.
type Region struct {
	Name     string
	MR       *verbs.MR
	Backing  mem.Backing
	PageSize int // bytes per page of the backing
	Access   mem.Access
}

// AccessLetters renders remote access rights as the --region letters:
// r (RDMA Read), w (RDMA Write), a (RFC 7306 atomics).
func AccessLetters(a mem.Access) string {
	s := ""
	if a&mem.RemoteRead != 0 {
		s += "r"
	}
	if a&mem.RemoteWrite != 0 {
		s += "w"
	}
	if a&mem.RemoteAtomic != 0 {
		s += "a"
	}
	return s
}

// MPAOutcome is how one incoming MPA connection setup ended.
type MPAOutcome uint8

// MPA negotiation outcomes (label values of xrnic_mpa_negotiations_total).
const (
	MPAAccepted          MPAOutcome = iota // Reply sent, QP in RTS
	MPARejected                            // we answered with a reject Reply (policy or limits)
	MPAMalformed                           // bad key, revision or length: closed without a Reply
	MPANegotiationFailed                   // RFC 6581 IRD/ORD or RTR mismatch
	MPATimeout                             // a setup step timed out
	MPAFailed                              // anything else (connection lost, ...)
	numMPAOutcomes
)

var mpaOutcomeNames = [numMPAOutcomes]string{"accepted", "rejected", "malformed", "negotiation_failed", "timeout", "failed"}

func (o MPAOutcome) String() string {
	if o < numMPAOutcomes {
		return mpaOutcomeNames[o]
	}
	return "unknown"
}

// SinkKind is a kind of untagged message the daemon's receive sink counts.
type SinkKind uint8

// Sink message kinds (label values of xrnic_sink_messages_total).
const (
	SinkSend           SinkKind = iota // any Send variant
	SinkImmediate                      // Immediate Data
	SinkWriteImmediate                 // Immediate Data following an RDMA Write
	numSinkKinds
)

var sinkKindNames = [numSinkKinds]string{"send", "immediate", "write_immediate"}

func (k SinkKind) String() string {
	if k < numSinkKinds {
		return sinkKindNames[k]
	}
	return "unknown"
}

// Totals are engine counters summed over every QP the daemon has had
// (live ones and those already closed), so they only grow.
type Totals struct {
	TxMsgs, RxMsgs   [16]uint64 // by RDMAP opcode
	TxBytes, RxBytes [16]uint64
	TxFPDUs, RxFPDUs uint64
	TxBatches        uint64
	// TermsSent and TermsRecv count Terminates by error; the nil key
	// counts triples that are not predeclared.
	TermsSent, TermsRecv                map[*term.Error]uint64
	FetchAdds, CmpSwaps, CmpSwapMatched uint64
}

func (t *Totals) add(s *verbs.Stats) {
	for i := range t.TxMsgs {
		t.TxMsgs[i] += s.TxMsgs[i]
		t.RxMsgs[i] += s.RxMsgs[i]
		t.TxBytes[i] += s.TxBytes[i]
		t.RxBytes[i] += s.RxBytes[i]
	}
	t.TxFPDUs += s.TxFPDUs
	t.RxFPDUs += s.RxFPDUs
	t.TxBatches += s.TxBatches
	t.FetchAdds += s.FetchAdds
	t.CmpSwaps += s.CmpSwaps
	t.CmpSwapMatched += s.CmpSwapMatched
	if t.TermsSent == nil {
		t.TermsSent, t.TermsRecv = map[*term.Error]uint64{}, map[*term.Error]uint64{}
	}
	for _, c := range s.TermsSent {
		t.TermsSent[c.Err] += c.Count
	}
	for _, c := range s.TermsRecv {
		t.TermsRecv[c.Err] += c.Count
	}
}

func (t *Totals) clone() Totals {
	c := *t
	c.TermsSent, c.TermsRecv = map[*term.Error]uint64{}, map[*term.Error]uint64{}
	for k, v := range t.TermsSent {
		c.TermsSent[k] = v
	}
	for k, v := range t.TermsRecv {
		c.TermsRecv[k] = v
	}
	return c
}

// QPEntry is a QP the daemon accepted, with what the control API shows
// about it (the peer address is shown there, never in metrics).
type QPEntry struct {
	QP      *verbs.QP
	Peer    string
	Created time.Time
}

// State is the daemon's view of its engine for the control API and the
// collectors: the device, its regions and QPs, and the counters the
// daemon keeps itself (connection setup outcomes, the receive sink). All
// methods are safe for concurrent use; counters are atomics.
type State struct {
	Dev       *verbs.Device
	Transport string // "kernel" or "afxdp"
	Listen    string // the MPA listen address
	Metrics   string // the metrics listen address ("" when off)
	Allow     []string
	Version   string
	Started   time.Time
	// ReadyCheck, when set, is consulted by Ready and /readyz: an error
	// makes the daemon not ready (verbs.Device.Healthy: the afxdp device
	// lost its XDP attachment). Set it before serving.
	ReadyCheck func() error

	mu      sync.Mutex
	regions []Region
	qps     map[*verbs.QP]*QPEntry
	retired Totals

	mpa     [numMPAOutcomes]atomic.Uint64
	refused atomic.Uint64
	sinkMsg [numSinkKinds]atomic.Uint64
	sinkB   [numSinkKinds]atomic.Uint64
	ready   atomic.Bool

	// Latency observes completion latencies (post to poll) by queue and
	// opcode; see NewLatency.
	Latency *Latency
}

// NewState returns the state of a daemon running dev.
func NewState(dev *verbs.Device) *State {
	return &State{Dev: dev, Started: time.Now(), qps: map[*verbs.QP]*QPEntry{}, Latency: NewLatency()}
}

// AddRegion records a registered daemon region.
func (s *State) AddRegion(r Region) {
	s.mu.Lock()
	s.regions = append(s.regions, r)
	s.mu.Unlock()
}

// Regions returns the daemon regions in registration order.
func (s *State) Regions() []Region {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Region(nil), s.regions...)
}

// ClearRegions forgets the regions (after they were deregistered).
func (s *State) ClearRegions() {
	s.mu.Lock()
	s.regions = nil
	s.mu.Unlock()
}

// AddQP starts tracking an accepted QP.
func (s *State) AddQP(qp *verbs.QP, peer string) {
	s.mu.Lock()
	s.qps[qp] = &QPEntry{QP: qp, Peer: peer, Created: time.Now()}
	s.mu.Unlock()
}

// RetireQP folds the counters of a closed QP into the totals and stops
// tracking it.
func (s *State) RetireQP(qp *verbs.QP) {
	st := qp.Stats()
	s.mu.Lock()
	if _, ok := s.qps[qp]; ok {
		delete(s.qps, qp)
		s.retired.add(&st)
	}
	s.mu.Unlock()
}

// QPs returns the tracked QPs ordered by QP number.
func (s *State) QPs() []QPEntry {
	s.mu.Lock()
	out := make([]QPEntry, 0, len(s.qps))
	for _, e := range s.qps {
		out = append(out, *e)
	}
	s.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].QP.Num() < out[j].QP.Num() })
	return out
}

// Totals sums the counters of the retired QPs and a snapshot of the live
// ones.
func (s *State) Totals() Totals {
	s.mu.Lock()
	t := s.retired.clone()
	live := make([]*verbs.QP, 0, len(s.qps))
	for qp := range s.qps {
		live = append(live, qp)
	}
	s.mu.Unlock()
	for _, qp := range live {
		st := qp.Stats()
		t.add(&st)
	}
	return t
}

// CountMPA counts one connection setup outcome.
func (s *State) CountMPA(o MPAOutcome) {
	if o < numMPAOutcomes {
		s.mpa[o].Add(1)
	}
}

// MPA returns the connection setup outcome counts.
func (s *State) MPA() map[string]uint64 {
	m := make(map[string]uint64, numMPAOutcomes)
	for i := range s.mpa {
		m[MPAOutcome(i).String()] = s.mpa[i].Load()
	}
	return m
}

// CountRefused counts a TCP connection closed because its peer is not in
// the --allow list.
func (s *State) CountRefused() { s.refused.Add(1) }

// Refused returns how many connections the allow list refused.
func (s *State) Refused() uint64 { return s.refused.Load() }

// CountSink counts one message the receive sink completed.
func (s *State) CountSink(k SinkKind, bytes uint32) {
	if k < numSinkKinds {
		s.sinkMsg[k].Add(1)
		s.sinkB[k].Add(uint64(bytes))
	}
}

// Sink returns the receive sink's message and byte counts by kind.
func (s *State) Sink() (msgs, bytes map[string]uint64) {
	msgs, bytes = map[string]uint64{}, map[string]uint64{}
	for i := range s.sinkMsg {
		msgs[SinkKind(i).String()] = s.sinkMsg[i].Load()
		bytes[SinkKind(i).String()] = s.sinkB[i].Load()
	}
	return msgs, bytes
}

// SetReady marks the daemon ready (listening, regions registered) or not
// (starting, shutting down); /readyz reports it.
func (s *State) SetReady(v bool) { s.ready.Store(v) }

// Ready reports readiness: SetReady(true) and ReadyCheck passing.
func (s *State) Ready() bool { return s.ReadyErr() == nil }

// ReadyErr says why the daemon is not ready (nil when it is).
func (s *State) ReadyErr() error {
	if !s.ready.Load() {
		return errors.New("starting or shutting down")
	}
	if s.ReadyCheck != nil {
		return s.ReadyCheck()
	}
	return nil
}
