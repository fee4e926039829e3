package reliability

import (
	"context"
	"net"
	"net/netip"
	"os"
	"testing"
	"time"

	"xrnic/internal/engine"
	"xrnic/internal/netnstest"
	"xrnic/mem"
	"xrnic/transport/afxdp"
)

// TestIntegrationSetupFlood (issue 12, MPA setup): silent TCP connections
// from one address of host B hold at most MaxSetupPerPeer setup slots,
// each for at most ConnTimeout, and delay nobody: a client from B's other
// address connects, negotiates MPA and completes FetchAdds while they are
// held, on both transports. Before the listener read Requests in parallel
// each silent connection held everyone behind it for ConnTimeout.
// XRNIC_LONG=1 sends more silent connections.
func TestIntegrationSetupFlood(t *testing.T) {
	e := newWireEnv(t, false)
	flood := netip.MustParseAddr("198.18.2.3") // B's second address: the flood's source
	rlIP(t, "-n", e.nsB, "addr", "add", flood.String()+"/24", "dev", e.devB)
	silent := 300
	if os.Getenv("XRNIC_LONG") != "" {
		silent = 5000
	}
	for _, tr := range []string{"kernel", "afxdp"} {
		t.Run(tr, func(t *testing.T) {
			var x *afxdp.Config
			if tr == "afxdp" {
				x = &afxdp.Config{Iface: e.devA}
			}
			srv := openEngine(t, e.nsA, engine.Config{ConnTimeout: 10 * time.Second}, x)
			ln := listenEngine(t, e.nsA, srv, engine.ListenConfig{MaxSetup: 64, MaxSetupPerPeer: 16})
			addr := ln.Addr().String()
			pd := srv.AllocPD()
			word := make([]byte, 8)
			mr, err := srv.RegMR(word, mem.MROptions{PD: pd, Access: mem.LocalWrite | mem.RemoteAtomic})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			serve := func(ln *engine.Listener) { // every valid Request
				for {
					req, err := ln.Accept(ctx)
					if err != nil {
						return
					}
					cq, _ := srv.CreateCQ(8)
					qp, err := srv.CreateQP(engine.QPAttr{PD: pd, SendCQ: cq, RecvCQ: cq, SQDepth: 4, RQDepth: 4})
					if err == nil {
						err = req.Accept(ctx, qp, engine.ConnParams{})
					}
					if err != nil {
						req.Close()
					}
				}
			}
			go serve(ln)
			cli := openEngine(t, e.nsB, engine.Config{ConnTimeout: 10 * time.Second}, nil)
			connectTime := func(addr string) time.Duration {
				t.Helper()
				start := time.Now()
				p := newRestartPeer(t, e, cli, addr)
				d := time.Since(start)
				defer p.qp.Close()
				wc := make([]engine.Completion, 1)
				for i := range 10 {
					if err := p.qp.PostSend(&engine.SendWR{ID: uint64(i), Op: engine.OpFetchAdd, Flags: engine.FlagSignaled,
						SGL: []engine.SGE{{Addr: p.mr.BaseTO(), Length: 8, LKey: p.mr.STag()}}, RemoteSTag: mr.STag(), RemoteTO: mr.BaseTO(), CompareAdd: 1}); err != nil {
						t.Fatal(err)
					}
					wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
					for p.cq.Poll(wc) == 0 {
						if err := p.cq.Wait(wctx); err != nil {
							wcancel()
							t.Fatalf("FetchAdd %d: no completion", i)
						}
					}
					wcancel()
					if wc[0].Status != engine.StatusSuccess {
						t.Fatalf("FetchAdd %d: %v", i, wc[0].Status)
					}
				}
				return d
			}
			quiet := connectTime(addr)
			// The flood: silent connections from B's second address (the
			// client dials from its first).
			var conns []net.Conn
			defer func() {
				for _, c := range conns {
					c.Close()
				}
			}()
			if err := netnstest.In(t, e.nsB, func() error {
				d := net.Dialer{LocalAddr: &net.TCPAddr{IP: flood.AsSlice()}, Timeout: 5 * time.Second}
				for range silent {
					c, err := d.Dial("tcp", addr)
					if err != nil {
						continue // reset over the bound: counted below
					}
					conns = append(conns, c)
				}
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			st := ln.Stats()
			if st.InSetup > 16 {
				t.Fatalf("%d connections in setup from one peer, bound 16", st.InSetup)
			}
			if st.Evicted == 0 {
				t.Fatalf("no connection over the per-peer bound was evicted: %+v", st)
			}
			during := connectTime(addr)
			st = ln.Stats()
			t.Logf("%s: %d silent connections: in setup %d, evicted over the bound %d; connect+MPA %v quiet, %v during the flood",
				tr, silent, st.InSetup, st.Evicted, quiet.Round(time.Microsecond), during.Round(time.Microsecond))

			// The same flood from the client's own address (a NAT, one
			// host), kept up while the client connects ten times, on a
			// listener with the default bounds: over the per-peer bound
			// each new connection evicts the oldest one still without a
			// Request, so the client's, whose Request comes within a
			// round trip, gets in every time (the flood would have to
			// open 256 connections in that time to evict it). When the
			// newest was refused instead, whoever held the bound locked
			// the address out (17 of 18 clients failed).
			ln2 := listenEngine(t, e.nsA, srv, engine.ListenConfig{})
			go serve(ln2)
			addr2 := ln2.Addr().String()
			stop := make(chan struct{})
			flooded := make(chan int, 1)
			go func() {
				n := 0
				defer func() { flooded <- n }()
				netnstest.In(t, e.nsB, func() error {
					d := net.Dialer{LocalAddr: &net.TCPAddr{IP: rlIPB.AsSlice()}, Timeout: 5 * time.Second}
					var held []net.Conn
					defer func() {
						for _, c := range held {
							c.Close()
						}
					}()
					for {
						select {
						case <-stop:
							return nil
						default:
						}
						c, err := d.Dial("tcp", addr2)
						if err != nil {
							continue
						}
						n++
						// Hold a few more than the bound: the server
						// resets the older ones anyway.
						if held = append(held, c); len(held) > 300 {
							held[0].Close()
							held = held[1:]
						}
					}
				})
			}()
			var stopped bool
			stopFlood := func() int {
				if stopped {
					return 0
				}
				stopped = true
				close(stop)
				return <-flooded
			}
			defer stopFlood()
			for range 10 {
				connectTime(addr2)
			}
			n := stopFlood()
			st = ln2.Stats()
			if st.Evicted == 0 {
				t.Fatalf("%d connections from the client's own address evicted nothing: %+v", n, st)
			}
			t.Logf("%s: 10 clients connected and did 10 FetchAdds each among %d silent connections from their own address (%d evicted)",
				tr, n, st.Evicted)
		})
	}
}
