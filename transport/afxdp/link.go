package afxdp

import xsk "xrnic/afxdp"

// xskLink is tcpstack's Link on one AF_XDP socket, owned by the queue's
// poll loop.
//
// RecvBatch takes descriptors from the RX ring and hands out views of the
// frames in the UMEM; the stack keeps a frame until the bytes in it were
// consumed (for in-order payload: until the QP's receive function has
// placed it and the loop released the views) and then calls Release, which
// queues the chunk for the fill ring; flush moves the released chunks to
// the pool and refills the fill ring, once per loop iteration. SendBatch
// copies the stack's frames into free chunks and puts them on the TX ring
// with one Transmit (at most one sendto wakeup per batch).
//
// # Multi-buffer (jumbo) frames
//
// With a multi-buffer socket (XDP_USE_SG, MTUs whose frames do not fit a
// chunk) a received packet is a run of descriptors. The stack wants a
// frame in one piece, so a run is copied into a reassembly buffer (a
// free list of MTU-sized buffers that grows to the working set, so the
// steady state allocates nothing) and its chunks go back to the fill ring
// at once; Release tells such a buffer from a UMEM frame by its address.
// Single-chunk packets stay zero-copy. On transmit a frame longer than a
// chunk is split over several chunks, all but the last marked OptMore,
// and only whole packets are put on the TX ring.
type xskLink struct {
	sock     *xsk.Socket
	base     []byte // the whole UMEM, for frame addresses
	rxd      []xsk.Desc
	txd      []xsk.Desc
	freed    []xsk.Desc
	reserve  int // chunks kept out of the fill ring for transmission
	rxCount  int // frames received since the last check
	txQueued int // frames left on the TX ring by a busy kernel at the last flush
	mtuDrop  uint64
	fragDrop uint64

	// multi-buffer
	sg      bool
	maxLen  int      // largest frame accepted (Ethernet header included)
	chunk   int      // bytes per TX chunk
	big     [][]byte // free reassembly buffers
	cur     []byte   // the run being reassembled (nil: none)
	dropRun bool     // the run being received is dropped

	// lose, when set (tests only), loses the frames it returns true for:
	// received ones before the stack sees them, transmitted ones before
	// they reach the TX ring (counted as sent, as a loss on the wire).
	lose func(frame []byte, tx bool) bool
}

func newXSKLink(s *xsk.Socket, base []byte, reserve, maxLen, chunk int) *xskLink {
	return &xskLink{sock: s, base: base, rxd: make([]xsk.Desc, 256), txd: make([]xsk.Desc, 256),
		freed: make([]xsk.Desc, 0, 4096), reserve: reserve, sg: s.MultiBuffer(), maxLen: maxLen, chunk: chunk}
}

// RecvBatch implements tcpstack.Link.
func (k *xskLink) RecvBatch(frames [][]byte) int {
	n := k.sock.Receive(k.rxd[:min(len(frames), len(k.rxd))])
	j := 0
	for _, d := range k.rxd[:n] {
		if !d.More() && k.cur == nil && !k.dropRun {
			f := k.sock.Frame(d)
			if k.lose != nil && k.lose(f, false) {
				k.freed = append(k.freed, d)
				continue
			}
			frames[j] = f
			j++
			continue
		}
		// Part of a multi-buffer packet: copy it out, free the chunk.
		k.freed = append(k.freed, d)
		if !k.sg || k.dropRun {
			k.dropRun = d.More()
			if !k.dropRun {
				k.fragDrop++
			}
			continue
		}
		if k.cur == nil {
			k.cur = k.bigBuf()
		}
		f := k.sock.Frame(d)
		if len(k.cur)+len(f) > cap(k.cur) {
			k.big = append(k.big, k.cur[:0])
			k.cur = nil
			k.dropRun = d.More()
			if !k.dropRun {
				k.fragDrop++
			}
			continue
		}
		k.cur = append(k.cur, f...)
		if !d.More() {
			frames[j] = k.cur
			j++
			k.cur = nil
		}
	}
	k.rxCount += j
	return j
}

// bigBuf returns an empty reassembly buffer.
func (k *xskLink) bigBuf() []byte {
	if n := len(k.big); n > 0 {
		b := k.big[n-1]
		k.big = k.big[:n-1]
		return b
	}
	return make([]byte, 0, k.maxLen)
}

// Release implements tcpstack.Link.
func (k *xskLink) Release(frame []byte) {
	if k.sg && !inUMEM(k.base, frame) {
		k.big = append(k.big, frame[:0])
		return
	}
	k.freed = append(k.freed, xsk.Desc{Addr: frameAddr(k.base, frame)})
}

// SendBatch implements tcpstack.Link.
func (k *xskLink) SendBatch(frames [][]byte) int {
	lost := 0
	if k.lose != nil {
		j := 0
		for _, f := range frames {
			if !k.lose(f, true) {
				frames[j] = f
				j++
			}
		}
		lost, frames = len(frames)-j, frames[:j]
	}
	if k.sg {
		return lost + k.sendSG(frames)
	}
	sent := 0
	for len(frames) > 0 {
		k.sock.Complete()
		want := min(len(frames), len(k.txd))
		n := k.sock.Alloc(k.txd[:want])
		if n == 0 {
			break
		}
		for i := range n {
			d := &k.txd[i]
			buf := k.sock.Frame(*d)
			f := frames[i]
			if len(f) > len(buf) {
				k.mtuDrop++
				f = f[:0]
			}
			d.Len = uint32(copy(buf, f))
		}
		m := k.sock.Transmit(k.txd[:n])
		if m < n {
			k.sock.Free(k.txd[m:n])
		}
		sent += m
		frames = frames[m:]
		if m < want {
			break
		}
	}
	return lost + sent
}

// sendSG is SendBatch on a multi-buffer socket: frames longer than a chunk
// span several descriptors; only whole packets go on the TX ring.
func (k *xskLink) sendSG(frames [][]byte) int {
	sent := 0
	for len(frames) > 0 {
		k.sock.Complete()
		// Whole packets that fit the descriptors, the pool and the ring.
		room := min(len(k.txd), k.sock.FreeFrames(), k.sock.TXRoom())
		np, nd := 0, 0
		for np < len(frames) {
			c := max(1, (len(frames[np])+k.chunk-1)/k.chunk)
			if len(frames[np]) > k.maxLen {
				c = 1 // dropped: sent empty
			}
			if nd+c > room {
				break
			}
			nd += c
			np++
		}
		if np == 0 {
			break
		}
		n := k.sock.Alloc(k.txd[:nd])
		if n < nd { // cannot happen: FreeFrames was checked
			k.sock.Free(k.txd[:n])
			break
		}
		i := 0
		for _, f := range frames[:np] {
			if len(f) > k.maxLen {
				k.mtuDrop++
				f = f[:0]
			}
			for {
				d := &k.txd[i]
				i++
				c := copy(k.sock.Frame(*d)[:min(k.chunk, int(d.Len))], f)
				d.Len = uint32(c)
				f = f[c:]
				if len(f) == 0 {
					d.Options = 0
					break
				}
				d.Options = xsk.OptMore
			}
		}
		m := k.sock.Transmit(k.txd[:nd])
		if m < nd { // cannot happen: TXRoom was checked
			k.sock.Free(k.txd[m:nd])
		}
		sent += np
		frames = frames[np:]
	}
	return sent
}

// flush returns released chunks to the pool and refills the fill ring.
func (k *xskLink) flush() {
	if len(k.freed) > 0 {
		k.sock.Free(k.freed)
		k.freed = k.freed[:0]
	}
	if f := k.sock.FreeFrames() - k.reserve; f > 0 {
		k.sock.Refill(f)
	}
	k.txQueued = k.sock.Retry()
}
