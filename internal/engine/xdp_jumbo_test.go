//go:build linux

package engine

import (
	"testing"

	"xrnic/bpf"
	"xrnic/internal/require"
)

// TestIntegrationXDPJumbo runs the afxdp transport at MTU 9000: frames span
// three UMEM chunks (multi-buffer sockets, XDP_USE_SG) both ways; every
// operation's data is checked, with 1% of the steered frames dropped so
// retransmissions of jumbo frames are exercised too.
func TestIntegrationXDPJumbo(t *testing.T) {
	e := newXDPEnv(t, 9000, false)
	a := e.open(t, e.nsA, e.devA, trAFXDP)
	b := e.open(t, e.nsB, e.devB, trAFXDP)
	for _, d := range []*Device{a, b} {
		info := xdpOf(d).Info()
		if !info.MultiBuffer {
			require.Unavailable(t, "no multi-buffer AF_XDP sockets here (MTU capped to %d): XDP_USE_SG needs Linux 6.6 or later", info.MTU)
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
		if err := xdpOf(d).SetFault(bpf.Fault{DropPPM: 10_000}); err != nil {
			t.Fatal(err)
		}
	}
	xdpExerciseAll(t, cs, ss, 2)
	for _, d := range []*Device{a, b} {
		frag, long, err := xdpOf(d).LinkDrops()
		if err != nil {
			t.Fatal(err)
		}
		if drops := [2]uint64{frag, long}; drops != [2]uint64{} {
			t.Errorf("link dropped frames (fragments, too long): %v", drops)
		}
	}
	for i := range cs {
		cs[i].qp.Close()
		ss[i].qp.Close()
	}
}
