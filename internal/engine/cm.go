package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"syscall"
	"time"

	"xrnic/mem"
	"xrnic/transport"
	"xrnic/wire/mpa"
	"xrnic/wire/term"
)

// Connection setup errors.
var (
	// ErrRejected is matched (errors.Is) by a *RejectedError.
	ErrRejected = errors.New("engine: connection rejected by the peer")
	// ErrRevMismatch: the Reply's revision is not the Request's.
	ErrRevMismatch = errors.New("engine: MPA Reply revision differs from the Request's")
	// ErrNoMPAReply: the peer sent no MPA Reply to our Request: it closed
	// the connection, sent bytes that do not start with the Reply key, or
	// nothing within the setup step's timeout. Most likely the port is
	// not an iWARP endpoint (RFC 5044 §7.1.2).
	ErrNoMPAReply = errors.New("engine: no MPA reply")
)

// ConnParams are the parameters of one side of an MPA connection setup
// (RFC 5044 §7.1, RFC 6581), as rdma_conn_param.
type ConnParams struct {
	// PrivateData goes in the Request or Reply (at most 512 bytes, 508
	// with MPA revision 2).
	PrivateData []byte
	// IRD and ORD are the inbound and outbound Read+Atomic depths to
	// negotiate; 0 takes the QP's MaxIRD/MaxORD, a negative value asks
	// for 0.
	IRD, ORD int
	// Rev is the MPA revision an initiator sends: 2 (RFC 6581, the
	// default when 0) or 1 (RFC 5044). A responder answers in kind.
	Rev uint8
	// NoRevFallback (Connect) turns off the retry in revision 1 when the
	// responder shows it does not understand a revision 2 Request (it
	// closes or resets the connection without a Reply, or answers with a
	// Rev 1 Reply; RFC 6581 §10). The retry dials a new connection, so
	// ConnectLLP never falls back. ConnInfo.RevFallback reports it.
	NoRevFallback bool
	// PeerToPeer asks (initiator) for RTR negotiation; a responder echoes
	// the initiator's choice.
	PeerToPeer bool
	// RTR is, for an initiator, the RTR types it offers (default all), and
	// for a responder those it accepts (default all).
	RTR mpa.RTR
	// NoCRC asks not to use CRCs; they are off only if both sides ask.
	NoCRC bool
	// Markers asks the peer to insert markers in what it sends to us.
	Markers bool
	// RequiredORD (responder) is the smallest ORD the responder needs; an
	// initiator IRD below it is rejected with Terminate code 0x06.
	RequiredORD uint16
	// Timeout bounds each setup step (default: the device's ConnTimeout).
	Timeout time.Duration
}

// ConnInfo is the outcome of connection setup.
type ConnInfo struct {
	Initiator  bool
	Rev        uint8
	CRC        bool
	MarkersTx  bool // we insert markers (the peer asked)
	MarkersRx  bool // the peer inserts markers (we asked)
	IRD, ORD   int
	PeerToPeer bool
	// RTR is, for the initiator, the RTR type it sent; for the responder
	// the types it accepted.
	RTR    mpa.RTR
	MULPDU int
	// PeerPrivateData is the peer's ULP private data.
	PeerPrivateData []byte
	// PeerEnhanced is the peer's RFC 6581 word (HasEnhanced) with its raw
	// IRD/ORD, as RFC 6581 §9.1 asks to hand to the ULP.
	PeerEnhanced mpa.Enhanced
	HasEnhanced  bool
	// RevFallback: the peer did not understand our revision 2 Request and
	// the connection was set up again in revision 1 (RFC 6581 §10).
	RevFallback bool
}

// ConnError is a connection setup failure: Op names the step; Err is the
// cause (a *term.Error for MPA/RFC 6581 protocol failures, a timeout, ...).
type ConnError struct {
	Op  string
	Err error
}

func (e *ConnError) Error() string { return "engine: connect: " + e.Op + ": " + e.Err.Error() }
func (e *ConnError) Unwrap() error { return e.Err }

// RejectedError reports a Reply with R=1.
type RejectedError struct {
	PrivateData  []byte       // the responder's private data
	PeerEnhanced mpa.Enhanced // its RFC 6581 word, if HasEnhanced
	HasEnhanced  bool
}

func (e *RejectedError) Error() string   { return ErrRejected.Error() }
func (e *RejectedError) Is(t error) bool { return t == ErrRejected }

func (qp *QP) params(p ConnParams) (ird, ord int, timeout time.Duration) {
	ird, ord = p.IRD, p.ORD
	if ird == 0 || ird > qp.maxIRD {
		ird = qp.maxIRD
	}
	if ord == 0 || ord > qp.maxORD {
		ord = qp.maxORD
	}
	ird, ord = max(ird, 0), max(ord, 0)
	timeout = p.Timeout
	if timeout <= 0 {
		timeout = qp.dev.cfg.ConnTimeout
	}
	return
}

// guard bounds a setup step by ctx and timeout through the LLP deadlines; the
// returned function clears them and reports whether ctx fired.
func guard(ctx context.Context, llp LLP, timeout time.Duration) func() error {
	dl := time.Now().Add(timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(dl) {
		dl = d
	}
	llp.SetReadDeadline(dl)
	llp.SetWriteDeadline(dl)
	stop := context.AfterFunc(ctx, func() {
		past := time.Unix(1, 0)
		llp.SetReadDeadline(past)
		llp.SetWriteDeadline(past)
	})
	return func() error {
		if !stop() && ctx.Err() != nil {
			return ctx.Err()
		}
		llp.SetReadDeadline(time.Time{})
		llp.SetWriteDeadline(time.Time{})
		return nil
	}
}

// readFrame reads exactly one MPA Request or Reply: the 20-byte header,
// then exactly PD_Length more bytes, never into the FPDUs that follow.
// got tells whether any byte arrived (a peer that closes on a Request
// it does not understand sends none).
func readFrame(llp LLP, kind mpa.Kind) (f mpa.Frame, got bool, err error) {
	var hdr [mpa.FrameHeaderLen]byte
	if n, err := io.ReadFull(llp, hdr[:]); err != nil {
		return nil, n > 0, err
	}
	rem, err := mpa.FrameRemaining(hdr[:], kind)
	if err != nil {
		return nil, true, err
	}
	buf := make([]byte, mpa.FrameHeaderLen+rem)
	copy(buf, hdr[:])
	if _, err := io.ReadFull(llp, buf[mpa.FrameHeaderLen:]); err != nil {
		return nil, true, err
	}
	f, err = mpa.ParseFrame(buf, kind)
	return f, true, err
}

// noMPAReply tells whether err, reading the Reply, means the peer does not
// answer MPA at all: it closed, sent another protocol's bytes, or was
// silent until the step's deadline (not a cancelled ctx).
func noMPAReply(err error, ctx context.Context) bool {
	switch {
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, syscall.ECONNRESET),
		errors.Is(err, mpa.ErrBadKey), errors.Is(err, mpa.ErrUnexpectedKey):
		return true
	case errors.Is(err, os.ErrDeadlineExceeded):
		return !errors.Is(ctx.Err(), context.Canceled)
	}
	return false
}

func (qp *QP) begin() error {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	if qp.state != QPInit || qp.closing.Load() {
		return ErrAlreadyInUse
	}
	qp.state = QPConnecting
	return nil
}

func (qp *QP) failConnect(llp LLP, err error) error {
	llp.Close()
	qp.mu.Lock()
	qp.state = QPError
	qp.endLocked()
	qp.flushLocked()
	qp.mu.Unlock()
	return err
}

// sendSetupTerminate sends the Terminate of a failed RFC 6581 negotiation
// as the first (and last) FPDU.
func sendSetupTerminate(llp LLP, e *term.Error, crc, markers bool) {
	f := mpa.NewFramer(mpa.FramerConfig{Markers: markers, CRC: crc})
	var buf [256]byte
	h := f.HeaderLen()
	n, err := putTerminate(buf[h:], e, nil)
	if err != nil {
		return
	}
	wl, err := f.Seal(buf[:], n)
	if err == nil {
		llp.Write(buf[:wl])
	}
	llp.CloseWrite()
}

// Connect dials addr through the device's transport and connects the QP
// as MPA initiator.
func (qp *QP) Connect(ctx context.Context, addr string, p ConnParams) error {
	if err := qp.begin(); err != nil {
		return err
	}
	dial := func() (LLP, error) { return qp.dev.tr.Dial(ctx, addr) }
	llp, err := dial()
	if err != nil {
		qp.failDial()
		return &ConnError{"dial", err}
	}
	return qp.connect(ctx, llp, p, dial)
}

func (qp *QP) failDial() {
	qp.mu.Lock()
	qp.state = QPError
	qp.endLocked()
	qp.flushLocked()
	qp.mu.Unlock()
}

// ConnectLLP connects the QP as MPA initiator over an established LLP (the
// user-space TCP, or tests). On failure the LLP is closed and the QP is in
// error. There is no revision 1 fallback: it would need a new connection.
func (qp *QP) ConnectLLP(ctx context.Context, llp LLP, p ConnParams) error {
	if err := qp.begin(); err != nil {
		return err
	}
	return qp.connect(ctx, llp, p, nil)
}

// connect runs the initiator's exchange; redial, when not nil, opens a new
// connection for the revision 1 fallback (RFC 6581 §10).
func (qp *QP) connect(ctx context.Context, llp LLP, p ConnParams, redial func() (LLP, error)) error {
	rev := p.Rev
	if rev == 0 {
		rev = mpa.Rev2
	}
	if rev != mpa.Rev1 && rev != mpa.Rev2 {
		return qp.failConnect(llp, &ConnError{"request", ErrUnsupportedRv})
	}
	if rev == mpa.Rev1 && p.PeerToPeer {
		return qp.failConnect(llp, &ConnError{"request", errors.New("engine: peer-to-peer mode needs MPA revision 2")})
	}
	info, rtr, notUnderstood, err := qp.exchange(ctx, llp, p, rev, false)
	if notUnderstood && !p.NoRevFallback && redial != nil && ctx.Err() == nil && qp.fallbackOK(p) {
		llp.Close()
		if llp, err = redial(); err != nil {
			qp.failDial()
			return &ConnError{"dial (MPA revision 1 fallback)", err}
		}
		info, rtr, _, err = qp.exchange(ctx, llp, p, mpa.Rev1, true)
		info.RevFallback = true
	}
	if err != nil {
		return qp.failConnect(llp, err)
	}
	return qp.establish(llp, info, rtr)
}

// fallbackOK: revision 1 has no RTR negotiation, so a peer-to-peer ULP
// falls back only if it offers the zero-length Write RTR, which it then
// sends unnegotiated (see exchange).
func (qp *QP) fallbackOK(p ConnParams) bool {
	return !p.PeerToPeer || p.RTR == mpa.RTRNone || p.RTR.Has(mpa.RTRWrite)
}

// exchange sends the Request in revision rev and reads and checks the
// Reply. notUnderstood reports (for rev 2) the signs of a responder that
// does not know RFC 6581: the connection closed or reset before any byte
// of a Reply, or a Rev 1 Reply. It does not close llp, but it may have
// sent a Terminate and half-closed it. fallback is the revision 1 retry.
func (qp *QP) exchange(ctx context.Context, llp LLP, p ConnParams, rev uint8, fallback bool) (info ConnInfo, rtr mpa.RTR, notUnderstood bool, err error) {
	ird, ord, timeout := qp.params(p)
	offer := p.RTR
	if offer == mpa.RTRNone {
		offer = mpa.RTRAll
	}
	ip := mpa.InitiatorParams{IRD: uint16(ird), MaxIRD: uint16(qp.maxIRD), ORD: uint16(ord), PeerToPeer: p.PeerToPeer, RTR: offer}
	fp := mpa.FrameParams{M: p.Markers, C: !p.NoCRC, Rev: rev}
	if rev == mpa.Rev2 {
		fp.HasEnhanced = true
		fp.Enhanced = mpa.RequestWord(ip)
	}
	done := guard(ctx, llp, timeout)
	buf := make([]byte, mpa.MaxFrameLen)
	n, err := mpa.PutFrame(buf, mpa.Request, fp, p.PrivateData)
	if err != nil {
		done()
		return info, 0, false, &ConnError{"encode request", err}
	}
	if _, err := llp.Write(buf[:n]); err != nil {
		done()
		closed := errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNRESET)
		if closed {
			err = fmt.Errorf("%w: %w", ErrNoMPAReply, err) // closed on us before the Request was out
		}
		return info, 0, closed && rev == mpa.Rev2, &ConnError{"send request", err}
	}
	reply, got, err := readFrame(llp, mpa.Reply)
	if cerr := done(); cerr != nil && err == nil {
		err = cerr
	}
	if err != nil {
		closed := !got && (errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET))
		if noMPAReply(err, ctx) {
			err = fmt.Errorf("%w: %w", ErrNoMPAReply, err)
		}
		return info, 0, closed && rev == mpa.Rev2 && ctx.Err() == nil, &ConnError{"read reply", err}
	}
	if reply.Rev() != rev {
		return info, 0, rev == mpa.Rev2 && reply.Rev() == mpa.Rev1, &ConnError{"reply", ErrRevMismatch}
	}
	info = ConnInfo{Initiator: true, Rev: rev, CRC: fp.C || reply.C(), MarkersTx: reply.M(), MarkersRx: p.Markers,
		IRD: ird, ORD: ord, PeerPrivateData: append([]byte(nil), reply.ULPPrivateData()...)}
	info.PeerEnhanced, info.HasEnhanced = reply.Enhanced()
	if reply.R() {
		return info, 0, false, &RejectedError{PrivateData: info.PeerPrivateData, PeerEnhanced: info.PeerEnhanced, HasEnhanced: info.HasEnhanced}
	}
	if rev == mpa.Rev1 {
		if fallback && p.PeerToPeer {
			// No RTR negotiation in RFC 5044: send the zero-length Write
			// unasked, as RNICs with a peer-to-peer mode over revision 1
			// do. It needs no buffer and no IRD at the responder, and a
			// zero-length tagged message is not checked (RFC 5041 §5.2),
			// so any responder can take it; it lets the responder send.
			info.PeerToPeer, info.RTR = true, mpa.RTRWrite
		}
		return info, info.RTR, false, nil
	}
	var neg mpa.Negotiated
	var nerr error
	if info.HasEnhanced {
		neg, nerr = mpa.Complete(fp.Enhanced, info.PeerEnhanced, ip)
	} else if p.PeerToPeer {
		nerr = term.MPANoMatchingRTR
	} else {
		neg = mpa.Negotiated{IRD: uint16(ird), ORD: uint16(ord)}
	}
	if nerr != nil {
		// RFC 6581 §9.3: the Terminate goes first, then the connection.
		sendSetupTerminate(llp, asTermError(nerr), info.CRC, info.MarkersTx)
		return info, 0, false, &ConnError{"negotiate", asTermError(nerr)}
	}
	info.IRD, info.ORD = min(int(neg.IRD), qp.maxIRD), min(int(neg.ORD), qp.maxORD)
	info.PeerToPeer = p.PeerToPeer
	info.RTR = neg.RTR
	return info, neg.RTR, false, nil
}

// establish starts full MPA operation on the QP.
func (qp *QP) establish(llp LLP, info ConnInfo, rtr mpa.RTR) error {
	info.MULPDU = mpa.MULPDU(llp.EMSS(), info.MarkersTx)
	qp.mu.Lock()
	if qp.state != QPConnecting || qp.closing.Load() {
		qp.mu.Unlock()
		if info.Initiator {
			// Closed while the Reply was on its way: a local failure after
			// a good negotiation, told with 0x05 (RFC 6581 §8). The
			// responder may send nothing before our first FPDU, so only
			// the initiator can say it.
			sendSetupTerminate(llp, term.MPALocalCatastrophic, info.CRC, info.MarkersTx)
		}
		return qp.failConnect(llp, ErrClosed)
	}
	qp.llp = llp
	qp.conn = info
	qp.ird, qp.ord = info.IRD, info.ORD
	qp.framer = mpa.NewFramer(mpa.FramerConfig{Markers: info.MarkersTx, CRC: info.CRC})
	qp.deframer = mpa.NewDeframer(mpa.DeframerConfig{Markers: info.MarkersRx, CRC: info.CRC, MaxULPDU: maxULPDU(llp)})
	qp.mulpdu = info.MULPDU
	qp.txLen = txBufLen + qp.framer.WireLen(qp.mulpdu) + 64
	qp.txReader = qp.dev.table.NewReader()
	qp.rxReader = qp.dev.table.NewReader()
	if info.Initiator {
		qp.txOpen = true
		if info.PeerToPeer {
			qp.rtrPending = rtr.Pick()
		}
	} else {
		qp.rxFirst = true
		qp.rxAwaitRTR = info.PeerToPeer
	}
	qp.state = QPRTS
	if il, ok := llp.(transport.InlineConn); ok {
		qp.fpduEnds = make([]int, 0, 64)
		qp.txKick = il.StartInline(qp.txStep)
	} else if tw, ok := llp.(transport.TryWriter); ok && !qp.dev.cfg.NoInlineTx {
		qp.txi.w = tw
	}
	qp.txStarted = true
	qp.wg.Add(1)
	go qp.runTx()
	if pl, ok := llp.(PushLLP); ok {
		qp.mu.Unlock()
		pl.StartPush(qp.rxPush)
	} else {
		qp.wg.Add(1)
		if tr, ok := llp.(transport.TryReader); ok {
			qp.rxTR, qp.rxTry = tr, qp.rxTryRead
			qp.scq.addDriven(qp)
			qp.rcq.addDriven(qp)
			go qp.runRxPolled()
		} else {
			qp.rxbuf = make([]byte, rxBufLen)
			go qp.runRx()
		}
		qp.mu.Unlock()
	}
	qp.ring()
	return nil
}

const (
	rtrSend  = mpa.RTRSend
	rtrWrite = mpa.RTRWrite
	rtrRead  = mpa.RTRRead
)

// Disconnect closes the connection in order: posting is refused, the SQ
// and the answers to the peer's Reads/Atomics drain, then the LLP is
// half-closed and Disconnect waits for the peer's FIN (or ctx). Remaining
// receives complete flushed.
func (qp *QP) Disconnect(ctx context.Context) error {
	qp.mu.Lock()
	if qp.state != QPRTS {
		qp.mu.Unlock()
		return ErrNotConnected
	}
	qp.state = QPClosing
	qp.mu.Unlock()
	qp.ring()
	select {
	case <-qp.rxExit:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (qp *QP) disconnect(deadline time.Time) {
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	qp.Disconnect(ctx)
	cancel()
}

// ConnRequest is a received MPA Request waiting for Accept or Reject.
type ConnRequest struct {
	Rev         uint8
	PrivateData []byte // the initiator's ULP private data
	PeerCRC     bool   // the initiator asked for CRCs
	PeerMarkers bool   // the initiator asked for markers
	// Enhanced is the initiator's RFC 6581 word (HasEnhanced): its raw
	// IRD/ORD, peer-to-peer flag and offered RTR types.
	Enhanced    mpa.Enhanced
	HasEnhanced bool

	llp  LLP
	dev  *Device
	done bool
	peer netip.Addr // the listener's per-peer key
}

// Addrs returns the local and remote addresses of the QP's LLP connection
// (nil where the LLP does not know one, and before the QP is connected).
func (qp *QP) Addrs() (local, remote net.Addr) {
	qp.mu.Lock()
	llp := qp.llp
	qp.mu.Unlock()
	if llp == nil {
		return nil, nil
	}
	if l, ok := llp.(interface{ LocalAddr() net.Addr }); ok {
		local = l.LocalAddr()
	}
	return local, peerAddr(llp)
}

// peerAddr returns the LLP's remote address, or nil.
func peerAddr(llp LLP) net.Addr {
	if l, ok := llp.(interface{ RemoteAddr() net.Addr }); ok {
		return l.RemoteAddr()
	}
	return nil
}

// ReadConnRequest reads and validates an MPA Request on an established LLP
// (the responder side of ConnectLLP). A malformed Request closes the LLP and
// is reported as a *ConnError (RFC 5044 §7.1.2).
func (d *Device) ReadConnRequest(ctx context.Context, llp LLP) (*ConnRequest, error) {
	done := guard(ctx, llp, d.cfg.ConnTimeout)
	f, _, err := readFrame(llp, mpa.Request)
	if cerr := done(); cerr != nil && err == nil {
		err = cerr
	}
	if err != nil {
		llp.Close()
		return nil, &ConnError{"read request", err}
	}
	if f.Rev() != mpa.Rev1 && f.Rev() != mpa.Rev2 {
		llp.Close()
		return nil, &ConnError{"request", ErrUnsupportedRv}
	}
	r := &ConnRequest{Rev: f.Rev(), PrivateData: append([]byte(nil), f.ULPPrivateData()...), PeerCRC: f.C(), PeerMarkers: f.M(), llp: llp, dev: d}
	r.Enhanced, r.HasEnhanced = f.Enhanced()
	return r, nil
}

// Accept answers the Request with a Reply (R=0) in the same revision and
// starts the QP as responder. With RFC 6581 it negotiates IRD/ORD and RTR;
// if the initiator's IRD is below p.RequiredORD it sends a reject Reply
// stating the needed ORD (RFC 6581 §9.1) and returns a *ConnError with
// term.MPAInsufficientIRD.
func (r *ConnRequest) Accept(ctx context.Context, qp *QP, p ConnParams) error {
	if r.done {
		return ErrState
	}
	if qp.dev != r.dev {
		return ErrWrongDevice
	}
	if err := qp.begin(); err != nil {
		return err
	}
	r.done = true
	llp := r.llp
	ird, ord, timeout := qp.params(p)
	// The Reply's C says whether CRCs are used: set when the initiator
	// asked even if we did not (Linux siw built to require CRCs refuses
	// a Reply with C = 0).
	fp := mpa.FrameParams{M: p.Markers, C: !p.NoCRC || r.PeerCRC, Rev: r.Rev}
	info := ConnInfo{Rev: r.Rev, CRC: fp.C, MarkersTx: r.PeerMarkers, MarkersRx: p.Markers,
		IRD: ird, ORD: ord, PeerPrivateData: r.PrivateData, PeerEnhanced: r.Enhanced, HasEnhanced: r.HasEnhanced}
	var negErr error
	if r.HasEnhanced {
		accept := p.RTR
		if accept == mpa.RTRNone {
			accept = mpa.RTRAll
		}
		reply, local, err := mpa.Respond(r.Enhanced, mpa.ResponderParams{MaxIRD: uint16(ird), ORD: uint16(ord), RequiredORD: p.RequiredORD, RTR: accept})
		if err != nil && !errors.Is(err, term.MPAInsufficientIRD) {
			// No RTR type to offer: refuse with a reject Reply. A bare
			// close would look like an RFC 5044 peer and make the
			// initiator retry in revision 1 (RFC 6581 §10).
			reply = mpa.Enhanced{PeerToPeer: r.Enhanced.PeerToPeer, IRD: min(uint16(ird), mpa.MaxIRDORD), ORD: min(uint16(ord), mpa.MaxIRDORD)}
		}
		negErr = err
		fp.HasEnhanced = true
		fp.Enhanced = reply
		info.IRD, info.ORD = min(int(local.IRD), qp.maxIRD), min(int(local.ORD), qp.maxORD)
		info.PeerToPeer = r.Enhanced.PeerToPeer
		info.RTR = local.RTR
	}
	pd := p.PrivateData
	if negErr != nil {
		fp.R = true
	}
	done := guard(ctx, llp, timeout)
	buf := make([]byte, mpa.MaxFrameLen)
	n, err := mpa.PutFrame(buf, mpa.Reply, fp, pd)
	if err == nil {
		_, err = llp.Write(buf[:n])
	}
	if cerr := done(); cerr != nil && err == nil {
		err = cerr
	}
	if err != nil {
		return qp.failConnect(llp, &ConnError{"send reply", err})
	}
	if negErr != nil {
		llp.CloseWrite()
		if errors.Is(negErr, term.MPAInsufficientIRD) {
			negErr = term.MPAInsufficientIRD
		}
		return qp.failConnect(llp, &ConnError{"negotiate", negErr})
	}
	return qp.establish(llp, info, info.RTR)
}

// Reject answers the Request with a Reply with R=1 carrying privateData,
// then closes the connection.
func (r *ConnRequest) Reject(privateData []byte) error {
	if r.done {
		return ErrState
	}
	r.done = true
	fp := mpa.FrameParams{Rev: r.Rev, R: true, C: true}
	if r.HasEnhanced {
		fp.HasEnhanced = true
		fp.Enhanced = mpa.Enhanced{PeerToPeer: r.Enhanced.PeerToPeer, IRD: 0, ORD: 0}
	}
	buf := make([]byte, mpa.MaxFrameLen)
	n, err := mpa.PutFrame(buf, mpa.Reply, fp, privateData)
	if err == nil {
		r.llp.SetWriteDeadline(time.Now().Add(r.dev.cfg.ConnTimeout))
		_, err = r.llp.Write(buf[:n])
		r.llp.CloseWrite()
	}
	r.llp.Close()
	return err
}

// RemoteAddr returns the initiator's address and port (a *net.TCPAddr), or
// nil when the LLP does not know it.
func (r *ConnRequest) RemoteAddr() net.Addr {
	return peerAddr(r.llp)
}

// Close drops a request that was neither accepted nor rejected.
func (r *ConnRequest) Close() error {
	if r.done {
		return nil
	}
	r.done = true
	return r.llp.Close()
}

var _ = mem.LocalWrite

// maxULPDU is the longest ULPDU the peer may send us: the MULPDU of the MSS
// we advertised, which bounds its EMSS (RFC 5044 §5.1). A longer
// ULPDU_Length is an MPA error at once (Terminate LLP 2/0/0x05) instead of
// a wait for bytes that need not come. The bound is the MULPDU without
// markers (with markers it is not monotonic in the EMSS, and a peer's EMSS
// may be below our MSS). Where the transport does not know the MSS, the
// 16-bit field itself is the bound.
func maxULPDU(llp LLP) int {
	if a, ok := llp.(transport.MSSAdvertiser); ok {
		if mss := a.AdvertisedMSS(); mss > 0 {
			return min(mpa.MULPDU(mss, false), mpa.MaxULPDU)
		}
	}
	return mpa.MaxULPDU
}
