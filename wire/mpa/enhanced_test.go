package mpa

import (
	"math/rand/v2"
	"testing"

	"xrnic/wire/term"
)

func TestEnhancedBits(t *testing.T) {
	cases := []struct {
		e Enhanced
		v uint32
	}{
		{Enhanced{}, 0},
		{Enhanced{PeerToPeer: true}, 0x80000000},
		{Enhanced{RTR: RTRSend}, 0x40000000},
		{Enhanced{RTR: RTRWrite}, 0x00008000},
		{Enhanced{RTR: RTRRead}, 0x00004000},
		{Enhanced{IRD: 0x3FFF}, 0x3FFF0000},
		{Enhanced{ORD: 0x3FFF}, 0x00003FFF},
		{Enhanced{PeerToPeer: true, RTR: RTRWrite | RTRRead, IRD: 16, ORD: 16}, 0x8010C010},
		{Enhanced{PeerToPeer: true, RTR: RTRAll, IRD: 1, ORD: 2}, 0xC001C002},
	}
	for _, c := range cases {
		if got := c.e.Uint32(); got != c.v {
			t.Errorf("%+v: %#08x, want %#08x", c.e, got, c.v)
		}
		if got := DecodeEnhanced(c.v); got != c.e {
			t.Errorf("%#08x: %+v, want %+v", c.v, got, c.e)
		}
		var b [4]byte
		c.e.Put(b[:])
		if got, err := ParseEnhanced(b[:]); err != nil || got != c.e {
			t.Errorf("Put/Parse %+v: %+v %v", c.e, got, err)
		}
	}
	if _, err := ParseEnhanced([]byte{1, 2, 3}); err != ErrTruncated {
		t.Fatal(err)
	}
	// IRD/ORD are 14 bits: higher bits do not leak into flags.
	if v := (Enhanced{IRD: 0xFFFF, ORD: 0xFFFF}).Uint32(); v != 0x3FFF3FFF {
		t.Fatalf("%#x", v)
	}
	// Every 32-bit value round-trips.
	r := rand.New(rand.NewPCG(7, 7))
	for i := 0; i < 10000; i++ {
		v := r.Uint32()
		if DecodeEnhanced(v).Uint32() != v {
			t.Fatalf("seed 7: %#x does not round-trip", v)
		}
	}
}

func TestRTRPick(t *testing.T) {
	for r, want := range map[RTR]RTR{
		RTRNone: RTRNone, RTRSend: RTRSend, RTRRead: RTRRead, RTRWrite: RTRWrite,
		RTRSend | RTRRead: RTRRead, RTRAll: RTRWrite, RTRSend | RTRWrite: RTRWrite,
	} {
		if got := r.Pick(); got != want {
			t.Errorf("%v.Pick() = %v, want %v", r, got, want)
		}
	}
	if RTRAll.String() != "send|write|read" || RTRNone.String() != "none" {
		t.Error(RTRAll.String())
	}
}

func TestRequestWord(t *testing.T) {
	e := RequestWord(InitiatorParams{IRD: 0x5000, ORD: NoNegotiation, RTR: RTRAll})
	if e != (Enhanced{IRD: MaxIRDORD, ORD: NoNegotiation}) {
		t.Fatalf("client/server word %+v (A=0 must clear B/C/D, IRD clamps)", e)
	}
	e = RequestWord(InitiatorParams{IRD: 2, ORD: 3, PeerToPeer: true, RTR: RTRSend | 0x80})
	if e != (Enhanced{PeerToPeer: true, RTR: RTRSend, IRD: 2, ORD: 3}) {
		t.Fatalf("%+v", e)
	}
}

func TestRespond(t *testing.T) {
	nn := NoNegotiation
	cases := []struct {
		name  string
		req   Enhanced
		p     ResponderParams
		reply Enhanced
		local Negotiated
		err   error
	}{
		{"client/server, plenty", Enhanced{IRD: 8, ORD: 4}, ResponderParams{MaxIRD: 16, ORD: 16, RTR: RTRWrite},
			Enhanced{IRD: 4, ORD: 8}, Negotiated{IRD: 4, ORD: 8}, nil},
		{"client/server ignores B/C/D", Enhanced{RTR: RTRAll, IRD: 8, ORD: 4}, ResponderParams{MaxIRD: 16, ORD: 2, RTR: RTRWrite},
			Enhanced{IRD: 4, ORD: 2}, Negotiated{IRD: 4, ORD: 2}, nil},
		{"initiator ORD above our max IRD", Enhanced{IRD: 8, ORD: 100}, ResponderParams{MaxIRD: 16, ORD: 1, RTR: RTRWrite},
			Enhanced{IRD: 16, ORD: 1}, Negotiated{IRD: 16, ORD: 1}, nil},
		{"0x3FFF both ways", Enhanced{IRD: nn, ORD: nn}, ResponderParams{MaxIRD: 7, ORD: 3, RTR: RTRWrite},
			Enhanced{IRD: nn, ORD: nn}, Negotiated{IRD: 7, ORD: 3}, nil},
		{"0x3FFF initiator ORD only", Enhanced{IRD: 2, ORD: nn}, ResponderParams{MaxIRD: 7, ORD: 3, RTR: RTRWrite},
			Enhanced{IRD: nn, ORD: 2}, Negotiated{IRD: 7, ORD: 2}, nil},
		{"0x3FFF initiator IRD only", Enhanced{IRD: nn, ORD: 2}, ResponderParams{MaxIRD: 7, ORD: 9, RTR: RTRWrite},
			Enhanced{IRD: 2, ORD: nn}, Negotiated{IRD: 2, ORD: 9}, nil},
		{"p2p offered write+read, we take write", Enhanced{PeerToPeer: true, RTR: RTRWrite | RTRRead, IRD: 16, ORD: 16},
			ResponderParams{MaxIRD: 16, ORD: 16, RTR: RTRWrite},
			Enhanced{PeerToPeer: true, RTR: RTRWrite, IRD: 16, ORD: 16}, Negotiated{IRD: 16, ORD: 16, RTR: RTRWrite}, nil},
		{"p2p advertise every common type", Enhanced{PeerToPeer: true, RTR: RTRAll, IRD: 1, ORD: 1},
			ResponderParams{MaxIRD: 4, ORD: 4, RTR: RTRSend | RTRRead},
			Enhanced{PeerToPeer: true, RTR: RTRSend | RTRRead, IRD: 1, ORD: 1}, Negotiated{IRD: 1, ORD: 1, RTR: RTRSend | RTRRead}, nil},
		{"p2p none offered supported: set ours", Enhanced{PeerToPeer: true, RTR: RTRSend, IRD: 1, ORD: 1},
			ResponderParams{MaxIRD: 4, ORD: 4, RTR: RTRWrite | RTRRead},
			Enhanced{PeerToPeer: true, RTR: RTRWrite | RTRRead, IRD: 1, ORD: 1}, Negotiated{IRD: 1, ORD: 1, RTR: RTRWrite | RTRRead}, nil},
		{"p2p read RTR raises IRD 0 to 1", Enhanced{PeerToPeer: true, RTR: RTRRead, IRD: 0, ORD: 0},
			ResponderParams{MaxIRD: 4, ORD: 4, RTR: RTRRead},
			Enhanced{PeerToPeer: true, RTR: RTRRead, IRD: 1, ORD: 0}, Negotiated{IRD: 1, ORD: 0, RTR: RTRRead}, nil},
		{"p2p read RTR unusable with MaxIRD 0", Enhanced{PeerToPeer: true, RTR: RTRRead, IRD: 0, ORD: 0},
			ResponderParams{MaxIRD: 0, ORD: 4, RTR: RTRRead | RTRWrite},
			Enhanced{PeerToPeer: true, RTR: RTRWrite}, Negotiated{RTR: RTRWrite}, nil},
		{"insufficient initiator IRD", Enhanced{IRD: 2, ORD: 4}, ResponderParams{MaxIRD: 8, ORD: 8, RequiredORD: 6, RTR: RTRWrite},
			Enhanced{IRD: 4, ORD: 6}, Negotiated{IRD: 4, ORD: 2}, term.MPAInsufficientIRD},
		{"required ORD met", Enhanced{IRD: 6, ORD: 4}, ResponderParams{MaxIRD: 8, ORD: 8, RequiredORD: 6, RTR: RTRWrite},
			Enhanced{IRD: 4, ORD: 6}, Negotiated{IRD: 4, ORD: 6}, nil},
		{"local values clamp to 0x3FFE", Enhanced{IRD: 0x3FFE, ORD: 0x3FFE}, ResponderParams{MaxIRD: 0xFFFF, ORD: 0xFFFF, RTR: RTRWrite},
			Enhanced{IRD: 0x3FFE, ORD: 0x3FFE}, Negotiated{IRD: 0x3FFE, ORD: 0x3FFE}, nil},
		{"p2p without RTR support", Enhanced{PeerToPeer: true, RTR: RTRWrite}, ResponderParams{MaxIRD: 1, RTR: RTRNone},
			Enhanced{}, Negotiated{}, ErrNoRTRSupport},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			reply, local, err := Respond(c.req, c.p)
			if err != c.err || reply != c.reply || local != c.local {
				t.Fatalf("Respond = %+v %+v %v\nwant      %+v %+v %v", reply, local, err, c.reply, c.local, c.err)
			}
		})
	}
}

func TestComplete(t *testing.T) {
	nn := NoNegotiation
	p2p := func(r RTR, ird, ord uint16) Enhanced { return Enhanced{PeerToPeer: true, RTR: r, IRD: ird, ORD: ord} }
	cases := []struct {
		name  string
		p     InitiatorParams
		reply Enhanced
		want  Negotiated
		err   error
	}{
		{"client/server", InitiatorParams{IRD: 4, MaxIRD: 4, ORD: 8}, Enhanced{IRD: 6, ORD: 3},
			Negotiated{IRD: 4, ORD: 6}, nil},
		{"raise IRD within max", InitiatorParams{IRD: 2, MaxIRD: 8, ORD: 2}, Enhanced{IRD: 2, ORD: 6},
			Negotiated{IRD: 6, ORD: 2}, nil},
		{"IRD beyond max", InitiatorParams{IRD: 2, MaxIRD: 4, ORD: 2}, Enhanced{IRD: 2, ORD: 6},
			Negotiated{IRD: 6, ORD: 2}, term.MPAInsufficientIRD},
		{"0x3FFF leaves local values", InitiatorParams{IRD: 3, MaxIRD: 3, ORD: 5}, Enhanced{IRD: nn, ORD: nn},
			Negotiated{IRD: 3, ORD: 5}, nil},
		{"p2p write+read offered, write chosen", InitiatorParams{IRD: 16, MaxIRD: 16, ORD: 16, PeerToPeer: true, RTR: RTRWrite | RTRRead},
			p2p(RTRWrite|RTRRead, 16, 16), Negotiated{IRD: 16, ORD: 16, RTR: RTRWrite}, nil},
		{"p2p only read in common", InitiatorParams{IRD: 1, MaxIRD: 1, ORD: 1, PeerToPeer: true, RTR: RTRWrite | RTRRead},
			p2p(RTRRead|RTRSend, 1, 1), Negotiated{IRD: 1, ORD: 1, RTR: RTRRead}, nil},
		{"p2p read needs responder IRD", InitiatorParams{IRD: 1, MaxIRD: 1, PeerToPeer: true, RTR: RTRRead | RTRSend},
			p2p(RTRRead|RTRSend, 0, 0), Negotiated{IRD: 1, RTR: RTRSend}, nil},
		{"p2p read with IRD 0 only", InitiatorParams{IRD: 1, MaxIRD: 1, PeerToPeer: true, RTR: RTRRead},
			p2p(RTRRead, 0, 0), Negotiated{IRD: 1}, term.MPANoMatchingRTR},
		{"p2p responder proposes unsupported", InitiatorParams{PeerToPeer: true, RTR: RTRSend},
			p2p(RTRWrite, 0, 0), Negotiated{}, term.MPANoMatchingRTR},
		{"p2p reply drops A", InitiatorParams{PeerToPeer: true, RTR: RTRAll}, Enhanced{},
			Negotiated{}, term.MPANoMatchingRTR},
		{"client/server reply sets A", InitiatorParams{}, p2p(RTRWrite, 0, 0),
			Negotiated{}, term.MPANoMatchingRTR},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := Complete(RequestWord(c.p), c.reply, c.p)
			if err != c.err || got != c.want {
				t.Fatalf("Complete = %+v %v, want %+v %v", got, err, c.want, c.err)
			}
		})
	}
}

// TestNegotiationInvariants runs random initiator/responder pairs through
// RequestWord → Respond → Complete and checks the RFC 6581 §9.1-9.2
// relations on the outcome.
func TestNegotiationInvariants(t *testing.T) {
	seed := uint64(0x6581)
	r := rand.New(rand.NewPCG(seed, 2))
	small := func() uint16 {
		if r.IntN(10) == 0 {
			return NoNegotiation
		}
		return uint16(r.IntN(20))
	}
	for i := 0; i < 20000; i++ {
		ip := InitiatorParams{IRD: small(), ORD: small(), PeerToPeer: r.IntN(2) == 1, RTR: RTR(r.IntN(8))}
		ip.MaxIRD = ip.IRD + uint16(r.IntN(8))
		rp := ResponderParams{MaxIRD: uint16(r.IntN(20)), ORD: uint16(r.IntN(20)), RTR: RTR(1 + r.IntN(7))}
		req := RequestWord(ip)
		reply, rl, err := Respond(req, rp)
		if err == ErrNoRTRSupport {
			if !(req.PeerToPeer && rp.MaxIRD == 0 && rp.RTR == RTRRead) {
				t.Fatalf("seed %#x iter %d: unexpected ErrNoRTRSupport", seed, i)
			}
			continue
		}
		if err != nil {
			t.Fatalf("seed %#x iter %d: %v", seed, i, err)
		}
		if reply.PeerToPeer != req.PeerToPeer {
			t.Fatalf("seed %#x iter %d: A not echoed", seed, i)
		}
		if req.PeerToPeer && reply.RTR == RTRNone {
			t.Fatalf("seed %#x iter %d: p2p reply without RTR", seed, i)
		}
		if !req.PeerToPeer && reply.RTR != RTRNone {
			t.Fatalf("seed %#x iter %d: client/server reply with RTR", seed, i)
		}
		if req.IRD != NoNegotiation && rl.ORD > req.IRD {
			t.Fatalf("seed %#x iter %d: responder ORD %d > initiator IRD %d", seed, i, rl.ORD, req.IRD)
		}
		if rl.IRD > max(rp.MaxIRD, 0) {
			t.Fatalf("seed %#x iter %d: responder IRD %d over its max %d", seed, i, rl.IRD, rp.MaxIRD)
		}
		il, err := Complete(req, reply, ip)
		if err != nil {
			usable := reply.RTR & ip.RTR
			if reply.IRD == 0 {
				usable &^= RTRRead
			}
			if err == term.MPANoMatchingRTR && req.PeerToPeer && usable == 0 {
				continue
			}
			if err == term.MPAInsufficientIRD && reply.ORD != NoNegotiation && reply.ORD > ip.MaxIRD {
				continue
			}
			t.Fatalf("seed %#x iter %d: Complete %v (req %+v reply %+v)", seed, i, err, req, reply)
		}
		// Final relations: initiator ORD <= responder IRD, responder ORD <= initiator IRD.
		if reply.IRD != NoNegotiation && il.ORD > rl.IRD {
			t.Fatalf("seed %#x iter %d: initiator ORD %d > responder IRD %d", seed, i, il.ORD, rl.IRD)
		}
		if reply.ORD != NoNegotiation && rl.ORD > il.IRD {
			t.Fatalf("seed %#x iter %d: responder ORD %d > initiator IRD %d", seed, i, rl.ORD, il.IRD)
		}
		if req.PeerToPeer {
			if il.RTR == RTRNone || il.RTR&(il.RTR-1) != 0 || rl.RTR&il.RTR == 0 || ip.RTR&il.RTR == 0 {
				t.Fatalf("seed %#x iter %d: RTR %v (responder accepts %v, initiator can %v)", seed, i, il.RTR, rl.RTR, ip.RTR)
			}
			if il.RTR == RTRRead && rl.IRD == 0 {
				t.Fatalf("seed %#x iter %d: Read RTR with responder IRD 0", seed, i)
			}
		}
	}
}
