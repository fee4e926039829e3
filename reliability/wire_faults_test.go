//go:build linux

package reliability

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"xrnic/atomics"
	"xrnic/bpf"
	"xrnic/internal/engine"
	"xrnic/internal/netnstest"
	"xrnic/mem"
	"xrnic/transport/afxdp"
	"xrnic/wire/term"
)

// Faults on the wire (issue 9, item 1). Two devices in namespaces A and B,
// joined through the faulty wire in nsM (netns_test.go), run a mixed
// workload from several QPs under each fault level, once over kernel TCP
// and once over afxdp (XDP steering + AF_XDP + our TCP). For afxdp the
// drop and byte-flip levels use the XDP program's own fault map (steered
// frames, on receive at both ends) and the wire carries the rest.
//
// The workload: per QP, iteration k posts a masked FetchAdd of
// (1<<32 | 1) with Add Mask bits 31 and 63 (two 32-bit counters, no carry
// between them) on one word shared by all QPs; every 8th iteration also a
// 4 KiB Write into one of 8 slots, a Read of it back, and a 512-byte Send.
// Every 64-bit word written or sent carries its own check (the write's id,
// its position and a hash of both), so a word placed from a corrupted frame
// is recognised wherever it lands. All WRs are signaled; up to 32 are
// outstanding per QP.
//
// Asserted, except at the swap level: every WR completes exactly once and
// successfully, every Read returns exactly what was written, every Send
// arrives intact, the slots end holding their last write, and the shared
// word ends at exactly N in both halves with the originals returned being
// exactly 0..N-1 (an atomic executed twice or lost would break that).
// At the byte-flip level the receivers' TCP checksum counters must have
// caught frames. At the swap level (two 16-bit words swapped: the TCP
// checksum stays valid) MPA must catch them: a QP may then fail, but only
// by the engine's own error at one end (see wfCaught), told to the other
// by its Terminate; every WR still completes exactly once (successes are
// exact), and no word from a corrupted frame is placed.
//
// CI runs 4 QPs x 2,500 FetchAdds per level; XRNIC_LONG=1 (or -long)
// runs 4 x 25,000. Every level logs one row of the table: completion
// rate, retransmissions, checksum drops, QPs failed, throughput.

type wfLevel struct {
	name string
	wire bpf.WireFault
	xdp  bpf.Fault // afxdp runs: instead of the wire's drop/flip
	swap bool
}

func wfLevels(afxdp bool) []wfLevel {
	lv := []wfLevel{
		{name: "clean"},
		{name: "drop 1%", wire: bpf.WireFault{DropPPM: 10_000}},
		{name: "drop 5%", wire: bpf.WireFault{DropPPM: 50_000}},
		{name: "dup 1%", wire: bpf.WireFault{DupPPM: 10_000}},
		{name: "reorder 1% gap 3", wire: bpf.WireFault{ReorderPPM: 10_000, Gap: 3}},
		{name: "mixed", wire: bpf.WireFault{DropPPM: 5_000, DupPPM: 5_000, ReorderPPM: 5_000, FlipPPM: 1_000, Gap: 2}},
		{name: "flip 0.1%", wire: bpf.WireFault{FlipPPM: 1_000}},
		{name: "swap 0.1%", wire: bpf.WireFault{SwapPPM: 1_000}, swap: true},
	}
	if afxdp {
		for i := range lv {
			w := &lv[i].wire
			lv[i].xdp = bpf.Fault{DropPPM: w.DropPPM, CorruptPPM: w.FlipPPM}
			w.DropPPM, w.FlipPPM = 0, 0
		}
	}
	return lv
}

const (
	wfQPs     = 4
	wfWindow  = 32
	wfSlots   = 8
	wfWriteSz = 4096
	wfSendSz  = 512
	wfEvery   = 8 // a Write, a Read and a Send every wfEvery FetchAdds
)

// wfWord is the self-checking word at 8-byte position p of the write or
// send with id s.
func wfWord(s uint32, p int) uint64 {
	h := (uint64(s)<<16 | uint64(p)) * 0x9E3779B97F4A7C15
	return uint64(s)<<32 | uint64(p)<<23 | (h>>41)&0x7fffff
}

// wfID returns the id of the word w at position p, and whether it is a
// valid word for that position.
func wfID(w uint64, p int) (uint32, bool) {
	s := uint32(w >> 32)
	return s, w == wfWord(s, p)
}

func wfFill(b []byte, s uint32) {
	for p := 0; p*8 < len(b); p++ {
		binary.NativeEndian.PutUint64(b[p*8:], wfWord(s, p))
	}
}

func wfWriteID(q, seq int) uint32 { return uint32(q)<<16 | uint32(seq) }
func wfSendID(q, seq int) uint32  { return 1<<31 | uint32(q)<<16 | uint32(seq) }

// WR ids: kind<<56 | sequence.
const (
	wfKindFA = iota + 1
	wfKindWrite
	wfKindRead
	wfKindSend
	wfKinds
)

type wfClient struct {
	qp  *engine.QP
	cq  *engine.CQ
	mr  *mem.MR
	buf []byte // [wfSlots]src 4K | [wfSlots]read 4K | [wfSlots]send 512 | [64]8 FA results
	// results
	seen   [wfKinds][]uint8
	origs  []uint64
	ok     [wfKinds]int
	posted int
	failed error // the QP's error, if it failed
}

// wfFPDUTimeout is the engines' partial-FPDU timer (Config.FPDUTimeout):
// well under wfHang, so that a stream stalled by a swapped ULPDU_Length
// ends by the engine's Terminate, never by the test's deadline. The
// request timer (Config.RequestTimeout) is set beyond wfHang: it must not
// end a stall in the timer's place, and a Stalled QP is then the timer's.
const (
	wfFPDUTimeout = 5 * time.Second
	wfHang        = 60 * time.Second // no completion for this long: a hang
)

// wfCaught says how an end's engine itself caught a swapped frame, by
// the Terminate it sent, or "" (none, or not for a swap):
//   - "CRC": the MPA CRC (Terminate LLP 2/0/0x02; RFC 5044 §4.4;
//     docs/spec/mpa.md#crc);
//   - "ULPDU_Length": a ULPDU_Length over the MULPDU of the MSS the end
//     advertised, refused at once (2/0/0x05; RFC 5044 §5.1;
//     docs/spec/mpa.md#mulpdu; engine cm.go maxULPDU);
//   - "stall": a ULPDU_Length within that bound but longer than what was
//     sent, so the partial FPDU never completed and the partial-FPDU timer
//     ended the QP (2/0/0x01, Stats.Stalled; engine watchdog.go).
func wfCaught(qp *engine.QP) string {
	st := qp.Stats()
	for _, tc := range st.TermsSent {
		switch {
		case errors.Is(tc.Err, term.MPACRCError):
			return "CRC"
		case errors.Is(tc.Err, term.MPALocalCatastrophic):
			return "ULPDU_Length"
		case errors.Is(tc.Err, term.MPAConnectionLost) && st.Stalled > 0:
			return "stall"
		}
	}
	return ""
}

// errHang: a client QP got no completion for wfHang.
var errHang = errors.New("hang")

type wfServer struct {
	qp       *engine.QP
	scq, rcq *engine.CQ
}

func (c *wfClient) srcOff(slot int) int  { return slot * wfWriteSz }
func (c *wfClient) readOff(slot int) int { return (wfSlots + slot) * wfWriteSz }
func (c *wfClient) sendOff(slot int) int { return 2*wfSlots*wfWriteSz + slot*wfSendSz }
func (c *wfClient) faOff(k int) int      { return 2*wfSlots*wfWriteSz + wfSlots*wfSendSz + (k%64)*8 }
func (c *wfClient) sge(off, n int) []engine.SGE {
	return []engine.SGE{{Addr: c.mr.BaseTO() + uint64(off), Length: uint32(n), LKey: c.mr.STag()}}
}

// server memory: word at 0; per QP: slots, then receive buffers.
func wfSlotOff(q, slot, nSends int) int {
	return 4096 + q*(wfSlots*wfWriteSz+(nSends+1)*wfSendSz) + slot*wfWriteSz
}
func wfRecvOff(q, i, nSends int) int {
	return 4096 + q*(wfSlots*wfWriteSz+(nSends+1)*wfSendSz) + wfSlots*wfWriteSz + i*wfSendSz
}

type wfResult struct {
	transport, level     string
	posted, completed    int
	qpsFailed            int
	elapsed              time.Duration
	bytes                int64
	retrans, csumDrops   uint64
	wire                 [2]bpf.WireCounters
	xdp                  bpf.Counters
	termsCRC, termsOther int
}

var (
	wfTableMu sync.Mutex
	wfTable   []wfResult
)

func TestIntegrationWireFaults(t *testing.T) {
	e := newWireEnv(t, true)
	nFA := 2_500
	if long() {
		nFA = 25_000
	}
	for _, tr := range []string{trKernel, trAFXDP} {
		t.Run(tr, func(t *testing.T) {
			a, b := wfOpen(t, e, tr)
			for _, lv := range wfLevels(tr == trAFXDP) {
				t.Run(strings.ReplaceAll(lv.name, " ", "_"), func(t *testing.T) {
					r := wfRun(t, e, tr, a, b, lv, nFA)
					wfTableMu.Lock()
					wfTable = append(wfTable, r)
					wfTableMu.Unlock()
				})
			}
		})
	}
	wfTableMu.Lock()
	defer wfTableMu.Unlock()
	var sb strings.Builder
	fmt.Fprintf(&sb, "\n%-7s %-17s %9s %9s %4s %8s %7s %8s %8s %9s\n", "llp", "level", "WRs", "complete", "QPs", "retrans", "csum", "kops/s", "MB/s", "faults")
	for _, r := range wfTable {
		w := r.wire[0].Add(r.wire[1])
		faults := fmt.Sprintf("wire d%d f%d s%d D%d h%d/%d xdp d%d c%d", w.Dropped, w.Flipped, w.Swapped, w.Duplicated, w.Held, w.Released, r.xdp.FaultDropped, r.xdp.FaultCorrupted)
		fmt.Fprintf(&sb, "%-7s %-17s %9d %8.2f%% %4d %8d %7d %8.1f %8.1f  %s (of %d TCP frames)\n", r.transport, r.level, r.posted,
			100*float64(r.completed)/float64(max(r.posted, 1)), r.qpsFailed, r.retrans, r.csumDrops,
			float64(r.posted)/r.elapsed.Seconds()/1e3, float64(r.bytes)/r.elapsed.Seconds()/1e6, faults, w.TCP())
	}
	t.Log(sb.String())
}

// The transports of the fault matrix.
const (
	trKernel = "kernel"
	trAFXDP  = "afxdp"
)

// xdpOf returns the afxdp transport of a device opened with trAFXDP.
func xdpOf(d *engine.Device) *afxdp.Transport { return d.Transport().(*afxdp.Transport) }

func wfOpen(t *testing.T, e *wireEnv, tr string) (a, b *engine.Device) {
	t.Helper()
	open := func(ns, dev string) *engine.Device {
		var x *afxdp.Config
		if tr == trAFXDP {
			// Native XDP: generic XDP skips skbs a tc program redirected
			// (skb_is_redirected in netif_receive_generic_xdp), which is
			// every frame from the wire; veth's native XDP runs on them.
			x = &afxdp.Config{Iface: dev, Mode: "native"}
		}
		return openEngine(t, ns, engine.Config{ConnTimeout: 10 * time.Second, FPDUTimeout: wfFPDUTimeout, RequestTimeout: 2 * wfHang}, x)
	}
	return open(e.nsA, e.devA), open(e.nsB, e.devB)
}

type wfCounters struct {
	retrans, csum uint64
	xdp           bpf.Counters
	wire          [2]bpf.WireCounters
}

func wfSnapshot(t *testing.T, e *wireEnv, tr string, a, b *engine.Device) wfCounters {
	t.Helper()
	var c wfCounters
	if tr == trKernel {
		for _, ns := range []string{e.nsA, e.nsB} {
			m := kernelTCP(t, ns)
			c.retrans += m["RetransSegs"]
			c.csum += m["InCsumErrors"]
		}
	} else {
		for _, d := range []*engine.Device{a, b} {
			st, err := xdpOf(d).TCPStats()
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range st {
				c.retrans += s.TxRetransmits
				c.csum += s.RxBadChecksum
			}
			x, err := xdpOf(d).Counters()
			if err != nil {
				t.Fatal(err)
			}
			c.xdp.FaultDropped += x.FaultDropped
			c.xdp.FaultCorrupted += x.FaultCorrupted
			c.xdp.Redirected += x.Redirected
		}
	}
	w, err := e.wire.Counters()
	if err != nil {
		t.Fatal(err)
	}
	c.wire = w
	return c
}

func wfSetFaults(t *testing.T, e *wireEnv, a, b *engine.Device, tr string, lv wfLevel) {
	t.Helper()
	if err := e.wire.SetFault(lv.wire); err != nil {
		t.Fatal(err)
	}
	if tr == trAFXDP {
		for _, d := range []*engine.Device{a, b} {
			if err := xdpOf(d).SetFault(lv.xdp); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// wfRun connects wfQPs QP pairs (B dials A), runs the workload under lv
// and checks everything.
func wfRun(t *testing.T, e *wireEnv, tr string, a, b *engine.Device, lv wfLevel, nFA int) wfResult {
	nSends := (nFA + wfEvery - 1) / wfEvery
	// Server A: one PD and one region for all its QPs.
	spd := a.AllocPD()
	sbuf := make([]byte, wfRecvOff(wfQPs, 0, nSends))
	smr, err := a.RegMR(sbuf, mem.MROptions{PD: spd, Access: mem.LocalWrite | mem.RemoteWrite | mem.RemoteRead | mem.RemoteAtomic})
	if err != nil {
		t.Fatal(err)
	}
	defer a.DeregMR(smr)
	word, err := atomics.Word(sbuf, 0)
	if err != nil {
		t.Fatal(err)
	}
	srv := make([]*wfServer, wfQPs)
	cli := make([]*wfClient, wfQPs)
	for q := range wfQPs {
		s := &wfServer{}
		s.scq, _ = a.CreateCQ(64)
		s.rcq, _ = a.CreateCQ(nSends + 16)
		if s.qp, err = a.CreateQP(engine.QPAttr{PD: spd, SendCQ: s.scq, RecvCQ: s.rcq, SQDepth: 16, RQDepth: nSends + 1}); err != nil {
			t.Fatal(err)
		}
		for i := range nSends + 1 {
			off := wfRecvOff(q, i, nSends)
			if err := s.qp.PostRecv(&engine.RecvWR{ID: uint64(i), SGL: []engine.SGE{{Addr: smr.BaseTO() + uint64(off), Length: wfSendSz, LKey: smr.STag()}}}); err != nil {
				t.Fatal(err)
			}
		}
		srv[q] = s
		c := &wfClient{origs: make([]uint64, 0, nFA)}
		cpd := b.AllocPD()
		c.buf = make([]byte, 2*wfSlots*wfWriteSz+wfSlots*wfSendSz+64*8)
		if c.mr, err = b.RegMR(c.buf, mem.MROptions{PD: cpd, Access: mem.LocalWrite}); err != nil {
			t.Fatal(err)
		}
		c.cq, _ = b.CreateCQ(wfWindow + 16)
		if c.qp, err = b.CreateQP(engine.QPAttr{PD: cpd, SendCQ: c.cq, RecvCQ: c.cq, SQDepth: wfWindow + 8, RQDepth: 4}); err != nil {
			t.Fatal(err)
		}
		for k := range wfKinds {
			c.seen[k] = make([]uint8, nFA)
		}
		cli[q] = c
	}
	defer func() {
		for q := range wfQPs {
			cli[q].qp.Close()
			srv[q].qp.Close()
			b.DeregMR(cli[q].mr)
		}
	}()
	wfConnect(t, e, a, b, srv, cli)

	before := wfSnapshot(t, e, tr, a, b)
	wfSetFaults(t, e, a, b, tr, lv)
	start := time.Now()
	var wg sync.WaitGroup
	for q := range wfQPs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cli[q].run(q, nFA, smr.STag(), smr.BaseTO(), nSends)
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	wfSetFaults(t, e, a, b, tr, wfLevel{})
	after := wfSnapshot(t, e, tr, a, b)

	r := wfResult{transport: tr, level: lv.name, elapsed: elapsed,
		retrans: after.retrans - before.retrans, csumDrops: after.csum - before.csum,
		wire: [2]bpf.WireCounters{after.wire[0].Sub(before.wire[0]), after.wire[1].Sub(before.wire[1])},
		xdp:  bpf.Counters{FaultDropped: after.xdp.FaultDropped - before.xdp.FaultDropped, FaultCorrupted: after.xdp.FaultCorrupted - before.xdp.FaultCorrupted}}

	// Exactly once, per client.
	var okFA int
	var origs []uint64
	for q, c := range cli {
		r.posted += c.posted
		for k := range wfKinds {
			for i, n := range c.seen[k] {
				if n > 1 {
					t.Errorf("QP %d: WR kind %d #%d completed %d times", q, k, i, n)
				}
				r.completed += int(n)
			}
		}
		okFA += len(c.origs)
		origs = append(origs, c.origs...)
		r.bytes += int64(len(c.origs))*8 + int64(c.count(wfKindWrite)+c.count(wfKindRead))*wfWriteSz + int64(c.count(wfKindSend))*wfSendSz
		if c.failed != nil {
			r.qpsFailed++
			if !lv.swap {
				t.Errorf("QP %d failed: %v", q, c.failed)
			}
		}
	}
	if r.completed != r.posted {
		t.Errorf("%d WRs posted, %d completed", r.posted, r.completed)
	}
	// Servers: every receive completes exactly once (a QP that failed
	// flushes the rest); a QP that did not fail got every Send intact
	// and the closing one.
	for q, s := range srv {
		failed := cli[q].failed != nil
		want := nSends + 1
		got := make([]uint8, want)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		wc := make([]engine.Completion, 64)
		n := 0
		for n < want {
			k := s.rcq.Poll(wc)
			if k == 0 {
				if err := s.rcq.Wait(ctx); err != nil {
					t.Errorf("server QP %d: %d of %d receives completed in 30 s (state %v, client failed: %v): hang", q, n, want, s.qp.State(), cli[q].failed)
					break
				}
				continue
			}
			for _, c := range wc[:k] {
				n++
				got[c.ID]++
				if got[c.ID] > 1 {
					t.Errorf("server QP %d: receive %d completed twice", q, c.ID)
				}
				if c.Status != engine.StatusSuccess {
					if !failed {
						t.Errorf("server QP %d: receive %d: %v %v", q, c.ID, c.Status, c.Err)
					}
					continue
				}
				if int(c.ID) == nSends {
					continue // the closing Send
				}
				off := wfRecvOff(q, int(c.ID), nSends)
				if err := wfCheck(sbuf[off:off+wfSendSz], wfSendID(q, int(c.ID)), wfSendID(q, int(c.ID))); err != nil || c.ByteLen != wfSendSz {
					t.Errorf("server QP %d: Send %d: %d bytes, %v", q, c.ID, c.ByteLen, err)
				}
			}
		}
		cancel()
		if lv.swap {
			// A failed pair: one end's engine caught the swap, and the
			// other end caught one too or was told by its Terminate.
			caught := map[string]string{}
			for end, qp := range map[string]*engine.QP{"server": s.qp, "client": cli[q].qp} {
				if how := wfCaught(qp); how != "" {
					caught[end] = how
				} else if x := qp.Err(); x != nil && !errors.Is(x, qp.PeerTerminate()) {
					t.Errorf("QP pair %d: %s: %v, not caught by MPA nor told by the peer's Terminate (%v)", q, end, x, qp.PeerTerminate())
				} else if failed && x == nil {
					t.Errorf("QP pair %d failed, but the %s QP is not in error: no Terminate reached it", q, end)
				}
			}
			for _, how := range caught {
				if how == "CRC" {
					r.termsCRC++
				} else {
					r.termsOther++
				}
			}
			if errors.Is(cli[q].failed, errHang) {
				t.Errorf("QP %d: %v: a stalled stream must end by the engine's Terminate within the partial-FPDU timer (%v)", q, cli[q].failed, wfFPDUTimeout)
			} else if failed && len(caught) == 0 {
				t.Errorf("QP %d failed (%v), but neither end's MPA caught a swap: server %v, client %v (Terminates received: %v, %v)",
					q, cli[q].failed, s.qp.Err(), cli[q].qp.Err(), s.qp.PeerTerminate(), cli[q].qp.PeerTerminate())
			}
			if len(caught) > 0 {
				t.Logf("QP pair %d: caught by %v", q, caught)
			}
		} else {
			for _, x := range []*term.Error{s.qp.Err(), cli[q].qp.Err()} {
				if x != nil {
					r.termsOther++
					t.Errorf("QP pair %d: %v", q, x)
				}
			}
		}
		// Slots: each ends with its last write; after a failure, only
		// intact words of writes to that slot may be there.
		for slot := range wfSlots {
			off := wfSlotOff(q, slot, nSends)
			if failed {
				// A Write cut short by the failure leaves its
				// placed segments, and a segment boundary can split
				// a word: every word must be a prefix of one write's
				// word (or the initial 0) followed by the suffix of
				// another's. A word from a corrupted frame is not.
				for p := 0; p*8 < wfWriteSz; p++ {
					w := binary.NativeEndian.Uint64(sbuf[off+p*8:])
					cands := []uint64{0}
					for j := slot; j < nSends; j += wfSlots {
						cands = append(cands, wfWord(wfWriteID(q, j), p))
					}
					if !wfSplice(w, cands) {
						t.Errorf("QP %d slot %d word %d: %#x was placed from a corrupted frame", q, slot, p, w)
						break
					}
				}
				continue
			}
			last := -1
			for j := slot; j < nSends; j += wfSlots {
				last = j
			}
			if last >= 0 {
				if err := wfCheck(sbuf[off:off+wfWriteSz], wfWriteID(q, last), wfWriteID(q, last)); err != nil {
					t.Errorf("QP %d slot %d: %v", q, slot, err)
				}
			}
		}
	}
	// The shared word.
	v := atomic.LoadUint64(word)
	lo, hi := v&0xffffffff, v>>32
	if lo != hi {
		t.Errorf("counter halves differ: %d and %d (a carry crossed the mask)", lo, hi)
	}
	slices.Sort(origs)
	for i, o := range origs {
		if o&0xffffffff != o>>32 {
			t.Errorf("original %#x: halves differ", o)
			break
		}
		if i > 0 && o == origs[i-1] {
			t.Errorf("original %d returned twice: an atomic executed twice", o&0xffffffff)
			break
		}
		if !lv.swap && o&0xffffffff != uint64(i) {
			t.Errorf("originals are not 0..N-1: #%d is %d", i, o&0xffffffff)
			break
		}
	}
	if lv.swap {
		if lo < uint64(okFA) || lo > uint64(wfQPs*nFA) {
			t.Errorf("counter %d: %d FetchAdds succeeded, at most %d posted", lo, okFA, wfQPs*nFA)
		}
		// Nothing else is lost at this level, so every swapped frame
		// carried fresh MPA data (payload-less frames count as
		// SwapNoop) and must have failed its QP, caught by MPA (above).
		if sw := r.wire[0].Swapped + r.wire[1].Swapped; sw > 0 && (r.qpsFailed == 0 || r.termsCRC+r.termsOther == 0) || uint64(r.qpsFailed) > sw {
			t.Errorf("%d frames swapped, %d QPs failed, %d caught by the MPA CRC, %d otherwise", sw, r.qpsFailed, r.termsCRC, r.termsOther)
		}
	} else if lo != uint64(wfQPs*nFA) || len(origs) != wfQPs*nFA {
		t.Errorf("counter %d, %d originals: want %d", lo, len(origs), wfQPs*nFA)
	}
	if w := r.wire[0].Add(r.wire[1]); w.Flipped+r.xdp.FaultCorrupted > 0 && r.csumDrops == 0 {
		t.Errorf("%d frames flipped, no TCP checksum error counted", w.Flipped+r.xdp.FaultCorrupted)
	}
	if w := r.wire[0].Add(r.wire[1]); w.HoldLost+w.RedirectFailed > 0 {
		t.Logf("wire: %d held frames lost, %d redirects failed", w.HoldLost, w.RedirectFailed)
	}
	t.Logf("%s %s: %d WRs in %v, %d QPs failed, retrans %d, csum drops %d, wire %+v %+v, xdp %+v", tr, lv.name, r.posted, elapsed.Round(time.Millisecond),
		r.qpsFailed, r.retrans, r.csumDrops, r.wire[0], r.wire[1], r.xdp)
	return r
}

// count is the number of successful completions of a kind.
func (c *wfClient) count(kind int) int { return c.ok[kind] }

// termOf is the error a QP detected or was told of (nil if none).
func termOf(qp *engine.QP) error {
	if e := qp.Err(); e != nil {
		return e
	}
	if e := qp.PeerTerminate(); e != nil {
		return e
	}
	return nil
}

// wfSplice reports whether w's bytes (memory order) are a prefix of one
// candidate followed by the suffix of another.
func wfSplice(w uint64, cands []uint64) bool {
	var b [8]byte
	binary.NativeEndian.PutUint64(b[:], w)
	match := func(c uint64, lo, hi int) bool {
		var x [8]byte
		binary.NativeEndian.PutUint64(x[:], c)
		return string(x[lo:hi]) == string(b[lo:hi])
	}
	for k := 0; k <= 8; k++ {
		pre, suf := false, false
		for _, c := range cands {
			pre = pre || match(c, 0, k)
			suf = suf || match(c, k, 8)
		}
		if pre && suf {
			return true
		}
	}
	return false
}

// wfCheck checks that every word of b belongs to an id in [lo, hi].
func wfCheck(b []byte, lo, hi uint32) error {
	for p := 0; p*8 < len(b); p++ {
		id, ok := wfID(binary.NativeEndian.Uint64(b[p*8:]), p)
		if !ok || id < lo || id > hi {
			return fmt.Errorf("word %d is %#x: not of write %#x", p, binary.NativeEndian.Uint64(b[p*8:]), lo)
		}
	}
	return nil
}

func wfConnect(t *testing.T, e *wireEnv, a, b *engine.Device, srv []*wfServer, cli []*wfClient) {
	t.Helper()
	var ln *engine.Listener
	if err := netnstest.In(t, e.nsA, func() (err error) {
		ln, err = a.Listen("tcp", netip.AddrPortFrom(rlIPA, 0).String())
		return err
	}); err != nil {
		t.Fatalf("listen: %v", err)
	}
	defer ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	acc := make(chan error, 1)
	go func() {
		for i := range srv {
			req, err := ln.Accept(ctx)
			if err == nil {
				err = req.Accept(ctx, srv[i].qp, engine.ConnParams{})
			}
			if err != nil {
				acc <- fmt.Errorf("accept %d: %w", i, err)
				return
			}
		}
		acc <- nil
	}()
	for i := range cli {
		if err := netnstest.In(t, e.nsB, func() error { return cli[i].qp.Connect(ctx, ln.Addr().String(), engine.ConnParams{}) }); err != nil {
			t.Fatalf("connect %d: %v", i, err)
		}
	}
	if err := <-acc; err != nil {
		t.Fatal(err)
	}
}

// run is one client QP's loop: post up to wfWindow WRs, reap, check.
func (c *wfClient) run(q, nFA int, rstag uint32, rbase uint64, nSends int) {
	wc := make([]engine.Completion, 32)
	outstanding := 0
	post := func(wr *engine.SendWR) bool {
		if c.failed != nil {
			return false
		}
		if err := c.qp.PostSend(wr); err != nil {
			c.failed = fmt.Errorf("post: %w (QP error %v, peer %v)", err, c.qp.Err(), c.qp.PeerTerminate())
			return false
		}
		outstanding++
		return true
	}
	k := 0
	for {
		for c.failed == nil && k < nFA && outstanding+4 <= wfWindow {
			if !post(&engine.SendWR{ID: wfKindFA<<56 | uint64(k), Op: engine.OpFetchAdd, Flags: engine.FlagSignaled,
				SGL: c.sge(c.faOff(k), 8), RemoteSTag: rstag, RemoteTO: rbase, CompareAdd: 1<<32 | 1, AddMask: 1<<31 | 1<<63}) {
				break
			}
			if k%wfEvery == 0 {
				j := k / wfEvery
				slot := j % wfSlots
				wfFill(c.buf[c.srcOff(slot):c.srcOff(slot)+wfWriteSz], wfWriteID(q, j))
				rto := rbase + uint64(wfSlotOff(q, slot, nSends))
				if !post(&engine.SendWR{ID: wfKindWrite<<56 | uint64(k), Op: engine.OpWrite, Flags: engine.FlagSignaled,
					SGL: c.sge(c.srcOff(slot), wfWriteSz), RemoteSTag: rstag, RemoteTO: rto}) {
					break
				}
				clear(c.buf[c.readOff(slot) : c.readOff(slot)+wfWriteSz])
				if !post(&engine.SendWR{ID: wfKindRead<<56 | uint64(k), Op: engine.OpRead, Flags: engine.FlagSignaled,
					SGL: c.sge(c.readOff(slot), wfWriteSz), RemoteSTag: rstag, RemoteTO: rto}) {
					break
				}
				wfFill(c.buf[c.sendOff(slot):c.sendOff(slot)+wfSendSz], wfSendID(q, j))
				if !post(&engine.SendWR{ID: wfKindSend<<56 | uint64(k), Op: engine.OpSend, Flags: engine.FlagSignaled,
					SGL: c.sge(c.sendOff(slot), wfSendSz)}) {
					break
				}
			}
			k++
		}
		if outstanding == 0 {
			break
		}
		n := c.cq.Poll(wc)
		if n == 0 {
			ctx, cancel := context.WithTimeout(context.Background(), wfHang)
			err := c.cq.Wait(ctx)
			cancel()
			if err != nil {
				c.failed = fmt.Errorf("%w: %d WRs outstanding for %v (QP state %v, error %v, peer's Terminate %v)",
					errHang, outstanding, wfHang, c.qp.State(), c.qp.Err(), c.qp.PeerTerminate())
				break
			}
			continue
		}
		for _, x := range wc[:n] {
			outstanding--
			kind, i := x.ID>>56, int(x.ID&(1<<56-1))
			c.seen[kind][i]++
			if x.Status != engine.StatusSuccess {
				if c.failed == nil {
					c.failed = fmt.Errorf("WR kind %d #%d: %v: %w", kind, i, x.Status, errOr(x.Err, termOf(c.qp)))
				}
				continue
			}
			c.ok[kind]++
			switch kind {
			case wfKindFA:
				c.origs = append(c.origs, x.AtomicOrig)
				if binary.NativeEndian.Uint64(c.buf[c.faOff(i):]) != x.AtomicOrig {
					c.failed = fmt.Errorf("FetchAdd #%d: completion %#x, buffer %#x", i, x.AtomicOrig, binary.NativeEndian.Uint64(c.buf[c.faOff(i):]))
				}
			case wfKindRead:
				j := i / wfEvery
				slot := j % wfSlots
				if err := wfCheck(c.buf[c.readOff(slot):c.readOff(slot)+wfWriteSz], wfWriteID(q, j), wfWriteID(q, j)); err != nil {
					c.failed = fmt.Errorf("Read #%d back: %w", j, err)
				}
			}
		}
	}
	// Posted = completed + lost; count what was accepted.
	for kind := range wfKinds {
		for _, v := range c.seen[kind] {
			c.posted += int(v)
		}
	}
	c.posted += outstanding
	if c.failed != nil {
		return
	}
	// The closing Send orders the server's view of this QP's memory.
	if err := c.qp.PostSend(&engine.SendWR{ID: 1 << 60, Op: engine.OpSend, Flags: engine.FlagSignaled, SGL: c.sge(c.sendOff(0), 8)}); err != nil {
		c.failed = err
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for c.cq.Poll(wc[:1]) == 0 {
		if err := c.cq.Wait(ctx); err != nil {
			c.failed = errors.New("closing Send: hang")
			return
		}
	}
	if wc[0].Status != engine.StatusSuccess {
		c.failed = fmt.Errorf("closing Send: %v", wc[0].Status)
	}
}

func errOr(a, b error) error {
	if a != nil {
		return a
	}
	if b != nil {
		return b
	}
	return errors.New("no iWARP error recorded")
}
