package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"xrnic/control"
	"xrnic/internal/daemontest"
	"xrnic/verbs"
)

// TestIntegrationDeviceView: against a real xrnicd on loopback, status
// shows the device like ibv_devinfo (transport, interface, capabilities,
// listeners) and qp list a connected QP's addresses and queue depths, in
// text and JSON.
func TestIntegrationDeviceView(t *testing.T) {
	if testing.Short() { // -short: not about the machine
		t.Skip("starts xrnicd")
	}
	d := daemontest.Start(t, daemontest.Options{Args: []string{"--listen", "127.0.0.1:0", "--metrics", "127.0.0.1:0",
		"--sink-depth", "16", "--hugepages", "off"}})
	defer d.Stop(t, 20*time.Second)

	var s control.StatusInfo
	if err := json.Unmarshal([]byte(d.Ctl.Must(t, "status", "-j")), &s); err != nil {
		t.Fatal(err)
	}
	dv := s.Device
	if dv.Transport != "iWARP" || dv.LLP != "kernel" || dv.AtomicCap != "IBV_ATOMIC_GLOB" || !dv.MaskedAtomics ||
		!dv.ImmediateData || dv.MaxQPs != s.MaxQPs || dv.MaxMsgSize != 1<<30 || dv.MaxMRSize == 0 ||
		dv.MaxORD != 128 || dv.MaxIRD != 128 || dv.XDPMode != "" || dv.ZeroCopy != nil {
		t.Errorf("status -j device: %+v", dv)
	}
	if len(s.Listeners) != 2 || s.Listeners[0] != (control.ListenerInfo{Kind: "mpa", Address: d.Listen}) ||
		s.Listeners[1].Kind != "metrics" || s.Listeners[1].Address == "" {
		t.Errorf("status -j listeners: %+v (listen %s)", s.Listeners, d.Listen)
	}
	text := d.Ctl.Must(t, "status")
	for _, want := range []string{"device               iWARP over kernel TCP sockets (MPA rev 2, CRC on, markers supported)",
		"interface            - (the kernel routes)", "max_qp               1024", "max_msg_sz           0x40000000 (1 GiB)",
		"max_qp_init_rd_atom  128 (ORD)", "max_qp_rd_atom       128 (IRD)", "atomic_cap           IBV_ATOMIC_GLOB",
		"masked_atomics       yes", "immediate_data       yes", "listener             mpa " + d.Listen} {
		if !strings.Contains(text, want+"\n") {
			t.Errorf("status lacks %q:\n%s", want, text)
		}
	}

	// One QP held open from here.
	dev, err := verbs.Open(verbs.DeviceConfig{MaxQPs: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	pd, _ := dev.AllocPD()
	cq, _ := dev.CreateCQ(16)
	qp, err := pd.CreateQP(verbs.QPAttr{SendCQ: cq, RecvCQ: cq, SQDepth: 8, RQDepth: 4, MaxSGE: 1})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := qp.Dial(ctx, d.Listen, verbs.ConnParam{}); err != nil {
		t.Fatal(err)
	}
	ci := qp.ConnInfo()
	if ci.LocalAddr == nil || ci.RemoteAddr == nil || ci.RemoteAddr.String() != d.Listen {
		t.Fatalf("ConnInfo addresses: local %v remote %v; want remote %s", ci.LocalAddr, ci.RemoteAddr, d.Listen)
	}
	if q := qp.Queues(); q.SQDepth != 8 || q.RQDepth != 4 || q.SQOutstanding != 0 || q.RQPosted != 0 {
		t.Errorf("Queues: %+v", q)
	}
	var qs []control.QPInfo
	deadline := time.Now().Add(5 * time.Second)
	for len(qs) == 0 && time.Now().Before(deadline) {
		qs = nil
		if err := json.Unmarshal([]byte(d.Ctl.Must(t, "qp", "list", "-j")), &qs); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if len(qs) != 1 {
		t.Fatalf("qp list -j: %+v", qs)
	}
	q := qs[0]
	if q.LocalAddr != d.Listen || q.RemoteAddr != ci.LocalAddr.String() || q.SQDepth <= 0 || q.RQDepth != 16 ||
		q.RQPosted != 16 || q.SQOutstanding != 0 || q.ORDOutstanding != 0 || q.IRDOutstanding != 0 {
		t.Errorf("qp list -j: %+v; want local %s, remote %s, RQ 16/16", q, d.Listen, ci.LocalAddr)
	}
	text = d.Ctl.Must(t, "qp", "list")
	lines := strings.Split(strings.TrimSpace(text), "\n")
	if len(lines) != 2 || strings.Join(strings.Fields(lines[0]), " ") != "QP STATE LOCAL REMOTE MPA CRC IRD/ORD SQ RQ RD_OUT TX_MSGS RX_MSGS ERROR" {
		t.Fatalf("qp list:\n%s", text)
	}
	f := strings.Fields(lines[1])
	if len(f) < 12 || f[1] != "RTS" || f[2] != d.Listen || f[3] != ci.LocalAddr.String() || f[8] != "16/16" || f[9] != "0/0" {
		t.Errorf("qp list row %q", lines[1])
	}
	t.Logf("status:\n%s\nqp list:\n%s", d.Ctl.Must(t, "status"), text)
}
