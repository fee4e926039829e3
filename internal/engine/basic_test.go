package engine

import (
	"bytes"
	"testing"
)

func TestSendWriteRead(t *testing.T) {
	c, s := connectPair(t, 1<<20, QPAttr{}, ConnParams{}, ConnParams{})
	// Send bigger than MULPDU.
	const n = 200000
	fill(c.buf[:n], 1)
	mustRecv(t, s.qp, RecvWR{ID: 7, SGL: []SGE{s.sge(0, 100000), s.sge(100000, 200000)}})
	mustPost(t, c.qp, SendWR{ID: 1, Op: OpSend, Flags: FlagSignaled, SGL: []SGE{c.sge(0, n)}})
	rc := poll(t, s.rcq, 1)[0]
	if rc.Status != StatusSuccess || rc.ID != 7 || rc.ByteLen != n || rc.Op != OpRecv {
		t.Fatalf("recv completion %+v", rc)
	}
	if !bytes.Equal(s.buf[:n], c.buf[:n]) {
		t.Fatal("send payload mismatch")
	}
	if sc := poll(t, c.scq, 1)[0]; sc.Status != StatusSuccess || sc.ID != 1 {
		t.Fatalf("send completion %+v", sc)
	}
	// Write then Read back.
	fill(c.buf[300000:400000], 9)
	mustPost(t, c.qp, SendWR{ID: 2, Op: OpWrite, Flags: FlagSignaled, SGL: []SGE{c.sge(300000, 100000)}, RemoteSTag: s.mr.STag(), RemoteTO: s.to(500000)})
	mustPost(t, c.qp, SendWR{ID: 3, Op: OpRead, Flags: FlagSignaled, SGL: []SGE{c.sge(600000, 100000)}, RemoteSTag: s.mr.STag(), RemoteTO: s.to(500000)})
	cs := poll(t, c.scq, 2)
	if cs[0].ID != 2 || cs[1].ID != 3 || cs[0].Status != StatusSuccess || cs[1].Status != StatusSuccess || cs[1].ByteLen != 100000 {
		t.Fatalf("completions %+v", cs)
	}
	if !bytes.Equal(c.buf[600000:700000], c.buf[300000:400000]) {
		t.Fatal("read back mismatch")
	}
}
