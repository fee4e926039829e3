// Package pcap writes and reads classic libpcap capture files (the format
// of tcpdump and Wireshark, described in draft-ietf-opsawg-pcap): a 24-byte
// file header followed by records of a 16-byte header and the captured
// bytes. The Writer produces microsecond-resolution files in little-endian
// byte order, by default with LINKTYPE_ETHERNET; the Reader accepts either
// byte order and microsecond or nanosecond files, which covers what we write
// and what tcpdump writes.
//
// It is a test and tooling aid (captures of our frames for tshark, debug
// dumps), not a hot path: Next allocates a fresh slice per packet.
package pcap

import (
	"encoding/binary"
	"errors"
	"io"
	"time"
)

// Link types (tcpdump.org "LINK-LAYER HEADER TYPES").
const (
	LinkTypeEthernet uint32 = 1
	LinkTypeRaw      uint32 = 101 // raw IPv4/IPv6
)

// MaxSnapLen is the largest record the Reader accepts and the default snap
// length of the Writer (libpcap's MAXIMUM_SNAPLEN).
const MaxSnapLen = 262144

const (
	magicMicro   = 0xa1b2c3d4
	magicNano    = 0xa1b23c4d
	fileHdrLen   = 24
	recordHdrLen = 16
)

// Errors.
var (
	ErrMagic    = errors.New("pcap: not a pcap file (bad magic number)")
	ErrVersion  = errors.New("pcap: unsupported file format version")
	ErrRecord   = errors.New("pcap: record length exceeds the maximum snap length")
	ErrTooLarge = errors.New("pcap: packet larger than 32-bit lengths allow")
	ErrTime     = errors.New("pcap: timestamp outside 1970..2106 (32-bit seconds)")
)

// WriterOptions configure a Writer. Zero fields take the defaults.
type WriterOptions struct {
	SnapLen  uint32 // default MaxSnapLen; longer packets are truncated
	LinkType uint32 // default LinkTypeEthernet
}

// Writer writes a pcap stream.
type Writer struct {
	w    io.Writer
	snap uint32
	hdr  [recordHdrLen]byte
}

// NewWriter writes the file header to w and returns a Writer.
func NewWriter(w io.Writer, o WriterOptions) (*Writer, error) {
	if o.SnapLen == 0 {
		o.SnapLen = MaxSnapLen
	}
	if o.LinkType == 0 {
		o.LinkType = LinkTypeEthernet
	}
	var h [fileHdrLen]byte
	le := binary.LittleEndian
	le.PutUint32(h[0:], magicMicro)
	le.PutUint16(h[4:], 2) // version 2.4
	le.PutUint16(h[6:], 4)
	// thiszone and sigfigs are zero.
	le.PutUint32(h[16:], o.SnapLen)
	le.PutUint32(h[20:], o.LinkType)
	if _, err := w.Write(h[:]); err != nil {
		return nil, err
	}
	return &Writer{w: w, snap: o.SnapLen}, nil
}

// WritePacket writes one packet captured at ts, truncated to the snap
// length; the original length is len(data).
func (w *Writer) WritePacket(ts time.Time, data []byte) error {
	return w.WritePacketLen(ts, data, len(data))
}

// WritePacketLen is WritePacket with an explicit original length (for data
// that was already truncated). Timestamps must fit the format's unsigned
// 32-bit seconds.
func (w *Writer) WritePacketLen(ts time.Time, data []byte, origLen int) error {
	if uint64(origLen) > 0xffffffff || uint64(len(data)) > 0xffffffff {
		return ErrTooLarge
	}
	if sec := ts.Unix(); sec < 0 || sec > 0xffffffff {
		return ErrTime
	}
	if uint32(len(data)) > w.snap {
		data = data[:w.snap]
	}
	le := binary.LittleEndian
	le.PutUint32(w.hdr[0:], uint32(ts.Unix()))
	le.PutUint32(w.hdr[4:], uint32(ts.Nanosecond()/1000))
	le.PutUint32(w.hdr[8:], uint32(len(data)))
	le.PutUint32(w.hdr[12:], uint32(origLen))
	if _, err := w.w.Write(w.hdr[:]); err != nil {
		return err
	}
	_, err := w.w.Write(data)
	return err
}

// Packet is one record read back.
type Packet struct {
	Time    time.Time
	Data    []byte // the captured bytes (possibly truncated)
	OrigLen int    // the length of the packet on the wire
}

// Reader reads a pcap stream.
type Reader struct {
	r     io.Reader
	order binary.ByteOrder
	nano  bool
	snap  uint32
	link  uint32
	hdr   [recordHdrLen]byte
}

// NewReader reads and checks the file header of r.
func NewReader(r io.Reader) (*Reader, error) {
	var h [fileHdrLen]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	rd := &Reader{r: r}
	switch {
	case binary.LittleEndian.Uint32(h[:]) == magicMicro:
		rd.order = binary.LittleEndian
	case binary.BigEndian.Uint32(h[:]) == magicMicro:
		rd.order = binary.BigEndian
	case binary.LittleEndian.Uint32(h[:]) == magicNano:
		rd.order, rd.nano = binary.LittleEndian, true
	case binary.BigEndian.Uint32(h[:]) == magicNano:
		rd.order, rd.nano = binary.BigEndian, true
	default:
		return nil, ErrMagic
	}
	if rd.order.Uint16(h[4:]) != 2 {
		return nil, ErrVersion
	}
	rd.snap = rd.order.Uint32(h[16:])
	rd.link = rd.order.Uint32(h[20:]) & 0x0fffffff // high bits: FCS info
	return rd, nil
}

// LinkType returns the file's link-layer header type.
func (r *Reader) LinkType() uint32 { return r.link }

// SnapLen returns the file's snap length.
func (r *Reader) SnapLen() uint32 { return r.snap }

// Next returns the next packet, io.EOF at a clean end of the stream and
// io.ErrUnexpectedEOF if the stream ends inside a record.
func (r *Reader) Next() (Packet, error) {
	if _, err := io.ReadFull(r.r, r.hdr[:]); err != nil {
		return Packet{}, err // io.EOF only if no byte of the header was read
	}
	sec := r.order.Uint32(r.hdr[0:])
	frac := r.order.Uint32(r.hdr[4:])
	incl := r.order.Uint32(r.hdr[8:])
	orig := r.order.Uint32(r.hdr[12:])
	if incl > MaxSnapLen {
		return Packet{}, ErrRecord
	}
	data := make([]byte, incl)
	if _, err := io.ReadFull(r.r, data); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return Packet{}, err
	}
	ns := int64(frac)
	if !r.nano {
		ns *= 1000
	}
	return Packet{Time: time.Unix(int64(sec), ns), Data: data, OrigLen: int(orig)}, nil
}
