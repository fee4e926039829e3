package mpa

import (
	"encoding/binary"

	"xrnic/wire/crc32c"
)

// IsMarkerSeq reports whether a marker starts at TCP sequence number seq in
// a stream whose full operation started at seqStart (RFC 5044 §4.3:
// (SeqNum - SeqStart) mod 512 == 0, wrap-safe).
func IsMarkerSeq(seq, seqStart uint32) bool { return (seq-seqStart)%MarkerInterval == 0 }

// PutMarker writes a marker (RESERVED = 0, FPDUPTR) into b[0:4].
func PutMarker(b []byte, fpduptr uint16) {
	_ = b[3]
	b[0], b[1] = 0, 0
	binary.BigEndian.PutUint16(b[2:], fpduptr)
}

// MarkerFPDUPTR returns a marker's FPDUPTR with its two low bits cleared,
// as receivers must treat them (RFC 5044 §4.2).
func MarkerFPDUPTR(b []byte) uint16 { return binary.BigEndian.Uint16(b[2:]) &^ 3 }

// FPDUStart returns the TCP sequence number of the ULPDU_Length field of
// the FPDU a marker at markerSeq points to. FPDUPTR is a back-pointer
// (marker − FPDUPTR) except 0, which means the marker sits between FPDUs
// and belongs to the one whose length field follows it at markerSeq+4.
func FPDUStart(markerSeq uint32, fpduptr uint16) uint32 {
	p := uint32(fpduptr &^ 3)
	if p == 0 {
		return markerSeq + MarkerSize
	}
	return markerSeq - p
}

// StripMarkers copies the stream bytes src, whose first byte has TCP
// sequence number seq, into dst leaving out every octet of a marker
// (positions p with (p - seqStart) mod 512 < 4). It returns the bytes
// written, or ErrBufferTooSmall if dst is shorter than src. It knows
// nothing of FPDU boundaries: it is the stream-level view an out-of-order
// receiver or a capture decoder needs. dst and src may be the same slice
// (in-place compaction) but must not otherwise overlap.
func StripMarkers(dst, src []byte, seq, seqStart uint32) (int, error) {
	if len(dst) < len(src) {
		return 0, ErrBufferTooSmall
	}
	n := 0
	off := int((seq - seqStart) % MarkerInterval)
	for i := 0; i < len(src); {
		if off < MarkerSize {
			skip := min(MarkerSize-off, len(src)-i)
			i += skip
			off += skip
			continue
		}
		take := min(MarkerInterval-off, len(src)-i)
		n += copy(dst[n:], src[i:i+take])
		i += take
		off = (off + take) % MarkerInterval
	}
	return n, nil
}

// layout describes where markers fall in one FPDU on the wire. Content
// index i counts FPDU octets without markers (0 = first octet of
// ULPDU_Length, content = FPDULen(n)).
type layout struct {
	n       int // ULPDU length
	lead    int // 0, or MarkerSize when a marker precedes the length field
	first   int // content index before which the first inner marker sits
	m       int // number of inner markers (each before a content octet)
	content int // FPDULen(n)
	wire    int // lead + content + m*MarkerSize
}

// contentPerInterval is the number of FPDU octets between two markers.
const contentPerInterval = MarkerInterval - MarkerSize

// newLayout computes the layout of an FPDU carrying n ULPDU octets that
// starts phase octets after a marker position (phase = (seq - SeqStart)
// mod 512). Without markers the layout is trivial.
func newLayout(n int, markers bool, phase int) layout {
	l := layout{n: n, content: FPDULen(n)}
	if markers {
		if phase == 0 {
			l.lead = MarkerSize
		}
		w := (phase + l.lead) % MarkerInterval
		l.first = (MarkerInterval - w) % MarkerInterval
		if l.first == 0 { // unreachable for 4-aligned phases; keeps odd ones sane
			l.first = MarkerInterval
		}
		if l.first < l.content {
			l.m = (l.content-1-l.first)/contentPerInterval + 1
		}
	}
	l.wire = l.lead + l.content + l.m*MarkerSize
	return l
}

// markerAt returns the content index before which inner marker k sits.
func (l *layout) markerAt(k int) int { return l.first + k*contentPerInterval }

// fpduptr returns the FPDUPTR of inner marker k: octets from the length
// field to the marker, counting earlier inner markers.
func (l *layout) fpduptr(k int) int { return l.markerAt(k) + k*MarkerSize }

// wirePos maps a content index to its wire offset within the FPDU.
func (l *layout) wirePos(i int) int {
	k := 0
	if l.m > 0 && i >= l.first {
		k = min(l.m, (i-l.first)/contentPerInterval+1)
	}
	return l.lead + i + k*MarkerSize
}

// splitsULPDU reports whether an inner marker lies inside the ULPDU, so the
// ULPDU is not contiguous on the wire.
func (l *layout) splitsULPDU() bool { return l.m > 0 && l.first < LengthSize+l.n }

// maxWire returns the longest wire length of an FPDU with a ULPDU of at
// most n octets, markers included, at any phase.
func maxWire(n int, markers bool) int {
	c := FPDULen(n) + 3 // any pad
	if !markers {
		return c
	}
	return MarkerSize + c + (c/contentPerInterval+2)*MarkerSize
}

// FramerConfig configures a Framer.
type FramerConfig struct {
	// SeqStart is the TCP sequence number of the first octet of full
	// operation: the first FPDU (and its marker, with markers on).
	SeqStart uint32
	// Markers inserts markers (the peer's M flag asked for them).
	Markers bool
	// CRC computes CRCs; when false the CRC field is written as zero.
	CRC bool
}

// Framer builds the send side of an MPA stream: it tracks the TCP sequence
// position of the next FPDU, inserts markers every 512 octets of sequence
// space when enabled, and seals FPDUs with the CRC covering the markers
// inside them (RFC 5044 §4.3-4.4). Each call produces one whole FPDU;
// successive FPDUs must be sent in the order they were produced with
// nothing in between. A Framer is not safe for concurrent use.
type Framer struct {
	seq, seqStart uint32
	markers, crc  bool
}

// NewFramer returns a Framer positioned at cfg.SeqStart.
func NewFramer(cfg FramerConfig) *Framer {
	return &Framer{seq: cfg.SeqStart, seqStart: cfg.SeqStart, markers: cfg.Markers, crc: cfg.CRC}
}

// Seq returns the TCP sequence number of the next octet the Framer will
// produce.
func (f *Framer) Seq() uint32 { return f.seq }

func (f *Framer) phase() int { return int((f.seq - f.seqStart) % MarkerInterval) }

// HeaderLen returns where, in the buffer passed to Seal, the caller writes
// the next ULPDU: 2, or 6 when a marker precedes the next FPDU.
func (f *Framer) HeaderLen() int {
	if f.markers && f.phase() == 0 {
		return MarkerSize + LengthSize
	}
	return LengthSize
}

// WireLen returns the number of octets the next FPDU carrying an n-octet
// ULPDU takes on the wire, markers included.
func (f *Framer) WireLen(n int) int { return newLayout(n, f.markers, f.phase()).wire }

// Seal turns b into the next FPDU in place. The caller has written the
// n-octet ULPDU at b[HeaderLen():HeaderLen()+n]; b must be at least
// WireLen(n) long. Seal moves the ULPDU apart to insert markers, writes
// the leading marker, ULPDU_Length, zero PAD, the markers and the CRC, and
// advances the stream position. It returns the FPDU's wire length.
//
// With markers on, a ULPDU whose FPDUPTRs would not fit 16 bits is refused
// with ErrULPDUTooLong; any n <= MaxULPDUMarkers is accepted.
func (f *Framer) Seal(b []byte, n int) (int, error) {
	if n < 0 || n > MaxULPDU {
		return 0, ErrULPDUTooLong
	}
	l := newLayout(n, f.markers, f.phase())
	if l.m > 0 && l.fpduptr(l.m-1) > 0xFFFF {
		return 0, ErrULPDUTooLong
	}
	if len(b) < l.wire {
		return 0, ErrBufferTooSmall
	}
	b = b[:l.wire]
	ulpEnd := LengthSize + n // content index after the ULPDU
	// Open gaps for inner markers, last first, so nothing is overwritten.
	for k := l.m - 1; k >= 0; k-- {
		at := l.markerAt(k)
		if at < ulpEnd {
			end := ulpEnd
			if k+1 < l.m {
				end = min(end, l.markerAt(k+1))
			}
			copy(b[l.lead+at+(k+1)*MarkerSize:], b[l.lead+at:l.lead+end])
		}
		PutMarker(b[l.lead+at+k*MarkerSize:], uint16(l.fpduptr(k)))
	}
	if l.lead != 0 {
		PutMarker(b, 0)
	}
	binary.BigEndian.PutUint16(b[l.lead:], uint16(n))
	if pad := PadLen(n); pad != 0 {
		p := l.wirePos(ulpEnd)
		clear(b[p : p+pad])
	}
	end := l.wire - CRCSize
	var c uint32
	if f.crc {
		c = crc32c.Checksum(b[:end])
	}
	crc32c.PutWire(b[end:], c)
	f.seq += uint32(l.wire)
	return l.wire, nil
}

// Frame copies ulpdu into dst as the next FPDU (markers, length, PAD, CRC)
// and returns its wire length. dst and ulpdu must not overlap.
func (f *Framer) Frame(dst, ulpdu []byte) (int, error) {
	n := len(ulpdu)
	if n > MaxULPDU {
		return 0, ErrULPDUTooLong
	}
	h := f.HeaderLen()
	if len(dst) < h+n {
		return 0, ErrBufferTooSmall
	}
	copy(dst[h:], ulpdu)
	return f.Seal(dst, n)
}
