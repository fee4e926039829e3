package tcpstack

// FuzzInput drives two stacks joined by a fuzzer-controlled wire. Both
// listen; the fixture establishes a connection A->B and leaves real data
// frames on the wire. The fuzz input is then a program of operations on the
// traffic (deliver, drop, duplicate, reorder, flip bytes with or without
// fixing the checksums, inject raw frames or crafted segments on a live
// 4-tuple), on the applications (write, commit, read, release, close, abort,
// dial) and on time. After every operation the stacks' invariants are
// checked, every frame the stacks transmit must be well formed, and every
// frame lent to a stack must be held by exactly one queue of it. At the end
// everything is closed (or aborted) and the stacks must hold no segment
// buffer, no frame and no connection.

import (
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	"xrnic/tcpstack/sim"
	"xrnic/wire/eth"
	"xrnic/wire/ipv4"
	"xrnic/wire/tcp"
)

const (
	fzMTU      = 600
	fzFrameCap = 2048
	fzPort     = 4791
)

var (
	fzMAC  = [2]eth.MAC{{2, 0, 0, 0, 0, 0xa}, {2, 0, 0, 0, 0, 0xb}}
	fzAddr = [2][4]byte{{10, 0, 0, 1}, {10, 0, 0, 2}}
)

// fzNet is the wire between the two stacks. wire[d] holds frames sent by
// side d and not yet delivered; rx[i] frames delivered to side i and not yet
// taken by its RecvBatch; lent[i] the frames side i holds.
type fzNet struct {
	tb   testing.TB
	wire [2][][]byte
	rx   [2][][]byte
	lent [2]map[*byte]bool
	last [2][]byte // copy of the last TCP frame side d sent: injection template
	free [][]byte
}

type fzLink struct {
	n    *fzNet
	side int
}

func (n *fzNet) get() []byte {
	if k := len(n.free); k > 0 {
		f := n.free[k-1]
		n.free = n.free[:k-1]
		return f
	}
	return make([]byte, fzFrameCap)
}

func (n *fzNet) put(f []byte) { n.free = append(n.free, f[:cap(f)]) }

func (l *fzLink) RecvBatch(frames [][]byte) int {
	n := l.n
	k := copy(frames, n.rx[l.side])
	for _, f := range frames[:k] {
		n.lent[l.side][&f[:1][0]] = true
	}
	n.rx[l.side] = append(n.rx[l.side][:0], n.rx[l.side][k:]...)
	return k
}

func (l *fzLink) Release(f []byte) {
	n := l.n
	if cap(f) == 0 || !n.lent[l.side][&f[:1][0]] {
		n.tb.Fatalf("side %d released a frame it does not hold (double release?)", l.side)
	}
	delete(n.lent[l.side], &f[:1][0])
	n.put(f)
}

func (l *fzLink) SendBatch(frames [][]byte) int {
	n := l.n
	for _, f := range frames {
		checkTxFrame(n.tb, l.side, f)
		c := n.get()[:len(f)]
		copy(c, f)
		n.wire[l.side] = append(n.wire[l.side], c)
		n.last[l.side] = append(n.last[l.side][:0], f...)
	}
	return len(frames)
}

// checkTxFrame asserts that a transmitted frame is well formed.
func checkTxFrame(tb testing.TB, side int, f []byte) {
	ef, err := eth.Parse(f)
	if err != nil || ef.Src() != fzMAC[side] || ef.EtherType() != eth.TypeIPv4 {
		tb.Fatalf("side %d sent a bad Ethernet frame: %v", side, err)
	}
	ip, err := ipv4.Parse(ef.Payload())
	if err != nil || ip.Src() != fzAddr[side] || ip.Protocol() != ipv4.ProtoTCP {
		tb.Fatalf("side %d sent a bad IPv4 packet: %v", side, err)
	}
	if int(ip.TotalLen()) > fzMTU {
		tb.Fatalf("side %d sent %d bytes, MTU %d", side, ip.TotalLen(), fzMTU)
	}
	th, err := tcp.Parse(ip.Payload())
	if err != nil || !th.ChecksumValid(ip.PseudoHeaderSum()) {
		tb.Fatalf("side %d sent a bad TCP segment: %v", side, err)
	}
	var o tcp.Options
	if err := tcp.ParseOptions(th.Options(), &o); err != nil {
		tb.Fatalf("side %d sent bad TCP options: %v", side, err)
	}
	for _, b := range o.SACK[:o.NumSACK] {
		if !b.Left.LessThan(b.Right) {
			tb.Fatalf("side %d sent an empty or inverted SACK block %v", side, b)
		}
	}
}

// fixChecksums recomputes the IPv4 and TCP checksums of f where it parses.
func fixChecksums(f []byte) {
	ef, err := eth.Parse(f)
	if err != nil {
		return
	}
	ip, err := ipv4.ParseNoChecksum(ef.Payload())
	if err != nil {
		return
	}
	ip.UpdateChecksum()
	if ip.Protocol() != ipv4.ProtoTCP || ip.IsFragment() {
		return
	}
	if th, err := tcp.Parse(ip.Payload()); err == nil {
		th.UpdateChecksum(ip.PseudoHeaderSum())
	}
}

type fzReader struct {
	b []byte
	i int
}

func (r *fzReader) done() bool { return r.i >= len(r.b) }

func (r *fzReader) byte() byte {
	if r.i >= len(r.b) {
		return 0
	}
	r.i++
	return r.b[r.i-1]
}

func (r *fzReader) u16() uint16 { return uint16(r.byte())<<8 | uint16(r.byte()) }

func (r *fzReader) take(n int) []byte {
	n = min(n, len(r.b)-r.i)
	p := r.b[r.i : r.i+n]
	r.i += n
	return p
}

type fzWorld struct {
	tb    testing.TB
	clock *sim.Clock
	net   *fzNet
	st    [2]*Stack
	ls    [2]*Listener
	conns [2][]*Conn // connections the application holds, per side
	buf   []byte
}

func newFzWorld(tb testing.TB, variant byte) *fzWorld {
	w := &fzWorld{tb: tb, clock: &sim.Clock{}, buf: make([]byte, 20000)}
	w.net = &fzNet{tb: tb}
	for i := range w.st {
		w.net.lent[i] = make(map[*byte]bool)
		cfg := Config{
			Link: &fzLink{n: w.net, side: i}, Clock: w.clock,
			MAC: fzMAC[i], Addr: fzAddr[i], MTU: fzMTU,
			SendSegments: 16, RecvBuffer: 8192, MaxOOO: 4,
			MaxRTO: 4 * time.Second, TimeWait: 2 * time.Second, FinWait2: 2 * time.Second,
			MaxRetries: 4, SynRetries: 2, Seed: uint64(i + 1),
			DisableSACK:           variant&1 != 0,
			DisableTimestamps:     variant&2 != 0,
			DisableWindowScale:    variant&4 != 0,
			AcceptPartialChecksum: variant&8 != 0,
			NewRenoRecovery:       variant&32 != 0,
		}
		if variant&16 != 0 {
			cfg.RecvBuffer = 1 << 20 // window scaling in use
		}
		if variant&64 != 0 {
			cfg.MaxOOO = 64
		}
		s, err := New(cfg)
		if err != nil {
			tb.Fatal(err)
		}
		s.cookieRand = detRand(uint64(i + 1)) // reproducible cookies (MaxHalfOpen 2 overflows)
		w.st[i] = s
		if w.ls[i], err = s.Listen(fzPort, ListenOptions{Backlog: 2, MaxHalfOpen: 2}); err != nil {
			tb.Fatal(err)
		}
	}
	if _, err := w.dial(0, fzPort, 0); err != nil {
		tb.Fatal(err)
	}
	for i := 0; i < 20 && len(w.conns[1]) == 0; i++ {
		w.deliverAll()
	}
	if len(w.conns[1]) != 1 || !w.conns[0][0].Established() {
		tb.Fatal("fixture: handshake did not complete")
	}
	// Real traffic on the wire for the program to work on: data both ways,
	// both byte stream and iWARP-style segments.
	a, b := w.conns[0][0], w.conns[1][0]
	w.write(a, 3*a.MSS()+100)
	w.commit(b, b.MSS()/2)
	w.commit(b, b.MSS())
	w.poll()
	w.check()
	return w
}

func (w *fzWorld) dial(side int, rport, lport uint16) (*Conn, error) {
	m := fzMAC[1-side]
	c, err := w.st[side].Dial(fzAddr[1-side], rport, DialOptions{RemoteMAC: &m, LocalPort: lport})
	if err == nil {
		w.conns[side] = append(w.conns[side], c)
	}
	return c, err
}

func (w *fzWorld) write(c *Conn, n int) {
	for i := range w.buf[:n] {
		w.buf[i] = byte(i)
	}
	c.Write(w.buf[:n])
}

func (w *fzWorld) commit(c *Conn, n int) {
	b, err := c.Segment()
	if err != nil {
		return
	}
	n = 1 + n%len(b)
	for i := range b[:n] {
		b[i] = byte(i * 7)
	}
	if err := c.Commit(n); err != nil {
		w.tb.Fatalf("Commit(%d) after Segment: %v", n, err)
	}
}

// poll lets both stacks process what was delivered, then accepts.
func (w *fzWorld) poll() {
	for i, s := range w.st {
		s.Poll()
		if w.ls[i] != nil {
			for c := w.ls[i].Accept(); c != nil; c = w.ls[i].Accept() {
				w.conns[i] = append(w.conns[i], c)
			}
		}
	}
}

// deliver moves frame idx of wire d to the receive queue of the other side.
func (w *fzWorld) deliver(d, idx int) {
	q := w.net.wire[d]
	if len(q) == 0 {
		return
	}
	idx %= len(q)
	f := q[idx]
	w.net.wire[d] = append(q[:idx], q[idx+1:]...)
	w.net.rx[1-d] = append(w.net.rx[1-d], f)
}

func (w *fzWorld) deliverAll() {
	w.poll()
	for round := 0; round < 8 && len(w.net.wire[0])+len(w.net.wire[1]) > 0; round++ {
		for d := range w.net.wire {
			for len(w.net.wire[d]) > 0 {
				w.deliver(d, 0)
			}
		}
		w.poll()
	}
}

// conn picks one of side's application connections, or nil.
func (w *fzWorld) conn(side int, k byte) *Conn {
	if len(w.conns[side]) == 0 {
		return nil
	}
	return w.conns[side][int(k)%len(w.conns[side])]
}

func (w *fzWorld) step(r *fzReader) {
	op := r.byte()
	d := int(op>>4) & 1
	n := w.net
	switch op % 16 {
	case 0, 11, 12, 13: // deliver the next frame
		w.deliver(d, 0)
	case 1:
		w.deliverAll()
	case 2: // flip bytes of a frame in flight
		idx, off, x := int(r.byte()), int(r.u16()), r.byte()
		if q := n.wire[d]; len(q) > 0 {
			f := q[idx%len(q)]
			f[off%len(f)] ^= x | 1
			if op&0x20 == 0 {
				fixChecksums(f)
			}
		}
	case 3: // drop
		if q := n.wire[d]; len(q) > 0 {
			idx := int(r.byte()) % len(q)
			n.put(q[idx])
			n.wire[d] = append(q[:idx], q[idx+1:]...)
		}
	case 4: // duplicate
		if q := n.wire[d]; len(q) > 0 {
			f := q[int(r.byte())%len(q)]
			c := n.get()[:len(f)]
			copy(c, f)
			n.wire[d] = append(q, c)
		}
	case 5: // swap two frames
		if q := n.wire[d]; len(q) > 1 {
			i := int(r.byte()) % (len(q) - 1)
			q[i], q[i+1] = q[i+1], q[i]
		}
	case 6: // inject raw bytes: a whole frame, or a TCP segment behind the headers of the last frame
		p := r.take(int(r.byte()))
		f := n.get()[:0]
		if op&0x20 == 0 {
			f = append(f, p...)
		} else if t := n.last[d]; len(t) >= eth.HeaderLen+ipv4.MinHeaderLen {
			f = append(f, t[:eth.HeaderLen+ipv4.MinHeaderLen]...)
			f = append(f, p...)
			ipv4.Header(f[eth.HeaderLen:]).SetTotalLen(uint16(len(f) - eth.HeaderLen))
			fixChecksums(f)
		}
		if len(f) == 0 {
			n.put(f)
			return
		}
		n.wire[d] = append(n.wire[d], f)
	case 7: // a crafted segment on the 4-tuple of the last frame
		t := n.last[d]
		seqD, ackD, sh := int16(r.u16()), int16(r.u16()), r.byte()%20
		flags, wnd, plen := tcp.Flags(r.byte()), r.u16(), int(r.byte())*3
		if len(t) == 0 {
			return
		}
		f := n.get()[:len(t)]
		copy(f, t)
		ip := ipv4.Header(f[eth.HeaderLen:])
		th := tcp.Header(ip[ip.HeaderLen():])
		hl := th.DataOffset()
		f = f[:eth.HeaderLen+ip.HeaderLen()+hl]
		for i := 0; i < plen && len(f) < fzMTU+eth.HeaderLen; i++ {
			f = append(f, byte(i))
		}
		ip = ipv4.Header(f[eth.HeaderLen:])
		ip.SetTotalLen(uint16(len(f) - eth.HeaderLen))
		th = tcp.Header(ip[ip.HeaderLen():])
		th.SetSeq(th.Seq() + tcp.Seq(int32(seqD)<<sh))
		th.SetAck(th.Ack() + tcp.Seq(int32(ackD)<<sh))
		th.SetFlags(flags)
		th.SetWindow(wnd)
		fixChecksums(f)
		n.wire[d] = append(n.wire[d], f)
	case 8: // the application
		c := w.conn(d, r.byte())
		act, arg := r.byte(), int(r.u16())
		if act%8 == 7 {
			rport := uint16(fzPort)
			if act&8 != 0 {
				rport = 5000 + uint16(arg%2)
			}
			w.dial(d, rport, uint16(5000+(arg>>1)%2))
			return
		}
		if c == nil {
			return
		}
		switch act % 8 {
		case 0:
			w.write(c, arg%len(w.buf))
		case 1:
			w.commit(c, arg)
		case 2:
			c.Release(arg)
		case 3:
			c.Read(w.buf[:arg%len(w.buf)])
		case 4:
			c.CloseWrite()
		case 5:
			c.Close()
		case 6:
			c.Abort()
		}
		w.st[d].Flush()
	case 9: // time passes
		w.clock.Advance(time.Duration(1+int(r.byte())) * time.Millisecond << (r.byte() % 8))
	case 10: // to the next timer
		if t := min(w.st[0].timers.next(), w.st[1].timers.next()); t != NoDeadline {
			w.clock.Set(t)
		}
	default: // 14, 15: the applications consume what they received
		for i := range w.conns {
			for _, c := range w.conns[i] {
				c.Release(c.Buffered())
			}
		}
	}
	w.poll()
}

// check asserts the invariants of both stacks.
func (w *fzWorld) check() {
	for i, s := range w.st {
		if err := s.checkInvariants(w.conns[i], len(w.net.lent[i])); err != nil {
			w.tb.Fatalf("side %d: %v", i, err)
		}
	}
}

// finish closes everything and asserts that nothing is left.
func (w *fzWorld) finish() {
	for i := range w.conns {
		for _, c := range w.conns[i] {
			c.Close()
		}
		w.ls[i].Close()
		w.ls[i] = nil
	}
	w.poll()
	w.check()
	for iter := 0; iter < 10000; iter++ {
		w.deliverAll()
		w.check()
		if w.st[0].NumConns()+w.st[1].NumConns() == 0 && len(w.net.wire[0])+len(w.net.wire[1]) == 0 {
			break
		}
		t := min(w.st[0].timers.next(), w.st[1].timers.next())
		if t == NoDeadline || t > w.clock.Now()+time.Hour {
			break
		}
		w.clock.Set(t)
		w.poll()
	}
	// Both applications closed everything and the wire is clean again:
	// every connection must end on its own (FIN handshake, FIN-WAIT-2 and
	// TIME-WAIT timers, retransmission limits).
	for i, s := range w.st {
		for _, c := range s.conns {
			w.tb.Fatalf("side %d: conn %d->%v:%d still %v an hour after close (wrShut %v, sq %d, una %d nxt %d max %d, wnd %d)",
				i, c.key.lport, c.key.raddr, c.key.rport, c.state, c.wrShut, c.sqLen, c.sndUna, c.sndNxt, c.sndMax, c.sndWnd)
		}
	}
	w.poll()
	w.check()
	for i, s := range w.st {
		if s.NumConns() != 0 || len(s.conns) != 0 {
			w.tb.Fatalf("side %d: %d connections left after abort", i, s.NumConns())
		}
		if n := s.SegmentsInUse(); n != 0 {
			w.tb.Fatalf("side %d: %d send segments in use after close", i, n)
		}
		if n := len(w.net.lent[i]); n != 0 {
			w.tb.Fatalf("side %d: %d frames not released after close", i, n)
		}
		if len(s.timers) != 0 {
			w.tb.Fatalf("side %d: %d timers armed after close", i, len(s.timers))
		}
	}
}

// checkInvariants checks the stack's bookkeeping; app are the connections
// the application holds (maybe closed, still holding received frames) and
// lent the number of frames the link lent to the stack.
func (s *Stack) checkInvariants(app []*Conn, lent int) error {
	if s.nconns != len(s.conns) {
		return fmt.Errorf("nconns %d, table %d", s.nconns, len(s.conns))
	}
	all := make(map[*Conn]bool)
	for k, c := range s.conns {
		if c.key != k {
			return fmt.Errorf("conn %v in the table under %v", c.key, k)
		}
		if c.state == StateClosed || c.removed {
			return fmt.Errorf("closed conn %v still in the table", c.key)
		}
		all[c] = true
	}
	for _, c := range app {
		all[c] = true
	}
	held := 0
	halfOpen := make(map[*Listener]int)
	for c := range all {
		if err := c.checkInvariants(); err != nil {
			return fmt.Errorf("conn %d->%v:%d %v: %w", c.key.lport, c.key.raddr, c.key.rport, c.state, err)
		}
		held += c.rdLen + len(c.ooo)
		if c.listener != nil && c.state == StateSynRcvd {
			halfOpen[c.listener]++
		}
	}
	if held != lent {
		return fmt.Errorf("link lent %d frames, connections hold %d", lent, held)
	}
	for _, l := range s.listeners {
		if l.halfOpen != halfOpen[l] {
			return fmt.Errorf("listener %d counts %d half-open, has %d", l.port, l.halfOpen, halfOpen[l])
		}
	}
	for i, c := range s.timers {
		if c.heapIdx != i {
			return fmt.Errorf("timer heap index %d, conn says %d", i, c.heapIdx)
		}
		if c.deadline != min(c.rtoAt, c.delackAt, c.twAt) || c.deadline == NoDeadline {
			return fmt.Errorf("timer heap: deadline %v of rto %v delack %v tw %v", c.deadline, c.rtoAt, c.delackAt, c.twAt)
		}
		if i > 0 && s.timers[(i-1)/2].deadline > c.deadline {
			return fmt.Errorf("timer heap out of order at %d", i)
		}
		if c.state == StateClosed {
			return fmt.Errorf("closed conn in the timer heap")
		}
	}
	return nil
}

func (c *Conn) checkInvariants() error {
	if c.state == StateClosed {
		if c.sqLen != 0 || len(c.ooo) != 0 || c.heapIdx >= 0 {
			return fmt.Errorf("closed but holds %d segments, %d ooo frames, timer %d", c.sqLen, len(c.ooo), c.heapIdx)
		}
		if c.appGone && c.rdLen != 0 {
			return fmt.Errorf("closed and released but holds %d views", c.rdLen)
		}
	} else {
		if c.sndNxt.LessThan(c.sndUna) || c.sndMax.LessThan(c.sndNxt) {
			return fmt.Errorf("SND.UNA %d, SND.NXT %d, SND.MAX %d out of order", c.sndUna, c.sndNxt, c.sndMax)
		}
		if c.sqLen > 0 && c.state >= StateEstablished {
			if g := c.sqAt(0); g.seq.GreaterThan(c.sndUna) || !g.end().GreaterThan(c.sndUna) {
				return fmt.Errorf("send queue head [%d,%d) does not hold SND.UNA %d", g.seq, g.end(), c.sndUna)
			}
		}
		if c.sqEnd().LessThan(c.sndMax) {
			return fmt.Errorf("SND.MAX %d beyond the send queue end %d", c.sndMax, c.sqEnd())
		}
		if c.estab && c.state != StateTimeWait && c.cwnd == 0 {
			return fmt.Errorf("cwnd 0")
		}
	}
	// The ring has one slot more than SendSegments, for the FIN.
	if c.sqLen < 0 || c.sqLen > len(c.sq) || (c.sqLen > 0 && c.sqLen == len(c.sq) && !c.sqAt(c.sqLen-1).fin) {
		return fmt.Errorf("send queue length %d of %d", c.sqLen, len(c.sq))
	}
	for i := 0; i+1 < c.sqLen; i++ {
		if a, b := c.sqAt(i), c.sqAt(i+1); a.end() != b.seq || a.fin {
			return fmt.Errorf("send queue not contiguous at %d: [%d,%d) fin %v then %d", i, a.seq, a.end(), a.fin, b.seq)
		}
	}
	for i := 0; i < c.sqLen; i++ {
		if g := c.sqAt(i); g.n < 0 || g.n > c.sndMSS || (g.n == 0 && !g.fin) {
			return fmt.Errorf("segment %d holds %d bytes (MSS %d)", i, g.n, c.sndMSS)
		}
	}
	if c.rdLen < 0 || c.rdLen > len(c.ready) {
		return fmt.Errorf("ready queue length %d of %d", c.rdLen, len(c.ready))
	}
	n := 0
	for i := 0; i < c.rdLen; i++ {
		v := c.ready[(c.rdHead+i)%len(c.ready)]
		if len(v.data) == 0 || v.frame == nil {
			return fmt.Errorf("empty view %d in the ready queue", i)
		}
		n += len(v.data)
	}
	if n != c.readyBytes {
		return fmt.Errorf("readyBytes %d, views hold %d", c.readyBytes, n)
	}
	n = 0
	for i, e := range c.ooo {
		if len(e.data) == 0 {
			return fmt.Errorf("empty out-of-order entry")
		}
		if i > 0 && !c.ooo[i-1].seq.LessThan(e.seq) {
			return fmt.Errorf("out-of-order queue not sorted at %d: %d then %d (len %d, %d)", i, c.ooo[i-1].seq, e.seq, len(c.ooo[i-1].data), len(e.data))
		}
		n += len(e.data)
	}
	if n != c.oooBytes || len(c.ooo) > cap(c.ooo) {
		return fmt.Errorf("oooBytes %d, entries hold %d", c.oooBytes, n)
	}
	return nil
}

// fzProgram builds a fuzz input from readable parts.
func fzProgram(variant byte, ops ...[]byte) []byte {
	b := []byte{variant}
	for _, o := range ops {
		b = append(b, o...)
	}
	return b
}

func fzSeeds() [][]byte {
	le := func(v uint16) []byte { return binary.BigEndian.AppendUint16(nil, v) }
	cat := func(p ...[]byte) []byte {
		var b []byte
		for _, x := range p {
			b = append(b, x...)
		}
		return b
	}
	deliverAll := []byte{1}
	return [][]byte{
		fzProgram(0, deliverAll),
		// Lose the first data segment: out-of-order queue, SACK, recovery.
		fzProgram(0, []byte{3, 0}, deliverAll, []byte{10}, deliverAll, []byte{14}),
		// Reorder, duplicate, then corrupt with and without checksum fix.
		fzProgram(0, []byte{5, 0, 4, 1}, deliverAll, cat([]byte{2, 1}, le(60), []byte{0x40}), cat([]byte{0x22, 0}, le(50), []byte{1}), deliverAll),
		// Crafted segments: a RST and a SYN in window, then a far seq.
		fzProgram(2, cat([]byte{7}, le(0), le(0), []byte{0, byte(tcp.FlagRST)}, le(1000), []byte{0}), deliverAll,
			cat([]byte{0x17}, le(1), le(0), []byte{0, byte(tcp.FlagSYN)}, le(1000), []byte{0}), deliverAll,
			cat([]byte{7}, le(0x4000), le(0), []byte{8, byte(tcp.FlagACK)}, le(0), []byte{10}), deliverAll),
		// Application churn: write, close, abort, dial a second connection.
		fzProgram(4, []byte{8, 0, 0}, le(5000), deliverAll, []byte{0x18, 0, 5}, le(0), deliverAll,
			[]byte{8, 0, 7}, le(0), deliverAll, []byte{8, 1, 6}, le(0), deliverAll, []byte{9, 200, 5}),
		// Raw frames: garbage, and a TCP segment behind real headers.
		fzProgram(8, []byte{6, 10, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, []byte{0x26, 24, 0x12, 0xb7, 0x13, 0x88, 0, 0, 0, 1, 0, 0, 0, 0, 0x50, 0x02, 0xff, 0xff, 0, 0, 0, 0, 1, 2, 3, 4}, deliverAll),
		// Zero window: the receiver never reads, the sender probes.
		fzProgram(0, []byte{8, 0, 0}, le(19999), deliverAll, []byte{8, 0, 0}, le(19999), deliverAll, []byte{10, 1, 10, 1, 10, 1, 9, 255, 7, 1}),
	}
}

func FuzzInput(f *testing.F) {
	for _, s := range fzSeeds() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) > 4096 {
			return
		}
		r := &fzReader{b: in}
		w := newFzWorld(t, r.byte())
		for ops := 0; !r.done() && ops < 1000; ops++ {
			w.step(r)
			w.check()
		}
		w.finish()
	})
}
