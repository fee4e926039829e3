package eth

import (
	"bytes"
	"math/rand/v2"
	"testing"
)

func TestParseTable(t *testing.T) {
	dst := MAC{0x02, 0x00, 0x00, 0x00, 0x00, 0x01}
	src := MAC{0x02, 0x00, 0x00, 0x00, 0x00, 0x02}
	plain := append(append(append([]byte{}, dst[:]...), src[:]...), 0x08, 0x00, 0xde, 0xad)
	// 802.1Q: TPID 8100, TCI: PCP 5, DEI 1, VID 0x123 -> 1011 0001 0010 0011 = b123.
	tagged := append(append(append([]byte{}, dst[:]...), src[:]...), 0x81, 0x00, 0xb1, 0x23, 0x86, 0xdd, 0xbe)
	qinq := append(append(append([]byte{}, dst[:]...), src[:]...), 0x88, 0xa8, 0x00, 0x05, 0x81, 0x00)
	tests := []struct {
		name    string
		b       []byte
		err     error
		typ     EtherType
		hlen    int
		vlan    bool
		vid     uint16
		pcp     uint8
		dei     bool
		payload []byte
	}{
		{"ipv4", plain, nil, TypeIPv4, 14, false, 0, 0, false, []byte{0xde, 0xad}},
		{"vlan ipv6", tagged, nil, TypeIPv6, 18, true, 0x123, 5, true, []byte{0xbe}},
		{"qinq not parsed", qinq, nil, TypeQinQ, 14, false, 0, 0, false, []byte{0x00, 0x05, 0x81, 0x00}},
		{"exact 14", plain[:14], nil, TypeIPv4, 14, false, 0, 0, false, []byte{}},
		{"13 bytes", plain[:13], ErrTruncated, 0, 0, false, 0, 0, false, nil},
		{"empty", nil, ErrTruncated, 0, 0, false, 0, 0, false, nil},
		{"vlan 17 bytes", tagged[:17], ErrTruncated, 0, 0, false, 0, 0, false, nil},
		{"vlan exact 18", tagged[:18], nil, TypeIPv6, 18, true, 0x123, 5, true, []byte{}},
		{"arp", append(append(append([]byte{}, Broadcast[:]...), src[:]...), 0x08, 0x06), nil, TypeARP, 14, false, 0, 0, false, []byte{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f, err := Parse(tc.b)
			if err != tc.err {
				t.Fatalf("err = %v, want %v", err, tc.err)
			}
			if err != nil {
				return
			}
			if f.EtherType() != tc.typ || f.HeaderLen() != tc.hlen || f.HasVLAN() != tc.vlan ||
				f.VLANID() != tc.vid || f.Priority() != tc.pcp || f.DEI() != tc.dei {
				t.Fatalf("type %#x hlen %d vlan %v vid %#x pcp %d dei %v", f.EtherType(), f.HeaderLen(),
					f.HasVLAN(), f.VLANID(), f.Priority(), f.DEI())
			}
			if !bytes.Equal(f.Payload(), tc.payload) {
				t.Fatalf("payload % x, want % x", f.Payload(), tc.payload)
			}
			if f.Src() != src {
				t.Fatalf("src %v", f.Src())
			}
		})
	}
}

func TestMACString(t *testing.T) {
	if s := (MAC{0x02, 0xab, 0, 0x10, 0xff, 9}).String(); s != "02:ab:00:10:ff:09" {
		t.Fatalf("got %q", s)
	}
}

func TestPutErrors(t *testing.T) {
	var b [18]byte
	if _, err := Put(b[:13], MAC{}, MAC{}, TypeIPv4); err != ErrShortBuffer {
		t.Fatalf("Put short: %v", err)
	}
	if _, err := PutVLAN(b[:17], MAC{}, MAC{}, 0, 1, TypeIPv4); err != ErrShortBuffer {
		t.Fatalf("PutVLAN short: %v", err)
	}
	if _, err := PutVLAN(b[:], MAC{}, MAC{}, 0, 0x1000, TypeIPv4); err != ErrVLANID {
		t.Fatalf("PutVLAN vid: %v", err)
	}
	if _, err := PutVLAN(b[:], MAC{}, MAC{}, 8, 1, TypeIPv4); err != ErrVLANID {
		t.Fatalf("PutVLAN pcp: %v", err)
	}
}

func TestRoundTrip(t *testing.T) {
	const seed = 0xe7
	r := rand.New(rand.NewPCG(seed, seed))
	defer func() {
		if t.Failed() {
			t.Logf("rand seed %#x", seed)
		}
	}()
	buf := make([]byte, 64)
	for i := 0; i < 2000; i++ {
		var dst, src MAC
		for j := range dst {
			dst[j], src[j] = byte(r.Uint32()), byte(r.Uint32())
		}
		typ := EtherType(r.Uint32())
		if typ == TypeVLAN {
			typ = TypeIPv4
		}
		vlan := r.IntN(2) == 0
		vid, pcp := uint16(r.IntN(4096)), uint8(r.IntN(8))
		var n int
		var err error
		if vlan {
			n, err = PutVLAN(buf, dst, src, pcp, vid, typ)
		} else {
			n, err = Put(buf, dst, src, typ)
		}
		if err != nil {
			t.Fatal(err)
		}
		f, err := Parse(buf[:n])
		if err != nil {
			t.Fatal(err)
		}
		if f.Dst() != dst || f.Src() != src || f.EtherType() != typ || f.HasVLAN() != vlan || f.HeaderLen() != n {
			t.Fatalf("round trip mismatch: % x", buf[:n])
		}
		if vlan && (f.VLANID() != vid || f.Priority() != pcp || f.DEI()) {
			t.Fatalf("tag mismatch: vid %d/%d pcp %d/%d", f.VLANID(), vid, f.Priority(), pcp)
		}
		// Setters change exactly their field.
		f.SetSrc(dst)
		f.SetDst(src)
		f.SetEtherType(TypeARP)
		if f.Src() != dst || f.Dst() != src || f.EtherType() != TypeARP || f.HasVLAN() != vlan {
			t.Fatal("setters")
		}
		if vlan {
			f.SetTCI(0xffff)
			if f.VLANID() != 0xfff || f.Priority() != 7 || !f.DEI() || f.EtherType() != TypeARP {
				t.Fatal("SetTCI")
			}
		}
	}
}

func TestAllocs(t *testing.T) {
	buf := make([]byte, 64)
	var sink int
	n := testing.AllocsPerRun(100, func() {
		m, _ := PutVLAN(buf, Broadcast, MAC{1}, 1, 2, TypeIPv4)
		f, err := Parse(buf[:m])
		if err != nil {
			panic(err)
		}
		sink += int(f.EtherType()) + int(f.VLANID()) + len(f.Payload()) + int(f.Dst()[0]) + int(f.Src()[0])
		f.SetDst(f.Src())
		m, _ = Put(buf, Broadcast, MAC{1}, TypeIPv4)
		sink += m
	})
	if n != 0 {
		t.Fatalf("allocs per run = %v, want 0", n)
	}
	_ = sink
}

func FuzzParse(f *testing.F) {
	f.Add([]byte("\x02\x00\x00\x00\x00\x01\x02\x00\x00\x00\x00\x02\x08\x00E"))
	f.Add([]byte("\x02\x00\x00\x00\x00\x01\x02\x00\x00\x00\x00\x02\x81\x00\xb1\x23\x86\xdd"))
	f.Add([]byte("\x02\x00\x00\x00\x00\x01\x02\x00\x00\x00\x00\x02\x81\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		fr, err := Parse(b)
		if err != nil {
			return
		}
		if fr.HeaderLen() > len(b) {
			t.Fatalf("header length %d > %d", fr.HeaderLen(), len(b))
		}
		// Re-encode and compare the header bytes.
		out := make([]byte, VLANHeaderLen)
		var n int
		if fr.HasVLAN() {
			tci := fr.TCI()
			n, err = PutVLAN(out, fr.Dst(), fr.Src(), fr.Priority(), fr.VLANID(), fr.EtherType())
			if err == nil && tci&0x1000 != 0 {
				Frame(out).SetTCI(tci)
			}
		} else {
			n, err = Put(out, fr.Dst(), fr.Src(), fr.EtherType())
		}
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(out[:n], b[:fr.HeaderLen()]) {
			t.Fatalf("re-encoded % x, want % x", out[:n], b[:fr.HeaderLen()])
		}
		_ = fr.Payload()
	})
}
