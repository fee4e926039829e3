package wiretest_test

import (
	"bytes"
	"errors"
	"io"
	"testing"

	"xrnic/wire/ddp"
	"xrnic/wire/eth"
	"xrnic/wire/ipv4"
	"xrnic/wire/mpa"
	"xrnic/wire/pcap"
	"xrnic/wire/rdmap"
	"xrnic/wire/tcp"
	"xrnic/wire/term"
	"xrnic/wire/wiretest"
)

// parseFrame checks one frame with the wire parsers (independent of how it
// was built) and returns its TCP segment.
func parseFrame(t *testing.T, i int, f wiretest.Frame) tcp.Header {
	t.Helper()
	e, err := eth.Parse(f.Data)
	if err != nil || e.EtherType() != eth.TypeIPv4 {
		t.Fatalf("frame %d: eth: %v type %#x", i, err, e.EtherType())
	}
	ip, err := ipv4.Parse(e.Payload())
	if err != nil {
		t.Fatalf("frame %d: ipv4: %v", i, err)
	}
	if !ip.DF() || ip.Protocol() != ipv4.ProtoTCP {
		t.Fatalf("frame %d: DF %v proto %d", i, ip.DF(), ip.Protocol())
	}
	seg, err := tcp.Parse(ip.Payload())
	if err != nil {
		t.Fatalf("frame %d: tcp: %v", i, err)
	}
	if !seg.ChecksumValid(tcp.PseudoHeaderSum(ip.Src(), ip.Dst(), len(seg))) {
		t.Fatalf("frame %d: bad TCP checksum", i)
	}
	if !bytes.Equal(seg.Payload(), f.Payload) || seg.Seq() != f.Seq || seg.Ack() != f.Ack || seg.Flags() != f.Flags {
		t.Fatalf("frame %d: header disagrees with the Frame record", i)
	}
	return seg
}

func TestConversation(t *testing.T) {
	c := wiretest.New(wiretest.Config{})
	c.Handshake()
	data := make([]byte, 3000)
	for i := range data {
		data[i] = byte(i)
	}
	got := c.Send(wiretest.Client, data)
	reply := c.Send(wiretest.Server, []byte("ok"))
	c.Close(wiretest.Client)
	if err := c.Err(); err != nil {
		t.Fatal(err)
	}
	if c.EMSS() != 1448 {
		t.Fatalf("EMSS %d, want 1448 (MSS 1460 less timestamps)", c.EMSS())
	}
	frames := c.Frames()
	if len(got) != 3 || len(reply) != 1 || len(frames) != 3+3+1+3 {
		t.Fatalf("frames: send %v reply %v total %d", got, reply, len(frames))
	}
	cl, sv := c.Endpoint(wiretest.Client), c.Endpoint(wiretest.Server)
	if cl.IP != [4]byte{198, 18, 0, 1} || sv.IP != [4]byte{198, 18, 0, 2} {
		t.Fatalf("addresses %v %v", cl.IP, sv.IP)
	}
	want := []struct {
		from  wiretest.Side
		flags tcp.Flags
		seq   tcp.Seq
		ack   tcp.Seq
		n     int
	}{
		{wiretest.Client, tcp.FlagSYN, cl.ISN, 0, 0},
		{wiretest.Server, tcp.FlagSYN | tcp.FlagACK, sv.ISN, cl.ISN + 1, 0},
		{wiretest.Client, tcp.FlagACK, cl.ISN + 1, sv.ISN + 1, 0},
		{wiretest.Client, tcp.FlagACK, cl.ISN + 1, sv.ISN + 1, 1448},
		{wiretest.Client, tcp.FlagACK, cl.ISN + 1 + 1448, sv.ISN + 1, 1448},
		{wiretest.Client, tcp.FlagACK | tcp.FlagPSH, cl.ISN + 1 + 2896, sv.ISN + 1, 104},
		{wiretest.Server, tcp.FlagACK | tcp.FlagPSH, sv.ISN + 1, cl.ISN + 3001, 2},
		{wiretest.Client, tcp.FlagFIN | tcp.FlagACK, cl.ISN + 3001, sv.ISN + 3, 0},
		{wiretest.Server, tcp.FlagFIN | tcp.FlagACK, sv.ISN + 3, cl.ISN + 3002, 0},
		{wiretest.Client, tcp.FlagACK, cl.ISN + 3002, sv.ISN + 4, 0},
	}
	var stream []byte
	for i, f := range frames {
		seg := parseFrame(t, i, f)
		w := want[i]
		if f.From != w.from || seg.Flags() != w.flags || seg.Seq() != w.seq || seg.Ack() != w.ack || len(seg.Payload()) != w.n {
			t.Errorf("frame %d: from %v flags %v seq %d ack %d len %d; want %v %v %d %d %d", i, f.From,
				seg.Flags(), seg.Seq(), seg.Ack(), len(seg.Payload()), w.from, w.flags, w.seq, w.ack, w.n)
		}
		var o tcp.Options
		if err := tcp.ParseOptions(seg.Options(), &o); err != nil || !o.HasTimestamps {
			t.Errorf("frame %d: options %v timestamps %v", i, err, o.HasTimestamps)
		}
		if seg.Flags()&tcp.FlagSYN != 0 && (!o.HasMSS || o.MSS != 1460 || !o.SACKPermitted || !o.HasWindowScale) {
			t.Errorf("frame %d: SYN options %+v", i, o)
		}
		if f.From == wiretest.Client {
			stream = append(stream, seg.Payload()...)
		}
	}
	if !bytes.Equal(stream, data) {
		t.Error("client stream differs from the data sent")
	}

	// The pcap reads back frame for frame.
	var buf bytes.Buffer
	if err := c.WritePcap(&buf); err != nil {
		t.Fatal(err)
	}
	r, err := pcap.NewReader(&buf)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; ; i++ {
		p, err := r.Next()
		if err == io.EOF {
			if i != len(frames) {
				t.Fatalf("read %d packets, wrote %d", i, len(frames))
			}
			break
		}
		if err != nil || !bytes.Equal(p.Data, frames[i].Data) || !p.Time.Equal(frames[i].Time) {
			t.Fatalf("packet %d: %v", i, err)
		}
	}
}

func TestConversationOrder(t *testing.T) {
	c := wiretest.New(wiretest.Config{})
	if c.Send(wiretest.Client, []byte("x")) != nil || !errors.Is(c.Err(), wiretest.ErrState) {
		t.Fatalf("data before the handshake: err %v", c.Err())
	}
	if err := c.WritePcap(io.Discard); !errors.Is(err, wiretest.ErrState) {
		t.Fatalf("WritePcap after an error: %v", err)
	}
}

// TestSession checks the canonical session with the repository's own
// parsers: every opcode, CRCs, MSNs, and the streams deframe cleanly.
func TestSession(t *testing.T) {
	for _, rev := range []uint8{1, 2} {
		s, err := wiretest.BuildSession(wiretest.SessionConfig{Rev: rev})
		if err != nil {
			t.Fatal(err)
		}
		frames := s.Conv.Frames()
		for i, f := range frames {
			parseFrame(t, i, f)
		}
		for _, m := range []wiretest.MPAFrame{s.Request, s.Reply} {
			fr, err := mpa.ParseFrame(frames[m.Frame].Payload, m.Kind)
			if err != nil {
				t.Fatalf("rev %d %v: %v", rev, m.Kind, err)
			}
			if fr.Rev() != rev || fr.C() != m.C || fr.S() != (rev == 2) || fr.PDLength() != m.PDLength {
				t.Errorf("rev %d %v: rev %d C %v S %v pd %d", rev, m.Kind, fr.Rev(), fr.C(), fr.S(), fr.PDLength())
			}
		}
		seen := map[rdmap.OpCode]int{}
		for _, f := range s.FPDUs {
			seen[f.OpCode]++
			if len(f.Frames) != 1 || !bytes.Equal(frames[f.Frames[0]].Payload, f.Wire) {
				t.Errorf("%s: not alone in its segment (frames %v)", f.Name, f.Frames)
			}
			p, err := mpa.ParseFPDU(f.Wire)
			if err != nil || p.CheckCRC() != nil || p.ULPDULength() != f.ULPDULen || p.CRC() != f.CRC {
				t.Errorf("%s: FPDU %v crc %v", f.Name, err, p.CheckCRC())
				continue
			}
			seg, err := ddp.Parse(p.ULPDU())
			if err != nil {
				t.Fatalf("%s: %v", f.Name, err)
			}
			op, terr := rdmap.Classify(seg, false)
			if terr != nil || op != f.OpCode || seg.IsTagged() != f.Tagged || seg.Last() != f.Last {
				t.Errorf("%s: classify %v %v tagged %v last %v", f.Name, op, terr, seg.IsTagged(), seg.Last())
			}
			if f.Tagged {
				h := seg.Tagged()
				if h.STag() != f.STag || h.TO() != f.TO {
					t.Errorf("%s: STag %#x TO %#x", f.Name, h.STag(), h.TO())
				}
			} else {
				h := seg.Untagged()
				if h.QN() != f.QN || h.MSN() != f.MSN || h.MO() != f.MO || h.RsvdULPWord() != f.InvSTag {
					t.Errorf("%s: QN %d MSN %d MO %d inv %#x", f.Name, h.QN(), h.MSN(), h.MO(), h.RsvdULPWord())
				}
			}
			if f.Terminate != nil {
				d, err := term.Decode(seg.Payload())
				if err != nil || d.Err != f.Terminate.Err || d.Parts != f.Terminate.Parts ||
					!bytes.Equal(d.DDPHeader, f.Terminate.DDPHeader) || !bytes.Equal(d.RDMAHeader, f.Terminate.RDMAHeader) {
					t.Errorf("%s: decoded %v (%v)", f.Name, d, err)
				}
			}
		}
		for op := rdmap.OpWrite; op <= rdmap.OpAtomicResponse; op++ {
			if seen[op] == 0 {
				t.Errorf("rev %d: no FPDU with opcode %v", rev, op)
			}
		}
		if seen[rdmap.OpWrite] < 4 || seen[rdmap.OpTerminate] != 2 {
			t.Errorf("rev %d: want a multi-segment Write and two Terminates: %v", rev, seen)
		}
		// Each direction deframes into exactly its FPDUs.
		for _, side := range []wiretest.Side{wiretest.Client, wiretest.Server} {
			d := mpa.NewDeframer(mpa.DeframerConfig{CRC: true})
			n := 0
			for _, f := range s.FPDUs {
				if f.From != side {
					continue
				}
				u, used, err := d.Next(f.Wire)
				if err != nil || used != len(f.Wire) || len(u) != f.ULPDULen {
					t.Errorf("%v %s: deframe %v used %d len %d", side, f.Name, err, used, len(u))
				}
				n++
			}
			if n == 0 {
				t.Errorf("%v sent no FPDU", side)
			}
		}
	}
	if _, err := wiretest.BuildSession(wiretest.SessionConfig{Rev: 3}); err == nil {
		t.Error("Rev 3 accepted")
	}
}

func TestCorruptCRC(t *testing.T) {
	s, err := wiretest.BuildSession(wiretest.SessionConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.CorruptCRC(len(s.FPDUs)); !errors.Is(err, wiretest.ErrIndex) {
		t.Fatalf("out of range: %v", err)
	}
	const i = 2
	if err := s.CorruptCRC(i); err != nil {
		t.Fatal(err)
	}
	f := s.FPDUs[i]
	fr := s.Conv.Frames()[f.Frames[0]]
	parseFrame(t, f.Frames[0], fr) // TCP checksum still valid
	p, err := mpa.ParseFPDU(fr.Payload)
	if err != nil || !errors.Is(p.CheckCRC(), term.MPACRCError) || f.CRCGood {
		t.Fatalf("corrupted FPDU: %v crc %v good %v", err, p.CheckCRC(), f.CRCGood)
	}
	if p.ComputeCRC() != f.CRC {
		t.Fatal("recorded CRC is not the CRC of the covered bytes")
	}
}
