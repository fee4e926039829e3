package datapath

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

func BenchmarkAtomicLatency(b *testing.B) {
	c, s := benchPair(b)
	wr := SendWR{Op: OpFetchAdd, Flags: FlagSignaled, SGL: []SGE{c.sge(0, 8)}, RemoteSTag: s.mr.STag(), RemoteTO: s.to(0), CompareAdd: 1}
	runOutstanding(b, c, &wr, 1)
}

func BenchmarkAtomicRate16(b *testing.B) {
	c, s := benchPair(b)
	wr := SendWR{Op: OpFetchAdd, Flags: FlagSignaled, SGL: []SGE{c.sge(0, 8)}, RemoteSTag: s.mr.STag(), RemoteTO: s.to(0), CompareAdd: 1}
	runOutstanding(b, c, &wr, 16)
}

func BenchmarkWrite64K(b *testing.B) {
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
// FPDU's size) with 36 bytes (an Atomic Response FPDU's size).
func tcpEcho(b *testing.B, depth int) {
	c, s := tcpPair(b)
	go func() {
		req := make([]byte, 76)
		resp := make([]byte, 36)
		for {
			if _, err := io.ReadFull(s, req); err != nil {
				return
			}
			if _, err := s.Write(resp); err != nil {
				return
			}
		}
	}()
	req := make([]byte, 76)
	resp := make([]byte, 36)
	b.ReportAllocs()
	b.ResetTimer()
	inflight, done, posted := 0, 0, 0
	for done < b.N {
		for inflight < depth && posted < b.N {
			c.Write(req)
			posted++
			inflight++
		}
		if _, err := io.ReadFull(c, resp); err != nil {
			b.Fatal(err)
		}
		inflight--
		done++
	}
}

func BenchmarkTCPEchoLatency(b *testing.B) { tcpEcho(b, 1) }
func BenchmarkTCPEchoRate16(b *testing.B)  { tcpEcho(b, 16) }

func BenchmarkTCPStream64K(b *testing.B) {
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
