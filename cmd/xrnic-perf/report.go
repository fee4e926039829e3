package main

import (
	"fmt"
	"math"
	"os"
	"slices"
	"strings"

	"xrnic/internal/perfsuite/perfjson"
)

// The report arithmetic and layout follow perftest (linux-rdma/perftest,
// print_report_bw and print_report_lat): numbers printed by xrnic-perf can
// be read next to ib_*_bw and ib_*_lat output column by column.

const resultLine = "---------------------------------------------------------------------------------------"

// Units of the bandwidth columns.
const (
	mib  = 1 << 20 // MiB/sec (perftest's default, 0x100000)
	gbit = 125e6   // Gb/sec: 1.25e8 bytes per second (--report_gbits)
)

// BWResult is one line of a bandwidth report; its fields and JSON keys
// are perfjson's (the demo and the sweep read them), the line layout is
// perftest's and lives here.
type BWResult perfjson.BWResult

// BWSamples are the timestamps of a bandwidth run, in nanoseconds from an
// arbitrary origin, indexed like perftest's tposted/tcompleted: Posted[i]
// is when the i-th work request (over all QPs) was posted, Completed[j]
// when the completion covering the j-th was polled. With completion
// moderation only every CQMod-th entry of Completed (index CQMod-1,
// 2·CQMod-1, ...) and the last one are filled.
type BWSamples struct {
	Size      int
	Iters     int // per QP
	QPs       int
	CQMod     int
	PostList  int
	Posted    []int64
	Completed []int64
	NoPeak    bool
	// Duplex doubles the bytes per message (perftest's -b on the side
	// that reports both directions).
	Duplex bool
}

// computeBW is perftest's print_report_bw arithmetic.
//
// Average bandwidth: size × iterations × QPs over the time from the first
// post to the last completion. Peak: the best per-message time over any
// window from a post i to a completion j (j on the moderation grid), i.e.
// min over i ≤ j of (Completed[j] − Posted[i]) / (j − i + 1). MsgRate: messages
// per second over the whole run, in millions.
func computeBW(s BWSamples, unit float64) BWResult {
	n := s.Iters * s.QPs
	r := BWResult{Size: s.Size, Iters: s.Iters, Unit: unitName(unit)}
	if n == 0 || len(s.Posted) < n || len(s.Completed) < n {
		return r
	}
	cqMod := max(s.CQMod, 1)
	postList := max(s.PostList, 1)
	tsize := float64(s.Size)
	if s.Duplex {
		tsize *= 2
	}
	if !s.NoPeak {
		best := math.Inf(1)
		for i := 0; i < n; i += postList {
			for j := roundUp(i+1, cqMod) - 1; j < n; j += cqMod {
				if s.Completed[j] == 0 {
					continue
				}
				t := float64(s.Completed[j]-s.Posted[i]) / float64(j-i+1)
				if t > 0 && t < best {
					best = t
				}
			}
			// The last completion is always stamped, also off the grid.
			if (n-1)%cqMod != cqMod-1 {
				j := n - 1
				t := float64(s.Completed[j]-s.Posted[i]) / float64(j-i+1)
				if t > 0 && t < best {
					best = t
				}
			}
		}
		if !math.IsInf(best, 1) {
			r.Peak = tsize / (best / 1e9) / unit
		}
	}
	total := float64(s.Completed[n-1]-s.Posted[0]) / 1e9
	if total > 0 {
		r.Average = tsize * float64(n) / total / unit
		r.MsgRate = float64(n) / total / 1e6
	}
	return r
}

// durationBW is the report of a timed run (-D): no peak (perftest prints
// 0.00), the average over the measured window.
func durationBW(size, msgs int, ns int64, duplex bool, unit float64) BWResult {
	r := BWResult{Size: size, Iters: msgs, Unit: unitName(unit)}
	if ns <= 0 {
		return r
	}
	tsize := float64(size)
	if duplex {
		tsize *= 2
	}
	sec := float64(ns) / 1e9
	r.Average = tsize * float64(msgs) / sec / unit
	r.MsgRate = float64(msgs) / sec / 1e6
	return r
}

func roundUp(v, m int) int { return (v + m - 1) / m * m }

func unitName(unit float64) string {
	if unit == gbit {
		return "Gb/sec"
	}
	return "MiB/sec"
}

// LatResult is one line of a latency report, in microseconds (fields and
// JSON keys: perfjson's, as for BWResult).
type LatResult perfjson.LatResult

// latTail is how many of the largest samples are dropped (perftest's
// LAT_MEASURE_TAIL).
const latTail = 2

// computeLat is perftest's print_report_lat arithmetic. stamps[i] is when
// iteration i was posted (ns); a sample is the time between consecutive
// iterations, stamps[i+1]−stamps[i], so n stamps give n−1 samples. The
// samples are sorted and the two largest dropped (m = n−3 remain); each is
// divided by rttFactor (2 for Send and Write ping-pong: half the round
// trip; 1 for Read and atomics: the full round trip). Then:
//
//	t_min     = s[0]
//	t_max     = s[m]            (perftest prints the smaller dropped sample)
//	t_typical = median of s[0:m] (mean of the middle two when m is even)
//	t_avg     = mean of s[0:m]
//	t_stdev   = population standard deviation of s[0:m]
//	99%       = s[ceil(0.99·m)]
//	99.9%     = s[ceil(0.999·m)]
func computeLat(size int, stamps []int64, rttFactor int) LatResult {
	r := LatResult{Size: size, Iters: len(stamps), RTTDiv: rttFactor}
	if len(stamps) < latTail+2 {
		return r
	}
	d := make([]float64, len(stamps)-1)
	for i := range d {
		d[i] = float64(stamps[i+1]-stamps[i]) / 1e3 / float64(rttFactor)
	}
	slices.Sort(d)
	m := len(d) - latTail
	r.Min = d[0]
	r.Max = d[m]
	if (m-1)%2 != 0 {
		r.Typical = (d[m/2] + d[m/2-1]) / 2
	} else {
		r.Typical = d[m/2]
	}
	var sum float64
	for _, v := range d[:m] {
		sum += v
	}
	r.Avg = sum / float64(m)
	var ss float64
	for _, v := range d[:m] {
		ss += (r.Avg - v) * (r.Avg - v)
	}
	r.Stdev = math.Sqrt(ss / float64(m))
	r.P99 = d[min(int(math.Ceil(float64(m)*0.99)), len(d)-1)]
	r.P999 = d[min(int(math.Ceil(float64(m)*0.999)), len(d)-1)]
	return r
}

// durationLat is the report of a timed latency run: the average and the
// transactions per second (perftest's print_report_lat_duration).
func durationLat(size, iters int, ns int64, rttFactor int) LatResult {
	r := LatResult{Size: size, Iters: iters, RTTDiv: rttFactor, Duration: true}
	if iters == 0 || ns <= 0 {
		return r
	}
	r.Avg = float64(ns) / 1e3 / float64(iters) / float64(rttFactor)
	r.TPS = float64(iters) / (float64(ns) / 1e9)
	return r
}

// Report headers and lines (perftest's RESULT_FMT*, REPORT_FMT*).
func bwHeader(unit float64) string {
	if unit == gbit {
		return " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]"
	}
	return " #bytes     #iterations    BW peak[MiB/sec]    BW average[MiB/sec]   MsgRate[Mpps]"
}

func (r BWResult) line() string {
	return fmt.Sprintf(" %-7d    %-10d       %-7.2f            %-7.2f\t\t   %-7.6f", r.Size, r.Iters, r.Peak, r.Average, r.MsgRate)
}

const latHeader = " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] "
const latDurHeader = " #bytes        #iterations       t_avg[usec]    tps average"

func (r LatResult) line() string {
	if r.Duration {
		return fmt.Sprintf(" %-7d       %d            %-7.2f        %-7.2f", r.Size, r.Iters, r.Avg, r.TPS)
	}
	return fmt.Sprintf(" %-7d %d          %-7.2f        %-7.2f      %-7.2f  \t       %-7.2f     \t%-7.2f\t\t%-7.2f \t\t%-7.2f",
		r.Size, r.Iters, r.Min, r.Max, r.Typical, r.Avg, r.Stdev, r.P99, r.P999)
}

// writeResults writes the --out_json file: perftest's test_info keys,
// plus xrnic's own (transport, iface, ...).
func writeResults(p *params, results []any) error {
	if !p.outJSON {
		return nil
	}
	f, err := os.Create(p.jsonFile)
	if err != nil {
		return err
	}
	info := map[string]any{
		perfjson.KeyTest: p.jsonTestName(), perfjson.KeyXrnicTest: p.test.name,
		"Dual_port": "OFF", "Device": "xrnic", "Number_of_qps": p.qps, "Transport_type": "IW", "Connection_type": "RC",
		"Using_SRQ": "OFF", "TX_depth": p.txDepth, "CQ_Moderation": p.cqMod, "Link_type": "Ethernet",
		"rdma_cm_QPs": "ON", "Data_ex_method": "MPA private data", "transport": p.transport, "iface": p.iface,
		"data_validation": p.validate, "bidirectional": p.bidir, "duration_s": p.duration.Seconds(),
	}
	if p.test.verb == verbRead || p.test.verb == verbAtomic || ((p.test.name == "tcp_lat" || p.test.name == "xdp_lat") && p.outs > 1) {
		info["Outstand_reads"] = p.outs
	}
	if p.test.verb == verbAtomic {
		info["atomic_type"] = p.atomicType
		info["masked_atomics"] = p.masked
	}
	if mtu := ifaceMTU(p.iface); mtu > 0 {
		info["Mtu"] = mtu
	}
	werr := perfjson.Write(f, info, results)
	if err := f.Close(); werr == nil {
		werr = err
	}
	return werr
}

// jsonTestName is the "test" of test_info as perftest writes it
// (linux-rdma/perftest, src/perftest_parameters.c,
// write_test_info_to_file): testsStr of the verb ("RDMA_Write_imm" with
// --write_with_imm), the atomic type for atomics, "Bidirectional" with -b,
// "BW" or "Latency", "Test", joined by underscores, e.g.
// Atomic_FETCH_AND_ADD_BW_Test. imm_lat (RFC 7306 Immediate Data, which
// perftest has not) follows the same pattern, Immediate_Data_Latency_Test,
// and so do the kernel TCP baselines, TCP_BW_Test and TCP_Latency_Test,
// and the raw AF_XDP ping-pong and stream, XDP_Latency_Test and
// XDP_BW_Test.
func (p *params) jsonTestName() string {
	t := p.test
	v := t.verbName()
	switch {
	case t.name == "tcp_bw" || t.name == "tcp_lat":
		v = "TCP"
	case t.name == "xdp_lat" || t.name == "xdp_bw":
		v = "XDP"
	case p.writeImm && t.verb == verbWrite:
		v = "RDMA_Write_imm"
	}
	parts := []string{v}
	if t.verb == verbAtomic {
		parts = append(parts, p.atomicType)
	}
	if t.bw {
		if p.bidir {
			parts = append(parts, "Bidirectional")
		}
		parts = append(parts, "BW")
	} else {
		parts = append(parts, "Latency")
	}
	return strings.Join(append(parts, "Test"), "_")
}

// banner is perftest's ctx_print_test_info, with the iWARP specifics.
func banner(p *params, side string, mtu int) string {
	var b strings.Builder
	fmt.Fprintln(&b, resultLine)
	title := p.test.verbName() + " "
	if p.test.verb == verbAtomic {
		title += p.atomicType + " "
	}
	if p.test.bw {
		if p.bidir {
			title += "Bidirectional "
		}
		title += "BW "
	} else {
		title += "Latency "
	}
	fmt.Fprintf(&b, "                    %sTest\n", title)
	fmt.Fprintf(&b, " Dual-port       : OFF\t\tDevice         : xrnic (%s)\n", p.transport)
	fmt.Fprintf(&b, " Number of qps   : %d\t\tTransport type : IW\n", p.qps)
	fmt.Fprintf(&b, " Connection type : RC\t\tUsing SRQ      : OFF\n")
	if side == "client" || p.bidir {
		fmt.Fprintf(&b, " TX depth        : %d\n", p.txDepth)
	}
	if p.test.verb == verbSend && p.test.bw && side == "server" {
		fmt.Fprintf(&b, " RX depth        : %d\n", p.rxDepth)
	}
	if p.test.bw {
		fmt.Fprintf(&b, " CQ Moderation   : %d\n", p.cqMod)
	}
	if mtu > 0 {
		fmt.Fprintf(&b, " Mtu             : %d[B]\n", mtu)
	}
	fmt.Fprintf(&b, " Link type       : Ethernet\n")
	if p.test.verb == verbRead || p.test.verb == verbAtomic {
		fmt.Fprintf(&b, " Outstand reads  : %d\n", p.outs)
	}
	if p.writeImm {
		fmt.Fprintf(&b, " Write with imm  : ON\n")
	}
	fmt.Fprintf(&b, " rdma_cm QPs\t : ON (MPA, RFC 6581)\n")
	fmt.Fprintf(&b, " Data ex. method : MPA private data\n")
	fmt.Fprint(&b, resultLine)
	return b.String()
}
