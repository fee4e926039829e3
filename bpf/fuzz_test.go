//go:build linux

package bpf

import (
	"encoding/binary"
	"testing"
)

// reference is a Go model of xdp.c's classification, written from the
// package documentation: the fuzz target checks the program against it.
func reference(b []byte) verdict {
	be := binary.BigEndian
	if len(b) < 14 {
		return vMalformed
	}
	et, off := be.Uint16(b[12:]), 14
	if et == 0x8100 {
		if len(b) < 18 {
			return vMalformed
		}
		et, off = be.Uint16(b[16:]), 18
	}
	if et != 0x0800 {
		return vPassed
	}
	if len(b) < off+20 || b[off]>>4 != 4 {
		return vMalformed
	}
	ihl := int(b[off]&0x0f) * 4
	tot := int(be.Uint16(b[off+2:]))
	if ihl < 20 || tot < ihl {
		return vMalformed
	}
	if be.Uint16(b[off+6:])&0x3fff != 0 || b[off+9] != 6 {
		return vPassed
	}
	t := off + ihl
	if len(b) < t+20 {
		return vMalformed
	}
	doff := int(b[t+12]>>4) * 4
	if doff < 20 || tot < ihl+doff || len(b) < t+doff {
		return vMalformed
	}
	dport, sport := be.Uint16(b[t+2:]), be.Uint16(b[t:])
	if dport == listenPort {
		return vNoSocket
	}
	if [4]byte(b[off+16:off+20]) == localIP && [4]byte(b[off+12:off+16]) == remoteIP && dport == flowLocal && sport == flowRemote {
		return vNoSocket
	}
	return vPassed
}

// FuzzRun runs the XDP program on arbitrary frames (BPF_PROG_TEST_RUN,
// root) and compares its verdict and counters with the reference model.
func FuzzRun(f *testing.F) {
	flow := tcpTo(flowLocal)
	flow.sport = flowRemote
	vlan := tcpTo(listenPort)
	vlan.vlan = true
	opts := tcpTo(listenPort)
	opts.ihl, opts.doff = 7, 9
	for _, s := range []frameSpec{tcpTo(listenPort), flow, vlan, opts, tcpTo(22), {etherType: 0x0806}} {
		f.Add(s.build())
	}
	p := load(f)
	steer(f, p)
	f.Fuzz(func(t *testing.T, frame []byte) {
		if len(frame) < 14 || len(frame) > 4000 {
			return // test run refuses less than an Ethernet header; keep inside a page
		}
		before, err := p.Counters()
		if err != nil {
			t.Fatal(err)
		}
		act, out, err := p.Run(frame, nil)
		if err != nil {
			t.Fatal(err)
		}
		want := reference(frame)
		if got := p.delta(t, before); act != Pass || got != wantOne(want) || string(out) != string(frame) {
			t.Fatalf("frame %x: %v %+v, want XDP_PASS %+v unchanged", frame, act, got, wantOne(want))
		}
	})
}
