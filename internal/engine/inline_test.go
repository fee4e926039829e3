package engine

import (
	"testing"
	"time"

	"xrnic/mem"
	"xrnic/transport"
	"xrnic/wire/mpa"
)

// TestTxStepOneFPDUAtATime checks the inline transmit seam: every piece
// txStep hands to put is exactly one whole FPDU, checked by an independent
// reader (the MPA Deframer, CRC and markers included), and a step honours
// room. Markers are where re-parsing FPDU lengths from the stream went
// wrong before.
func TestTxStepOneFPDUAtATime(t *testing.T) {
	for _, markers := range []bool{false, true} {
		d, err := Open(Config{ConnTimeout: 50 * time.Millisecond}) // Close waits that long for the null peer's FIN
		if err != nil {
			t.Fatal(err)
		}
		pd := d.AllocPD()
		cq, _ := d.CreateCQ(64)
		qp, err := d.CreateQP(QPAttr{PD: pd, SendCQ: cq, RecvCQ: cq, SQDepth: 32, RQDepth: 4})
		if err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 64<<10)
		mr, err := d.RegMR(buf, mem.MROptions{PD: pd, Access: mem.LocalWrite | mem.RemoteWrite, TO: mem.TOZeroBased})
		if err != nil {
			t.Fatal(err)
		}
		qp.begin()
		llp := &inlineNull{nullLLP: nullLLP{closed: make(chan struct{})}}
		if err := qp.establish(llp, ConnInfo{Initiator: true, CRC: true, MarkersTx: markers, IRD: 2, ORD: 2}, 0); err != nil {
			t.Fatal(err)
		}
		if llp.step == nil {
			t.Fatal("establish did not start the inline transmit seam")
		}
		sizes := []uint32{0, 1, 3, 100, 1400, 5000, 20000}
		for i, n := range sizes {
			err := qp.PostSend(&SendWR{ID: uint64(i), Op: OpWrite, SGL: []SGE{{Addr: 0, Length: n, LKey: mr.STag()}},
				RemoteSTag: 0x100, RemoteTO: 0})
			if err != nil {
				t.Fatal(err)
			}
		}
		df := mpa.NewDeframer(mpa.DeframerConfig{CRC: true, Markers: markers})
		fpdus, total := 0, 0
		for range 1000 {
			got := 0
			llp.step(4096, func(fpdu []byte) {
				ulpdu, n, err := df.Next(fpdu)
				if err != nil || ulpdu == nil || n != len(fpdu) || df.Pending() != 0 {
					t.Fatalf("markers %v: piece of %d bytes is not one FPDU: ulpdu %v consumed %d pending %d err %v",
						markers, len(fpdu), ulpdu != nil, n, df.Pending(), err)
				}
				fpdus++
				got += len(fpdu)
			})
			if got == 0 {
				break
			}
			if got > 4096+qp.maxWire() {
				t.Fatalf("a step of room 4096 put %d bytes", got)
			}
			total += got
		}
		want := 0
		for _, n := range sizes {
			want += int(n)
		}
		if fpdus < len(sizes) || total < want {
			t.Fatalf("markers %v: %d FPDUs, %d bytes for %d payload bytes", markers, fpdus, total, want)
		}
		d.Close()
	}
}

// inlineNull is a transport.InlineConn that sends nowhere: the test runs
// the transmit step itself, as a poll loop would.
type inlineNull struct {
	nullLLP
	step transport.TxStep
}

func (n *inlineNull) StartInline(step transport.TxStep) func() {
	n.step = step
	return func() {}
}
