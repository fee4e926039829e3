//go:build linux

package afxdp

import (
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"xrnic/bpf"
	"xrnic/internal/netnstest"
	"xrnic/wire/tcp"
)

// xdpMD is struct xdp_md, the context BPF_PROG_TEST_RUN accepts for XDP.
type xdpMD struct {
	Data, DataEnd, DataMeta uint32
	IngressIfindex          uint32
	RXQueueIndex            uint32
	EgressIfindex           uint32
}

// inject makes the kernel deliver n copies of frame to queue 0 of the rig's
// device through the steering program (BPF_PROG_TEST_RUN in live-frames
// mode: the redirect really happens), so RX can be measured without a
// sender in the loop.
func (r *rig) inject(tb testing.TB, frame []byte, n int) {
	netnstest.Do(tb, r.pair.NSA, func() {
		opts := ebpf.RunOptions{
			Data:    frame,
			Repeat:  uint32(n),
			Flags:   unix.BPF_F_TEST_XDP_LIVE_FRAMES,
			Context: xdpMD{DataEnd: uint32(len(frame)), IngressIfindex: uint32(r.idxA)},
		}
		if _, err := r.prog.Prog().Run(&opts); err != nil {
			tb.Fatalf("live test run: %v", err)
		}
	})
}

func steeredFrame(tb testing.TB) []byte {
	b := make([]byte, 128)
	n := putTCP(tb, b, macB, macA, ipB, ipA, 1234, steeredPort, 1, 0, tcp.FlagACK, make([]byte, 32))
	return b[:n]
}

// TestIntegrationHotPathAllocs checks that the batch calls of a real
// socket allocate nothing.
func TestIntegrationHotPathAllocs(t *testing.T) {
	r := newRig(t, 1, bpf.ModeGeneric, SocketOptions{RXSize: 256, TXSize: 256})
	s := r.socks[0]
	frame := steeredFrame(t)
	batch := make([]Desc, 32)
	r.inject(t, frame, 64)
	allocs := testing.AllocsPerRun(50, func() {
		n := s.Receive(batch)
		s.Free(batch[:n])
		s.Refill(n)
		n = s.Alloc(batch)
		for i := range batch[:n] {
			batch[i].Len = uint32(copy(s.Frame(batch[i]), frame))
		}
		s.Transmit(batch[:n])
		s.Complete()
		s.Poll(0)
	})
	if allocs != 0 {
		t.Errorf("hot path allocates %v times per batch", allocs)
	}
	st, err := s.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if st.KickErrors != 0 {
		t.Errorf("kick errors: %+v", st)
	}
}

// BenchmarkIntegrationRX measures the receive path per frame: ns/op is
// the kernel (steering program, redirect, copy into the UMEM, injected with
// BPF_PROG_TEST_RUN live frames) plus our Receive+Free+Refill; the
// user-ns/frame metric is our part alone.
func BenchmarkIntegrationRX(b *testing.B) {
	const batchFrames = 1024
	r := newRig(b, 1, bpf.ModeGeneric, SocketOptions{RXSize: 2048, FillSize: 4096, Frames: 4096 + txReserve})
	s := r.socks[0]
	frame := steeredFrame(b)
	batch := make([]Desc, 64)
	b.ReportAllocs()
	b.ResetTimer()
	var sum uint64
	var user time.Duration
	for done := 0; done < b.N; {
		k := min(batchFrames, b.N-done)
		r.inject(b, frame, k)
		start := time.Now()
		for got := 0; got < k; {
			n := s.Receive(batch)
			if n == 0 {
				st, _ := s.Stats()
				b.Fatalf("RX ring empty after %d of %d injected frames; stats %+v", got, k, st)
			}
			for _, d := range batch[:n] {
				sum += uint64(s.Frame(d)[0]) // touch the frame
			}
			s.Free(batch[:n])
			s.Refill(n)
			got += n
		}
		user += time.Since(start)
		done += k
	}
	b.StopTimer()
	b.ReportMetric(float64(user.Nanoseconds())/float64(b.N), "user-ns/frame")
	_ = sum
}

// BenchmarkIntegrationTX measures Alloc+copy+Transmit+Complete per frame
// in batches of 64 (copy mode on veth: the time includes the kernel's
// transmit through the veth, where the peer drops the frames).
func BenchmarkIntegrationTX(b *testing.B) {
	r := newRig(b, 1, bpf.ModeGeneric, SocketOptions{TXSize: 2048, CompletionSize: 2048, FillSize: 64, RXSize: 64, Frames: 2048 + 64})
	s := r.socks[0]
	frame := steeredFrame(b)
	batch := make([]Desc, 64)
	b.ReportAllocs()
	b.ResetTimer()
	for done := 0; done < b.N; {
		s.Complete()
		n := s.Alloc(batch[:min(len(batch), b.N-done)])
		for i := range batch[:n] {
			batch[i].Len = uint32(copy(s.Frame(batch[i]), frame))
		}
		m := s.Transmit(batch[:n])
		s.Free(batch[m:n])
		done += m
	}
	b.StopTimer()
	if st, _ := s.Stats(); st.TXInvalidDescs != 0 || st.KickErrors != 0 {
		b.Errorf("stats %+v", st)
	}
}
