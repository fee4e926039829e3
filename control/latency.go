package control

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"xrnic/verbs"
)

// Queue names a work queue for the completion latency histogram.
type Queue uint8

// Work queues.
const (
	QueueSend Queue = iota
	QueueRecv
	numQueues
)

var queueNames = [numQueues]string{"send", "recv"}

// maxOpcode bounds the engine opcodes the histogram is resolved for.
const maxOpcode = int(verbs.OpRecvWriteImm) + 1

// Latency is the completion latency histogram (xrnic_completion_latency_seconds):
// the time from posting a work request to polling its completion, by queue
// and completion opcode. Only the (queue, opcode) pairs that can complete
// have a series (ValidLatencyPair), each created by its first observation:
// an idle daemon exports none, and the daemon, which only posts receives,
// never exports send-queue ones. After the first observation of a pair,
// Observe neither allocates nor hashes labels.
type Latency struct {
	vec *prometheus.HistogramVec
	obs [numQueues][maxOpcode]lazyObserver
}

type lazyObserver struct {
	once sync.Once
	o    prometheus.Observer
}

// LatencyBuckets are the bucket bounds in seconds: 1 µs to about 4 s.
var LatencyBuckets = prometheus.ExponentialBuckets(1e-6, 4, 12)

// ValidLatencyPair reports whether a completion of op can be polled from
// queue q: the send queue completes the work requests posted to it, the
// receive queue receives (with Immediate Data, and after a Write with
// Immediate Data).
func ValidLatencyPair(q Queue, op verbs.Opcode) bool {
	switch q {
	case QueueSend:
		switch op {
		case verbs.OpSend, verbs.OpSendWithInv, verbs.OpWrite, verbs.OpWriteWithImm, verbs.OpRead,
			verbs.OpFetchAdd, verbs.OpCmpSwap, verbs.OpImm, verbs.OpLocalInv:
			return true
		}
	case QueueRecv:
		switch op {
		case verbs.OpRecv, verbs.OpRecvImm, verbs.OpRecvWriteImm:
			return true
		}
	}
	return false
}

// NewLatency returns an empty histogram vector.
func NewLatency() *Latency {
	return &Latency{vec: prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "xrnic_completion_latency_seconds",
		Help:    "Time from posting a work request to polling its completion, by work queue and completion opcode (daemon: the receive sink's buffers).",
		Buckets: LatencyBuckets,
	}, []string{"queue", "opcode"})}
}

// Observe records one completion; a pair that cannot occur is ignored.
func (l *Latency) Observe(q Queue, op verbs.Opcode, d time.Duration) {
	if q >= numQueues || int(op) <= 0 || int(op) >= maxOpcode || !ValidLatencyPair(q, op) {
		return
	}
	c := &l.obs[q][op]
	c.once.Do(func() { c.o = l.vec.WithLabelValues(queueNames[q], OpcodeLabel(op)) })
	c.o.Observe(d.Seconds())
}

// Collector returns the histogram vector for registration.
func (l *Latency) Collector() prometheus.Collector { return l.vec }

var opcodeLabels = map[verbs.Opcode]string{
	verbs.OpSend: "send", verbs.OpSendWithInv: "send_inv",
	verbs.OpWrite: "write", verbs.OpWriteWithImm: "write_imm",
	verbs.OpRead: "read", verbs.OpFetchAdd: "fetch_add", verbs.OpCmpSwap: "cmp_swap",
	verbs.OpImm: "imm", verbs.OpLocalInv: "local_inv",
	verbs.OpRecv: "recv", verbs.OpRecvImm: "recv_imm", verbs.OpRecvWriteImm: "recv_write_imm",
}

// OpcodeLabel is the label value of a work request or completion opcode.
func OpcodeLabel(op verbs.Opcode) string {
	if s, ok := opcodeLabels[op]; ok {
		return s
	}
	return "unknown"
}
