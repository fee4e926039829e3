package control

import (
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
// and completion opcode. Observers are resolved once, so Observe neither
// allocates nor hashes labels.
type Latency struct {
	vec *prometheus.HistogramVec
	obs [numQueues][maxOpcode]prometheus.Observer
}

// LatencyBuckets are the bucket bounds in seconds: 1 µs to about 4 s.
var LatencyBuckets = prometheus.ExponentialBuckets(1e-6, 4, 12)

// NewLatency returns an empty histogram vector.
func NewLatency() *Latency {
	l := &Latency{vec: prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "xrnic_completion_latency_seconds",
		Help:    "Time from posting a work request to polling its completion, by work queue and completion opcode (daemon: the receive sink's buffers).",
		Buckets: LatencyBuckets,
	}, []string{"queue", "opcode"})}
	for q := range l.obs {
		for op := 1; op < maxOpcode; op++ {
			l.obs[q][op] = l.vec.WithLabelValues(queueNames[q], OpcodeLabel(verbs.Opcode(op)))
		}
	}
	return l
}

// Observe records one completion.
func (l *Latency) Observe(q Queue, op verbs.Opcode, d time.Duration) {
	if q < numQueues && int(op) > 0 && int(op) < maxOpcode {
		l.obs[q][op].Observe(d.Seconds())
	}
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
