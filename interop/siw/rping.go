package siw

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"xrnic/verbs"
)

// The rping protocol of rdma-core's librdmacm/examples/rping.c (Debian
// rdma-core 44), both roles, so that xrnic runs against the unmodified
// `rping -s` and `rping -c` of another host.
//
// Each iteration ("ping") of the client, whose every Send is signaled:
//
//  1. The client fills its start buffer: "rdma-ping-<i>: " and then the
//     letters 'A'..'z' (65..122) rolling from a start letter that advances
//     by one each ping, the last byte NUL.
//  2. The client Sends its start buffer's address, STag and size (the
//     16-byte struct rping_rdma_info, big-endian: __be64 buf, __be32 rkey,
//     __be32 size).
//  3. The server RDMA Reads that many bytes of the client's start buffer
//     into its own rdma buffer, then Sends a 16-byte "go ahead" (rping's
//     server sends its send_buf, which it never fills: 16 zero bytes; the
//     client looks at the length only).
//  4. The client Sends the address, STag and size of its rdma buffer.
//  5. The server RDMA Writes strlen(rdma buffer)+1 bytes of its rdma
//     buffer (all of it for rping's data) into the client's rdma buffer
//     and, once the Write completed, Sends another 16-byte go ahead.
//  6. With -V the client compares its start and rdma buffers.
//
// Each side posts one receive of 16 bytes before connecting and posts it
// again as soon as it completes, before anything else; a received message
// of any other length is "bogus data". After its last ping the client
// disconnects; the server, waiting for the next start advertisement, sees
// the disconnect (RDMA_CM_EVENT_DISCONNECTED) and ends. No private data is
// exchanged; rdma_connect asks for responder_resources (IRD) 1 and
// initiator_depth (ORD) 1 (and retry counts, which iWARP has no use for),
// and rping's rdma_accept(NULL) takes the values of the request, 1 and 1.

// RpingPort is rping's default port (-p).
const RpingPort = 7174

// Rping's buffer size limits (-S): the minimum is rping.c's
// RPING_MIN_BUFSIZE, sizeof(stringify(INT_MAX)) + sizeof(RPING_MSG_FMT),
// 8 + 15 since INT_MAX is not defined where rping.c expands it (Debian's
// rping says "valid range is 23 to 65536"); the maximum is
// RPING_BUFSIZE - 1.
const (
	RpingMinSize     = 23
	RpingMaxSize     = 64*1024 - 1
	RpingDefaultSize = 64
	// RpingDefaultCount is the client's iteration count when
	// RpingConfig.Count is 0 (rping itself pings forever without -C).
	RpingDefaultCount = 10
)

// rpingInfoLen is sizeof(struct rping_rdma_info), the length of every Send.
const rpingInfoLen = 16

// rping's queue sizes: RPING_SQ_DEPTH send WRs, 2 receive WRs, a CQ of
// twice RPING_SQ_DEPTH.
const (
	rpingSQDepth = 16
	rpingRQDepth = 2
	rpingCQDepth = 2 * rpingSQDepth
)

// RpingConfig describes one rping run.
type RpingConfig struct {
	Count   int  // iterations (rping -C; client only, the server runs until the client disconnects); 0 = 10
	Size    int  // buffer size (rping -S, 23..65535); 0 = 64
	Verify  bool // compare data like rping -V (the server also checks that the data it read is rping's pattern)
	Verbose bool // log each ping like rping -v (through Log)
	// Log, if set, gets the Verbose lines and the client's note that it
	// had to wake the server (see RpingClient).
	Log func(format string, a ...any)

	// corrupt, when set, is called on the server's rdma buffer (the
	// bytes about to be written back) before the RDMA Write: tests use it
	// to prove that verification fails.
	corrupt func(iteration int, buf []byte)
	// stall, when set, delays the server's first RDMA Read (tests: the
	// client then wakes the server).
	stall time.Duration
}

func (c *RpingConfig) norm() error {
	if c.Count == 0 {
		c.Count = RpingDefaultCount
	}
	if c.Size == 0 {
		c.Size = RpingDefaultSize
	}
	if c.Count < 0 {
		return fmt.Errorf("rping: invalid count %d", c.Count)
	}
	if c.Size < RpingMinSize || c.Size > RpingMaxSize {
		return fmt.Errorf("rping: invalid size %d (valid range is %d to %d)", c.Size, RpingMinSize, RpingMaxSize)
	}
	return nil
}

func (c *RpingConfig) logf(format string, a ...any) {
	if c.Log != nil {
		c.Log(format, a...)
	}
}

// RpingMismatchError is the client's verification failure (rping -V's
// "data mismatch!"): the first byte of the rdma buffer that differs from
// the start buffer.
type RpingMismatchError struct {
	Iteration int
	Offset    int
	Want, Got byte
}

func (e *RpingMismatchError) Error() string {
	return fmt.Sprintf("rping: data mismatch in iteration %d at offset %d: sent %#02x, got back %#02x", e.Iteration, e.Offset, e.Want, e.Got)
}

// errRpingPeerClosed: the peer disconnected (a flushed receive after an
// orderly close).
var errRpingPeerClosed = errors.New("peer disconnected")

// rpingInfo is struct rping_rdma_info.
type rpingInfo struct {
	addr uint64
	stag uint32
	size uint32
}

func (i rpingInfo) put(b []byte) {
	binary.BigEndian.PutUint64(b[0:], i.addr)
	binary.BigEndian.PutUint32(b[8:], i.stag)
	binary.BigEndian.PutUint32(b[12:], i.size)
}

func parseRpingInfo(b []byte) rpingInfo {
	return rpingInfo{binary.BigEndian.Uint64(b[0:]), binary.BigEndian.Uint32(b[8:]), binary.BigEndian.Uint32(b[12:])}
}

func (i rpingInfo) String() string {
	return fmt.Sprintf("addr %#x rkey %#x len %d", i.addr, i.stag, i.size)
}

// rpingFill writes the client's start buffer of ping i: rping_test_client's
// snprintf of RPING_MSG_FMT, the rolling letters, a NUL at the end.
func rpingFill(buf []byte, ping int) {
	hdr := "rdma-ping-" + strconv.Itoa(ping) + ": "
	n := copy(buf[:len(buf)-1], hdr)
	if n == len(hdr) {
		c := byte(65 + ping%58)
		for i := n; i < len(buf); i++ {
			buf[i] = c
			if c++; c > 122 {
				c = 65
			}
		}
	}
	buf[len(buf)-1] = 0
}

// cstr is buf up to its first NUL.
func cstr(buf []byte) []byte {
	if i := bytes.IndexByte(buf, 0); i >= 0 {
		return buf[:i]
	}
	return buf
}

// rpingEnd is one side's verbs resources.
type rpingEnd struct {
	pd    *verbs.PD
	cq    *verbs.CQ
	qp    *verbs.QP
	mrs   []*verbs.MR
	ctl   *verbs.MR // [0,16) receive, [16,32) and [32,48) sends
	wc    [1]verbs.Completion
	role  string
	wakes int // wakes sent
}

const (
	ctlRecv  = 0
	ctlSend0 = rpingInfoLen
	ctlSend1 = 2 * rpingInfoLen
	ctlLen   = 3 * rpingInfoLen
)

// Work request IDs.
const (
	wrRecv = iota + 1
	wrSend
	wrRead
	wrWrite
	wrWake
)

// rpingWakeAfter is how long the client waits for the first go ahead
// before it wakes the server (see awaitWake), at most rpingMaxWakes
// times.
const (
	rpingWakeAfter = 100 * time.Millisecond
	rpingMaxWakes  = 3
)

func newRpingEnd(dev *verbs.Device, role string) (*rpingEnd, error) {
	e := &rpingEnd{role: role}
	var err error
	if e.pd, err = dev.AllocPD(); err != nil {
		return nil, fmt.Errorf("rping %s: alloc PD: %w", role, err)
	}
	if e.cq, err = dev.CreateCQ(rpingCQDepth); err != nil {
		e.close()
		return nil, fmt.Errorf("rping %s: create CQ: %w", role, err)
	}
	if e.qp, err = e.pd.CreateQP(verbs.QPAttr{SendCQ: e.cq, RecvCQ: e.cq, SQDepth: rpingSQDepth, RQDepth: rpingRQDepth, MaxSGE: 1}); err != nil {
		e.close()
		return nil, fmt.Errorf("rping %s: create QP: %w", role, err)
	}
	if e.ctl, err = e.reg(ctlLen, verbs.AccessLocalWrite); err != nil {
		e.close()
		return nil, err
	}
	return e, nil
}

// reg registers a buffer of n bytes.
func (e *rpingEnd) reg(n int, a verbs.Access) (*verbs.MR, error) {
	mr, err := e.pd.RegMR(make([]byte, n), a)
	if err != nil {
		return nil, fmt.Errorf("rping %s: register %d-byte buffer: %w", e.role, n, err)
	}
	e.mrs = append(e.mrs, mr)
	return mr, nil
}

func (e *rpingEnd) close() {
	if e.qp != nil {
		e.qp.Close()
	}
	for _, mr := range e.mrs {
		mr.Dereg()
	}
	if e.cq != nil {
		e.cq.Close()
	}
	e.pd.Dealloc()
}

// disconnect closes the connection in order, waiting a little for the
// peer, then destroys everything.
func (e *rpingEnd) disconnect(ctx context.Context) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	e.qp.Disconnect(ctx)
	cancel()
	e.close()
}

func (e *rpingEnd) postRecv() error {
	if err := e.qp.PostRecvBuf(wrRecv, e.ctl.SGE(ctlRecv, rpingInfoLen)); err != nil {
		return fmt.Errorf("post receive: %w", err)
	}
	return nil
}

// send Sends the 16 bytes at ctl offset off (signaled, as rping's sq_wr).
func (e *rpingEnd) send(off int) error {
	if err := e.qp.PostSendBuf(wrSend, e.ctl.SGE(off, rpingInfoLen), verbs.FlagSignaled); err != nil {
		return fmt.Errorf("post send: %w", err)
	}
	return nil
}

// await polls until the completion of an op work request, consuming the
// completions of Sends on the way. A receive is checked to be 16 bytes
// and posted again before await returns (rping_cq_event_handler). A
// flushed completion after the peer's orderly close is
// errRpingPeerClosed.
func (e *rpingEnd) await(ctx context.Context, op verbs.Opcode) (verbs.Completion, error) {
	return e.awaitWake(ctx, op, 0)
}

// awaitWake is await that, while wakes > 0, sends a wake (a zero-length
// RDMA Write) each time nothing completes for rpingWakeAfter.
//
// Linux siw attaches a responder's QP to the socket only after sending
// its MPA Reply, and misses what arrived in between until the next
// segment comes: the client's first Send, right after the connection is
// up, can sit unread in the socket of `rping -s`, which then waits
// forever for it. The zero-length Write is that next segment. It goes to
// STag 1 at TO 0 and is never checked (a zero-length tagged message,
// RFC 5041 §5.2; siw returns before any lookup), as the engine's own wake
// for Reads (QPAttr.WakeAfter); the peer sees no completion.
func (e *rpingEnd) awaitWake(ctx context.Context, op verbs.Opcode, wakes int) (verbs.Completion, error) {
	for {
		if e.cq.Poll(e.wc[:]) == 0 {
			wctx, cancel := ctx, context.CancelFunc(func() {})
			if wakes > 0 {
				wctx, cancel = context.WithTimeout(ctx, rpingWakeAfter)
			}
			err := e.cq.Wait(wctx)
			cancel()
			if err != nil && ctx.Err() != nil {
				return verbs.Completion{}, err
			}
			if err != nil && wakes > 0 {
				wakes--
				if err := e.qp.PostSend(&verbs.SendWR{ID: wrWake, Op: verbs.OpWrite, Flags: verbs.FlagSignaled, RemoteSTag: 1}); err != nil {
					return verbs.Completion{}, fmt.Errorf("post wake (zero-length RDMA Write): %w", err)
				}
				e.wakes++
			}
			continue
		}
		wc := e.wc[0]
		if wc.Status != verbs.StatusSuccess {
			if wc.Status == verbs.StatusWRFlushErr {
				if e.qp.Disconnected() != nil {
					return wc, errRpingPeerClosed
				}
				if err := e.qp.Err(); err != nil {
					return wc, fmt.Errorf("%v completion flushed: %w", wc.Op, err)
				}
			}
			if wc.Err != nil {
				return wc, fmt.Errorf("%v completion failed: %v: %w", wc.Op, wc.Status, wc.Err)
			}
			return wc, fmt.Errorf("%v completion failed: %v", wc.Op, wc.Status)
		}
		switch {
		case wc.ID == wrWake:
		case wc.Op == op:
			if op == verbs.OpRecv {
				if wc.ByteLen != rpingInfoLen {
					return wc, fmt.Errorf("received bogus data, size %d (want %d)", wc.ByteLen, rpingInfoLen)
				}
			}
			return wc, nil
		case wc.Op == verbs.OpSend:
		default:
			return wc, fmt.Errorf("unexpected %v completion (wr_id %d) while waiting for %v", wc.Op, wc.ID, op)
		}
	}
}

// recvInfo waits for a receive and returns the rping_rdma_info in it,
// having posted the receive again.
func (e *rpingEnd) recvInfo(ctx context.Context) (rpingInfo, error) {
	if _, err := e.await(ctx, verbs.OpRecv); err != nil {
		return rpingInfo{}, err
	}
	info := parseRpingInfo(e.ctl.Bytes()[ctlRecv:])
	return info, e.postRecv()
}

// connParam is rping_init_conn_param's, for Dial and Accept.
func rpingConnParam() verbs.ConnParam { return verbs.ConnParam{IRD: 1, ORD: 1} }

// RpingServer serves one rping client connection arriving on ln (a
// verbs.Listener) until the client disconnects, as `rping -s` does, and
// returns the iterations completed. The caller creates ln (for example in
// a network namespace), by default on port RpingPort. c.Size must be at
// least the client's size (rping -S on both sides); c.Count is not used.
func RpingServer(ctx context.Context, dev *verbs.Device, ln *verbs.Listener, c RpingConfig) (int, error) {
	if err := c.norm(); err != nil {
		return 0, err
	}
	req, err := ln.Accept(ctx)
	if err != nil {
		return 0, fmt.Errorf("rping server: waiting for a connection request: %w", err)
	}
	e, err := newRpingEnd(dev, "server")
	if err != nil {
		req.Close()
		return 0, err
	}
	rdma, err := e.reg(c.Size, verbs.AccessLocalWrite|verbs.AccessRemoteRead|verbs.AccessRemoteWrite)
	if err == nil {
		err = e.postRecv()
	}
	if err != nil {
		req.Close()
		e.close()
		return 0, fmt.Errorf("rping server: %w", err)
	}
	if err := req.Accept(ctx, e.qp, rpingConnParam()); err != nil {
		e.close()
		return 0, fmt.Errorf("rping server: accept %v: %w", req.RemoteAddr, err)
	}
	n, err := rpingServe(ctx, e, rdma, &c)
	e.disconnect(ctx)
	return n, err
}

func rpingServe(ctx context.Context, e *rpingEnd, rdma *verbs.MR, c *RpingConfig) (int, error) {
	buf := rdma.Bytes()
	// The go ahead: rping's never written send_buf.
	clear(e.ctl.Bytes()[ctlSend0 : ctlSend0+rpingInfoLen])
	for i := 0; ; i++ {
		fail := func(step string, err error) (int, error) {
			return i, fmt.Errorf("rping server: iteration %d: %s: %w", i, step, err)
		}
		// The client's start buffer.
		src, err := e.recvInfo(ctx)
		if errors.Is(err, errRpingPeerClosed) {
			return i, nil // the client is done: rping's DISCONNECTED
		}
		if err != nil {
			return fail("waiting for the client's start buffer advertisement", err)
		}
		if int(src.size) > len(buf) {
			return fail("start buffer advertisement", fmt.Errorf("client's buffer (%s) is larger than ours (%d bytes): use a Size of at least %d", src, len(buf), src.size))
		}
		if i == 0 && c.stall > 0 {
			time.Sleep(c.stall)
		}
		if err := e.qp.PostRead(wrRead, rdma.SGE(0, int(src.size)), src.stag, src.addr, verbs.FlagSignaled); err != nil {
			return fail("post RDMA Read of the client's start buffer "+src.String(), err)
		}
		if _, err := e.await(ctx, verbs.OpRead); err != nil {
			return fail("RDMA Read of the client's start buffer "+src.String(), err)
		}
		if c.Verbose {
			c.logf("server ping data: %s", cstr(buf))
		}
		if c.Verify {
			want := make([]byte, src.size)
			rpingFill(want, i)
			if off := firstDiff(want, buf[:src.size]); off >= 0 {
				return fail("checking the data read", fmt.Errorf("not rping's pattern at offset %d: want %#02x, got %#02x", off, want[off], buf[off]))
			}
		}
		if err := e.send(ctlSend0); err != nil {
			return fail("go ahead after the Read", err)
		}
		// The client's rdma buffer.
		sink, err := e.recvInfo(ctx)
		if errors.Is(err, errRpingPeerClosed) {
			return fail("waiting for the client's sink advertisement", errors.New("client disconnected in mid-iteration"))
		}
		if err != nil {
			return fail("waiting for the client's sink advertisement", err)
		}
		wlen := len(cstr(buf)) + 1
		if wlen > len(buf) {
			wlen = len(buf)
		}
		if wlen > int(sink.size) {
			return fail("sink advertisement", fmt.Errorf("client's sink (%s) is smaller than the %d bytes to write", sink, wlen))
		}
		if c.corrupt != nil {
			c.corrupt(i, buf[:wlen])
		}
		if err := e.qp.PostWrite(wrWrite, rdma.SGE(0, wlen), sink.stag, sink.addr, verbs.FlagSignaled); err != nil {
			return fail("post RDMA Write to the client's sink "+sink.String(), err)
		}
		if _, err := e.await(ctx, verbs.OpWrite); err != nil {
			return fail("RDMA Write to the client's sink "+sink.String(), err)
		}
		if err := e.send(ctlSend0); err != nil {
			return fail("go ahead after the Write", err)
		}
	}
}

func firstDiff(a, b []byte) int {
	for i := range a {
		if i >= len(b) || a[i] != b[i] {
			return i
		}
	}
	if len(b) > len(a) {
		return len(a)
	}
	return -1
}

// RpingClient connects dev to addr ("ip:port"; without a port, RpingPort)
// and runs c.Count iterations as `rping -c` does, then disconnects. It
// returns the iterations completed. The Dial runs on the calling goroutine,
// so a caller that switched its thread's network namespace gets the
// connection there. If the first go ahead is late, the client wakes the
// server with up to 3 zero-length RDMA Writes (see awaitWake): Linux siw
// may otherwise never read the first Send.
func RpingClient(ctx context.Context, dev *verbs.Device, addr string, c RpingConfig) (int, error) {
	if err := c.norm(); err != nil {
		return 0, err
	}
	if _, _, err := net.SplitHostPort(addr); err != nil {
		addr = net.JoinHostPort(addr, strconv.Itoa(RpingPort))
	}
	e, err := newRpingEnd(dev, "client")
	if err != nil {
		return 0, err
	}
	access := verbs.AccessLocalWrite | verbs.AccessRemoteRead | verbs.AccessRemoteWrite
	start, err := e.reg(c.Size, access)
	var rdma *verbs.MR
	if err == nil {
		rdma, err = e.reg(c.Size, access)
	}
	if err == nil {
		err = e.postRecv()
	}
	if err != nil {
		e.close()
		return 0, fmt.Errorf("rping client: %w", err)
	}
	if err := e.qp.Dial(ctx, addr, rpingConnParam()); err != nil {
		e.close()
		return 0, fmt.Errorf("rping client: connect to %s: %w", addr, err)
	}
	n, err := rpingPing(ctx, e, start, rdma, &c)
	e.disconnect(ctx)
	return n, err
}

func rpingPing(ctx context.Context, e *rpingEnd, start, rdma *verbs.MR, c *RpingConfig) (int, error) {
	ctl := e.ctl.Bytes()
	sbuf, rbuf := start.Bytes(), rdma.Bytes()
	rpingInfo{start.TO(0), start.STag(), uint32(c.Size)}.put(ctl[ctlSend0:])
	rpingInfo{rdma.TO(0), rdma.STag(), uint32(c.Size)}.put(ctl[ctlSend1:])
	for i := 0; i < c.Count; i++ {
		fail := func(step string, err error) (int, error) {
			if errors.Is(err, errRpingPeerClosed) {
				err = errors.New("server disconnected")
			}
			return i, fmt.Errorf("rping client: iteration %d: %s: %w", i, step, err)
		}
		rpingFill(sbuf, i)
		clear(rbuf)
		if err := e.send(ctlSend0); err != nil {
			return fail("send start buffer advertisement", err)
		}
		wakes := 0
		if i == 0 {
			wakes = rpingMaxWakes
		}
		if _, err := e.awaitWake(ctx, verbs.OpRecv, wakes); err != nil {
			return fail("waiting for the go ahead after the server's Read", err)
		}
		if i == 0 && e.wakes > 0 {
			c.logf("rping client: woke the server %d times (siw's missed first message)", e.wakes)
		}
		if err := e.postRecv(); err != nil {
			return fail("re-post receive", err)
		}
		if err := e.send(ctlSend1); err != nil {
			return fail("send sink advertisement", err)
		}
		if _, err := e.await(ctx, verbs.OpRecv); err != nil {
			return fail("waiting for the go ahead after the server's Write", err)
		}
		if err := e.postRecv(); err != nil {
			return fail("re-post receive", err)
		}
		if c.Verify {
			if off := firstDiff(sbuf, rbuf); off >= 0 {
				return i, &RpingMismatchError{Iteration: i, Offset: off, Want: sbuf[off], Got: rbuf[off]}
			}
		}
		if c.Verbose {
			c.logf("ping data: %s", cstr(rbuf))
		}
	}
	return c.Count, nil
}
