//go:build linux

package bpf

import (
	"encoding/binary"
	"errors"
	"io"
	"testing"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"xrnic/internal/require"
)

// load loads a fresh program or skips (fails under CI: package require)
// when the test is unprivileged.
func load(t testing.TB) *Program {
	t.Helper()
	require.Root(t, "load an XDP program and run it with BPF_PROG_TEST_RUN")
	return mustLoad(t, func() (*Program, error) { return Load(Options{}) })
}

// mustLoad loads with load, skips (fails under CI) when the kernel refuses
// BPF programs to this process, and closes what it loaded when the test
// ends.
func mustLoad[T io.Closer](t testing.TB, load func() (T, error)) T {
	t.Helper()
	x, err := load()
	if errors.Is(err, unix.EPERM) {
		require.Unavailable(t, "cannot load BPF programs here (run as root on a kernel with BPF and without a lockdown or seccomp filter refusing bpf()): %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { x.Close() })
	return x
}

var (
	localIP  = [4]byte{198, 18, 0, 1}
	remoteIP = [4]byte{198, 18, 0, 2}
)

const (
	listenPort = 4791
	flowLocal  = 40000
	flowRemote = 50000
)

// frameSpec describes a crafted frame; build encodes it independently of
// wire/ (a second, simpler encoder as oracle for the C parser).
type frameSpec struct {
	vlan      bool
	qinq      bool
	etherType uint16 // 0: IPv4
	version   uint8  // 0: 4
	ihl       uint8  // in words; 0: 5
	totLen    int    // -1: computed
	fragOff   uint16 // flags+offset field
	proto     uint8  // 0: TCP
	src, dst  [4]byte
	sport     uint16
	dport     uint16
	doff      uint8 // in words; 0: 5
	payload   int
}

func tcpTo(dport uint16) frameSpec {
	return frameSpec{totLen: -1, src: remoteIP, dst: localIP, sport: 12345, dport: dport, payload: 16}
}

func (s frameSpec) build() []byte {
	b := make([]byte, 0, 256)
	b = append(b, 2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2) // dst, src MAC
	if s.qinq {
		b = binary.BigEndian.AppendUint16(b, 0x88a8)
		b = binary.BigEndian.AppendUint16(b, 7)
	}
	if s.vlan {
		b = binary.BigEndian.AppendUint16(b, 0x8100)
		b = binary.BigEndian.AppendUint16(b, 42)
	}
	et := s.etherType
	if et == 0 {
		et = 0x0800
	}
	b = binary.BigEndian.AppendUint16(b, et)
	if et != 0x0800 {
		return append(b, make([]byte, 46)...)
	}
	ver, ihl, doff, proto := s.version, s.ihl, s.doff, s.proto
	if ver == 0 {
		ver = 4
	}
	if ihl == 0 {
		ihl = 5
	}
	if doff == 0 {
		doff = 5
	}
	if proto == 0 {
		proto = unix.IPPROTO_TCP
	}
	hlen := int(ihl) * 4
	if hlen < 20 {
		hlen = 20 // the fixed header is always present in our frames
	}
	tlen := int(doff) * 4
	if tlen < 20 {
		tlen = 20
	}
	tot := s.totLen
	if tot < 0 {
		tot = hlen + tlen + s.payload
	}
	ip := len(b)
	b = append(b, ver<<4|ihl, 0)
	b = binary.BigEndian.AppendUint16(b, uint16(tot))
	b = append(b, 0, 1)
	b = binary.BigEndian.AppendUint16(b, s.fragOff)
	b = append(b, 64, proto, 0, 0)
	b = append(b, s.src[:]...)
	b = append(b, s.dst[:]...)
	for len(b) < ip+hlen {
		b = append(b, 1) // NOP-ish option bytes
	}
	b = binary.BigEndian.AppendUint16(b, s.sport)
	b = binary.BigEndian.AppendUint16(b, s.dport)
	b = append(b, 0, 0, 0, 1, 0, 0, 0, 0, doff<<4, 0x18, 0xff, 0xff, 0, 0, 0, 0)
	for i := 20; i < tlen; i++ {
		b = append(b, 1) // TCP NOP options
	}
	for i := range s.payload {
		b = append(b, byte(0xa0+i))
	}
	return b
}

type verdict int

const (
	vPassed verdict = iota
	vMalformed
	vNoSocket
	vDropped
)

func (p *Program) delta(t *testing.T, before Counters) Counters {
	t.Helper()
	after, err := p.Counters()
	if err != nil {
		t.Fatal(err)
	}
	return Counters{
		Redirected:     after.Redirected - before.Redirected,
		Passed:         after.Passed - before.Passed,
		Malformed:      after.Malformed - before.Malformed,
		NoSocket:       after.NoSocket - before.NoSocket,
		FaultDropped:   after.FaultDropped - before.FaultDropped,
		FaultCorrupted: after.FaultCorrupted - before.FaultCorrupted,
	}
}

func wantOne(v verdict) Counters {
	switch v {
	case vPassed:
		return Counters{Passed: 1}
	case vMalformed:
		return Counters{Malformed: 1}
	case vNoSocket:
		return Counters{NoSocket: 1}
	default:
		return Counters{FaultDropped: 1}
	}
}

func steer(t testing.TB, p *Program) {
	t.Helper()
	if err := p.AddListen(listenPort); err != nil {
		t.Fatal(err)
	}
	if err := p.AddFlow(Flow{LocalIP: localIP, RemoteIP: remoteIP, LocalPort: flowLocal, RemotePort: flowRemote}); err != nil {
		t.Fatal(err)
	}
}

func TestRunVerdicts(t *testing.T) {
	p := load(t)
	steer(t, p)

	flow := tcpTo(flowLocal)
	flow.sport = flowRemote
	reversed := flow
	reversed.src, reversed.dst = flow.dst, flow.src
	otherPeer := flow
	otherPeer.src = [4]byte{198, 19, 0, 9}
	withOpts := tcpTo(listenPort)
	withOpts.ihl, withOpts.doff = 15, 15
	vlan := tcpTo(listenPort)
	vlan.vlan = true
	qinq := vlan
	qinq.qinq = true
	udp := tcpTo(listenPort)
	udp.proto = unix.IPPROTO_UDP
	mf := tcpTo(listenPort)
	mf.fragOff = 0x2000
	fragOff := tcpTo(listenPort)
	fragOff.fragOff = 0x0001
	df := tcpTo(listenPort)
	df.fragOff = 0x4000 // DF alone is not a fragment
	arp := frameSpec{etherType: 0x0806}
	ipv6 := frameSpec{etherType: 0x86dd}
	badVer := tcpTo(listenPort)
	badVer.version = 6
	smallIHL := tcpTo(listenPort)
	smallIHL.ihl = 4
	totBelowIHL := tcpTo(listenPort)
	totBelowIHL.totLen = 19
	totBelowTCP := tcpTo(listenPort)
	totBelowTCP.totLen = 39
	smallDoff := tcpTo(listenPort)
	smallDoff.doff = 4
	noPayload := tcpTo(listenPort)
	noPayload.payload = 0
	ssh := tcpTo(22)

	tests := []struct {
		name string
		spec frameSpec
		want verdict
	}{
		{"listen hit", tcpTo(listenPort), vNoSocket},
		{"listen hit no payload", noPayload, vNoSocket},
		{"flow hit", flow, vNoSocket},
		{"flow reversed", reversed, vPassed},
		{"flow other peer", otherPeer, vPassed},
		{"miss ssh", ssh, vPassed},
		{"ip and tcp options", withOpts, vNoSocket},
		{"vlan", vlan, vNoSocket},
		{"qinq", qinq, vPassed},
		{"arp", arp, vPassed},
		{"ipv6", ipv6, vPassed},
		{"udp", udp, vPassed},
		{"fragment MF", mf, vPassed},
		{"fragment offset", fragOff, vPassed},
		{"DF set", df, vNoSocket},
		{"ip version 6 in IPv4 ethertype", badVer, vMalformed},
		{"ihl 4", smallIHL, vMalformed},
		{"total length below ihl", totBelowIHL, vMalformed},
		{"total length below tcp header", totBelowTCP, vMalformed},
		{"tcp data offset 4", smallDoff, vMalformed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before, err := p.Counters()
			if err != nil {
				t.Fatal(err)
			}
			frame := tt.spec.build()
			act, out, err := p.Run(frame, nil)
			if err != nil {
				t.Fatal(err)
			}
			if act != Pass {
				t.Errorf("action %v, want XDP_PASS", act)
			}
			if string(out) != string(frame) {
				t.Errorf("frame modified")
			}
			if got := p.delta(t, before); got != wantOne(tt.want) {
				t.Errorf("counter delta %+v, want %+v", got, wantOne(tt.want))
			}
		})
	}
}

// TestRunTruncated cuts a steered frame at every length between the
// Ethernet header and the end of its TCP header (options included): every
// cut is malformed; the whole headers are steered.
func TestRunTruncated(t *testing.T) {
	p := load(t)
	steer(t, p)
	for _, spec := range []frameSpec{
		func() frameSpec { s := tcpTo(listenPort); s.payload = 0; return s }(),
		func() frameSpec { s := tcpTo(listenPort); s.payload = 0; s.vlan = true; return s }(),
		func() frameSpec { s := tcpTo(listenPort); s.payload = 0; s.ihl, s.doff = 7, 9; return s }(),
	} {
		full := spec.build()
		// BPF_PROG_TEST_RUN refuses XDP input shorter than an Ethernet
		// header, so cuts start at 14 bytes.
		for n := 14; n <= len(full); n++ {
			before, _ := p.Counters()
			act, _, err := p.Run(full[:n], nil)
			if err != nil {
				t.Fatalf("len %d: %v", n, err)
			}
			want := wantOne(vMalformed)
			if n == len(full) {
				want = wantOne(vNoSocket)
			}
			if got := p.delta(t, before); act != Pass || got != want {
				t.Errorf("vlan=%v ihl=%d doff=%d cut at %d/%d: %v %+v, want XDP_PASS %+v",
					spec.vlan, spec.ihl, spec.doff, n, len(full), act, got, want)
			}
		}
	}
}

func TestMapsAddDelete(t *testing.T) {
	p := load(t)
	frame := tcpTo(listenPort).build()
	run := func() Counters {
		before, _ := p.Counters()
		if _, _, err := p.Run(frame, nil); err != nil {
			t.Fatal(err)
		}
		return p.delta(t, before)
	}
	if got := run(); got != wantOne(vPassed) {
		t.Fatalf("before AddListen: %+v", got)
	}
	if err := p.AddListen(listenPort); err != nil {
		t.Fatal(err)
	}
	if got := run(); got != wantOne(vNoSocket) {
		t.Fatalf("after AddListen: %+v", got)
	}
	if err := p.DeleteListen(listenPort); err != nil {
		t.Fatal(err)
	}
	if got := run(); got != wantOne(vPassed) {
		t.Fatalf("after DeleteListen: %+v", got)
	}
	if err := p.DeleteListen(listenPort); !errors.Is(err, ebpf.ErrKeyNotExist) {
		t.Fatalf("second DeleteListen: %v", err)
	}
	f := Flow{LocalIP: localIP, RemoteIP: remoteIP, LocalPort: listenPort, RemotePort: 12345}
	if err := p.AddFlow(f); err != nil {
		t.Fatal(err)
	}
	if got := run(); got != wantOne(vNoSocket) {
		t.Fatalf("after AddFlow: %+v", got)
	}
	if err := p.DeleteFlow(f); err != nil {
		t.Fatal(err)
	}
	if got := run(); got != wantOne(vPassed) {
		t.Fatalf("after DeleteFlow: %+v", got)
	}
	if err := p.DeleteFlow(f); !errors.Is(err, ebpf.ErrKeyNotExist) {
		t.Fatalf("second DeleteFlow: %v", err)
	}
}

func TestFaultInjection(t *testing.T) {
	p := load(t)
	steer(t, p)
	steered := tcpTo(listenPort)
	steered.ihl, steered.doff = 6, 7
	frame := steered.build()
	payloadOff := 14 + 24 + 28
	noPayloadSpec := tcpTo(listenPort)
	noPayloadSpec.payload = 0
	noPayload := append(noPayloadSpec.build(), 0, 0, 0, 0, 0, 0) // Ethernet padding is not payload
	miss := tcpTo(9).build()

	run := func(t *testing.T, f []byte) (Action, []byte, Counters) {
		t.Helper()
		before, _ := p.Counters()
		act, out, err := p.Run(f, nil)
		if err != nil {
			t.Fatal(err)
		}
		return act, out, p.delta(t, before)
	}

	t.Run("off by default", func(t *testing.T) {
		for range 200 {
			act, out, c := run(t, frame)
			if act != Pass || string(out) != string(frame) || c != wantOne(vNoSocket) {
				t.Fatalf("%v %+v", act, c)
			}
		}
	})
	t.Run("drop all", func(t *testing.T) {
		if err := p.SetFault(Fault{DropPPM: 1_000_000}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.SetFault(Fault{}) })
		for range 100 {
			if act, _, c := run(t, frame); act != Drop || c != wantOne(vDropped) {
				t.Fatalf("steered: %v %+v", act, c)
			}
			if act, _, c := run(t, miss); act != Pass || c != wantOne(vPassed) {
				t.Fatalf("not steered: %v %+v", act, c)
			}
		}
	})
	t.Run("corrupt all", func(t *testing.T) {
		if err := p.SetFault(Fault{CorruptPPM: 1_000_000}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.SetFault(Fault{}) })
		seen := map[int]bool{}
		for range 300 {
			act, out, c := run(t, frame)
			if act != Pass || c != (Counters{NoSocket: 1, FaultCorrupted: 1}) {
				t.Fatalf("%v %+v", act, c)
			}
			diff := -1
			for i := range frame {
				if out[i] != frame[i] {
					if diff >= 0 || out[i] != frame[i]^0xff || i < payloadOff {
						t.Fatalf("unexpected change at %d: %#x -> %#x", i, frame[i], out[i])
					}
					diff = i
				}
			}
			if diff < 0 {
				t.Fatal("frame not corrupted")
			}
			seen[diff] = true
		}
		if len(seen) < 8 {
			t.Errorf("corruption hit only %d of 16 payload positions in 300 runs", len(seen))
		}
		// Without payload the TCP checksum is flipped, not the padding.
		act, out, _ := run(t, noPayload)
		csum := 14 + 20 + 17
		for i := range noPayload {
			want := noPayload[i]
			if i == csum {
				want ^= 0xff
			}
			if out[i] != want {
				t.Fatalf("%v: byte %d is %#x, want %#x", act, i, out[i], want)
			}
		}
		if _, out, c := run(t, miss); string(out) != string(miss) || c != wantOne(vPassed) {
			t.Fatalf("not steered frame touched: %+v", c)
		}
	})
	t.Run("half", func(t *testing.T) {
		if err := p.SetFault(Fault{DropPPM: 500_000}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.SetFault(Fault{}) })
		const n = 2000
		before, _ := p.Counters()
		for range n {
			if _, _, err := p.Run(frame, nil); err != nil {
				t.Fatal(err)
			}
		}
		c := p.delta(t, before)
		// Binomial(2000, 0.5): sd 22; ±200 is 9 sd.
		if c.FaultDropped < 800 || c.FaultDropped > 1200 || c.Total() != n {
			t.Errorf("50%% drop: %+v", c)
		}
	})
}

func TestParseMode(t *testing.T) {
	for s, want := range map[string]Mode{"": ModeAuto, "auto": ModeAuto, "Native": ModeNative, "skb": ModeGeneric, "generic": ModeGeneric} {
		if got, err := ParseMode(s); err != nil || got != want {
			t.Errorf("ParseMode(%q) = %v, %v", s, got, err)
		}
		if want != ModeAuto {
			if back, _ := ParseMode(want.String()); back != want {
				t.Errorf("round trip %v", want)
			}
		}
	}
	if _, err := ParseMode("offload"); err == nil {
		t.Error("ParseMode(offload) accepted")
	}
}

func BenchmarkRun(b *testing.B) {
	p := load(b)
	if err := p.AddListen(listenPort); err != nil {
		b.Fatal(err)
	}
	frame := tcpTo(listenPort).build()
	out := make([]byte, len(frame))
	opts := ebpf.RunOptions{Data: frame, DataOut: out, Repeat: uint32(max(b.N, 1))}
	b.ReportAllocs()
	b.ResetTimer()
	if _, err := p.objs.XrnicSteer.Run(&opts); err != nil {
		b.Fatal(err)
	}
}
