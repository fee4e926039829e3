//go:build linux

package afxdp

import (
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"xrnic/bpf"
	"xrnic/internal/netns"
	"xrnic/internal/netnstest"
	"xrnic/internal/require"
	"xrnic/wire/eth"
	"xrnic/wire/ipv4"
	"xrnic/wire/tcp"
)

const (
	steeredPort = 7000
	kernelPort  = 7001
)

// rig is a veth pair with the steering program on end A and one AF_XDP
// socket per queue of A sharing one UMEM.
type rig struct {
	pair  *netnstest.Pair
	idxA  int
	idxB  int
	prog  *bpf.Program
	att   *bpf.Attachment
	umem  *UMEM
	socks []*Socket
	batch []Desc
}

func newRig(t testing.TB, queues int, mode bpf.Mode, so SocketOptions) *rig {
	t.Helper()
	netnstest.RequireRoot(t, true)
	r := &rig{pair: newVethPair(t, queues), batch: make([]Desc, 64)}
	r.idxA = netnstest.Ifindex(t, r.pair.NSA, r.pair.DevA)
	r.idxB = netnstest.Ifindex(t, r.pair.NSB, r.pair.DevB)
	netnstest.Do(t, r.pair.NSA, func() {
		var err error
		if r.prog, err = bpf.Load(bpf.Options{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { r.prog.Close() })
		if r.att, err = r.prog.Attach(bpf.AttachOptions{Ifindex: r.idxA, Mode: mode, Logger: slog.New(slog.DiscardHandler)}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { r.att.Close() })
		if r.umem, err = NewUMEM(UMEMOptions{Frames: 2048}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { r.umem.Close() })
		t.Logf("UMEM backing %v %s", r.umem.Backing(), r.umem.Warning())
		for q := range queues {
			s, err := r.umem.Open(r.idxA, q, so)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			if err := r.prog.SetSocket(q, s.Fd()); err != nil {
				t.Fatal(err)
			}
			r.refill(s)
			r.socks = append(r.socks, s)
		}
		if err := r.prog.AddListen(steeredPort); err != nil {
			t.Fatal(err)
		}
	})
	t.Logf("XDP %v (%s); socket zero-copy=%v multi-buffer=%v shared=%v",
		r.att.Mode, r.att.Reason, r.socks[0].ZeroCopy(), r.socks[0].MultiBuffer(), len(r.socks) > 1 && r.socks[1].SharedUMEM())
	return r
}

// refill gives the kernel all free frames but a reserve for TX.
func (r *rig) refill(s *Socket) { s.Refill(s.FreeFrames() - txReserve) }

const txReserve = 64

// receive polls every socket until n packets matching keep arrived or the
// timeout passed, calling keep on each received packet (multi-buffer runs
// joined); it returns the packets kept per queue.
func (r *rig) receive(t testing.TB, n int, timeout time.Duration, keep func(q int, pkt []byte) bool) []int {
	t.Helper()
	perQueue := make([]int, len(r.socks))
	fds := make([]unix.PollFd, len(r.socks))
	for i, s := range r.socks {
		fds[i] = unix.PollFd{Fd: int32(s.Fd()), Events: unix.POLLIN}
	}
	var joined []byte
	deadline := time.Now().Add(timeout)
	got := 0
	for got < n && time.Now().Before(deadline) {
		if _, err := unix.Poll(fds, 10); err != nil && err != unix.EINTR {
			t.Fatal(err)
		}
		for q, s := range r.socks {
			k := s.Receive(r.batch)
			for _, d := range r.batch[:k] {
				joined = append(joined, s.Frame(d)...)
				if d.More() {
					continue
				}
				if keep(q, joined) {
					perQueue[q]++
					got++
				}
				joined = joined[:0]
			}
			s.Free(r.batch[:k])
			r.refill(s)
		}
	}
	if got < n {
		t.Fatalf("received %d of %d packets in %v (per queue %v)", got, n, timeout, perQueue)
	}
	return perQueue
}

// putTCP writes an Ethernet/IPv4/TCP frame with valid checksums into b.
func putTCP(t testing.TB, b []byte, srcMAC, dstMAC [6]byte, src, dst [4]byte, sport, dport uint16, seq, ack uint32, flags tcp.Flags, payload []byte) int {
	n, err := eth.Put(b, dstMAC, srcMAC, eth.TypeIPv4)
	if err != nil {
		t.Fatal(err)
	}
	segLen := tcp.MinHeaderLen + len(payload)
	ih, err := ipv4.Put(b[n:], &ipv4.Fields{TotalLen: uint16(ipv4.MinHeaderLen + segLen), TTL: 64, Flags: ipv4.FlagDF, Protocol: ipv4.ProtoTCP, Src: src, Dst: dst})
	if err != nil {
		t.Fatal(err)
	}
	n += ih
	th, err := tcp.Put(b[n:], &tcp.Fields{SrcPort: sport, DstPort: dport, Seq: tcp.Seq(seq), Ack: tcp.Seq(ack), Flags: flags, Window: 65535}, nil)
	if err != nil {
		t.Fatal(err)
	}
	copy(b[n+th:], payload)
	tcp.Header(b[n : n+segLen]).UpdateChecksum(tcp.PseudoHeaderSum(src, dst, segLen))
	return n + segLen
}

// parseTCP returns the IPv4 header and TCP segment of an untagged frame.
func parseTCP(pkt []byte) (ipv4.Header, tcp.Header, bool) {
	f, err := eth.Parse(pkt)
	if err != nil || f.EtherType() != eth.TypeIPv4 {
		return nil, nil, false
	}
	ip, err := ipv4.Parse(f.Payload())
	if err != nil || ip.Protocol() != ipv4.ProtoTCP {
		return nil, nil, false
	}
	seg, err := tcp.Parse(ip.Payload())
	if err != nil {
		return nil, nil, false
	}
	return ip, seg, true
}

func packetSocket(t testing.TB, ns string, idx int) int {
	t.Helper()
	var fd int
	netnstest.Do(t, ns, func() {
		var err error
		fd, err = unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, int(htons(unix.ETH_P_ALL)))
		if err != nil {
			t.Fatal(err)
		}
		if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: idx}); err != nil {
			t.Fatal(err)
		}
		unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, 8<<20)
		unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Usec: 200_000})
	})
	t.Cleanup(func() { unix.Close(fd) })
	return fd
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// peerRecv passes the TCP segments the peer receives on packet socket pfd
// (its own transmissions skipped) to done, kicking s while none arrive,
// until done returns true (peerRecv then does) or 5 seconds passed.
func peerRecv(t testing.TB, pfd int, s *Socket, buf []byte, done func(tcp.Header) bool) bool {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); {
		n, from, err := unix.Recvfrom(pfd, buf, 0)
		if err == unix.EAGAIN || err == unix.EINTR {
			s.Kick()
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if ll, ok := from.(*unix.SockaddrLinklayer); ok && ll.Pkttype == unix.PACKET_OUTGOING {
			continue
		}
		if _, seg, ok := parseTCP(buf[:n]); ok && done(seg) {
			return true
		}
	}
	return false
}

// dialIn dials addr from namespace ns on its own goroutine.
func dialIn(ns, addr string) <-chan error {
	ch := make(chan error, 1)
	go func() {
		ch <- netns.Do(ns, func() error {
			c, err := net.DialTimeout("tcp", addr, 5*time.Second)
			if err == nil {
				c.Close()
			}
			return err
		})
	}()
	return ch
}

// TestIntegrationHandshake: a kernel TCP connect from the peer namespace
// to a steered port reaches our socket as a SYN; a SYN-ACK we transmit
// through the TX ring completes the peer's connect (the kernel's TCP is the
// oracle for our frame), and its ACK arrives on RX too.
func TestIntegrationHandshake(t *testing.T) {
	r := newRig(t, 1, bpf.ModeAuto, SocketOptions{RXSize: 64, TXSize: 64})
	if r.att.Mode != bpf.ModeGeneric {
		t.Errorf("auto mode on veth chose %v, want generic", r.att.Mode)
	}
	dialed := dialIn(r.pair.NSB, net.JoinHostPort(net.IP(ipA[:]).String(), strconv.Itoa(steeredPort)))

	var synSeq uint32
	var sport uint16
	r.receive(t, 1, 5*time.Second, func(q int, pkt []byte) bool {
		ip, seg, ok := parseTCP(pkt)
		if !ok || seg.DstPort() != steeredPort || seg.Flags() != tcp.FlagSYN || ip.Src() != ipB {
			return false
		}
		synSeq, sport = uint32(seg.Seq()), seg.SrcPort()
		return true
	})

	s := r.socks[0]
	const iss = 0x10203040
	tx := r.batch[:1]
	if s.Alloc(tx) != 1 {
		t.Fatal("no free frame")
	}
	tx[0].Len = uint32(putTCP(t, s.Frame(tx[0]), macA, macB, ipA, ipB, steeredPort, sport, iss, synSeq+1, tcp.FlagSYN|tcp.FlagACK, nil))
	if s.Transmit(tx) != 1 {
		t.Fatal("TX ring full")
	}
	select {
	case err := <-dialed:
		if err != nil {
			t.Fatalf("peer connect: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("peer connect did not complete after our SYN-ACK")
	}
	r.receive(t, 1, 5*time.Second, func(q int, pkt []byte) bool {
		_, seg, ok := parseTCP(pkt)
		return ok && seg.DstPort() == steeredPort && seg.Flags()&tcp.FlagACK != 0 && uint32(seg.Ack()) == iss+1
	})
	if waitComplete(s, 1) != 1 {
		t.Error("transmitted frame never completed")
	}
	st, err := s.Stats()
	if err != nil {
		t.Fatal(err)
	}
	// With a socket in the XSKMAP the program redirects (BPF_PROG_TEST_RUN
	// on queue 0; the test run does not deliver the frame).
	probe := make([]byte, 128)
	pn := putTCP(t, probe, macB, macA, ipB, ipA, 1234, steeredPort, 1, 0, tcp.FlagACK, nil)
	if act, _, err := r.prog.Run(probe[:pn], nil); err != nil || act != bpf.Redirect {
		t.Errorf("test run of a steered frame: %v, %v; want XDP_REDIRECT", act, err)
	}
	c, err := r.prog.Counters()
	if err != nil {
		t.Fatal(err)
	}
	if c.Redirected < 3 {
		t.Errorf("program counters %+v: want at least SYN, ACK and the test run redirected", c)
	}
	t.Logf("socket stats %+v; program counters %+v", st, c)
}

// waitComplete collects up to n completions within a second.
func waitComplete(s *Socket, n int) int {
	done := 0
	for deadline := time.Now().Add(time.Second); done < n && time.Now().Before(deadline); {
		if c := s.Complete(); c > 0 {
			done += c
			continue
		}
		s.Kick()
		time.Sleep(100 * time.Microsecond)
	}
	return done
}

// TestIntegrationKernelTCP: while the program is attached, kernel TCP to
// a port that is not steered works both ways, and ARP/other frames pass.
func TestIntegrationKernelTCP(t *testing.T) {
	r := newRig(t, 1, bpf.ModeAuto, SocketOptions{})
	addr := netnstest.Serve(t, r.pair.NSA, net.JoinHostPort(net.IP(ipA[:]).String(), strconv.Itoa(kernelPort)), true)
	before, _ := r.prog.Counters()
	msg := make([]byte, 1<<20)
	for i := range msg {
		msg[i] = byte(i * 7)
	}
	errc := make(chan error, 1)
	go func() {
		var c net.Conn
		if err := netns.Do(r.pair.NSB, func() (err error) {
			c, err = net.DialTimeout("tcp", addr, 5*time.Second)
			return err
		}); err != nil {
			errc <- err
			return
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		go c.Write(msg)
		back := make([]byte, len(msg))
		if _, err := io.ReadFull(c, back); err != nil {
			errc <- err
			return
		}
		if string(back) != string(msg) {
			errc <- fmt.Errorf("echo differs")
			return
		}
		errc <- nil
	}()
	if err := <-errc; err != nil {
		t.Fatalf("kernel TCP through the attached veth: %v", err)
	}
	after, _ := r.prog.Counters()
	if after.Passed <= before.Passed || after.Redirected != before.Redirected {
		t.Errorf("counters before %+v after %+v: want passed frames and nothing redirected", before, after)
	}
}

// TestIntegrationManyFrames sends thousands of frames each way through
// small rings (64 entries: the indices wrap the rings many times), over two
// queues sharing one UMEM when the veth has them.
func TestIntegrationManyFrames(t *testing.T) {
	for _, mode := range []bpf.Mode{bpf.ModeGeneric, bpf.ModeNative} {
		t.Run(mode.String(), func(t *testing.T) { testManyFrames(t, mode) })
	}
}

func testManyFrames(t *testing.T, mode bpf.Mode) {
	r := newRig(t, 2, mode, SocketOptions{RXSize: 64, TXSize: 64, FillSize: 64, CompletionSize: 64, Frames: 192})
	if !r.socks[1].SharedUMEM() || r.socks[0].SharedUMEM() {
		t.Fatalf("second socket should share the first one's UMEM")
	}
	pfd := packetSocket(t, r.pair.NSB, r.idxB)
	const total, burst = 4000, 32
	frame := make([]byte, 128)
	t.Run("rx", func(t *testing.T) {
		next := uint64(0)
		perQueue := make([]int, len(r.socks))
		for sent := 0; sent < total; sent += burst {
			for i := range burst {
				var payload [8]byte
				binary.BigEndian.PutUint64(payload[:], uint64(sent+i))
				// Source ports vary so the peer spreads frames over its
				// TX queues (and so over our RX queues where veth maps
				// them).
				n := putTCP(t, frame, macB, macA, ipB, ipA, uint16(20000+(sent+i)%64), steeredPort, uint32(sent+i), 0, tcp.FlagACK, payload[:])
				if err := unix.Sendto(pfd, frame[:n], 0, &unix.SockaddrLinklayer{Ifindex: r.idxB, Halen: 6, Addr: [8]byte{macA[0], macA[1], macA[2], macA[3], macA[4], macA[5]}}); err != nil {
					t.Fatal(err)
				}
			}
			seen := map[uint64]bool{}
			q := r.receive(t, burst, 5*time.Second, func(q int, pkt []byte) bool {
				_, seg, ok := parseTCP(pkt)
				if !ok || seg.DstPort() != steeredPort || len(seg.Payload()) != 8 {
					return false
				}
				v := binary.BigEndian.Uint64(seg.Payload())
				if v < uint64(sent) || v >= uint64(sent+burst) || seen[v] {
					t.Fatalf("unexpected frame %d in burst at %d", v, sent)
				}
				seen[v] = true
				return true
			})
			for i := range q {
				perQueue[i] += q[i]
			}
			next += burst
		}
		for _, s := range r.socks {
			if st, err := s.Stats(); err != nil {
				t.Fatal(err)
			} else if st.RXRingFull+st.RXDropped+st.RXInvalidDescs != 0 {
				t.Errorf("queue %d drops: %+v", s.Queue(), st)
			}
		}
		t.Logf("received %d frames, per queue %v", next, perQueue)
		// Native XDP on veth sees the peer's TX queue as the RX queue, so
		// the peer's flow hashing spreads the frames. Generic XDP on veth
		// does not record an RX queue: everything arrives on queue 0.
		if mode == bpf.ModeNative && slices.Contains(perQueue, 0) {
			t.Errorf("native mode: a queue received nothing: %v", perQueue)
		}
		if c, err := r.prog.Counters(); err != nil || c.Redirected < total {
			t.Errorf("program counters %+v, %v: want %d redirected", c, err, total)
		}
	})
	t.Run("tx", func(t *testing.T) {
		buf := make([]byte, 2048)
		got := 0
		for sent := 0; sent < total; sent += burst {
			s := r.socks[(sent/burst)%len(r.socks)] // alternate queues
			tx := r.batch[:burst]
			for s.Alloc(tx) < burst {
				t.Fatal("pool ran dry")
			}
			for i := range tx {
				var payload [8]byte
				binary.BigEndian.PutUint64(payload[:], uint64(sent+i))
				tx[i].Len = uint32(putTCP(t, s.Frame(tx[i]), macA, macB, ipA, ipB, steeredPort, 9, uint32(sent+i), 0, tcp.FlagRST, payload[:]))
			}
			if n := s.Transmit(tx); n != burst {
				t.Fatalf("TX ring took %d of %d", n, burst)
			}
			seen := 0
			peerRecv(t, pfd, s, buf, func(seg tcp.Header) bool {
				if seg.SrcPort() != steeredPort || seg.DstPort() != 9 {
					return false
				}
				if v := binary.BigEndian.Uint64(seg.Payload()); v != uint64(sent+seen) {
					t.Fatalf("peer got frame %d, want %d", v, sent+seen)
				}
				seen++
				return seen == burst
			})
			got += seen
			if seen < burst {
				t.Fatalf("peer received %d of burst at %d", seen, sent)
			}
			if c := waitComplete(s, burst); c != burst {
				t.Fatalf("%d of %d frames completed", c, burst)
			}
		}
		t.Logf("peer received %d frames", got)
	})
}

// TestIntegrationJumbo exchanges a 9000-byte-MTU frame, spanning several
// 4096-byte chunks, each way with multi-buffer (XDP_USE_SG) sockets.
func TestIntegrationJumbo(t *testing.T) {
	r := newRig(t, 1, bpf.ModeAuto, SocketOptions{MultiBuffer: true})
	s := r.socks[0]
	if !s.MultiBuffer() {
		require.Unavailable(t, "the kernel refused XDP_USE_SG: multi-buffer AF_XDP needs Linux 6.6 or later")
	}
	netnstest.IP(t, "-n", r.pair.NSA, "link", "set", r.pair.DevA, "mtu", "9000")
	netnstest.IP(t, "-n", r.pair.NSB, "link", "set", r.pair.DevB, "mtu", "9000")
	pfd := packetSocket(t, r.pair.NSB, r.idxB)
	payload := make([]byte, 8000)
	for i := range payload {
		payload[i] = byte(i*13 + 1)
	}
	frame := make([]byte, 9100)
	n := putTCP(t, frame, macB, macA, ipB, ipA, 30000, steeredPort, 1, 0, tcp.FlagACK, payload)
	if err := unix.Sendto(pfd, frame[:n], 0, &unix.SockaddrLinklayer{Ifindex: r.idxB, Halen: 6}); err != nil {
		t.Fatal(err)
	}
	r.receive(t, 1, 5*time.Second, func(q int, pkt []byte) bool {
		_, seg, ok := parseTCP(pkt)
		if !ok || seg.DstPort() != steeredPort {
			return false
		}
		if string(seg.Payload()) != string(payload) {
			t.Fatalf("jumbo payload differs (%d bytes received)", len(seg.Payload()))
		}
		return true
	})

	// TX: the same frame as a run of descriptors.
	n = putTCP(t, frame, macA, macB, ipA, ipB, steeredPort, 9, 2, 0, tcp.FlagRST, payload)
	descs := r.batch[:(n+4095)/4096]
	if s.Alloc(descs) != len(descs) {
		t.Fatal("pool ran dry")
	}
	rest := frame[:n]
	for i := range descs {
		k := copy(s.Frame(descs[i]), rest)
		rest = rest[k:]
		descs[i].Len = uint32(k)
		if len(rest) > 0 {
			descs[i].Options = OptMore
		}
	}
	if s.Transmit(descs) != len(descs) {
		t.Fatal("TX ring full")
	}
	if peerRecv(t, pfd, s, make([]byte, 10000), func(seg tcp.Header) bool {
		if seg.DstPort() != 9 {
			return false
		}
		if string(seg.Payload()) != string(payload) {
			t.Fatalf("peer got a %d-byte jumbo payload that differs", len(seg.Payload()))
		}
		return true
	}) {
		return
	}
	st, _ := s.Stats()
	t.Fatalf("peer never received the multi-buffer frame; stats %+v", st)
}

// TestIntegrationTXRetry: a kick that finds the kernel unable to take the
// TX ring (here: the completion ring is full because nobody collected it)
// leaves the frames queued and counts TXBusy; once completions are
// collected, Retry sends the rest without any new Transmit.
func TestIntegrationTXRetry(t *testing.T) {
	r := newRig(t, 1, bpf.ModeAuto, SocketOptions{RXSize: 64, TXSize: 64, FillSize: 64, CompletionSize: 8, Frames: 192})
	s := r.socks[0]
	const n = 32
	tx := make([]Desc, n)
	if got := s.Alloc(tx); got != n {
		t.Fatalf("Alloc: %d frames, want %d", got, n)
	}
	for i := range tx {
		tx[i].Len = uint32(putTCP(t, s.Frame(tx[i]), macA, macB, ipA, ipB, steeredPort, 40000, uint32(i), 0, tcp.FlagACK, nil))
	}
	if m := s.Transmit(tx); m != n {
		t.Fatalf("Transmit took %d, want %d", m, n)
	}
	queued := s.TXQueued()
	st, _ := s.Stats()
	t.Logf("after Transmit: %d queued, stats %+v", queued, st)
	if queued == 0 || st.TXBusy == 0 {
		t.Fatalf("the kernel took all %d frames with an 8-entry completion ring (queued %d, TXBusy %d)", n, queued, st.TXBusy)
	}
	// Nothing retries by itself: the frames wait on the ring.
	time.Sleep(20 * time.Millisecond)
	if q := s.TXQueued(); q != queued {
		t.Fatalf("queued went from %d to %d without a kick", queued, q)
	}
	done := 0
	for deadline := time.Now().Add(2 * time.Second); done < n && time.Now().Before(deadline); {
		done += s.Complete()
		s.Retry()
	}
	if done != n || s.TXQueued() != 0 {
		t.Fatalf("completed %d of %d, %d still queued", done, n, s.TXQueued())
	}
}

// TestIntegrationReopenQueue: a queue whose socket was just closed (as when
// its process exits) binds again at once: the kernel releases the old
// socket's buffer pool in deferred work, answering EBUSY until then, and
// Open waits that out. 30 close-and-reopen cycles, each on a new UMEM.
func TestIntegrationReopenQueue(t *testing.T) {
	r := newRig(t, 1, bpf.ModeAuto, SocketOptions{})
	netnstest.Do(t, r.pair.NSA, func() {
		s, u := r.socks[0], r.umem
		for i := range 30 {
			s.Close()
			u.Close()
			var err error
			if u, err = NewUMEM(UMEMOptions{Frames: 2048}); err != nil {
				t.Fatal(err)
			}
			if s, err = u.Open(r.idxA, 0, SocketOptions{}); err != nil {
				u.Close()
				t.Fatalf("cycle %d: %v", i, err)
			}
		}
		s.Close()
		u.Close()
	})
}
