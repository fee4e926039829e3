package engine

import (
	"context"
	"io"
	"net"
	"testing"
)

// Benchmarks over loopback TCP, each next to a plain Go TCP baseline of the
// same sizes in the same run.

func benchPair(b *testing.B) (*side, *side) {
	return connectPair(b, 1<<22, QPAttr{SQDepth: 256}, ConnParams{}, ConnParams{})
}

func runOutstanding(b *testing.B, c *side, wr *SendWR, depth int) {
	b.ReportAllocs()
	wc := make([]Completion, 64)
	ctx := context.Background()
	inflight, done := 0, 0
	b.ResetTimer()
	for posted := 0; done < b.N; {
		for inflight < depth && posted < b.N {
			if err := c.qp.PostSend(wr); err != nil {
				b.Fatal(err)
			}
			posted++
			inflight++
		}
		n := c.scq.Poll(wc)
		if n == 0 {
			c.scq.Wait(ctx)
			continue
		}
		for _, x := range wc[:n] {
			if x.Status != StatusSuccess {
				b.Fatalf("completion %+v", x)
			}
		}
		inflight -= n
		done += n
	}
}

// BenchmarkLoopback runs each engine operation next to a plain Go TCP
// baseline of the same sizes in the same run (sub-benchmarks xrnic and tcp,
// benchstat-friendly) and reports the ratio xrnic/tcp of ns/op as a metric
// of the tcp line, so the engine's
// own overhead shows as a number that the machine's noise affects equally.
//
//	go test -run '^$' -bench BenchmarkLoopback -count 5 ./internal/engine/
func BenchmarkLoopback(b *testing.B) {
	pairs := []struct {
		name       string
		xrnic, tcp func(*testing.B)
	}{
		{"atomic_lat", benchAtomicLatency, func(b *testing.B) { tcpEcho(b, 1) }},
		{"atomic_rate16", benchAtomicRate16, func(b *testing.B) { tcpEcho(b, 16) }},
		{"write64k", benchWrite64K, benchTCPStream64K},
	}
	for _, p := range pairs {
		b.Run(p.name, func(b *testing.B) {
			var nsXrnic float64
			b.Run("xrnic", func(b *testing.B) { p.xrnic(b); nsXrnic = nsPerOp(b) })
			b.Run("tcp", func(b *testing.B) {
				p.tcp(b)
				if ns := nsPerOp(b); ns > 0 && nsXrnic > 0 {
					b.ReportMetric(nsXrnic/ns, "xrnic/tcp")
				}
			})
		})
	}
}

func nsPerOp(b *testing.B) float64 {
	if b.N == 0 {
		return 0
	}
	return float64(b.Elapsed().Nanoseconds()) / float64(b.N)
}

func benchAtomicLatency(b *testing.B) {
	c, s := benchPair(b)
	wr := SendWR{Op: OpFetchAdd, Flags: FlagSignaled, SGL: []SGE{c.sge(0, 8)}, RemoteSTag: s.mr.STag(), RemoteTO: s.to(0), CompareAdd: 1}
	runOutstanding(b, c, &wr, 1)
}

func benchAtomicRate16(b *testing.B) {
	c, s := benchPair(b)
	wr := SendWR{Op: OpFetchAdd, Flags: FlagSignaled, SGL: []SGE{c.sge(0, 8)}, RemoteSTag: s.mr.STag(), RemoteTO: s.to(0), CompareAdd: 1}
	runOutstanding(b, c, &wr, 16)
}

func benchWrite64K(b *testing.B) {
	c, s := benchPair(b)
	wr := SendWR{Op: OpWrite, Flags: FlagSignaled, SGL: []SGE{c.sge(0, 64<<10)}, RemoteSTag: s.mr.STag(), RemoteTO: s.to(0)}
	b.SetBytes(64 << 10)
	runOutstanding(b, c, &wr, 16)
	// The Writes are placed when a Read behind them returns.
	rd := SendWR{Op: OpRead, Flags: FlagSignaled, SGL: []SGE{c.sge(1<<20, 8)}, RemoteSTag: s.mr.STag(), RemoteTO: s.to(0)}
	runOutstandingTail(b, c, &rd)
}

func runOutstandingTail(b *testing.B, c *side, wr *SendWR) {
	b.StopTimer()
	c.qp.PostSend(wr)
	poll(b, c.scq, 1)
}

// tcpPair returns two connected loopback TCP conns with Nagle off.
func tcpPair(b *testing.B) (net.Conn, net.Conn) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	ch := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		ch <- c
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	s := <-ch
	c.(*net.TCPConn).SetNoDelay(true)
	s.(*net.TCPConn).SetNoDelay(true)
	b.Cleanup(func() { c.Close(); s.Close() })
	return c, s
}

// tcpEcho: the server answers each 76-byte request (an Atomic Request
// FPDU's size) with 36 bytes (an Atomic Response FPDU's size). Both sides
// batch as an engine does: the client writes all requests it may have
// outstanding in one call, the server answers everything it has read in one
// write, so the depth-16 baseline is not limited to one request per syscall.
func tcpEcho(b *testing.B, depth int) {
	const reqLen, respLen = 76, 36
	c, s := tcpPair(b)
	go func() {
		in := make([]byte, 64*reqLen)
		out := make([]byte, 64*respLen)
		have := 0
		for {
			n, err := s.Read(in[have:])
			if err != nil {
				return
			}
			have += n
			k := have / reqLen
			if k == 0 {
				continue
			}
			if _, err := s.Write(out[:k*respLen]); err != nil {
				return
			}
			have = copy(in, in[k*reqLen:have])
		}
	}()
	req := make([]byte, depth*reqLen)
	resp := make([]byte, depth*respLen)
	b.ReportAllocs()
	b.ResetTimer()
	inflight, done, posted := 0, 0, 0
	have := 0
	for done < b.N {
		if k := min(depth-inflight, b.N-posted); k > 0 {
			if _, err := c.Write(req[:k*reqLen]); err != nil {
				b.Fatal(err)
			}
			posted += k
			inflight += k
		}
		n, err := c.Read(resp[have:])
		if err != nil {
			b.Fatal(err)
		}
		have += n
		k := have / respLen
		have -= k * respLen // responses carry no data to keep
		inflight -= k
		done += k
	}
}

func benchTCPStream64K(b *testing.B) {
	c, s := tcpPair(b)
	go io.Copy(io.Discard, s)
	buf := make([]byte, 64<<10)
	b.SetBytes(64 << 10)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := c.Write(buf); err != nil {
			b.Fatal(err)
		}
	}
}
