package datapath

import (
	"xrnic/afxdp"
)

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
type xskLink struct {
	sock     *afxdp.Socket
	base     []byte // the whole UMEM, for frame addresses
	rxd      []afxdp.Desc
	txd      []afxdp.Desc
	freed    []afxdp.Desc
	reserve  int // chunks kept out of the fill ring for transmission
	inRun    bool
	rxCount  int // frames received since the last check
	mtuDrop  uint64
	fragDrop uint64
}

func newXSKLink(s *afxdp.Socket, base []byte, reserve int) *xskLink {
	return &xskLink{sock: s, base: base, rxd: make([]afxdp.Desc, 256), txd: make([]afxdp.Desc, 256),
		freed: make([]afxdp.Desc, 0, 4096), reserve: reserve}
}

// RecvBatch implements tcpstack.Link.
func (k *xskLink) RecvBatch(frames [][]byte) int {
	n := k.sock.Receive(k.rxd[:min(len(frames), len(k.rxd))])
	j := 0
	for _, d := range k.rxd[:n] {
		if d.More() || k.inRun {
			// A multi-buffer packet (the socket is single-buffer, so
			// this does not happen): drop the whole run.
			k.inRun = d.More()
			k.freed = append(k.freed, d)
			k.fragDrop++
			continue
		}
		frames[j] = k.sock.Frame(d)
		j++
	}
	k.rxCount += j
	return j
}

// Release implements tcpstack.Link.
func (k *xskLink) Release(frame []byte) {
	k.freed = append(k.freed, afxdp.Desc{Addr: frameAddr(k.base, frame)})
}

// SendBatch implements tcpstack.Link.
func (k *xskLink) SendBatch(frames [][]byte) int {
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
}
