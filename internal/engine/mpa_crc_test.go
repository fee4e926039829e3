package engine

import (
	"context"
	"net"
	"testing"
	"time"

	"xrnic/wire/mpa"
)

// TestReplyCRCFollowsInitiator: a responder that asked for no CRCs still
// sets C in its Reply when the initiator set it, since CRCs are then used
// (RFC 5044 §7.1.2). Linux siw built to require CRCs refuses a Reply with
// C = 0 and closes.
func TestReplyCRCFollowsInitiator(t *testing.T) {
	for _, tc := range []struct{ initC, respNoCRC, want bool }{
		{true, true, true}, {true, false, true}, {false, false, true}, {false, true, false},
	} {
		d, ln := listenFor(t, ListenConfig{})
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		errc := make(chan error, 1)
		go func() {
			req, err := ln.Accept(ctx)
			if err != nil {
				errc <- err
				return
			}
			pd := d.AllocPD()
			cq, _ := d.CreateCQ(16)
			qp, err := d.CreateQP(QPAttr{PD: pd, SendCQ: cq, RecvCQ: cq, SQDepth: 8, RQDepth: 8})
			if err == nil {
				err = req.Accept(ctx, qp, ConnParams{NoCRC: tc.respNoCRC})
			}
			errc <- err
		}()
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, mpa.MaxFrameLen)
		n, err := mpa.PutFrame(buf, mpa.Request, mpa.FrameParams{C: tc.initC, Rev: 1}, nil)
		if err != nil {
			t.Fatal(err)
		}
		c.Write(buf[:n])
		c.SetDeadline(time.Now().Add(5 * time.Second))
		rep, err := readRawFrame(c, mpa.Reply)
		if err != nil {
			t.Fatal(err)
		}
		if rep.C() != tc.want {
			t.Errorf("initiator C %v, responder NoCRC %v: Reply C %v, want %v", tc.initC, tc.respNoCRC, rep.C(), tc.want)
		}
		c.Close()
		<-errc
		cancel()
	}
}
