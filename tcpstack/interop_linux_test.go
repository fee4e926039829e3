//go:build linux

package tcpstack_test

// Interop with the Linux kernel's TCP (needs root; skips otherwise).
//
// Topology: one network namespace holding a veth pair xa <-> xb. The kernel
// owns xa with 198.18.0.1/24. tcpstack sends and receives raw frames on xb
// through an AF_PACKET socket and uses 198.18.0.2 with xb's MAC; xb has no
// IP address, so the kernel never treats 198.18.0.2 as local and never
// answers our port with RSTs (with forwarding off it drops what arrives on
// xb). A permanent neighbour entry on xa maps 198.18.0.2 to xb's MAC, so no
// ARP is needed. Frames the kernel sends over veth carry partial checksums
// (checksum offload), so the stack runs with AcceptPartialChecksum.

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"xrnic/internal/netns"
	"xrnic/internal/netnstest"
	"xrnic/internal/require"
	"xrnic/tcpstack"
	"xrnic/wire/eth"
	"xrnic/wire/pcap"
)

var (
	kMAC   = eth.MAC{2, 0x78, 0, 0, 0, 1}
	sMAC   = eth.MAC{2, 0x78, 0, 0, 0, 2}
	kAddr  = [4]byte{198, 18, 0, 1}
	sAddr  = [4]byte{198, 18, 0, 2}
	bigLen = interopSize()
)

// setupNetns makes the namespace of the topology above (removing those of
// killed runs first) and returns its name.
func setupNetns(t *testing.T) string {
	t.Helper()
	netnstest.RequireRoot(t, false)
	topo := netnstest.New(t, netns.Options{Prefix: "xrnic-tcp-", Links: []netns.Link{{
		A: netns.End{NS: "k", Dev: "xa", MAC: net.HardwareAddr(kMAC[:]), Addr: netip.PrefixFrom(netip.AddrFrom4(kAddr), 24),
			LimitGSO: true, // no TSO/GSO super-frames towards a raw socket: one MTU frame each
			Neigh:    netip.AddrFrom4(sAddr)},
		B: netns.End{NS: "k", Dev: "xb", MAC: net.HardwareAddr(sMAC[:])},
	}}})
	return topo.NS("k")
}

// pktLink is a tcpstack.Link over an AF_PACKET socket.
type pktLink struct {
	fd   int
	free [][]byte
}

var _ tcpstack.Link = (*pktLink)(nil)

func htons(v uint16) uint16 { return v<<8 | v>>8 }

func openPktLink(t *testing.T, ns string) *pktLink {
	l := &pktLink{}
	err := netns.Do(ns, func() error {
		ifi, err := net.InterfaceByName("xb")
		if err != nil {
			return err
		}
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, int(htons(unix.ETH_P_ALL)))
		if err != nil {
			return err
		}
		if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: ifi.Index}); err != nil {
			unix.Close(fd)
			return err
		}
		unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, 8<<20)
		unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUF, 8<<20)
		l.fd = fd
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(l.fd) })
	return l
}

func (l *pktLink) RecvBatch(frames [][]byte) int {
	n := 0
	for n < len(frames) {
		var b []byte
		if k := len(l.free); k > 0 {
			b = l.free[k-1]
			l.free = l.free[:k-1]
		} else {
			b = make([]byte, 2048)
		}
		m, from, err := unix.Recvfrom(l.fd, b, unix.MSG_DONTWAIT)
		if err != nil {
			l.free = append(l.free, b)
			break
		}
		if sa, ok := from.(*unix.SockaddrLinklayer); ok && sa.Pkttype == unix.PACKET_OUTGOING {
			l.free = append(l.free, b)
			continue // our own transmissions
		}
		frames[n] = b[:m]
		n++
	}
	return n
}

func (l *pktLink) Release(f []byte) { l.free = append(l.free, f[:cap(f)]) }

func (l *pktLink) SendBatch(frames [][]byte) int {
	n := 0
	for _, f := range frames {
		for {
			_, err := unix.Write(l.fd, f)
			if err == unix.EAGAIN || err == unix.ENOBUFS {
				time.Sleep(50 * time.Microsecond)
				continue
			}
			if err == nil {
				n++
			}
			break
		}
	}
	return n
}

func (l *pktLink) wait(d time.Duration) {
	ms := int(d / time.Millisecond)
	if ms > 5 {
		ms = 5
	}
	fds := []unix.PollFd{{Fd: int32(l.fd), Events: unix.POLLIN}}
	unix.Poll(fds, ms)
}

func pat(salt byte, i int) byte { return byte(i*131+i>>9) ^ salt }

// capture writes the first frames the stack sees and sends to a pcap file.
type capture struct {
	w    *pcap.Writer
	f    *os.File
	path string
	left int
}

func newCapture(t *testing.T, name string, frames int) *capture {
	path := filepath.Join(t.TempDir(), name)
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w, err := pcap.NewWriter(f, pcap.WriterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return &capture{w: w, f: f, path: path, left: frames}
}

// finish waits for the kernel side's result, then closes the capture and
// checks it with tshark.
func (c *capture) finish(t *testing.T, st *tcpstack.Stack, kerr <-chan error) {
	t.Helper()
	if err := <-kerr; err != nil {
		t.Fatal(err)
	}
	c.f.Close()
	t.Logf("stats %+v", st.Stats)
	tsharkCheck(t, c.path)
}

// kernelDial connects to addr from the kernel's side of namespace ns.
func kernelDial(ns, addr string) (c net.Conn, err error) {
	err = netns.Do(ns, func() error {
		c, err = net.DialTimeout("tcp4", addr, 10*time.Second)
		return err
	})
	return c, err
}

func (c *capture) tap(frame []byte, out bool) {
	if c.left > 0 {
		c.left--
		c.w.WritePacket(time.Now(), frame)
	}
}

// stackSide runs the tcpstack end: it sends n bytes with salt ours and
// checks n bytes with salt theirs, then closes (FIN) or waits for the
// peer's FIN first.
func runStack(t *testing.T, st *tcpstack.Stack, link *pktLink, getConn func() *tcpstack.Conn, n int, ours, theirs byte, closeFirst bool) {
	var c *tcpstack.Conn
	sent, got := 0, 0
	buf := make([]byte, 64<<10)
	var views [][]byte
	deadline := time.Now().Add(time.Duration(max(60, n>>19)) * time.Second)
	for {
		next := st.Poll()
		if c == nil {
			c = getConn()
		}
		if c != nil && c.Established() {
			for sent < n {
				k := min(len(buf), n-sent)
				for i := 0; i < k; i++ {
					buf[i] = pat(ours, sent+i)
				}
				w, _ := c.Write(buf[:k])
				sent += w
				if w < k {
					break
				}
			}
			views = c.Views(views[:0])
			rel := 0
			for _, v := range views {
				for i, b := range v {
					if b != pat(theirs, got+i) {
						t.Fatalf("byte %d: got %#x want %#x", got+i, b, pat(theirs, got+i))
					}
				}
				got += len(v)
				rel += len(v)
			}
			c.Release(rel)
			if sent == n && (closeFirst || c.EOF()) && c.State() == tcpstack.StateEstablished || sent == n && c.State() == tcpstack.StateCloseWait {
				c.CloseWrite()
			}
			if c.EOF() {
				if c.Err() != nil {
					t.Fatalf("connection error: %v", c.Err())
				}
				if got != n {
					t.Fatalf("got %d bytes, want %d", got, n)
				}
				if c.State() == tcpstack.StateTimeWait || c.State() == tcpstack.StateClosed {
					c.Close()
					st.Flush()
					return
				}
			}
			st.Flush()
		}
		if time.Now().After(deadline) {
			t.Fatalf("timeout: sent %d got %d state %v stats %+v", sent, got, stateOf(c), st.Stats)
		}
		if next > st.Now() {
			link.wait(next - st.Now())
		}
	}
}

func stateOf(c *tcpstack.Conn) string {
	if c == nil {
		return "none"
	}
	return c.State().String()
}

// kernelPeer sends n bytes with salt ours, checks n bytes with salt theirs.
func kernelPeer(conn net.Conn, n int, ours, theirs byte, closeFirst bool) error {
	errc := make(chan error, 2)
	go func() {
		buf := make([]byte, 64<<10)
		for sent := 0; sent < n; {
			k := min(len(buf), n-sent)
			for i := 0; i < k; i++ {
				buf[i] = pat(ours, sent+i)
			}
			if _, err := conn.Write(buf[:k]); err != nil {
				errc <- err
				return
			}
			sent += k
		}
		if closeFirst {
			conn.(*net.TCPConn).CloseWrite()
		}
		errc <- nil
	}()
	h1, h2 := sha256.New(), sha256.New()
	buf := make([]byte, 64<<10)
	got := 0
	for {
		k, err := conn.Read(buf)
		h1.Write(buf[:k])
		for i := 0; i < k; i++ {
			buf[i] = pat(theirs, got+i)
		}
		h2.Write(buf[:k])
		got += k
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("kernel read after %d bytes: %w", got, err)
		}
	}
	if err := <-errc; err != nil {
		return fmt.Errorf("kernel write: %w", err)
	}
	if got != n || string(h1.Sum(nil)) != string(h2.Sum(nil)) {
		return fmt.Errorf("kernel got %d bytes (want %d), checksum match %v", got, n, string(h1.Sum(nil)) == string(h2.Sum(nil)))
	}
	if !closeFirst {
		conn.(*net.TCPConn).CloseWrite()
	}
	return conn.Close()
}

func newStack(t *testing.T, link *pktLink, tap func([]byte, bool)) *tcpstack.Stack {
	st, err := tcpstack.New(tcpstack.Config{Link: link, MAC: sMAC, Addr: sAddr, AcceptPartialChecksum: true, RecvBuffer: 1 << 20, SendSegments: 512, Tap: tap})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func tsharkCheck(t *testing.T, path string) {
	t.Helper()
	if _, err := exec.LookPath("tshark"); err != nil && !require.CI() {
		// The transfer was checked already; only the capture's check is
		// missing, so a developer's run passes (CI fails: require.Tool).
		t.Log("tshark not installed (Debian: apt-get install tshark); capture not checked")
		return
	}
	tshark := require.Tool(t, "tshark", "tshark")
	out, err := exec.Command(tshark, "-r", path, "-o", "tcp.check_checksum:TRUE", "-o", "ip.check_checksum:TRUE",
		"-Y", "_ws.expert.severity >= error || tcp.checksum.status == 0 || ip.checksum.status == 0").Output()
	if err != nil {
		t.Fatalf("tshark: %v", err)
	}
	if s := strings.TrimSpace(string(out)); s != "" {
		lines := strings.Split(s, "\n")
		t.Errorf("tshark flags %d frames, first: %s", len(lines), strings.Join(lines[:min(10, len(lines))], "\n"))
	}
	n, _ := exec.Command(tshark, "-r", path, "-T", "fields", "-e", "frame.number").Output()
	t.Logf("tshark checked %d frames of %s", strings.Count(string(n), "\n"), filepath.Base(path))
}

// TestIntegrationStackClient: tcpstack dials a kernel server; 100 MB each
// way; tcpstack closes first.
func TestIntegrationStackClient(t *testing.T) {
	ns := setupNetns(t)
	link := openPktLink(t, ns)
	var ln net.Listener
	if err := netns.Do(ns, func() (err error) { ln, err = net.Listen("tcp4", "198.18.0.1:5001"); return }); err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	kerr := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			kerr <- err
			return
		}
		kerr <- kernelPeer(c, bigLen, 'k', 's', false)
	}()
	cp := newCapture(t, "client.pcap", 30000)
	st := newStack(t, link, cp.tap)
	m := kMAC
	c, err := st.Dial(kAddr, 5001, tcpstack.DialOptions{RemoteMAC: &m})
	if err != nil {
		t.Fatal(err)
	}
	runStack(t, st, link, func() *tcpstack.Conn { return c }, bigLen, 's', 'k', true)
	cp.finish(t, st, kerr)
}

// TestIntegrationStackServer: a kernel client connects to a tcpstack
// listener; 100 MB each way; the kernel closes first.
func TestIntegrationStackServer(t *testing.T) {
	ns := setupNetns(t)
	link := openPktLink(t, ns)
	cp := newCapture(t, "server.pcap", 30000)
	st := newStack(t, link, cp.tap)
	l, err := st.Listen(5002, tcpstack.ListenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	kerr := make(chan error, 1)
	go func() {
		c, err := kernelDial(ns, "198.18.0.2:5002")
		if err != nil {
			kerr <- err
			return
		}
		kerr <- kernelPeer(c, bigLen, 'K', 'S', true)
	}()
	runStack(t, st, link, l.Accept, bigLen, 'S', 'K', false)
	cp.finish(t, st, kerr)
}

// TestIntegrationReset: tcpstack aborts a connection from a kernel client,
// which must see ECONNRESET; then the kernel aborts (SO_LINGER 0) and the
// stack must report ErrReset.
func TestIntegrationReset(t *testing.T) {
	ns := setupNetns(t)
	link := openPktLink(t, ns)
	st := newStack(t, link, nil)
	l, err := st.Listen(5003, tcpstack.ListenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for round := 0; round < 2; round++ {
		kc := make(chan net.Conn, 1)
		go func() {
			c, _ := kernelDial(ns, "198.18.0.2:5003")
			kc <- c
		}()
		var c *tcpstack.Conn
		for end := time.Now().Add(10 * time.Second); c == nil && time.Now().Before(end); {
			st.Poll()
			c = l.Accept()
			link.wait(time.Millisecond)
		}
		if c == nil {
			t.Fatal("no connection")
		}
		k := <-kc
		if k == nil {
			t.Fatal("kernel dial failed")
		}
		if round == 0 {
			c.Abort()
			k.SetReadDeadline(time.Now().Add(5 * time.Second))
			_, err := k.Read(make([]byte, 10))
			if !errors.Is(err, syscall.ECONNRESET) {
				t.Fatalf("kernel read after our RST: %v, want ECONNRESET", err)
			}
			k.Close()
			continue
		}
		k.(*net.TCPConn).SetLinger(0)
		k.Close()
		for end := time.Now().Add(5 * time.Second); c.State() != tcpstack.StateClosed && time.Now().Before(end); {
			st.Poll()
			link.wait(time.Millisecond)
		}
		if !errors.Is(c.Err(), tcpstack.ErrReset) {
			t.Fatalf("after kernel RST: state %v err %v, want ErrReset", c.State(), c.Err())
		}
		c.Close()
	}
}

// interopSize is 100 MB, or TCPSTACK_INTEROP_BYTES.
func interopSize() int {
	var n int
	if _, err := fmt.Sscan(os.Getenv("TCPSTACK_INTEROP_BYTES"), &n); err == nil && n > 0 {
		return n
	}
	return 100 << 20
}
