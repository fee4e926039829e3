//go:build linux

package engine

import (
	"context"
	"net"
	"net/netip"
	"testing"
	"time"

	"xrnic/internal/netnstest"

	"golang.org/x/sys/unix"
)

// Benchmarks of the afxdp transport on a veth pair between two network
// namespaces, side by side with the kernel-TCP transport on the same kind
// of pair and a plain kernel TCP stream (GSO on) as baselines. Root only;
// docs/PERFORMANCE.md has the commands and the numbers.
//
//	go test -run '^$' -bench BenchmarkIntegrationXDP -benchtime 2s ./internal/engine/

func benchDevices(b *testing.B, e *xdpEnv, transport string) (c, s *side) {
	a := e.open(b, e.nsA, e.devA, transport)
	bb := e.open(b, e.nsB, e.devB, transport)
	cs, ss := e.connectN(b, a, e.nsA, bb, e.nsB, xdpIPB, 1, 4<<20)
	return cs[0], ss[0]
}

func benchOps(b *testing.B, c, s *side) {
	b.Run("AtomicLatency", func(b *testing.B) {
		wr := SendWR{Op: OpFetchAdd, Flags: FlagSignaled, SGL: []SGE{c.sge(0, 8)}, RemoteSTag: s.mr.STag(), RemoteTO: s.to(0), CompareAdd: 1}
		runOutstanding(b, c, &wr, 1)
	})
	b.Run("AtomicRate16", func(b *testing.B) {
		wr := SendWR{Op: OpFetchAdd, Flags: FlagSignaled, SGL: []SGE{c.sge(0, 8)}, RemoteSTag: s.mr.STag(), RemoteTO: s.to(0), CompareAdd: 1}
		runOutstanding(b, c, &wr, 16)
	})
	b.Run("Write64K", func(b *testing.B) {
		wr := SendWR{Op: OpWrite, Flags: FlagSignaled, SGL: []SGE{c.sge(0, 64<<10)}, RemoteSTag: s.mr.STag(), RemoteTO: s.to(0)}
		b.SetBytes(64 << 10)
		runOutstanding(b, c, &wr, 16)
		rd := SendWR{Op: OpRead, Flags: FlagSignaled, SGL: []SGE{c.sge(1<<20, 8)}, RemoteSTag: s.mr.STag(), RemoteTO: s.to(0)}
		runOutstandingTail(b, c, &rd)
	})
}

// benchStream is an iperf-style kernel TCP stream from A to B in 64 KiB
// writes.
func benchStream(b *testing.B, e *xdpEnv) {
	addr := netnstest.Serve(b, e.nsB, netip.AddrPortFrom(xdpIPB, 0).String(), false)
	var c net.Conn
	if err := e.in(b, e.nsA, func() (err error) {
		c, err = net.DialTimeout("tcp", addr, 5*time.Second)
		return err
	}); err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	buf := make([]byte, 64<<10)
	b.SetBytes(64 << 10)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if _, err := c.Write(buf); err != nil {
			b.Fatal(err)
		}
	}
}

func cpuTime() time.Duration {
	var ru unix.Rusage
	unix.Getrusage(unix.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func BenchmarkIntegrationXDP(b *testing.B) {
	netnstest.RequireRoot(b, true)
	for _, mtu := range []int{1500, 3498, 9000} {
		b.Run("mtu"+itoa(mtu), func(b *testing.B) {
			b.Run("afxdp", func(b *testing.B) {
				e := newXDPEnv(b, mtu, false)
				c, s := benchDevices(b, e, trAFXDP)
				benchOps(b, c, s)
				// Kernel TCP through the same veth with our program
				// attached on both ends.
				b.Run("KernelTCPStream64K", func(b *testing.B) { benchStream(b, e) })
				b.Run("IdleCPU", func(b *testing.B) {
					time.Sleep(200 * time.Millisecond)
					start, t0 := cpuTime(), time.Now()
					for range b.N {
						time.Sleep(100 * time.Millisecond)
					}
					pct := 100 * float64(cpuTime()-start) / float64(time.Since(t0))
					b.ReportMetric(pct, "%cpu")
				})
			})
			b.Run("kernel", func(b *testing.B) {
				e := newXDPEnv(b, mtu, false)
				c, s := benchDevices(b, e, trKernel)
				benchOps(b, c, s)
				b.Run("KernelTCPStream64K", func(b *testing.B) { benchStream(b, e) })
			})
		})
	}
}

func itoa(n int) string {
	var buf [20]byte
	i := len(buf)
	for n >= 10 {
		i--
		buf[i] = byte('0' + n%10)
		n /= 10
	}
	i--
	buf[i] = byte('0' + n)
	return string(buf[i:])
}

var _ = context.Background
