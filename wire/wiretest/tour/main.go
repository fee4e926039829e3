// Command tour is a guided tour of xrnic's iWARP wire layer, checked by
// Wireshark: it builds the canonical iWARP session of package wiretest
// (TCP handshake, MPA Request/Reply, FPDUs of every RDMAP opcode 0x0-0xB,
// two Terminates, close), writes it as a pcap file, prints the FPDUs, and,
// when tshark is installed, decodes the capture with it and prints per
// opcode whether Wireshark reads back the fields that were encoded.
//
// Usage:
//
//	go run ./wire/wiretest/tour [-o xrnic-tour.pcap] [-rev 1|2]
//
// Exit status: 0 when tshark agrees (or is missing), 1 when any decoded
// field differs, 2 on other errors.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"xrnic/wire/mpa"
	"xrnic/wire/rdmap"
	"xrnic/wire/wiretest"
)

func main() {
	out := flag.String("o", "xrnic-tour.pcap", "write the capture to this `file`")
	rev := flag.Uint("rev", 1, "MPA revision of the Request/Reply: 1 (RFC 5044) or 2 (RFC 6581)")
	corrupt := flag.Int("corrupt", 0, "negative control: flip a CRC bit of FPDU `n` (1-based) in the capture\nand watch the cross-check fail")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: tour [-o file] [-rev 1|2] [-corrupt n]\n\n"+
			"Builds a canonical iWARP session (MPA, DDP, RDMAP incl. RFC 7306 atomics),\n"+
			"writes it as a pcap, prints its FPDUs and cross-checks them with tshark.\n\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	os.Exit(run(os.Stdout, *out, uint8(*rev), *corrupt))
}

func run(w io.Writer, path string, rev uint8, corrupt int) int {
	s, err := wiretest.BuildSession(wiretest.SessionConfig{Rev: rev})
	if err == nil {
		capture := s
		if corrupt != 0 {
			// The capture gets the damaged CRC; the expectations stay
			// those of the undamaged session.
			if capture, err = wiretest.BuildSession(wiretest.SessionConfig{Rev: rev}); err == nil {
				err = capture.CorruptCRC(corrupt - 1)
			}
		}
		if err == nil {
			err = capture.Conv.WriteFile(path)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "tour:", err)
		return 2
	}
	c, sv := s.Conv.Endpoint(wiretest.Client), s.Conv.Endpoint(wiretest.Server)
	fmt.Fprintf(w, "xrnic tour: iWARP over TCP %s:%d -> %s:%d, MPA Rev %d, CRC on, %d frames -> %s\n",
		ip(c.IP), c.Port, ip(sv.IP), sv.Port, rev, len(s.Conv.Frames()), path)
	printTable(w, s)

	tshark, err := wiretest.FindTshark()
	if err != nil {
		fmt.Fprintf(w, "\ntshark not found: skipping the Wireshark cross-check (%s)\n", wiretest.InstallHint)
		return 0
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	d, err := wiretest.RunTshark(ctx, tshark, path)
	if err != nil {
		fmt.Fprintln(os.Stderr, "tour:", err)
		return 2
	}
	return verdicts(w, s, d)
}

func ip(a [4]byte) string { return fmt.Sprintf("%d.%d.%d.%d", a[0], a[1], a[2], a[3]) }

func dir(s wiretest.Side) string {
	if s == wiretest.Client {
		return "c>s"
	}
	return "s>c"
}

func printTable(w io.Writer, s *wiretest.Session) {
	fmt.Fprintf(w, "%3s %5s %-3s %-36s %5s %3s  %-50s %s\n", "#", "frame", "dir", "message", "ULPDU", "pad", "key fields", "CRC32c")
	for _, m := range []wiretest.MPAFrame{s.Request, s.Reply} {
		name := "MPA Request"
		if m.Kind == mpa.Reply {
			name = "MPA Reply"
		}
		fmt.Fprintf(w, "%3s %5d %-3s %-36s %5s %3s  rev %d flags %#02x PD_Length %d\n", "-", m.Frame+1,
			dir(m.From), name, "", "", m.Rev, m.Flags(), m.PDLength)
	}
	for i, f := range s.FPDUs {
		fmt.Fprintf(w, "%3d %5d %-3s %-36s %5d %3d  %-50s %08x\n", i+1, f.Frames[0]+1, dir(f.From),
			fmt.Sprintf("%#x %s", uint8(f.OpCode), f.Name), f.ULPDULen, f.PadLen, keyFields(&f), f.CRC)
	}
}

func keyFields(f *wiretest.FPDU) string {
	if f.Tagged {
		return fmt.Sprintf("STag %#x TO %#x L%d len %d", f.STag, f.TO, b2i(f.Last), f.PayloadLen)
	}
	q := fmt.Sprintf("QN %d MSN %d", f.QN, f.MSN)
	switch {
	case f.Read != nil:
		return fmt.Sprintf("%s sink %#x size %d src %#x", q, f.Read.SinkSTag, f.Read.Size, f.Read.SrcSTag)
	case f.Atomic != nil:
		a := f.Atomic
		if a.AOpCode == rdmap.AOpFetchAdd {
			return fmt.Sprintf("%s id %#x add %#x mask %#x", q, a.RequestID, a.AddSwap, a.AddSwapMask)
		}
		return fmt.Sprintf("%s id %#x cmp %#x swap %#x", q, a.RequestID, a.Compare, a.AddSwap)
	case f.AtomicResponse != nil:
		return fmt.Sprintf("%s id %#x orig %#x", q, f.AtomicResponse.RequestID, f.AtomicResponse.Value)
	case f.Immediate != nil:
		return fmt.Sprintf("%s data %x", q, f.Immediate[:])
	case f.Terminate != nil:
		e := f.Terminate.Err
		return fmt.Sprintf("%s %v/%d/%#02x %v", q, e.Layer, e.EType, e.Code, f.Terminate.Parts)
	case f.InvSTag != 0:
		return fmt.Sprintf("%s inv %#x len %d", q, f.InvSTag, f.PayloadLen)
	}
	return fmt.Sprintf("%s len %d", q, f.PayloadLen)
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// verdicts prints one line per group (TCP/IP, MPA frames, each opcode) and
// a summary, and returns the exit status.
func verdicts(w io.Writer, s *wiretest.Session, d *wiretest.Decode) int {
	checks := s.Compare(d)
	type group struct {
		name      string
		order     int
		n, failed int
		first     string
		notes     []int
	}
	var groups []*group
	byKey := map[string]*group{}
	var notes []string
	for _, c := range checks {
		key, name, order := "mpa", "MPA Request/Reply", -1
		switch {
		case c.Frame == 0:
			key, name, order = "tcp", fmt.Sprintf("TCP/IP, %d frames", len(s.Conv.Frames())), -2
		case c.OpCode >= 0:
			key, order = fmt.Sprint(c.OpCode), c.OpCode
			name = fmt.Sprintf("%#x %v", c.OpCode, rdmap.OpCode(c.OpCode))
		}
		g := byKey[key]
		if g == nil {
			g = &group{name: name, order: order}
			byKey[key] = g
			groups = append(groups, g)
		}
		g.n++
		if !c.OK() {
			g.failed++
			if g.first == "" {
				g.first = fmt.Sprintf("%s: %s", c.Name, c.Mismatches[0])
			}
		}
		for _, n := range c.Notes {
			i := slices.Index(notes, n)
			if i < 0 {
				notes = append(notes, n)
				i = len(notes) - 1
			}
			if !slices.Contains(g.notes, i) {
				g.notes = append(g.notes, i)
			}
		}
	}
	slices.SortStableFunc(groups, func(a, b *group) int { return a.order - b.order })
	fmt.Fprintf(w, "\ntshark %s reads the capture back (MPA heuristic, no decode-as):\n", d.Version)
	agree, failed := 0, 0
	for _, g := range groups {
		v := "agree"
		if g.failed > 0 {
			v = fmt.Sprintf("DIFFER in %d of %d: %s", g.failed, g.n, g.first)
			failed++
		} else {
			agree++
		}
		var refs []string
		for _, i := range g.notes {
			refs = append(refs, fmt.Sprintf("[%d]", i+1))
		}
		fmt.Fprintln(w, strings.TrimRight(fmt.Sprintf("  %-32s x%-2d %s %s", g.name, g.n, v, strings.Join(refs, "")), " "))
	}
	for i, n := range notes {
		fmt.Fprintf(w, "  [%d] %s\n", i+1, n)
	}
	fmt.Fprintf(w, "summary: %d of %d groups agree with tshark (%d FPDUs, %d checks)\n",
		agree, agree+failed, len(s.FPDUs), len(checks))
	if failed > 0 {
		fmt.Fprintln(w, "FAIL: tshark decodes fields differently from what xrnic encoded")
		return 1
	}
	return 0
}
