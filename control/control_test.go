package control

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"xrnic/internal/require"
	"xrnic/mem"
	"xrnic/verbs"
)

// rig is a daemon-like device with one region and a client device whose
// QP is connected to it.
type rig struct {
	state  *State
	region *verbs.MR
	srvQP  *verbs.QP
	cli    *verbs.QP
	cliMR  *verbs.MR
	cliCQ  *verbs.CQ
}

func newRig(t *testing.T) *rig {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	open := func() (*verbs.Device, *verbs.PD, *verbs.CQ, *verbs.QP) {
		dev, err := verbs.Open(verbs.DeviceConfig{ConnTimeout: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { dev.Close() })
		pd, _ := dev.AllocPD()
		scq, _ := dev.CreateCQ(8)
		rcq, _ := dev.CreateCQ(8)
		qp, err := pd.CreateQP(verbs.QPAttr{SendCQ: scq, RecvCQ: rcq, SQDepth: 4, RQDepth: 4})
		if err != nil {
			t.Fatal(err)
		}
		return dev, pd, scq, qp
	}
	dev, pd, _, srv := open()
	s := NewState(dev)
	s.Transport = "kernel"
	mr, err := pd.RegMR(make([]byte, 4096), verbs.AccessLocalWrite|verbs.AccessRemoteRead|verbs.AccessRemoteWrite|verbs.AccessRemoteAtomic|verbs.AccessZeroBased)
	if err != nil {
		t.Fatal(err)
	}
	s.AddRegion(Region{Name: "counter", MR: mr, Backing: mem.Backing4K, PageSize: mem.Size4K, Access: mem.RemoteRead | mem.RemoteWrite | mem.RemoteAtomic})
	s.AddQP(srv, "127.0.0.1:1")

	_, cpd, cscq, cqp := open()
	cmr, err := cpd.RegMR(make([]byte, 64), verbs.AccessLocalWrite|verbs.AccessZeroBased)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := dev.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	errc := make(chan error, 1)
	go func() {
		req, err := ln.Accept(ctx)
		if err == nil {
			err = req.Accept(ctx, srv, verbs.ConnParam{})
		}
		if err == nil {
			s.CountMPA(MPAAccepted)
		}
		errc <- err
	}()
	if err := cqp.Dial(ctx, ln.Addr().String(), verbs.ConnParam{}); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	return &rig{state: s, region: mr, srvQP: srv, cli: cqp, cliMR: cmr, cliCQ: cscq}
}

func (r *rig) post(t *testing.T, wr verbs.SendWR) verbs.Completion {
	t.Helper()
	wr.Flags |= verbs.FlagSignaled
	wr.SGL = []verbs.SGE{r.cliMR.SGE(0, 8)}
	if err := r.cli.PostSend(&wr); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	wc := make([]verbs.Completion, 1)
	for r.cliCQ.Poll(wc) == 0 {
		if err := r.cliCQ.Wait(ctx); err != nil {
			t.Fatal(err)
		}
	}
	return wc[0]
}

// value returns the value of the sample of family name with the given
// labels (all of them), or -1.
func value(t *testing.T, g prometheus.Gatherer, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			have := map[string]string{}
			for _, lp := range m.GetLabel() {
				have[lp.GetName()] = lp.GetValue()
			}
			for k, v := range labels {
				if have[k] != v {
					continue next
				}
			}
			switch mf.GetType() {
			case dto.MetricType_COUNTER:
				return m.GetCounter().GetValue()
			case dto.MetricType_GAUGE:
				return m.GetGauge().GetValue()
			case dto.MetricType_HISTOGRAM:
				return float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return -1
}

func TestCollectorCountsOperations(t *testing.T) {
	r := newRig(t)
	reg := NewRegistry(r.state, Options{NoProcess: true})
	fa := map[string]string{"operation": "fetch_add", "result": "ok"}
	rx := map[string]string{"direction": "rx", "opcode": "atomic_request"}
	if v := value(t, reg, "xrnic_atomics_total", fa); v != 0 {
		t.Fatalf("fetch_add before: %v", v)
	}
	for i := range 3 {
		if c := r.post(t, verbs.SendWR{Op: verbs.OpFetchAdd, RemoteSTag: r.region.STag(), RemoteTO: 0, CompareAdd: 2}); c.Status != verbs.StatusSuccess || c.AtomicOrig != uint64(2*i) {
			t.Fatalf("fetchadd %d: %+v", i, c)
		}
	}
	r.post(t, verbs.SendWR{Op: verbs.OpCmpSwap, RemoteSTag: r.region.STag(), CompareAdd: 6, Swap: 1, CompareMask: ^uint64(0), SwapMask: ^uint64(0)})
	r.post(t, verbs.SendWR{Op: verbs.OpCmpSwap, RemoteSTag: r.region.STag(), CompareAdd: 6, Swap: 1, CompareMask: ^uint64(0), SwapMask: ^uint64(0)})
	checks := []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"xrnic_atomics_total", fa, 3},
		{"xrnic_atomics_total", map[string]string{"operation": "cmp_swap", "result": "matched"}, 1},
		{"xrnic_atomics_total", map[string]string{"operation": "cmp_swap", "result": "not_matched"}, 1},
		{"xrnic_rdmap_messages_total", rx, 5},
		{"xrnic_rdmap_messages_total", map[string]string{"direction": "tx", "opcode": "atomic_response"}, 5},
		{"xrnic_mpa_negotiations_total", map[string]string{"outcome": "accepted"}, 1},
		{"xrnic_qps", map[string]string{"state": "rts"}, 1},
		{"xrnic_registered_memory_bytes", map[string]string{"page_size": "4k"}, 4096},
		{"xrnic_transport_info", map[string]string{"transport": "kernel"}, 1},
	}
	for _, c := range checks {
		if v := value(t, reg, c.name, c.labels); v != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, v, c.want)
		}
	}
	// An atomic on a misaligned target is refused: the error counter and a
	// Terminate move, and the totals survive the QP's retirement.
	c := r.post(t, verbs.SendWR{Op: verbs.OpFetchAdd, RemoteSTag: r.region.STag(), RemoteTO: 3, CompareAdd: 1})
	if c.Status == verbs.StatusSuccess {
		t.Fatalf("misaligned fetchadd succeeded: %+v", c)
	}
	if v := value(t, reg, "xrnic_atomic_errors_total", map[string]string{"reason": "misaligned"}); v != 1 {
		t.Errorf("misaligned errors = %v", v)
	}
	tl := map[string]string{"direction": "tx", "layer": "rdmap", "type": "remote_operation", "code": "0x07", "reason": "rdmap_catastrophic_stream"}
	if v := value(t, reg, "xrnic_terminates_total", tl); v != 1 {
		t.Errorf("terminates sent %v = %v", tl, v)
	}
	r.srvQP.Close()
	r.state.RetireQP(r.srvQP)
	if v := value(t, reg, "xrnic_atomics_total", fa); v != 3 {
		t.Errorf("fetch_add after retirement: %v", v)
	}
	if v := value(t, reg, "xrnic_qps", map[string]string{"state": "rts"}); v != 0 {
		t.Errorf("RTS QPs after retirement: %v", v)
	}
	if v := value(t, reg, "xrnic_terminates_total", tl); v != 1 {
		t.Errorf("terminates after retirement = %v", v)
	}
}

// fakeSources fill the TCP and XDP families so they can be linted.
type fakeSources struct{}

func (fakeSources) TCPStats() TCPStats {
	return TCPStats{SegmentsIn: 10, SegmentsOut: 12, Retransmits: 1, RTOEvents: 1, OutOfOrder: 2,
		RTTBounds: []float64{0.0001, 0.001}, RTTBuckets: []uint64{3, 5}, RTTCount: 6, RTTSumSeconds: 0.01}
}

func (fakeSources) XDPSocketStats() []XDPSocketStats {
	return []XDPSocketStats{{Interface: "eth0", Queue: 0, RxDropped: 1}, {Interface: "eth0", Queue: 1, RxRingFull: 2}}
}

func (fakeSources) XDPProgramCounters() []XDPProgramCounter {
	return []XDPProgramCounter{{Interface: "eth0", Name: "redirected", PerCPU: []uint64{4, 5}}}
}

func TestMetricsLint(t *testing.T) {
	r := newRig(t)
	r.state.Latency.Observe(QueueRecv, verbs.OpRecv, 3*time.Microsecond)
	for _, tc := range []struct {
		name string
		c    prometheus.Collector
	}{
		{"engine", NewCollector(r.state, nil, nil)},
		{"engine with TCP and XDP", NewCollector(r.state, fakeSources{}, fakeSources{})},
		{"latency", r.state.Latency.Collector()},
	} {
		problems, err := testutil.CollectAndLint(tc.c)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		for _, p := range problems {
			t.Errorf("%s: %s: %s", tc.name, p.Metric, p.Text)
		}
	}
	// The whole exposition, as served, passes promtool check metrics.
	reg := NewRegistry(r.state, Options{XDP: fakeSources{}, TCP: fakeSources{}})
	srv := httptest.NewServer(HTTPHandler(r.state, reg))
	defer srv.Close()
	body := get(t, srv.URL+"/metrics", 200)
	for _, want := range []string{"xrnic_build_info{", "go_goroutines", "process_resident_memory_bytes", "xrnic_xdp_rx_ring_full_total{", "xrnic_tcp_rtt_seconds_bucket{"} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	promtool := require.Tool(t, "promtool", "prometheus")
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = strings.NewReader(body)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("promtool check metrics: %v\n%s", err, out)
	}
}

func get(t *testing.T, url string, want int) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		t.Fatalf("GET %s: %d, want %d: %s", url, resp.StatusCode, want, b)
	}
	return string(b)
}

func TestHealthAndReady(t *testing.T) {
	r := newRig(t)
	srv := httptest.NewServer(HTTPHandler(r.state, NewRegistry(r.state, Options{NoProcess: true})))
	defer srv.Close()
	get(t, srv.URL+"/healthz", 200)
	get(t, srv.URL+"/readyz", 503)
	r.state.SetReady(true)
	get(t, srv.URL+"/readyz", 200)
}

func TestControlSocket(t *testing.T) {
	r := newRig(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "sub", "x.sock")
	for _, tc := range []struct {
		name  string
		allow bool
	}{{"admitted", true}, {"refused", false}} {
		t.Run(tc.name, func(t *testing.T) {
			ss, err := ListenSocket(path, -1)
			if err != nil {
				t.Fatal(err)
			}
			fi, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			if fi.Mode().Perm() != 0o660 {
				t.Errorf("socket mode %v, want 0660", fi.Mode().Perm())
			}
			// The policy runs at accept and, for an admitted peer, again
			// per request.
			got := make(chan Cred, 8)
			go ss.Serve(APIHandler(r.state), func(c Cred) bool { got <- c; return tc.allow })
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			var regions []RegionInfo
			err = NewClient(path).Get(ctx, PathRegions, &regions)
			seen := <-got
			if seen.PID != os.Getpid() || seen.UID != os.Getuid() {
				t.Errorf("peer credentials %+v, want pid %d uid %d", seen, os.Getpid(), os.Getuid())
			}
			if !tc.allow {
				// Closed at accept: the client says the user is refused.
				if !errors.Is(err, errClosedEarly) && !errors.Is(err, ErrDenied) {
					t.Fatalf("refused peer: err %v", err)
				}
			} else {
				if err != nil {
					t.Fatal(err)
				}
				if len(regions) != 1 || regions[0].Name != "counter" || regions[0].Length != 4096 || regions[0].Access != "rwa" ||
					len(regions[0].STag) != 10 || regions[0].TO != "0x0000000000000000" {
					t.Fatalf("regions %+v", regions)
				}
			}
			// A second daemon on the same path is refused.
			if _, err := ListenSocket(path, -1); err == nil {
				t.Fatal("second ListenSocket succeeded")
			}
			ss.Close()
			if _, err := os.Stat(path); !os.IsNotExist(err) {
				t.Fatalf("socket file left behind: %v", err)
			}
		})
	}
}

func TestDefaultPolicy(t *testing.T) {
	p := DefaultPolicy(1234)
	me := os.Getuid()
	cases := []struct {
		c    Cred
		want bool
	}{
		{Cred{UID: 0, GID: 0}, true},
		{Cred{UID: me, GID: 99999}, true},
		{Cred{UID: 54321, GID: 1234}, true},
		{Cred{UID: 54321, GID: 5, Groups: []int{7, 1234}}, true},
		{Cred{UID: 54321, GID: 5, Groups: []int{7}}, me == 54321},
	}
	for _, c := range cases {
		if got := p(c.c); got != c.want {
			t.Errorf("policy(%+v) = %v, want %v", c.c, got, c.want)
		}
	}
}

// TestTransportSourcesKernel: a kernel-transport device has no TCP or XDP
// source, so those families are absent from its metrics.
func TestTransportSourcesKernel(t *testing.T) {
	dev, err := verbs.Open(verbs.DeviceConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	tcp, xdp := TransportSources(dev.Transport(), "eth0")
	if tcp != nil || xdp != nil {
		t.Fatalf("kernel device sources %v %v", tcp, xdp)
	}
}

// TestTCPWithoutRTT: a TCP source without RTT samples exports the
// counters and no RTT histogram.
func TestTCPWithoutRTT(t *testing.T) {
	ch := make(chan prometheus.Metric, 16)
	collectTCP(ch, noRTT{})
	close(ch)
	n := 0
	for m := range ch {
		if strings.Contains(m.Desc().String(), "rtt") {
			t.Fatalf("RTT histogram exported without samples: %v", m.Desc())
		}
		n++
	}
	if n != 5 {
		t.Fatalf("%d metrics, want 5 (segments in/out, retransmits, RTO, out of order)", n)
	}
}

type noRTT struct{}

func (noRTT) TCPStats() TCPStats { return TCPStats{SegmentsIn: 1, SegmentsOut: 2} }

// TestSocketDirectoryRemoved: the directories ListenSocket creates for the
// socket are removed again when it closes (and a directory that existed
// stays).
func TestSocketDirectoryRemoved(t *testing.T) {
	base := t.TempDir()
	path := filepath.Join(base, "a", "b", "xrnicd.sock")
	s, err := ListenSocket(path, -1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(base, "a", "b")); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if _, err := os.Stat(filepath.Join(base, "a")); !os.IsNotExist(err) {
		t.Fatalf("directory left behind: %v", err)
	}
	if _, err := os.Stat(base); err != nil {
		t.Fatalf("the existing directory went too: %v", err)
	}
}
