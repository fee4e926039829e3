package verbs

import (
	"context"
	"net"
	"time"

	"xrnic/wire/mpa"
)

// ConnParam are one side's connection parameters (rdma_conn_param), for
// Dial and ConnRequest.Accept. The zero value takes the defaults.
type ConnParam struct {
	// PrivateData goes in the MPA Request or Reply (at most 512 bytes,
	// 508 with MPA revision 2).
	PrivateData []byte
	// IRD (responder_resources) and ORD (initiator_depth) are the inbound
	// and outbound Read+Atomic depths to negotiate; 0 takes the QP's
	// MaxIRD/MaxORD, a negative value asks for 0.
	IRD, ORD int
	// MPARev is the MPA revision Dial sends: 2 (RFC 6581, default) or 1
	// (RFC 5044). A responder answers in kind.
	MPARev uint8
	// NoMPARevFallback (Dial) turns off the retry in MPA revision 1 when
	// the responder shows it does not understand revision 2: it closes or
	// resets the connection without a Reply, or replies in revision 1
	// (RFC 6581 §10). The retry uses a new TCP connection; RFC 5044 has no
	// RTR negotiation, so a PeerToPeer Dial falls back only if RTR offers
	// RTRWrite, and then sends the zero-length Write unnegotiated.
	// ConnInfo.MPARevFallback tells that it happened.
	NoMPARevFallback bool
	// PeerToPeer asks (Dial) for RFC 6581 peer-to-peer mode, in which the
	// initiator sends the first FPDU (the RTR).
	PeerToPeer bool
	// NoCRC asks not to use MPA CRCs; they are off only if both sides ask.
	NoCRC bool
	// Markers asks the peer to insert MPA markers.
	Markers bool
	// RTR is the set of peer-to-peer ready-to-receive messages we offer
	// (Dial) or accept (ConnRequest.Accept) in RFC 6581 negotiation
	// (RTRSend, RTRWrite, RTRRead; zero: all of them).
	RTR RTR
	// RequiredORD (Accept) is the smallest ORD this responder needs; an
	// initiator whose IRD is lower is refused (RFC 6581 §9.1).
	RequiredORD int
	// Timeout bounds each setup step (default: DeviceConfig.ConnTimeout).
	Timeout time.Duration
}

// ConnInfo is the outcome of connection setup.
type ConnInfo struct {
	Initiator bool
	MPARev    uint8 // the negotiated MPA revision
	// MPARevFallback: the peer did not understand revision 2 and Dial
	// connected again in revision 1 (see ConnParam.NoMPARevFallback).
	MPARevFallback bool
	CRC            bool
	MarkersTx      bool // we insert markers (the peer asked)
	MarkersRx      bool // the peer inserts markers (we asked)
	IRD, ORD       int  // negotiated inbound and outbound Read+Atomic depths
	// PeerToPeer: RFC 6581 peer-to-peer mode is on.
	PeerToPeer bool
	// MULPDU is the largest DDP segment payload per FPDU.
	MULPDU int
	// PeerPrivateData is the peer's private data (rdma_cm event's
	// private_data).
	PeerPrivateData []byte
	// PeerIRD and PeerORD are the raw values of the peer's RFC 6581 word
	// (HasPeerIRDORD), which RFC 6581 §9.1 asks to hand to the ULP.
	PeerIRD, PeerORD int
	HasPeerIRDORD    bool
	// LocalAddr and RemoteAddr are the LLP connection's addresses and
	// ports (rdma_get_local_addr, rdma_get_peer_addr); nil where the
	// transport does not know one.
	LocalAddr, RemoteAddr net.Addr
}

// ConnRequestInfo describes an incoming connection request.
type ConnRequestInfo struct {
	RemoteAddr  net.Addr // the initiator's address and port (nil if unknown)
	MPARev      uint8
	PrivateData []byte // the initiator's private data
	PeerCRC     bool   // the initiator asked for CRCs
	PeerMarkers bool   // the initiator asked for markers
	// PeerIRD and PeerORD are the initiator's RFC 6581 IRD/ORD
	// (HasPeerIRDORD).
	PeerIRD, PeerORD int
	HasPeerIRDORD    bool
	PeerToPeer       bool
}

// Listener accepts connection requests (rdma_listen).
type Listener struct {
	dev *Device
	l   listenerImpl
}

// Listen listens for MPA connections on a TCP address (network "tcp",
// "tcp4" or "tcp6"; addr as for net.Listen) with the default ListenConfig.
func (d *Device) Listen(network, addr string) (*Listener, error) {
	return d.ListenConfig(network, addr, ListenConfig{})
}

// ListenConfig configures a Listener. Every connection's MPA Request is
// read on its own, bounded in time by DeviceConfig.ConnTimeout, so a
// silent or slow peer delays no other. Zero fields take the defaults.
type ListenConfig struct {
	// Admit decides from the peer's address, before anything is read,
	// whether a connection may go on to MPA setup; a refused one is reset
	// at once. nil admits every peer.
	Admit func(remote net.Addr) bool
	// MaxSetup bounds the connections in MPA setup (Request being read,
	// or waiting for Accept), default 1024; MaxSetupPerPeer bounds them
	// per peer IP address, default 256. A connection over a bound evicts
	// (resets) the oldest one still sending no Request, from its own
	// address (over MaxSetupPerPeer) or the address holding the most (over
	// MaxSetup); only when all of those sent valid Requests is the newest
	// reset instead. A flood from an address so evicts its own connections
	// and not a client's behind the same address.
	MaxSetup, MaxSetupPerPeer int
	// OnSetupError, when set, hears of each connection that did not become
	// a Request: ErrRefused (Admit), ErrSetupFull (a bound), ErrSetupEvicted
	// (a newer connection took its slot), a malformed,
	// silent or late Request, or a failed accept (remote nil). It is
	// called from the listener's goroutines and must not block.
	OnSetupError func(remote net.Addr, err error)
}

// ListenerStats count the connections a Listener turned away.
type ListenerStats struct {
	Refused   uint64 // by ListenConfig.Admit
	Overflow  uint64 // over MaxSetup or MaxSetupPerPeer, nothing to evict
	Evicted   uint64 // reset in setup for a newer connection
	Malformed uint64 // bad, silent or late MPA Requests
	InSetup   int    // connections in MPA setup now
}

// ListenConfig listens as Listen, configured by lc.
func (d *Device) ListenConfig(network, addr string, lc ListenConfig) (*Listener, error) {
	l, err := d.p.listen(network, addr, lc)
	if err != nil {
		return nil, err
	}
	return &Listener{dev: d, l: l}, nil
}

// Stats returns the listener's counters.
func (l *Listener) Stats() ListenerStats { return l.l.stats() }

// Accept waits for the next valid connection request (rdma_get_request):
// answer it with ConnRequest.Accept or Reject.
func (l *Listener) Accept(ctx context.Context) (*ConnRequest, error) {
	r, info, err := l.l.accept(ctx)
	if err != nil {
		return nil, err
	}
	return &ConnRequest{ConnRequestInfo: info, dev: l.dev, r: r}, nil
}

// Addr returns the listening address.
func (l *Listener) Addr() net.Addr { return l.l.addr() }

// Close stops listening (rdma_destroy_id of the listening id).
func (l *Listener) Close() error { return l.l.close() }

// ConnRequest is a received connection request waiting for Accept or
// Reject (RDMA_CM_EVENT_CONNECT_REQUEST).
type ConnRequest struct {
	ConnRequestInfo
	dev *Device
	r   connReqImpl
}

// Accept accepts the request on qp, which must be in QPInit and belong to
// the listener's device (rdma_accept). p.PrivateData goes back in the
// Reply.
func (r *ConnRequest) Accept(ctx context.Context, qp *QP, p ConnParam) error {
	if qp.pd.dev != r.dev {
		return ErrWrongDevice
	}
	return r.r.accept(ctx, qp.q, &p)
}

// Reject refuses the request, sending privateData to the initiator
// (rdma_reject), and closes the connection.
func (r *ConnRequest) Reject(privateData []byte) error { return r.r.reject(privateData) }

// Close drops a request that was neither accepted nor rejected.
func (r *ConnRequest) Close() error { return r.r.close() }

// RTR is a set of RFC 6581 ready-to-receive message types.
type RTR = mpa.RTR

// The RTR message types (RFC 6581 §5): a zero-length Send, RDMA Write or
// RDMA Read Request.
const (
	RTRSend  = mpa.RTRSend
	RTRWrite = mpa.RTRWrite
	RTRRead  = mpa.RTRRead
	RTRAll   = mpa.RTRAll
)

// RejectedError is Dial's error when the peer rejected the request
// (RDMA_CM_EVENT_REJECTED); errors.Is(err, ErrRejected) matches it.
type RejectedError struct {
	PrivateData []byte // the responder's private data
	// PeerIRD and PeerORD are the raw IRD/ORD of the responder's RFC 6581
	// reject Reply (HasPeerIRDORD), which RFC 6581 §9.1 asks to hand to
	// the ULP: PeerORD is, for example, the ORD the responder needs when
	// our IRD was too small (ConnParam.RequiredORD). 0x3FFF means "not
	// negotiated".
	PeerIRD, PeerORD int
	HasPeerIRDORD    bool
	// Hint names the option of ours the peer most likely refused, if any.
	Hint string
}

func (e *RejectedError) Error() string {
	if e.Hint != "" {
		return ErrRejected.Error() + ": " + e.Hint
	}
	return ErrRejected.Error()
}
func (e *RejectedError) Is(t error) bool { return t == ErrRejected }
