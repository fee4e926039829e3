package verbs_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"log"
	"time"

	"xrnic/verbs"
)

// A remote FetchAdd and a Write with Immediate between two devices over
// loopback. The responder hands its STag and the word's address to the
// initiator in the private data of its accept, as rdma_cm applications do.
func Example_remoteAtomics() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	// Both sides: device, PD, CQs, QP, and a registered buffer.
	type end struct {
		dev *verbs.Device
		cq  *verbs.CQ
		qp  *verbs.QP
		mr  *verbs.MR
	}
	open := func() end {
		dev, err := verbs.Open(verbs.DeviceConfig{Transport: "kernel"})
		if err != nil {
			log.Fatal(err)
		}
		pd, _ := dev.AllocPD()
		cq, _ := dev.CreateCQ(64) // serves both queues: 32 + 32
		qp, err := pd.CreateQP(verbs.QPAttr{SendCQ: cq, RecvCQ: cq, SQDepth: 32, RQDepth: 32})
		if err != nil {
			log.Fatal(err)
		}
		mr, err := pd.RegMR(make([]byte, 4096), verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteAtomic)
		if err != nil {
			log.Fatal(err)
		}
		return end{dev, cq, qp, mr}
	}
	srv, cli := open(), open()
	defer srv.dev.Close()
	defer cli.dev.Close()

	// The responder: a counter at offset 0, a receive for the Immediate
	// Data, and its STag and counter address in the accept's private data.
	binary.NativeEndian.PutUint64(srv.mr.Bytes()[0:], 40)
	srv.qp.PostRecvBuf(100, srv.mr.SGE(8, 8))
	ln, err := srv.dev.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan error, 1)
	go func() {
		req, err := ln.Accept(ctx)
		if err != nil {
			accepted <- err
			return
		}
		var pdata [12]byte
		binary.BigEndian.PutUint32(pdata[0:], srv.mr.STag())
		binary.BigEndian.PutUint64(pdata[4:], srv.mr.TO(0))
		accepted <- req.Accept(ctx, srv.qp, verbs.ConnParam{PrivateData: pdata[:]})
	}()

	// The initiator connects and learns where the counter is.
	if err := cli.qp.Dial(ctx, ln.Addr().String(), verbs.ConnParam{PrivateData: []byte("hi")}); err != nil {
		log.Fatal(err)
	}
	if err := <-accepted; err != nil {
		log.Fatal(err)
	}
	pdata := cli.qp.ConnInfo().PeerPrivateData
	rkey, raddr := binary.BigEndian.Uint32(pdata), binary.BigEndian.Uint64(pdata[4:])

	// Remote FetchAdd of 2: the original value arrives in the completion
	// and in the 8-byte local buffer.
	wc := make([]verbs.Completion, 4)
	cli.qp.PostFetchAdd(1, cli.mr.SGE(0, 8), rkey, raddr, 2, 0, verbs.FlagSignaled)
	for cli.cq.Poll(wc[:1]) == 0 {
		cli.cq.Wait(ctx)
	}
	fmt.Printf("FetchAdd: %v orig=%d local=%d remote now %d\n", wc[0].Status, wc[0].AtomicOrig,
		binary.NativeEndian.Uint64(cli.mr.Bytes()), binary.NativeEndian.Uint64(srv.mr.Bytes()))

	// Write with Immediate: the data lands at offset 64, then the
	// responder's receive completes with the Immediate Data.
	copy(cli.mr.Bytes()[64:], "hello, iWARP")
	cli.qp.PostWriteImm(2, cli.mr.SGE(64, 12), rkey, raddr+64, 0xC0FFEE, verbs.FlagSignaled)
	for srv.cq.Poll(wc[:1]) == 0 {
		srv.cq.Wait(ctx)
	}
	fmt.Printf("responder: %v id=%d len=%d imm=%#x data=%q\n", wc[0].Op, wc[0].ID, wc[0].ByteLen, wc[0].Imm, srv.mr.Bytes()[64:76])
	for cli.cq.Poll(wc[:1]) == 0 {
		cli.cq.Wait(ctx)
	}
	fmt.Printf("initiator: %v %v\n", wc[0].Op, wc[0].Status)

	// Output:
	// FetchAdd: success orig=40 local=40 remote now 42
	// responder: RECV_RDMA_WITH_IMM id=100 len=12 imm=0xc0ffee data="hello, iWARP"
	// initiator: RDMA_WRITE_WITH_IMM success
}

// A server whose QPs share one receive queue: each QP created with the
// SRQ takes its receives from it, and each receive completes on the CQ of
// the QP that took it. The limit event says when to post more.
func ExampleSRQ() {
	dev, err := verbs.Open(verbs.DeviceConfig{Transport: "kernel"})
	if err != nil {
		log.Fatal(err)
	}
	defer dev.Close()
	pd, _ := dev.AllocPD()
	mr, _ := pd.RegMR(make([]byte, 64*1024), verbs.AccessLocalWrite)
	srq, err := pd.CreateSRQ(verbs.SRQAttr{Depth: 64, MaxSGE: 1}) // ibv_create_srq
	if err != nil {
		log.Fatal(err)
	}
	for i := range 64 {
		srq.PostRecvBuf(uint64(i), mr.SGE(i*1024, 1024)) // ibv_post_srq_recv
	}
	srq.SetLimit(16) // ibv_modify_srq(IBV_SRQ_LIMIT)
	cq, _ := dev.CreateCQ(256)
	var qps []*verbs.QP
	for range 4 { // one per client, accepted from a Listener as usual
		qp, err := pd.CreateQP(verbs.QPAttr{SendCQ: cq, RecvCQ: cq, SQDepth: 16, SRQ: srq})
		if err != nil {
			log.Fatal(err)
		}
		qps = append(qps, qp)
	}
	select {
	case <-srq.LimitEvents(): // IBV_EVENT_SRQ_LIMIT_REACHED
		// Fewer than 16 left: repost what was polled, then re-arm.
		srq.SetLimit(16)
	default:
	}
	fmt.Println(srq.Query().Posted, len(qps))
	for _, qp := range qps {
		qp.Close()
	}
	fmt.Println(srq.Close())
	// Output:
	// 64 4
	// <nil>
}
