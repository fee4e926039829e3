package engine

import (
	"bytes"
	"io"
	"net"
	"runtime"
	"testing"
	"time"

	"xrnic/internal/engine/enginetest"
)

// txWriters counts the pipeline writer goroutines of the process.
func txWriters() int {
	buf := make([]byte, 4<<20)
	n := runtime.Stack(buf, true)
	return bytes.Count(buf[:n], []byte("engine.(*QP).txWriter("))
}

// waitNoTxWriters fails unless every pipeline writer ends within 5 s.
func waitNoTxWriters(t *testing.T) {
	t.Helper()
	for end := time.Now().Add(5 * time.Second); txWriters() > 0; {
		if time.Now().After(end) {
			t.Fatalf("%d pipeline writer goroutines still run on an idle QP", txWriters())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestTxPipeline: a stream of Writes larger than the framing buffer goes
// through the pipeline (the next batch framed while one is written),
// arrives whole and in order, completes in order, and leaves no writer
// goroutine behind once the QP idles.
func TestTxPipeline(t *testing.T) {
	const msg, n = 64 << 10, 128
	c, s := connectPair(t, msg*n, QPAttr{SQDepth: n + 1}, ConnParams{}, ConnParams{})
	for round := range 2 {
		fill(c.buf, byte(17+round))
		mustRecv(t, s.qp, RecvWR{ID: 7, SGL: []SGE{s.sge(0, 8)}})
		for i := range n {
			mustPost(t, c.qp, SendWR{ID: uint64(i), Op: OpWrite, Flags: FlagSignaled,
				SGL: []SGE{c.sge(i*msg, msg)}, RemoteTO: s.to(i * msg), RemoteSTag: s.mr.STag()})
		}
		// The Send arrives after every Write: once it completes, all is placed.
		mustPost(t, c.qp, SendWR{ID: n, Op: OpSend, SGL: []SGE{c.sge(0, 8)}})
		for i, cc := range poll(t, c.scq, n) {
			if cc.ID != uint64(i) || cc.Status != StatusSuccess {
				t.Fatalf("round %d: completion %d: %+v", round, i, cc)
			}
		}
		if rc := poll(t, s.rcq, 1)[0]; rc.ID != 7 || rc.Status != StatusSuccess {
			t.Fatalf("round %d: the Send: %+v", round, rc)
		}
		if !bytes.Equal(s.buf[8:], c.buf[8:]) {
			t.Fatalf("round %d: the written data differs", round)
		}
		waitNoTxWriters(t)
	}
	if st := c.qp.Stats(); st.TxPiped == 0 {
		t.Fatalf("no write went through the pipeline (%d batches)", st.TxBatches)
	}
}

// TestTxPipelineReset: the peer resets the connection while the pipeline
// has a write in flight and the next batch framed: every posted WR
// completes exactly once, in order, none successful after one that
// failed, the QP goes to error and the writer ends.
func TestTxPipelineReset(t *testing.T) {
	for round := range 3 {
		// A small receive buffer: the writer is blocked in its write when
		// the reset comes, and that write fails.
		const n, msg = 64, 1 << 20 // more than the sockets' buffers hold
		s := newSide(t, msg, QPAttr{})
		mustRecv(t, s.qp, RecvWR{ID: 1, SGL: []SGE{s.sge(0, 64)}})
		p := acceptRaw(t, s, enginetest.Options{RcvBuf: 64 << 10})
		// (A responder sends nothing before the initiator's first FPDU.)
		peerSend(t, p, 1, []byte("first"))
		for i := range n {
			mustPost(t, s.qp, SendWR{ID: uint64(i), Op: OpWrite, Flags: FlagSignaled,
				SGL: []SGE{s.sge(0, msg)}, RemoteTO: 0x1000, RemoteSTag: 0x1234})
		}
		// Take some, so that the pipeline runs, then stop reading and reset.
		if _, err := io.CopyN(io.Discard, p.Conn, int64(1+round)<<20); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
		p.Conn.(*net.TCPConn).SetLinger(0)
		p.Conn.Close()
		cs := poll(t, s.scq, n)
		failed := false
		for i, cc := range cs {
			if cc.ID != uint64(i) {
				t.Fatalf("round %d: completion %d has ID %d", round, i, cc.ID)
			}
			if cc.Status != StatusSuccess {
				failed = true
			} else if failed {
				t.Fatalf("round %d: WR %d succeeded after a failed one", round, i)
			}
		}
		if !failed {
			t.Fatalf("round %d: every Write succeeded although the peer reset", round)
		}
		if extra := s.scq.Poll(make([]Completion, 4)); extra != 0 {
			t.Fatalf("round %d: %d completions more than WRs", round, extra)
		}
		waitState(t, s.qp, QPError)
		if s.qp.Stats().TxPiped == 0 {
			t.Fatalf("round %d: the pipeline never ran", round)
		}
		waitNoTxWriters(t)
	}
}
