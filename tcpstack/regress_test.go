package tcpstack

import (
	"testing"
)

// simOpen starts a simultaneous open between ports 6000 (side 0) and 6001
// (side 1) and delivers both SYNs, so both are in SYN-RECEIVED.
func simOpen(t *testing.T, w *fzWorld) (a, b *Conn) {
	t.Helper()
	a, err := w.dial(0, 6001, 6000)
	if err != nil {
		t.Fatal(err)
	}
	b, err = w.dial(1, 6000, 6001)
	if err != nil {
		t.Fatal(err)
	}
	w.deliver(0, len(w.net.wire[0])-1)
	w.deliver(1, len(w.net.wire[1])-1)
	w.poll()
	if a.State() != StateSynRcvd || b.State() != StateSynRcvd {
		t.Fatalf("states %v, %v; want SYN-RECEIVED", a.State(), b.State())
	}
	return a, b
}

// TestSimultaneousOpen: each side's SYN-ACK repeats a SYN the other already
// took; it must still complete the handshake (it used to be dropped as out
// of window until SynRetries ran out), with the unscaled SYN-ACK window.
func TestSimultaneousOpen(t *testing.T) {
	w := newFzWorld(t, 16) // 1 MiB buffers: window scaling in use
	a, b := simOpen(t, w)
	w.deliverAll()
	if a.State() != StateEstablished || b.State() != StateEstablished {
		t.Fatalf("states %v, %v; want ESTABLISHED", a.State(), b.State())
	}
	if a.sndWScale == 0 || a.sndWnd != 65535 {
		t.Fatalf("send window %d (scale %d), want the SYN-ACK's unscaled 65535", a.sndWnd, a.sndWScale)
	}
	w.write(a, 5000)
	w.deliverAll()
	if got := b.Buffered(); got != 5000 {
		t.Fatalf("b received %d bytes, want 5000", got)
	}
	w.finish()
}

// TestCloseWriteInSynRcvd: a FIN queued in SYN-RECEIVED (simultaneous open)
// must move the connection to FIN-WAIT-1 once established (RFC 9293
// §3.10.4), so the close completes; it used to stay ESTABLISHED forever.
func TestCloseWriteInSynRcvd(t *testing.T) {
	w := newFzWorld(t, 0)
	a, b := simOpen(t, w)
	if err := a.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 10; i++ {
		w.deliverAll()
	}
	if !a.Established() || a.State() != StateFinWait2 {
		t.Fatalf("a is %v after the handshake and the peer's ACK of its FIN, want FIN-WAIT-2", a.State())
	}
	if !b.EOF() {
		t.Fatal("b did not see the FIN")
	}
	w.finish()
}

// TestDataAfterClose: data that arrives after Close has no reader; the
// connection resets (RFC 1122 §4.2.2.13) instead of holding the frames
// until the window closes and the peer probes it forever.
func TestDataAfterClose(t *testing.T) {
	w := newFzWorld(t, 0)
	w.deliverAll()
	a, b := w.conns[0][0], w.conns[1][0]
	b.Release(b.Buffered())
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	w.deliverAll()
	if b.State() != StateFinWait2 || a.State() != StateCloseWait {
		t.Fatalf("states %v, %v; want FIN-WAIT-2, CLOSE-WAIT", b.State(), a.State())
	}
	w.write(a, 1000)
	w.deliverAll()
	if b.State() != StateClosed || a.State() != StateClosed {
		t.Fatalf("states %v, %v after data to a closed socket; want both CLOSED", b.State(), a.State())
	}
	if a.Err() != ErrReset {
		t.Fatalf("a.Err() = %v, want ErrReset", a.Err())
	}
	if n := len(w.net.lent[1]); n != 0 {
		t.Fatalf("b holds %d frames", n)
	}
	w.finish()
}
