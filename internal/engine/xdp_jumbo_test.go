//go:build linux

package datapath

import (
	"testing"

	"xrnic/bpf"
)

// TestIntegrationXDPJumbo runs the afxdp transport at MTU 9000: frames span
// three UMEM chunks (multi-buffer sockets, XDP_USE_SG) both ways; every
// operation's data is checked, with 1% of the steered frames dropped so
// retransmissions of jumbo frames are exercised too.
func TestIntegrationXDPJumbo(t *testing.T) {
	e := newXDPEnv(t, 9000, false)
	a := e.open(t, e.nsA, e.devA, TransportAFXDP)
	b := e.open(t, e.nsB, e.devB, TransportAFXDP)
	for _, d := range []*Device{a, b} {
		info, _ := d.XDPInfo()
		k := d.xdp.loops[0].q.link
		if !k.sg {
			t.Skipf("no multi-buffer AF_XDP sockets here (MTU capped to %d)", info.MTU)
		}
		if info.MTU != 9000 {
			t.Fatalf("MTU %d, want 9000", info.MTU)
		}
	}
	cs, ss := e.connectN(t, b, e.nsB, a, e.nsA, xdpIPA, 4, 2<<20)
	if m := cs[0].qp.llp.EMSS(); m < 8000 {
		t.Fatalf("EMSS %d: jumbo frames not in use", m)
	}
	xdpExerciseAll(t, cs, ss, 2)
	for _, d := range []*Device{a, b} {
		if err := d.SetXDPFault(bpf.Fault{DropPPM: 10_000}); err != nil {
			t.Fatal(err)
		}
	}
	xdpExerciseAll(t, cs, ss, 2)
	for _, d := range []*Device{a, b} {
		k := d.xdp.loops[0].q.link
		var drops [2]uint64
		d.xdp.loops[0].do(func() { drops = [2]uint64{k.fragDrop, k.mtuDrop} })
		if drops != [2]uint64{} {
			t.Errorf("link dropped frames (fragments, too long): %v", drops)
		}
	}
	for i := range cs {
		cs[i].qp.Close()
		ss[i].qp.Close()
	}
}
