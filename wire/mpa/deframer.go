package mpa

import (
	"encoding/binary"

	"xrnic/wire/crc32c"
	"xrnic/wire/term"
)

// DeframerConfig configures a Deframer.
type DeframerConfig struct {
	// SeqStart is the TCP sequence number of the first octet of full
	// operation (where the first marker is, with markers on).
	SeqStart uint32
	// Markers: the peer inserts markers (we sent M=1).
	Markers bool
	// CRC: check CRCs (off only if both sides sent C=0).
	CRC bool
	// MaxULPDU is the largest ULPDU_Length accepted (0 means MaxULPDU,
	// 65535). It sizes the reassembly buffer; a longer FPDU is
	// ErrULPDUTooLong.
	MaxULPDU int
}

// Deframer is the receive side of an MPA stream. It is fed in-order TCP
// payload in arbitrary pieces and yields whole ULPDUs, each checked before
// it is handed out: CRC over the received octets (term.MPACRCError), then
// markers against the length-derived FPDU start (term.MPAMarkerError),
// markers stripped. After an error it delivers nothing more and returns the
// same error from every call (RFC 5044 §7.2, §8).
//
// Usage: pass each piece to Next until it is consumed, processing every
// ULPDU before the next call:
//
//	for len(p) > 0 {
//		ulpdu, n, err := d.Next(p)
//		if err != nil { /* terminate */ }
//		p = p[n:]
//		if ulpdu != nil { handle(ulpdu) }
//	}
//
// Memory: when the whole FPDU lies within p and no marker falls inside its
// ULPDU, the ULPDU is a subslice of p (zero copy) and stays valid as long as
// p does. Otherwise the Deframer copies into its one internal buffer,
// allocated by NewDeframer for the largest FPDU, and the ULPDU is valid
// until the next call to Next. Bytes of an incomplete FPDU are copied, so
// a piece may be released as soon as Next has consumed it. Next never
// allocates.
//
// A Deframer is not safe for concurrent use.
type Deframer struct {
	seq, seqStart uint32
	markers, crc  bool
	maxULPDU      int
	buf           []byte // reassembly / marker-stripping buffer
	have          int    // bytes of the current FPDU in buf
	need          int    // wire length of the current FPDU; 0 until known
	lay           layout
	err           error
}

// NewDeframer returns a Deframer positioned at cfg.SeqStart. It allocates
// the reassembly buffer (about 66 KiB for the default MaxULPDU).
func NewDeframer(cfg DeframerConfig) *Deframer {
	max := cfg.MaxULPDU
	if max <= 0 || max > MaxULPDU {
		max = MaxULPDU
	}
	return &Deframer{
		seq:      cfg.SeqStart,
		seqStart: cfg.SeqStart,
		markers:  cfg.Markers,
		crc:      cfg.CRC,
		maxULPDU: max,
		buf:      make([]byte, maxWire(max, cfg.Markers)),
	}
}

// Seq returns the TCP sequence number of the next octet Next expects.
func (d *Deframer) Seq() uint32 { return d.seq + uint32(d.have) }

// Pending returns the number of octets of an incomplete FPDU held in the
// internal buffer.
func (d *Deframer) Pending() int { return d.have }

// Err returns the sticky error, if any.
func (d *Deframer) Err() error { return d.err }

// hdrLen returns how many octets of the next FPDU are needed to read its
// length: the length field, after the leading marker if there is one.
func (d *Deframer) hdrLen() (lead int) {
	if d.markers && (d.seq-d.seqStart)%MarkerInterval == 0 {
		return MarkerSize + LengthSize
	}
	return LengthSize
}

// layoutFor reads the length field from hdr (hdrLen octets) and computes
// the FPDU layout.
func (d *Deframer) layoutFor(hdr []byte) (layout, error) {
	h := len(hdr)
	n := int(binary.BigEndian.Uint16(hdr[h-LengthSize:]))
	if n > d.maxULPDU {
		return layout{}, ErrULPDUTooLong
	}
	return newLayout(n, d.markers, int((d.seq-d.seqStart)%MarkerInterval)), nil
}

// Next consumes octets from p and returns the next ULPDU if p completes an
// FPDU. consumed is the number of octets of p used; when ulpdu is nil and
// err is nil all of p was consumed (buffered) and more input is needed.
// A delivered ULPDU is never nil, even when empty. On error nothing is
// delivered, consumed is 0, and the Deframer stays failed.
func (d *Deframer) Next(p []byte) (ulpdu []byte, consumed int, err error) {
	if d.err != nil {
		return nil, 0, d.err
	}
	h := d.hdrLen()
	if d.have == 0 && len(p) >= h {
		// Fast path: the whole FPDU may be in p.
		l, err := d.layoutFor(p[:h])
		if err != nil {
			d.err = err
			return nil, 0, err
		}
		if len(p) >= l.wire {
			u, err := d.finish(p[:l.wire], &l)
			if err != nil {
				d.err = err
				return nil, 0, err
			}
			d.seq += uint32(l.wire)
			return u, l.wire, nil
		}
	}
	// Reassembly path.
	if d.need == 0 {
		k := copy(d.buf[d.have:h], p)
		d.have += k
		consumed = k
		if d.have < h {
			return nil, consumed, nil
		}
		l, err := d.layoutFor(d.buf[:h])
		if err != nil {
			d.err = err
			return nil, 0, err
		}
		d.lay = l
		d.need = l.wire
	}
	k := copy(d.buf[d.have:d.need], p[consumed:])
	d.have += k
	consumed += k
	if d.have < d.need {
		return nil, consumed, nil
	}
	u, err := d.finish(d.buf[:d.need], &d.lay)
	if err != nil {
		d.err = err
		return nil, 0, err
	}
	d.seq += uint32(d.need)
	d.have, d.need = 0, 0
	return u, consumed, nil
}

// finish checks one complete FPDU w (wire octets, markers included) and
// returns its ULPDU. A ULPDU split by markers is copied into d.buf (in
// place when w already is d.buf).
func (d *Deframer) finish(w []byte, l *layout) ([]byte, error) {
	if d.crc && crc32c.Checksum(w) != crc32c.Residue {
		return nil, term.MPACRCError
	}
	if l.lead != 0 && MarkerFPDUPTR(w) != 0 {
		return nil, term.MPAMarkerError
	}
	for k := 0; k < l.m; k++ {
		ptr := l.fpduptr(k)
		if MarkerFPDUPTR(w[l.lead+ptr:]) != uint16(ptr)&^3 {
			return nil, term.MPAMarkerError
		}
	}
	start := l.lead + LengthSize
	if !l.splitsULPDU() {
		return w[start : start+l.n : start+l.n], nil
	}
	// Copy the ULPDU out segment by segment, skipping inner markers. When
	// w is d.buf this compacts forward in place (destination never passes
	// the source).
	dst := d.buf
	o := 0
	ulpEnd := LengthSize + l.n
	from := LengthSize
	for k := 0; k < l.m && from < ulpEnd; k++ {
		at := min(l.markerAt(k), ulpEnd)
		o += copy(dst[o:], w[l.lead+from+k*MarkerSize:l.lead+at+k*MarkerSize])
		from = at
	}
	if from < ulpEnd {
		o += copy(dst[o:], w[l.wirePos(from):l.wirePos(from)+ulpEnd-from])
	}
	return dst[:o:o], nil
}
