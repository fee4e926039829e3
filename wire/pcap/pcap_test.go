package pcap

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"math/rand/v2"
	"testing"
	"time"
)

func TestRoundTrip(t *testing.T) {
	const seed = 0xcafe
	r := rand.New(rand.NewPCG(seed, seed))
	defer func() {
		if t.Failed() {
			t.Logf("rand seed %#x", seed)
		}
	}()
	var buf bytes.Buffer
	w, err := NewWriter(&buf, WriterOptions{SnapLen: 1000})
	if err != nil {
		t.Fatal(err)
	}
	type rec struct {
		ts   time.Time
		data []byte
	}
	var recs []rec
	for i := 0; i < 200; i++ {
		d := make([]byte, r.IntN(1500))
		for j := range d {
			d[j] = byte(r.Uint32())
		}
		ts := time.Unix(int64(r.Uint32()), int64(r.IntN(1e9)))
		if err := w.WritePacket(ts, d); err != nil {
			t.Fatal(err)
		}
		recs = append(recs, rec{ts, d})
	}
	b := buf.Bytes()
	// File header fields by offset (format spec, little-endian).
	le := binary.LittleEndian
	if le.Uint32(b) != 0xa1b2c3d4 || le.Uint16(b[4:]) != 2 || le.Uint16(b[6:]) != 4 ||
		le.Uint32(b[16:]) != 1000 || le.Uint32(b[20:]) != 1 {
		t.Fatalf("file header % x", b[:24])
	}
	rd, err := NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	if rd.LinkType() != LinkTypeEthernet || rd.SnapLen() != 1000 {
		t.Fatalf("link %d snap %d", rd.LinkType(), rd.SnapLen())
	}
	for i, want := range recs {
		p, err := rd.Next()
		if err != nil {
			t.Fatalf("packet %d: %v", i, err)
		}
		wd := want.data
		if len(wd) > 1000 {
			wd = wd[:1000]
		}
		if !bytes.Equal(p.Data, wd) || p.OrigLen != len(want.data) ||
			!p.Time.Equal(want.ts.Truncate(time.Microsecond)) {
			t.Fatalf("packet %d: len %d/%d orig %d time %v/%v", i, len(p.Data), len(wd), p.OrigLen, p.Time, want.ts)
		}
	}
	if _, err := rd.Next(); err != io.EOF {
		t.Fatalf("end: %v", err)
	}
}

// TestReadForeign reads hand-built big-endian and nanosecond files.
func TestReadForeign(t *testing.T) {
	be := []byte{
		0xa1, 0xb2, 0xc3, 0xd4, 0, 2, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0, 0, 0, 101,
		0, 0, 0, 10, 0, 0, 0, 7, 0, 0, 0, 3, 0, 0, 0, 60, 0xaa, 0xbb, 0xcc,
	}
	rd, err := NewReader(bytes.NewReader(be))
	if err != nil {
		t.Fatal(err)
	}
	p, err := rd.Next()
	if err != nil || rd.LinkType() != LinkTypeRaw || rd.SnapLen() != 0xffff ||
		!p.Time.Equal(time.Unix(10, 7000)) || p.OrigLen != 60 || !bytes.Equal(p.Data, []byte{0xaa, 0xbb, 0xcc}) {
		t.Fatalf("big-endian: %v %+v", err, p)
	}
	nano := []byte{
		0x4d, 0x3c, 0xb2, 0xa1, 2, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 4, 0, 1, 0, 0, 0,
		10, 0, 0, 0, 7, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 0x55,
	}
	rd, err = NewReader(bytes.NewReader(nano))
	if err != nil {
		t.Fatal(err)
	}
	p, err = rd.Next()
	if err != nil || !p.Time.Equal(time.Unix(10, 7)) || !bytes.Equal(p.Data, []byte{0x55}) {
		t.Fatalf("nanosecond: %v %+v", err, p)
	}
}

func TestReaderErrors(t *testing.T) {
	var buf bytes.Buffer
	w, _ := NewWriter(&buf, WriterOptions{})
	w.WritePacket(time.Unix(1, 0), []byte{1, 2, 3, 4})
	good := buf.Bytes()
	tests := []struct {
		name    string
		b       []byte
		openErr error
		nextErr error
	}{
		{"empty", nil, io.ErrUnexpectedEOF, nil},
		{"short header", good[:23], io.ErrUnexpectedEOF, nil},
		{"bad magic", append([]byte{0, 0, 0, 0}, good[4:]...), ErrMagic, nil},
		{"bad version", append(append(append([]byte{}, good[:4]...), 3, 0), good[6:]...), ErrVersion, nil},
		{"no packets", good[:24], nil, io.EOF},
		{"short record header", good[:30], nil, io.ErrUnexpectedEOF},
		{"short data", good[:len(good)-1], nil, io.ErrUnexpectedEOF},
		{"huge record", func() []byte {
			b := append([]byte{}, good...)
			binary.LittleEndian.PutUint32(b[24+8:], MaxSnapLen+1)
			return b
		}(), nil, ErrRecord},
	}
	for _, tc := range tests {
		rd, err := NewReader(bytes.NewReader(tc.b))
		if !errors.Is(err, tc.openErr) {
			t.Errorf("%s: open err %v, want %v", tc.name, err, tc.openErr)
			continue
		}
		if err != nil {
			continue
		}
		if _, err := rd.Next(); !errors.Is(err, tc.nextErr) {
			t.Errorf("%s: next err %v, want %v", tc.name, err, tc.nextErr)
		}
	}
}

func FuzzReader(f *testing.F) {
	var buf bytes.Buffer
	w, _ := NewWriter(&buf, WriterOptions{})
	w.WritePacket(time.Unix(1, 2000), []byte{1, 2, 3})
	w.WritePacket(time.Unix(3, 4000), []byte{})
	f.Add(buf.Bytes())
	f.Add([]byte{0xa1, 0xb2, 0xc3, 0xd4, 0, 2, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0, 0, 0, 1,
		0, 0, 0, 10, 0, 0, 0, 7, 0, 0, 0, 3, 0, 0, 0, 60, 0xaa, 0xbb, 0xcc})
	f.Fuzz(func(t *testing.T, b []byte) {
		rd, err := NewReader(bytes.NewReader(b))
		if err != nil {
			return
		}
		var pkts []Packet
		for {
			p, err := rd.Next()
			if err != nil {
				break
			}
			pkts = append(pkts, p)
		}
		// Re-encode what was read and read it back.
		var out bytes.Buffer
		w, err := NewWriter(&out, WriterOptions{LinkType: rd.LinkType()})
		if err != nil {
			t.Fatal(err)
		}
		for i, p := range pkts {
			if err := w.WritePacketLen(p.Time, p.Data, p.OrigLen); err != nil {
				// A fraction field beyond one second can carry the time
				// past what 32-bit seconds hold; nothing else may fail.
				if err != ErrTime || p.Time.Unix() <= 0xffffffff {
					t.Fatal(err)
				}
				pkts = pkts[:i]
				break
			}
		}
		rd2, err := NewReader(&out)
		if err != nil {
			t.Fatal(err)
		}
		for i, p := range pkts {
			q, err := rd2.Next()
			if err != nil {
				t.Fatalf("packet %d: %v", i, err)
			}
			if !bytes.Equal(q.Data, p.Data) || q.OrigLen != p.OrigLen || !q.Time.Equal(p.Time.Truncate(time.Microsecond)) {
				t.Fatalf("packet %d differs: %+v vs %+v", i, q, p)
			}
		}
		if _, err := rd2.Next(); err != io.EOF {
			t.Fatalf("trailing: %v", err)
		}
	})
}

func TestWriterErrors(t *testing.T) {
	var buf bytes.Buffer
	w, _ := NewWriter(&buf, WriterOptions{SnapLen: 4, LinkType: LinkTypeRaw})
	n := buf.Len()
	for _, ts := range []time.Time{time.Unix(-1, 0), time.Unix(1<<32, 0)} {
		if err := w.WritePacket(ts, []byte{1}); err != ErrTime {
			t.Errorf("WritePacket(%v) = %v, want ErrTime", ts, err)
		}
	}
	if buf.Len() != n {
		t.Fatal("failed writes wrote bytes")
	}
	if err := w.WritePacket(time.Unix(1<<32-1, 999999999), []byte{1, 2, 3, 4, 5, 6}); err != nil {
		t.Fatal(err)
	}
	rd, err := NewReader(&buf)
	if err != nil {
		t.Fatal(err)
	}
	p, err := rd.Next()
	if err != nil || rd.LinkType() != LinkTypeRaw || len(p.Data) != 4 || p.OrigLen != 6 ||
		!p.Time.Equal(time.Unix(1<<32-1, 999999000)) {
		t.Fatalf("%v %+v", err, p)
	}
}
