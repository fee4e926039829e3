package engine

import (
	"bytes"
	"encoding/binary"
	"io"
	"sync"
	"testing"
	"time"

	"xrnic/mem"
	"xrnic/wire/mpa"
	"xrnic/wire/rdmap"
	"xrnic/wire/term"
)

// nullLLP is a push LLP that swallows what tx writes.
type nullLLP struct {
	once   sync.Once
	closed chan struct{}
}

func (n *nullLLP) Read(p []byte) (int, error)          { <-n.closed; return 0, io.EOF }
func (n *nullLLP) Write(p []byte) (int, error)         { return len(p), nil }
func (n *nullLLP) CloseWrite() error                   { return nil }
func (n *nullLLP) Close() error                        { n.once.Do(func() { close(n.closed) }); return nil }
func (n *nullLLP) SetReadDeadline(time.Time) error     { return nil }
func (n *nullLLP) SetWriteDeadline(time.Time) error    { return nil }
func (n *nullLLP) EMSS() int                           { return 1460 }
func (n *nullLLP) StartPush(func([]byte) (int, error)) {}

// stagMagic in a fuzzed segment is replaced by the real STag of the
// registered buffer, so the fuzzer reaches placement.
const stagMagic = 0x53544147 // "STAG"

func fuzzSegments() [][]byte {
	var out [][]byte
	add := func(b []byte, n int, err error) {
		if err == nil {
			out = append(out, append([]byte(nil), b[:n]...))
		}
	}
	b := make([]byte, 256)
	add(b, 23, func() error { _, err := rdmap.PutSend(b, rdmap.OpSend, 0, 1, 0, true, 5); return err }())
	n, err := rdmap.PutWrite(b, stagMagic, 16, true, 8)
	add(b, n, err)
	n, err = rdmap.PutReadRequest(b, 1, rdmap.ReadParams{SinkSTag: 9, Size: 16, SrcSTag: stagMagic, SrcTO: 0})
	add(b, n, err)
	n, err = rdmap.PutAtomicRequest(b, 1, rdmap.AtomicParams{AOpCode: rdmap.AOpCmpSwap, STag: stagMagic, TO: 8, CompareMask: ^uint64(0), AddSwapMask: ^uint64(0)})
	add(b, n, err)
	n, err = rdmap.PutImmediate(b, rdmap.OpImmediateSE, 1, [8]byte{1})
	add(b, n, err)
	n, err = rdmap.PutAtomicResponse(b, 1, 1, 5)
	add(b, n, err)
	n, err = rdmap.PutReadResponse(b, 9, 0, true, 0)
	add(b, n, err)
	n, err = rdmap.PutTerminate(b, term.DDPTaggedInvalidSTag, out[1])
	add(b, n, err)
	return out
}

// encodeSegs is the fuzz input format: 2-byte length, then the segment.
func encodeSegs(segs ...[]byte) []byte {
	var in []byte
	for _, s := range segs {
		in = binary.BigEndian.AppendUint16(in, uint16(len(s)))
		in = append(in, s...)
	}
	return in
}

// FuzzRx feeds arbitrary DDP segments (framed with valid CRCs) or, when
// the input starts with 0xFF, arbitrary raw stream bytes to a connected
// responder QP: nothing may panic and no byte outside the registered
// buffer may change.
func FuzzRx(f *testing.F) {
	segs := fuzzSegments()
	for _, s := range segs {
		f.Add(encodeSegs(s))
	}
	f.Add(encodeSegs(segs...))
	f.Add(append([]byte{0xFF}, 0, 4, 0x41, 0x43, 0, 0))
	f.Fuzz(runFuzzBody)
}

func runFuzzBody(t *testing.T, in []byte) {
	{
		d, err := Open(Config{MaxMR: 16, ConnTimeout: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		pd := d.AllocPD()
		cq, _ := d.CreateCQ(16)
		qp, err := d.CreateQP(QPAttr{PD: pd, SendCQ: cq, RecvCQ: cq, SQDepth: 4, RQDepth: 4, MaxIRD: 2})
		if err != nil {
			t.Fatal(err)
		}
		mem0 := make([]byte, 64+256+64)
		mr, err := d.RegMR(mem0[64:64+256], mem.MROptions{PD: pd, Access: mem.LocalWrite | mem.RemoteRead | mem.RemoteWrite | mem.RemoteAtomic, TO: mem.TOZeroBased, RemoteInvalidate: true})
		if err != nil {
			t.Fatal(err)
		}
		qp.PostRecv(&RecvWR{ID: 1, SGL: []SGE{{Addr: 0, Length: 32, LKey: mr.STag()}}})
		qp.PostRecv(&RecvWR{ID: 2, SGL: []SGE{{Addr: 32, Length: 8, LKey: mr.STag()}}})
		qp.begin()
		if err := qp.establish(&nullLLP{closed: make(chan struct{})}, ConnInfo{CRC: true, IRD: 2, ORD: 2}, 0); err != nil {
			t.Fatal(err)
		}
		var stream []byte
		if len(in) > 0 && in[0] == 0xFF {
			stream = in[1:]
		} else {
			fr := mpa.NewFramer(mpa.FramerConfig{CRC: true})
			buf := make([]byte, 70000)
			var magic, real [4]byte
			binary.BigEndian.PutUint32(magic[:], stagMagic)
			binary.BigEndian.PutUint32(real[:], mr.STag())
			for len(in) >= 2 {
				n := int(binary.BigEndian.Uint16(in))
				in = in[2:]
				n = min(n, len(in))
				seg := bytes.ReplaceAll(in[:n], magic[:], real[:])
				in = in[n:]
				k, err := fr.Frame(buf, seg)
				if err != nil {
					continue
				}
				stream = append(stream, buf[:k]...)
			}
		}
		for len(stream) > 0 { // in uneven pieces
			k := min(len(stream), 1+len(stream)%37)
			qp.rxPush(stream[:k])
			stream = stream[k:]
		}
		qp.rxPush(nil)
		qp.Close()
		for i, v := range mem0 {
			if (i < 64 || i >= 64+256) && v != 0 {
				t.Fatalf("byte %d outside the MR changed", i)
			}
		}
	}
}
