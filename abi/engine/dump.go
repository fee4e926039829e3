package main

import (
	"os"
	"os/signal"
	"runtime"
	"sync"
	"syscall"
)

var dumpOnce sync.Once

// dumpOnSignal, with XRNIC_DEBUG=1, writes every goroutine's stack and
// each QP's queues to stderr on SIGUSR1: what a stalled application's
// engine is doing (a C host gives the Go runtime no SIGQUIT dump).
func dumpOnSignal() {
	dumpOnce.Do(func() {
		ch := make(chan os.Signal, 1)
		signal.Notify(ch, syscall.SIGUSR1)
		go func() {
			buf := make([]byte, 1<<20)
			for range ch {
				n := runtime.Stack(buf, true)
				os.Stderr.Write(buf[:n])
				handles.each(func(o any) {
					if q, ok := o.(*qpObj); ok {
						debugf("QP %d: state %v, queues %+v, stats tx %d rx %d", q.qp.Num(), q.qp.State(), q.qp.Queues(), q.qp.Stats().TxFPDUs, q.qp.Stats().RxFPDUs)
					}
				})
			}
		}()
	})
}
