package verbs

import (
	"errors"
	"testing"
	"time"
)

// TestSRQ: two connected QPs on one SRQ; each Send takes one of its
// receives and completes on its own QP's receive CQ; the limit event
// fires once; a Send that finds the SRQ empty ends only its connection;
// Close is ErrSRQBusy while QPs use the SRQ.
func TestSRQ(t *testing.T) {
	d := openDev(t)
	pd, err := d.AllocPD()
	must(t, err)
	srq, err := pd.CreateSRQ(SRQAttr{Depth: 8, MaxSGE: 1})
	must(t, err)
	if _, err := pd.CreateSRQ(SRQAttr{Depth: 8, Limit: 9}); !errors.Is(err, ErrBadAttr) {
		t.Errorf("limit above the depth: %v", err)
	}
	var srv, cli [2]*side
	for i := range srv {
		srv[i] = newSidePD(t, d, pd, 1<<12, QPAttr{SRQ: srq})
		cli[i] = newSide(t, nil, 1<<12, QPAttr{})
		connect(t, cli[i], srv[i], ConnParam{}, ConnParam{})
	}
	if err := srv[0].qp.PostRecv(&RecvWR{ID: 1}); !errors.Is(err, ErrInvalidWR) {
		t.Errorf("PostRecv on a QP on an SRQ: %v, want ErrInvalidWR", err)
	}
	mr := srv[0].mr
	for id := range 4 {
		must(t, srq.PostRecvBuf(uint64(id), mr.SGE(id*64, 64)))
	}
	must(t, srq.SetLimit(2))
	if q := srq.Query(); q.Depth != 8 || q.MaxSGE != 1 || q.Limit != 2 || q.Posted != 4 {
		t.Errorf("Query %+v", q)
	}
	post := func(i int, b byte) {
		t.Helper()
		m := cli[i].mr
		m.Bytes()[0] = b
		must(t, cli[i].qp.PostSendBuf(uint64(b), m.SGE(0, 1), FlagSignaled))
	}
	send := func(i int, b byte) {
		t.Helper()
		post(i, b)
		if x := poll(t, cli[i].scq, 1)[0]; x.Status != StatusSuccess {
			t.Fatalf("client %d: %+v", i, x)
		}
	}
	seen := map[uint64]bool{}
	for k, i := range []int{0, 1, 0} {
		send(i, byte(10+k))
		x := poll(t, srv[i].rcq, 1)[0]
		if x.Status != StatusSuccess || x.QPNum != srv[i].qp.Num() || seen[x.ID] || mr.Bytes()[x.ID*64] != byte(10+k) {
			t.Fatalf("message %d to QP %d: %+v", k, i, x)
		}
		seen[x.ID] = true
	}
	select { // 1 left, below 2
	case <-srq.LimitEvents():
	case <-time.After(5 * time.Second):
		t.Fatal("no limit event")
	}
	send(1, 20) // takes the last one
	poll(t, srv[1].rcq, 1)
	post(0, 21) // finds the SRQ empty: the peer's Terminate may flush it first
	select {
	case <-srv[0].qp.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("QP 0 did not end")
	}
	if srv[0].qp.Err() == nil || srv[1].qp.State() != QPRTS {
		t.Fatalf("QP 0 err %v, QP 1 state %v", srv[0].qp.Err(), srv[1].qp.State())
	}
	must(t, srq.PostRecvBuf(7, mr.SGE(7*64, 64)))
	send(1, 22)
	if x := poll(t, srv[1].rcq, 1)[0]; x.Status != StatusSuccess || x.ID != 7 {
		t.Fatalf("after QP 0 ended: %+v", x)
	}
	select {
	case <-srq.LimitEvents():
		t.Error("a second limit event without re-arming")
	default:
	}
	if err := srq.Close(); !errors.Is(err, ErrSRQBusy) {
		t.Fatalf("Close with QPs: %v", err)
	}
	for i := range srv {
		srv[i].qp.Close()
	}
	must(t, srq.Close())
}
