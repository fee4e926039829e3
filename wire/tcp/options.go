package tcp

import (
	"encoding/binary"
	"errors"
)

// Option kinds (IANA "TCP Option Kind Numbers").
const (
	OptEOL           uint8 = 0 // End of Option List (RFC 9293)
	OptNOP           uint8 = 1 // No-Operation (RFC 9293)
	OptMSS           uint8 = 2 // Maximum Segment Size (RFC 9293 §3.7.1), length 4
	OptWindowScale   uint8 = 3 // Window Scale (RFC 7323 §2), length 3
	OptSACKPermitted uint8 = 4 // SACK-Permitted (RFC 2018 §2), length 2
	OptSACK          uint8 = 5 // SACK (RFC 2018 §3), length 2+8n, 1 ≤ n ≤ 4
	OptTimestamps    uint8 = 8 // Timestamps (RFC 7323 §3), length 10
)

// MaxSACKBlocks is the most SACK blocks one option carries (RFC 2018 §3:
// 40 option bytes hold at most 4).
const MaxSACKBlocks = 4

// Option errors.
var (
	ErrOptionTruncated = errors.New("tcp: option runs past the end of the options")
	ErrOptionLen       = errors.New("tcp: option length invalid for its kind")
	ErrOptionsTooLong  = errors.New("tcp: options do not fit in 40 bytes")
)

// Option is one option found by an [OptionIter]: its kind and the bytes
// after the kind and length octets. Data aliases the segment.
type Option struct {
	Kind uint8
	Data []byte
}

// MSS returns the value of an [OptMSS] option.
func (o Option) MSS() uint16 { return binary.BigEndian.Uint16(o.Data) }

// WindowScale returns the shift count of an [OptWindowScale] option, as
// sent (RFC 7323 §2.3 says a receiver uses 14 for anything larger; that is
// left to the TCP).
func (o Option) WindowScale() uint8 { return o.Data[0] }

// Timestamps returns TSval and TSecr of an [OptTimestamps] option.
func (o Option) Timestamps() (val, ecr uint32) {
	return binary.BigEndian.Uint32(o.Data), binary.BigEndian.Uint32(o.Data[4:])
}

// SACKBlocks returns the number of blocks in an [OptSACK] option.
func (o Option) SACKBlocks() int { return len(o.Data) / 8 }

// SACKBlock returns block i of an [OptSACK] option.
func (o Option) SACKBlock(i int) SACKBlock {
	d := o.Data[8*i:]
	return SACKBlock{Left: Seq(binary.BigEndian.Uint32(d)), Right: Seq(binary.BigEndian.Uint32(d[4:]))}
}

// SACKBlock is one SACK block: octets Left up to (not including) Right.
type SACKBlock struct {
	Left, Right Seq
}

// OptionIter walks a TCP option list without allocating. NOP options are
// skipped, EOL ends the walk (whatever follows is padding), and every other
// option, known or not, is returned with its data; unknown kinds are
// skipped over by their length octet. Known kinds with a wrong length, a
// length below 2, or a length running past the list stop the walk with an
// error.
//
//	it := tcp.NewOptionIter(h.Options())
//	for it.Next() {
//		o := it.Option()
//		...
//	}
//	if it.Err() != nil { ... }
type OptionIter struct {
	b   []byte
	opt Option
	err error
}

// NewOptionIter returns an iterator over the option bytes b.
func NewOptionIter(b []byte) OptionIter { return OptionIter{b: b} }

// Next advances to the next option and reports whether there is one.
func (it *OptionIter) Next() bool {
	for len(it.b) > 0 {
		switch it.b[0] {
		case OptEOL:
			it.b = nil
			return false
		case OptNOP:
			it.b = it.b[1:]
			continue
		}
		if len(it.b) < 2 {
			return it.fail(ErrOptionTruncated)
		}
		k, l := it.b[0], int(it.b[1])
		if l < 2 {
			return it.fail(ErrOptionLen)
		}
		if l > len(it.b) {
			return it.fail(ErrOptionTruncated)
		}
		if !validLen(k, l) {
			return it.fail(ErrOptionLen)
		}
		it.opt = Option{Kind: k, Data: it.b[2:l]}
		it.b = it.b[l:]
		return true
	}
	return false
}

func (it *OptionIter) fail(err error) bool {
	it.err = err
	it.b = nil
	it.opt = Option{}
	return false
}

// Option returns the current option; valid after Next returned true.
func (it *OptionIter) Option() Option { return it.opt }

// Err returns the error that stopped the walk, nil at a clean end.
func (it *OptionIter) Err() error { return it.err }

func validLen(kind uint8, l int) bool {
	switch kind {
	case OptMSS:
		return l == 4
	case OptWindowScale:
		return l == 3
	case OptSACKPermitted:
		return l == 2
	case OptTimestamps:
		return l == 10
	case OptSACK:
		n := l - 2
		return n >= 8 && n%8 == 0 && n/8 <= MaxSACKBlocks
	}
	return true
}

// Options is the decoded set of options TCP uses. The zero value means
// "no options".
type Options struct {
	HasMSS         bool
	MSS            uint16
	HasWindowScale bool
	WindowScale    uint8
	SACKPermitted  bool
	HasTimestamps  bool
	TSVal, TSEcr   uint32
	NumSACK        int // number of valid entries in SACK, 0..4
	SACK           [MaxSACKBlocks]SACKBlock
}

// ParseOptions decodes the option bytes b into o, which is reset first.
// Unknown options are skipped; for repeated options the last one wins.
func ParseOptions(b []byte, o *Options) error {
	*o = Options{}
	it := NewOptionIter(b)
	for it.Next() {
		opt := it.Option()
		switch opt.Kind {
		case OptMSS:
			o.HasMSS, o.MSS = true, opt.MSS()
		case OptWindowScale:
			o.HasWindowScale, o.WindowScale = true, opt.WindowScale()
		case OptSACKPermitted:
			o.SACKPermitted = true
		case OptTimestamps:
			o.HasTimestamps = true
			o.TSVal, o.TSEcr = opt.Timestamps()
		case OptSACK:
			// A repeated SACK option replaces the earlier one whole: no
			// blocks of a longer first one stay behind NumSACK.
			o.SACK = [MaxSACKBlocks]SACKBlock{}
			o.NumSACK = opt.SACKBlocks()
			for i := range o.NumSACK {
				o.SACK[i] = opt.SACKBlock(i)
			}
		}
	}
	return it.Err()
}

// Len returns the number of bytes [PutOptions] writes for o (a multiple of
// 4), which may exceed 40; PutOptions then fails.
func (o *Options) Len() int {
	n := 0
	if o.HasMSS {
		n += 4
	}
	if o.HasTimestamps {
		n += 12 // NOP NOP TS, or SACKP TS
	} else if o.SACKPermitted {
		n += 4 // NOP NOP SACKP
	}
	if o.HasWindowScale {
		n += 4 // NOP WS
	}
	if o.NumSACK > 0 {
		n += 4 + 8*o.NumSACK // NOP NOP SACK
	}
	return n
}

// PutOptions writes o into b and returns the number of bytes written, a
// multiple of 4 (so it can follow a TCP header directly). The layout is the
// one Linux uses, with every multi-byte value 32-bit aligned by NOPs:
//
//	MSS:                2 4 mss(2)
//	SACK-Permitted+TS:  4 2 8 10 tsval(4) tsecr(4)
//	TS alone:           1 1 8 10 tsval(4) tsecr(4)
//	SACK-Permitted:     1 1 4 2
//	Window Scale:       1 3 3 shift
//	SACK blocks:        1 1 5 2+8n blocks
//
// It fails with [ErrOptionsTooLong] if NumSACK is out of 0..4 or the result
// would exceed 40 bytes (timestamps leave room for 3 SACK blocks), and with
// [ErrShortBuffer] if b is too small.
func PutOptions(b []byte, o *Options) (int, error) {
	if o.NumSACK < 0 || o.NumSACK > MaxSACKBlocks {
		return 0, ErrOptionsTooLong
	}
	n := o.Len()
	if n > MaxOptionsLen {
		return 0, ErrOptionsTooLong
	}
	if len(b) < n {
		return 0, ErrShortBuffer
	}
	b = b[:n]
	i := 0
	if o.HasMSS {
		b[0], b[1] = OptMSS, 4
		binary.BigEndian.PutUint16(b[2:], o.MSS)
		i = 4
	}
	if o.HasTimestamps {
		if o.SACKPermitted {
			b[i], b[i+1] = OptSACKPermitted, 2
		} else {
			b[i], b[i+1] = OptNOP, OptNOP
		}
		b[i+2], b[i+3] = OptTimestamps, 10
		binary.BigEndian.PutUint32(b[i+4:], o.TSVal)
		binary.BigEndian.PutUint32(b[i+8:], o.TSEcr)
		i += 12
	} else if o.SACKPermitted {
		b[i], b[i+1], b[i+2], b[i+3] = OptNOP, OptNOP, OptSACKPermitted, 2
		i += 4
	}
	if o.HasWindowScale {
		b[i], b[i+1], b[i+2], b[i+3] = OptNOP, OptWindowScale, 3, o.WindowScale
		i += 4
	}
	if o.NumSACK > 0 {
		b[i], b[i+1], b[i+2], b[i+3] = OptNOP, OptNOP, OptSACK, byte(2+8*o.NumSACK)
		i += 4
		for _, blk := range o.SACK[:o.NumSACK] {
			binary.BigEndian.PutUint32(b[i:], uint32(blk.Left))
			binary.BigEndian.PutUint32(b[i+4:], uint32(blk.Right))
			i += 8
		}
	}
	return i, nil
}
