package verbs

import (
	"bytes"
	"context"
	"errors"
	"testing"
)

// TestPostSendInline: inline Sends and Writes carry the bytes as they were
// at the post (the caller's buffers are overwritten right after), across
// many turns of the bounce ring, and allocate nothing; what cannot be
// inline is refused.
func TestPostSendInline(t *testing.T) {
	const depth = 4 // 8 bounce slots: 200 posts wrap the ring 25 times
	c, s := pair(t, 1<<16, QPAttr{SQDepth: depth, RQDepth: depth, MaxInlineData: 100})
	head, tail := make([]byte, 40), make([]byte, 88) // 128: 100 rounded up to 64 bytes
	want := make([]byte, len(head)+len(tail))
	sb := s.mr.Bytes()
	for i := range 200 {
		for j := range head {
			head[j] = byte(i + j)
		}
		for j := range tail {
			tail[j] = byte(3*i + j)
		}
		copy(want, head)
		copy(want[len(head):], tail)
		if i%2 == 0 {
			must(t, s.qp.PostRecvBuf(uint64(i), s.mr.SGE(0, 256)))
			must(t, c.qp.PostSendInline(&SendWR{ID: uint64(i), Op: OpSend, Flags: FlagSignaled}, head, tail))
		} else {
			must(t, c.qp.PostSendInline(&SendWR{ID: uint64(i), Op: OpWrite, Flags: FlagSignaled,
				RemoteSTag: s.mr.STag(), RemoteTO: s.mr.TO(1024)}, head, tail))
		}
		clear(head) // the post copied them
		clear(tail)
		if wc := poll(t, c.scq, 1)[0]; wc.Status != StatusSuccess || wc.ID != uint64(i) {
			t.Fatalf("post %d: completion %+v", i, wc)
		}
		var got []byte
		if i%2 == 0 {
			wc := poll(t, s.rcq, 1)[0]
			if wc.Status != StatusSuccess || wc.ByteLen != uint32(len(want)) {
				t.Fatalf("send %d: receive %+v", i, wc)
			}
			got = sb[:len(want)]
		} else {
			// Ordered by a Read back: the Write is placed when the Read
			// Response arrives behind it.
			must(t, c.qp.Read(ctxT(t), c.mr.SGE(0, len(want)), s.mr.STag(), s.mr.TO(1024)))
			got = c.mr.Bytes()[:len(want)]
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("post %d: payload differs", i)
		}
	}

	if err := c.qp.PostSendInline(&SendWR{Op: OpSend}, make([]byte, 129)); !errors.Is(err, ErrTooLong) {
		t.Errorf("129 bytes into a 128-byte inline QP: %v, want ErrTooLong", err)
	}
	for _, wr := range []SendWR{
		{Op: OpRead, RemoteSTag: s.mr.STag()},
		{Op: OpFetchAdd, RemoteSTag: s.mr.STag()},
		{Op: OpSend, SGL: []SGE{c.mr.SGE(0, 8)}},
	} {
		if err := c.qp.PostSendInline(&wr, head[:8]); !errors.Is(err, ErrInvalidWR) {
			t.Errorf("inline %v with %d SGEs: %v, want ErrInvalidWR", wr.Op, len(wr.SGL), err)
		}
	}
	plain := newSide(t, c.dev, 4096, QPAttr{})
	if err := plain.qp.PostSendInline(&SendWR{Op: OpSend}, head[:8]); !errors.Is(err, ErrInvalidWR) {
		t.Errorf("inline on a QP without MaxInlineData: %v, want ErrInvalidWR", err)
	}
	if _, err := c.pd.CreateQP(QPAttr{SendCQ: c.scq, RecvCQ: c.rcq, MaxInlineData: MaxInlineData + 1}); !errors.Is(err, ErrBadAttr) {
		t.Errorf("MaxInlineData beyond the limit: %v, want ErrBadAttr", err)
	}

	wr := SendWR{ID: 9, Op: OpWrite, Flags: FlagSignaled, RemoteSTag: s.mr.STag(), RemoteTO: s.mr.TO(2048)}
	wc := make([]Completion, 1)
	ctx := context.Background()
	if n := testing.AllocsPerRun(200, func() {
		must(t, c.qp.PostSendInline(&wr, head, tail))
		for c.scq.Poll(wc) == 0 {
			c.scq.Wait(ctx)
		}
	}); n != 0 {
		t.Errorf("PostSendInline+Poll: %.1f allocations per run, want 0", n)
	}
}
