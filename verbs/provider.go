package verbs

import (
	"context"
	"net"

	"xrnic/internal/engine"
	"xrnic/mem"
	"xrnic/transport"
	"xrnic/wire/term"
)

// The provider interfaces are the seam between the public API and what
// implements it: today the in-process engine (kernel.go); later a
// daemon-backed device (xrnicd, memory shared by memfd) can implement them
// without any change to user code. They speak verbs types only.
//
// Post and poll methods are called with the caller's verbs-level lock held
// (QP send lock, QP receive lock, CQ poll lock), so an implementation may
// use per-object scratch space for conversions without locking again. They
// must not allocate.

type provider interface {
	attributes() Attributes
	allocPD() (uint32, error)
	deallocPD(pd uint32) error
	// regMR registers caller memory (buf stays owned by the caller); caller memory; stream, when not 0, is the QP number
	// whose stream alone may use the STag.
	regMR(pd uint32, buf []byte, a Access, stream uint32) (mrImpl, error)
	// allocMR allocates device memory and registers it.
	allocMR(pd uint32, size int, a Access, o AllocOptions) (mrImpl, error)
	createCQ(depth int) (cqImpl, error)
	createQP(pd uint32, a *QPAttr) (qpImpl, error)
	createSRQ(pd uint32, a *SRQAttr) (srqImpl, error)
	listen(network, addr string, lc ListenConfig) (listenerImpl, error)
	// memStats reads the device's access-check failure counters and its
	// number of registered MRs.
	memStats() (mem.CheckCounts, int)
	// transport is the engine's transport (nil for other providers).
	transport() transport.Transport
	close() error
}

type mrImpl interface {
	stag() uint32
	baseTO() uint64
	bytes() []byte
	backing() Backing
	warning() string
	valid() bool
	// dereg deregisters and, for allocated memory, frees it.
	dereg() error
}

type cqImpl interface {
	poll(wc []Completion) int
	wait(ctx context.Context) error
	arm(solicitedOnly bool)
	events() <-chan struct{}
	countPushes(p *engine.PushCounter)
	drive() transport.DriveResult
	len() int
	cap() int
	resize(n int) (int, error)
	close() error
}

type srqImpl interface {
	postRecv(wr *RecvWR) error
	setLimit(limit int) error
	limitEvents() <-chan struct{}
	query() SRQInfo
	close() error
}

type qpImpl interface {
	num() uint32
	postSend(wr *SendWR) error
	postRecv(wr *RecvWR) error
	connect(ctx context.Context, addr string, p *ConnParam) error
	probe(ctx context.Context, stag uint32, to uint64) (ProbeResult, error)
	connInfo() ConnInfo
	queues() QueueInfo
	state() QPState
	err() error
	disconnected() error
	wakes() uint64
	peerTerminate() *term.Error
	stats() Stats
	disconnect(ctx context.Context) error
	done() <-chan struct{}
	toError()
	close() error
}

type listenerImpl interface {
	accept(ctx context.Context) (connReqImpl, ConnRequestInfo, error)
	addr() net.Addr
	stats() ListenerStats
	close() error
}

type connReqImpl interface {
	accept(ctx context.Context, qp qpImpl, p *ConnParam) error
	reject(privateData []byte) error
	close() error
}
