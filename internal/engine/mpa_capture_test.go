package engine

import (
	"context"
	"net"
	"strconv"
	"testing"
	"time"

	"xrnic/wire/wiretest"
)

// TestCaptureRevFallback captures a peer-to-peer initiator falling back to
// MPA revision 1 against an RFC 5044-only responder and has tshark judge
// the second connection: a Rev 1 Request and Reply, then the unnegotiated
// zero-length RDMA Write RTR as one FPDU with a good CRC. Needs root and
// tshark/dumpcap, as TestCaptureTshark.
func TestCaptureRevFallback(t *testing.T) {
	tshark, dumpcap := captureTools(t)
	got := make(chan [][]byte, 1)
	addr, _ := rfc5044Responder(t, "close", got)
	_, port, _ := net.SplitHostPort(addr)

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	pcap, stop := captureLo(ctx, t, tshark, dumpcap, port)
	defer stop()

	c := newSide(t, 4096, QPAttr{})
	if err := c.qp.Connect(ctx, addr, ConnParams{PeerToPeer: true}); err != nil {
		t.Fatal(err)
	}
	// The FPDU after the Reply (the RTR) is out and captured before the
	// disconnect (which implies the Request and Reply before it are too).
	waitCaptured(ctx, t, tshark, pcap, "iwarp_mpa.ulpdulength", 1)
	dctx, dcancel := context.WithTimeout(ctx, 5*time.Second)
	c.qp.Disconnect(dctx)
	dcancel()
	<-got
	stop()

	d, err := wiretest.RunTshark(ctx, tshark, pcap)
	if err != nil {
		t.Fatal(err)
	}
	var rev1Req, rev1Rep, fpdus int
	for n := 1; n <= len(d.Frames); n++ {
		f := d.Frames[n]
		if f["iwarp_mpa.rev"] == "1" && f["iwarp_mpa.key.req"] != "" {
			rev1Req++
		}
		if f["iwarp_mpa.rev"] == "1" && f["iwarp_mpa.key.rep"] != "" {
			rev1Rep++
		}
		if f["iwarp_mpa.ulpdulength"] == "" {
			continue
		}
		fpdus++
		if v, ok := d.CRC[n]; !ok || !v.Good {
			t.Errorf("frame %d (%s): CRC verdict %+v", n, f["_ws.col.Info"], v)
		}
		if l, _ := strconv.ParseUint(f["iwarp_mpa.ulpdulength"], 0, 16); l != 14 || f["iwarp_ddp.tagged_flag"] != "1" || f["iwarp_ddp.last_flag"] != "1" {
			t.Errorf("frame %d: %v, want a zero-length RDMA Write (ULPDU 14, tagged, last)", n, f)
		}
	}
	t.Logf("tshark %s: %d frames, Rev 1 Request %d, Reply %d, FPDUs %d", d.Version, len(d.Frames), rev1Req, rev1Rep, fpdus)
	// The RTR, and up to maxWakes copies of it from the watchdog while the
	// peer (which sends nothing) has not answered (watchdog.go).
	if rev1Req != 1 || rev1Rep != 1 || fpdus < 1 || fpdus > 1+maxWakes {
		t.Fatalf("tshark saw %d Rev 1 Requests, %d Rev 1 Replies, %d FPDUs; want 1, 1, and 1 to %d", rev1Req, rev1Rep, fpdus, 1+maxWakes)
	}
}
