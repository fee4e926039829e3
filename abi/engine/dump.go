package main

import (
	"os"
	"os/signal"
	"runtime"
	"sync"
	"syscall"

	"xrnic/transport/afxdp"
)

var dumpOnce sync.Once

// dumpOnSignal, with XRNIC_DEBUG=1, writes every goroutine's stack and
// each QP's queues (on afxdp also the poll loops' counters) to stderr on
// SIGUSR1: what a stalled application's engine is doing (a C host gives
// the Go runtime no SIGQUIT dump).
func dumpOnSignal() {
	dumpOnce.Do(func() {
		ch := make(chan os.Signal, 1)
		signal.Notify(ch, syscall.SIGUSR1)
		go func() {
			buf := make([]byte, 1<<20)
			for range ch {
				n := runtime.Stack(buf, true)
				os.Stderr.Write(buf[:n])
				if d := device(); d != nil {
					if x, ok := d.Transport().(*afxdp.Transport); ok {
						st, err := x.LoopStats()
						debugf("poll loops: %+v %v", st, err)
					}
				}
				handles.each(func(o any) {
					if q, ok := o.(*qpObj); ok {
						debugf("QP %d: state %v, queues %+v, stats tx %d rx %d", q.qp.Num(), q.qp.State(), q.qp.Queues(), q.qp.Stats().TxFPDUs, q.qp.Stats().RxFPDUs)
					}
					if s, ok := o.(*srqObj); ok {
						debugf("SRQ: %+v, used by %d QPs", s.srq.Query(), s.nqps.Load())
					}
				})
			}
		}()
	})
}
