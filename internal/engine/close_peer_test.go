package engine

import (
	"bytes"
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"xrnic/internal/engine/enginetest"
	"xrnic/wire/ddp"
	"xrnic/wire/rdmap"
	"xrnic/wire/term"
)

// waitState waits until qp is in state st.
func waitState(t *testing.T, qp *QP, st QPState) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for qp.State() != st {
		if time.Now().After(deadline) {
			t.Fatalf("state %v, want %v (err %v)", qp.State(), st, qp.Err())
		}
		time.Sleep(time.Millisecond)
	}
}

// peerSend sends a one-segment Send with MSN msn from the raw peer.
func peerSend(t *testing.T, p *enginetest.Peer, msn uint32, data []byte) {
	t.Helper()
	seg := make([]byte, ddp.UntaggedHeaderLen+len(data))
	rdmap.PutSend(seg, rdmap.OpSend, 0, msn, 0, true, len(data))
	copy(seg[ddp.UntaggedHeaderLen:], data)
	if err := p.Send(seg); err != nil {
		t.Fatal(err)
	}
}

func closeWrite(t *testing.T, p *enginetest.Peer) {
	t.Helper()
	if err := p.Conn.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
}

// TestClosePeerFINAfterSend: the peer sends its last Send, then its FIN.
// That Send completes successfully, the receives after it are flushed
// (also one posted later), the QP reports a disconnect, not an error, and
// a Write posted after the FIN still reaches the peer, which then gets
// our FIN (not a reset) once the QP has nothing left to send.
func TestClosePeerFINAfterSend(t *testing.T) {
	s, p := rawPair(t, enginetest.Options{})
	peerFINAfterSend(t, s, p)
}

// TestIntegrationXDPClosePeerFIN is the same over the afxdp transport
// (its tcpstack also writes after the peer's FIN): the engine's QP is in
// namespace A, the raw peer dials it over kernel TCP from B.
func TestIntegrationXDPClosePeerFIN(t *testing.T) {
	e := newXDPEnv(t, 0, true)
	a := e.open(t, e.nsA, e.devA, trAFXDP)
	ln := e.listenA(t, a)
	s := newQPSide(t, a, 1<<16)
	mustRecv(t, s.qp, RecvWR{ID: 1, SGL: []SGE{s.sge(0, 64)}})
	mustRecv(t, s.qp, RecvWR{ID: 2, SGL: []SGE{s.sge(64, 64)}})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	errc := acceptAsync(ctx, ln, s.qp, ConnParams{})
	var p *enginetest.Peer
	if err := e.in(t, e.nsB, func() (err error) {
		p, err = enginetest.Dial(ctx, ln.Addr().String(), enginetest.Options{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	peerFINAfterSend(t, s, p)
	s.qp.Close()
}

func peerFINAfterSend(t *testing.T, s *side, p *enginetest.Peer) {
	t.Helper()
	peerSend(t, p, 1, []byte("last words"))
	closeWrite(t, p)
	rc := poll(t, s.rcq, 2)
	if rc[0].ID != 1 || rc[0].Status != StatusSuccess || rc[0].ByteLen != 10 || string(s.buf[:10]) != "last words" {
		t.Fatalf("the last Send: %+v %q", rc[0], s.buf[:10])
	}
	if rc[1].ID != 2 || rc[1].Status != StatusWRFlushErr {
		t.Fatalf("the receive after it: %+v, want flushed", rc[1])
	}
	if err := s.qp.Disconnected(); !errors.Is(err, ErrPeerClosed) {
		t.Fatalf("Disconnected %v, want ErrPeerClosed", err)
	}
	if e := s.qp.Err(); e != nil {
		t.Fatalf("Err %v after an orderly close", e)
	}
	if st := s.qp.State(); st != QPRTS {
		t.Fatalf("state %v right after the peer's FIN", st)
	}
	mustRecv(t, s.qp, RecvWR{ID: 3, SGL: []SGE{s.sge(0, 64)}})
	if c := poll(t, s.rcq, 1)[0]; c.ID != 3 || c.Status != StatusWRFlushErr {
		t.Fatalf("receive posted after the FIN: %+v", c)
	}
	want := []byte("written after the peer's FIN")
	copy(s.buf[1024:], want)
	mustPost(t, s.qp, SendWR{ID: 9, Op: OpWrite, Flags: FlagSignaled, SGL: []SGE{s.sge(1024, len(want))}, RemoteSTag: 0x77, RemoteTO: 0x100})
	if c := poll(t, s.scq, 1)[0]; c.ID != 9 || c.Status != StatusSuccess {
		t.Fatalf("Write after the FIN: %+v", c)
	}
	u, err := p.Next(5 * time.Second)
	if err != nil {
		t.Fatalf("the peer got no Write: %v", err)
	}
	seg, _ := ddp.Parse(u)
	if !seg.IsTagged() || seg.Tagged().STag() != 0x77 || seg.Tagged().TO() != 0x100 || !bytes.Equal(seg.Payload(), want) {
		t.Fatalf("the peer got %x", u)
	}
	if err := p.ExpectEOF(5 * time.Second); err != nil {
		t.Fatalf("no FIN from the QP: %v", err)
	}
	waitState(t, s.qp, QPError)
	if e := s.qp.Err(); e != nil || !errors.Is(s.qp.Disconnected(), ErrPeerClosed) {
		t.Fatalf("after both FINs: Err %v, Disconnected %v", e, s.qp.Disconnected())
	}
}

// TestClosePeerFINMidFPDU: a FIN inside an FPDU stays an error: the
// connection is lost, not closed.
func TestClosePeerFINMidFPDU(t *testing.T) {
	s, p := rawPair(t, enginetest.Options{})
	seg := make([]byte, ddp.UntaggedHeaderLen+32)
	rdmap.PutSend(seg, rdmap.OpSend, 0, 1, 0, true, 32)
	f := p.FPDU(seg)
	if err := p.WriteRaw(f[:len(f)/2]); err != nil {
		t.Fatal(err)
	}
	closeWrite(t, p)
	rc := poll(t, s.rcq, 2)
	if rc[0].Status != StatusWRFlushErr || rc[1].Status != StatusWRFlushErr {
		t.Fatalf("receives %+v, want flushed", rc)
	}
	waitState(t, s.qp, QPError)
	if e := s.qp.Err(); e != term.MPAConnectionLost {
		t.Fatalf("Err %v, want %v", e, term.MPAConnectionLost)
	}
	if err := s.qp.Disconnected(); err != nil {
		t.Fatalf("Disconnected %v after a FIN inside an FPDU", err)
	}
}

// TestClosePeerFINInsideMessage: a FIN after the first segment of a
// two-segment Send is an error too (the message can never complete).
func TestClosePeerFINInsideMessage(t *testing.T) {
	s, p := rawPair(t, enginetest.Options{})
	seg := make([]byte, ddp.UntaggedHeaderLen+8)
	rdmap.PutSend(seg, rdmap.OpSend, 0, 1, 0, false, 8)
	if err := p.Send(seg); err != nil {
		t.Fatal(err)
	}
	closeWrite(t, p)
	waitState(t, s.qp, QPError)
	if e := s.qp.Err(); e != term.MPAConnectionLost || s.qp.Disconnected() != nil {
		t.Fatalf("Err %v, Disconnected %v", e, s.qp.Disconnected())
	}
}

// TestClosePeerFINFlushesReads: after the peer's FIN no response can
// come: the outstanding Read and one posted later complete flushed, in
// order with the Write posted between them, which is still sent.
func TestClosePeerFINFlushesReads(t *testing.T) {
	s, p := rawResponder(t, ConnParams{}, Config{})
	mustPost(t, s.qp, SendWR{ID: 1, Op: OpRead, Flags: FlagSignaled, SGL: []SGE{s.sge(0, 64)}, RemoteSTag: 0x1234})
	if u, err := p.Next(5 * time.Second); err != nil || u[1]&0xF != byte(rdmap.OpReadRequest) {
		t.Fatalf("Read Request: %x %v", u, err)
	}
	closeWrite(t, p)
	if c := poll(t, s.scq, 1)[0]; c.ID != 1 || c.Status != StatusWRFlushErr {
		t.Fatalf("outstanding Read: %+v, want flushed", c)
	}
	mustPost(t, s.qp, SendWR{ID: 2, Op: OpWrite, Flags: FlagSignaled, SGL: []SGE{s.sge(64, 8)}, RemoteSTag: 0x55})
	mustPost(t, s.qp, SendWR{ID: 3, Op: OpFetchAdd, Flags: FlagSignaled, SGL: []SGE{s.sge(128, 8)}, RemoteSTag: 0x55, CompareAdd: 1})
	mustPost(t, s.qp, SendWR{ID: 4, Op: OpWrite, Flags: FlagSignaled, SGL: []SGE{s.sge(64, 8)}, RemoteSTag: 0x56})
	cs := poll(t, s.scq, 3)
	if cs[0].ID != 2 || cs[0].Status != StatusSuccess || cs[1].ID != 3 || cs[1].Status != StatusWRFlushErr ||
		cs[2].ID != 4 || cs[2].Status != StatusSuccess {
		t.Fatalf("completions %+v, want Write ok, FetchAdd flushed, Write ok", cs)
	}
	if !errors.Is(s.qp.Disconnected(), ErrPeerClosed) || s.qp.Err() != nil {
		t.Fatalf("Disconnected %v, Err %v", s.qp.Disconnected(), s.qp.Err())
	}
	var stags []uint32
	for {
		u, err := p.Next(5 * time.Second)
		if err != nil {
			if err := p.ExpectEOF(time.Second); err != nil {
				t.Logf("%v", err)
			}
			break
		}
		if seg, _ := ddp.Parse(u); seg.IsTagged() {
			stags = append(stags, seg.Tagged().STag())
		}
	}
	if len(stags) != 2 || stags[0] != 0x55 || stags[1] != 0x56 {
		t.Fatalf("the peer got Writes to %x", stags)
	}
}

// TestCloseDisconnectOrderly: Disconnect sends our FIN after what is
// queued; the peer QP takes it as a disconnect, can still write to us
// before it closes its half, and neither side reports an error.
func TestCloseDisconnectOrderly(t *testing.T) {
	c, s := connectPair(t, 1<<16, QPAttr{}, ConnParams{}, ConnParams{})
	for i := range 4 {
		mustRecv(t, s.qp, RecvWR{ID: uint64(i), SGL: []SGE{s.sge(i*64, 64)}})
	}
	fill(c.buf[:3*64], 3)
	for i := range 3 {
		mustPost(t, c.qp, SendWR{ID: uint64(i), Op: OpSend, SGL: []SGE{c.sge(i*64, 64)}})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- c.qp.Disconnect(ctx) }()
	rc := poll(t, s.rcq, 4)
	for i, x := range rc[:3] {
		if x.ID != uint64(i) || x.Status != StatusSuccess || !bytes.Equal(s.buf[i*64:i*64+64], c.buf[i*64:i*64+64]) {
			t.Fatalf("receive %d: %+v", i, x)
		}
	}
	if rc[3].Status != StatusWRFlushErr {
		t.Fatalf("receive 3: %+v, want flushed", rc[3])
	}
	if !errors.Is(s.qp.Disconnected(), ErrPeerClosed) {
		t.Fatalf("server: Disconnected %v", s.qp.Disconnected())
	}
	want := []byte("an answer after the FIN")
	copy(s.buf[4096:], want)
	mustPost(t, s.qp, SendWR{ID: 7, Op: OpWrite, Flags: FlagSignaled, SGL: []SGE{s.sge(4096, len(want))}, RemoteSTag: c.mr.STag(), RemoteTO: c.to(8192)})
	if x := poll(t, s.scq, 1)[0]; x.Status != StatusSuccess {
		t.Fatalf("server Write: %+v", x)
	}
	if err := <-done; err != nil {
		t.Fatalf("Disconnect: %v", err)
	}
	if !bytes.Equal(c.buf[8192:8192+len(want)], want) {
		t.Fatalf("the Write after the FIN did not arrive: %q", c.buf[8192:8192+len(want)])
	}
	waitState(t, s.qp, QPError)
	for _, q := range []*QP{c.qp, s.qp} {
		if q.State() != QPError || q.Err() != nil || !errors.Is(q.Disconnected(), ErrPeerClosed) {
			t.Errorf("QP %d: state %v, Err %v, Disconnected %v", q.Num(), q.State(), q.Err(), q.Disconnected())
		}
	}
}

// TestCloseDisconnectSendsFIN: our Disconnect ends the stream with a FIN
// after the queued Write, never a reset, and returns once the peer's FIN
// came.
func TestCloseDisconnectSendsFIN(t *testing.T) {
	s, p := rawPair(t, enginetest.Options{})
	peerSend(t, p, 1, []byte("hi"))
	poll(t, s.rcq, 1)
	mustPost(t, s.qp, SendWR{ID: 1, Op: OpWrite, SGL: []SGE{s.sge(0, 2)}, RemoteSTag: 0x99})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- s.qp.Disconnect(ctx) }()
	u, err := p.Next(5 * time.Second)
	if seg, _ := ddp.Parse(u); err != nil || !seg.IsTagged() || seg.Tagged().STag() != 0x99 {
		t.Fatalf("the peer got %x, %v; want the Write", u, err)
	}
	if err := p.ExpectEOF(5 * time.Second); err != nil {
		t.Fatalf("want a FIN: %v", err)
	}
	select {
	case err := <-done:
		t.Fatalf("Disconnect returned (%v) before the peer's FIN", err)
	case <-time.After(50 * time.Millisecond):
	}
	closeWrite(t, p)
	if err := <-done; err != nil {
		t.Fatalf("Disconnect: %v", err)
	}
	if s.qp.State() != QPError || s.qp.Err() != nil || !errors.Is(s.qp.Disconnected(), ErrPeerClosed) {
		t.Fatalf("state %v, Err %v, Disconnected %v", s.qp.State(), s.qp.Err(), s.qp.Disconnected())
	}
}
