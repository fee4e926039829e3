package control

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"golang.org/x/crypto/bcrypt"

	"xrnic/verbs"
	"xrnic/wire/term"
)

// gather returns the families of g by name.
func gather(t *testing.T, g prometheus.Gatherer) map[string]*dto.MetricFamily {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*dto.MetricFamily{}
	for _, mf := range mfs {
		out[mf.GetName()] = mf
	}
	return out
}

func labelsOf(m *dto.Metric) map[string]string {
	l := map[string]string{}
	for _, lp := range m.GetLabel() {
		l[lp.GetName()] = lp.GetValue()
	}
	return l
}

// TestTerminateSeries: every predeclared error (and the bucket of unknown
// ones) has a zero-valued series in both directions before any Terminate,
// with a readable reason.
func TestTerminateSeries(t *testing.T) {
	r := newRig(t)
	reg := NewRegistry(r.state, Options{NoProcess: true})
	known := term.Known()
	if len(known) < 30 {
		t.Fatalf("term.Known() has %d errors", len(known))
	}
	for _, dir := range []string{"tx", "rx"} {
		for _, e := range known {
			reason := termReasons[e]
			if reason == "" {
				t.Errorf("%v has no reason in termReasons", e)
				continue
			}
			if v := value(t, reg, "xrnic_terminates_total", map[string]string{"direction": dir, "reason": reason}); v != 0 {
				t.Errorf("%s %s (%v) = %v, want a series at 0", dir, reason, e, v)
			}
		}
		if v := value(t, reg, "xrnic_terminates_total", map[string]string{"direction": dir, "reason": "unknown"}); v != 0 {
			t.Errorf("%s unknown = %v, want a series at 0", dir, v)
		}
	}
	mf := gather(t, reg)["xrnic_terminates_total"]
	if n := len(mf.GetMetric()); n != 2*(len(known)+1) {
		t.Errorf("%d Terminate series, want %d (2 directions x (%d errors + unknown))", n, 2*(len(known)+1), len(known))
	}
	seen := map[string]bool{}
	for _, m := range mf.GetMetric() {
		l := labelsOf(m)
		k := l["direction"] + " " + l["reason"]
		if seen[k] {
			t.Errorf("reason %q twice", k)
		}
		seen[k] = true
	}
	// Written out from RFC 5040 §7.2 / RFC 5041 §7.2 / RFC 5044 §8, not
	// derived by the code under test.
	for _, c := range []struct {
		e                          *term.Error
		layer, etype, code, reason string
	}{
		{term.DDPTaggedInvalidSTag, "ddp", "tagged", "0x00", "ddp_tagged_invalid_stag"},
		{term.DDPUntaggedNoBuffer, "ddp", "untagged", "0x02", "ddp_untagged_no_buffer"},
		{term.RDMAPAccessRights, "rdmap", "remote_protection", "0x02", "rdmap_access_rights"},
		{term.RDMAPCatastrophicStream, "rdmap", "remote_operation", "0x07", "rdmap_catastrophic_stream"},
		{term.RDMAPLocalCatastrophic, "rdmap", "local_catastrophic", "0x00", "rdmap_local_catastrophic"},
		{term.MPACRCError, "mpa", "llp", "0x02", "mpa_crc_error"},
		{nil, "unknown", "unknown", "unknown", "unknown"},
	} {
		if got := termSeriesOf(c.e); got != (termSeries{c.layer, c.etype, c.code, c.reason}) {
			t.Errorf("%v: labels %+v, want %s/%s/%s %s", c.e, got, c.layer, c.etype, c.code, c.reason)
		}
	}
	// A Terminate moves its own series only.
	c := r.post(t, verbs.SendWR{Op: verbs.OpFetchAdd, RemoteSTag: r.region.STag() ^ 0x100, CompareAdd: 1})
	if c.Status == verbs.StatusSuccess {
		t.Fatalf("fetchadd to a bad STag succeeded")
	}
	tx := map[string]string{"direction": "tx", "layer": "rdmap", "type": "remote_protection", "code": "0x00", "reason": "rdmap_invalid_stag"}
	waitValue(t, reg, "xrnic_terminates_total", tx, 1)
	var total float64
	for _, m := range gather(t, reg)["xrnic_terminates_total"].GetMetric() {
		total += m.GetCounter().GetValue()
	}
	if total != 1 {
		t.Errorf("Terminates summed over series = %v, want 1", total)
	}
}

func waitValue(t *testing.T, g prometheus.Gatherer, name string, labels map[string]string, want float64) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		v := value(t, g, name, labels)
		if v == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s%v = %v, want %v", name, labels, v, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestLabelConventions: one direction vocabulary (rx, tx) and lower
// snake_case label values in every xrnic_ family.
func TestLabelConventions(t *testing.T) {
	r := newRig(t)
	r.state.Latency.Observe(QueueRecv, verbs.OpRecvImm, time.Microsecond)
	reg := NewRegistry(r.state, Options{NoProcess: true, TCP: fakeSources{}, XDP: fakeSources{},
		Servers: []*ServerStats{{Name: "metrics"}}})
	snake := regexp.MustCompile(`^([a-z0-9]+(_[a-z0-9]+)*|0x[0-9a-f]+|[0-9.e+-]+|\+Inf)$`)
	dirs := 0
	for name, mf := range gather(t, reg) {
		if !strings.HasPrefix(name, "xrnic_") || name == "xrnic_build_info" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for k, v := range labelsOf(m) {
				if k == "direction" {
					dirs++
					if v != "rx" && v != "tx" {
						t.Errorf("%s: direction %q, want rx or tx", name, v)
					}
				}
				if !snake.MatchString(v) {
					t.Errorf("%s: %s=%q is not lower snake_case", name, k, v)
				}
			}
		}
	}
	if dirs < 50 {
		t.Errorf("only %d direction labels seen", dirs)
	}
	for _, fam := range []string{"xrnic_rdmap_messages_total", "xrnic_rdmap_bytes_total", "xrnic_mpa_fpdus_total", "xrnic_terminates_total", "xrnic_tcp_segments_total"} {
		for _, d := range []string{"rx", "tx"} {
			if v := value(t, reg, fam, map[string]string{"direction": d}); v < 0 {
				t.Errorf("%s has no direction=%q series", fam, d)
			}
		}
	}
}

// TestLatencyValidPairsOnly: the completion latency histogram has no
// series on an idle daemon, and only the (queue, opcode) pairs that can
// complete get one.
func TestLatencyValidPairsOnly(t *testing.T) {
	r := newRig(t)
	reg := NewRegistry(r.state, Options{NoProcess: true})
	idle := gather(t, reg)
	if mf := idle["xrnic_completion_latency_seconds"]; mf != nil && len(mf.GetMetric()) != 0 {
		t.Fatalf("idle: %d latency histograms, want none", len(mf.GetMetric()))
	}
	series := 0
	for _, mf := range idle {
		series += len(mf.GetMetric())
	}
	t.Logf("idle registry: %d xrnic_ metrics (latency: 0)", series)

	// Every queue and opcode, including the impossible pairs.
	for q := Queue(0); q < numQueues+1; q++ {
		for op := verbs.Opcode(0); op <= verbs.OpRecvWriteImm+1; op++ {
			r.state.Latency.Observe(q, op, 5*time.Microsecond)
		}
	}
	valid := map[string]bool{
		"send/send": true, "send/send_inv": true, "send/write": true, "send/write_imm": true, "send/read": true,
		"send/fetch_add": true, "send/cmp_swap": true, "send/imm": true, "send/local_inv": true,
		"recv/recv": true, "recv/recv_imm": true, "recv/recv_write_imm": true,
	}
	mf := gather(t, reg)["xrnic_completion_latency_seconds"]
	if mf == nil || len(mf.GetMetric()) != len(valid) {
		t.Fatalf("latency histograms after observing every pair: %v, want %d", mf, len(valid))
	}
	for _, m := range mf.GetMetric() {
		l := labelsOf(m)
		if k := l["queue"] + "/" + l["opcode"]; !valid[k] {
			t.Errorf("histogram for impossible pair %s", k)
		} else if m.GetHistogram().GetSampleCount() != 1 {
			t.Errorf("%s: %d samples, want 1", k, m.GetHistogram().GetSampleCount())
		}
		if n := len(m.GetHistogram().GetBucket()); n != len(LatencyBuckets) {
			t.Errorf("%d buckets, want %d", n, len(LatencyBuckets))
		}
	}
	// Resolved once: later observations allocate nothing.
	if a := testing.AllocsPerRun(100, func() { r.state.Latency.Observe(QueueRecv, verbs.OpRecv, time.Microsecond) }); a != 0 {
		t.Errorf("Observe allocates %v times", a)
	}
}

// multiCPU reports the same counter per CPU, and one counter twice.
type multiCPU struct{ fakeSources }

func (multiCPU) XDPProgramCounters() []XDPProgramCounter {
	return []XDPProgramCounter{
		{Interface: "eth0", Name: "redirected", PerCPU: []uint64{4, 5, 0, 1}},
		{Interface: "eth0", Name: "passed", PerCPU: []uint64{1, 2}},
		{Interface: "eth1", Name: "redirected", PerCPU: []uint64{7}},
		{Interface: "eth0", Name: "passed", PerCPU: []uint64{10}},
	}
}

// TestXDPProgramCountersSummed: one series per counter and interface, the
// per-CPU values summed, no cpu label.
func TestXDPProgramCountersSummed(t *testing.T) {
	r := newRig(t)
	reg := NewRegistry(r.state, Options{NoProcess: true, XDP: multiCPU{}})
	mf := gather(t, reg)["xrnic_xdp_program_packets_total"]
	if mf == nil || len(mf.GetMetric()) != 3 {
		t.Fatalf("program counter series: %v, want 3", mf)
	}
	for _, m := range mf.GetMetric() {
		if _, ok := labelsOf(m)["cpu"]; ok || len(m.GetLabel()) != 2 {
			t.Errorf("labels %v, want interface and counter only", labelsOf(m))
		}
	}
	for _, c := range []struct {
		iface, name string
		want        float64
	}{{"eth0", "redirected", 10}, {"eth0", "passed", 13}, {"eth1", "redirected", 7}} {
		if v := value(t, reg, "xrnic_xdp_program_packets_total", map[string]string{"interface": c.iface, "counter": c.name}); v != c.want {
			t.Errorf("%s %s = %v, want %v", c.iface, c.name, v, c.want)
		}
	}
}

// TestOpenMetricsNegotiation: the text format by default, OpenMetrics
// when the Accept header asks for it (as Prometheus does).
func TestOpenMetricsNegotiation(t *testing.T) {
	r := newRig(t)
	srv := httptest.NewServer(HTTPHandler(r.state, NewRegistry(r.state, Options{NoProcess: true})))
	defer srv.Close()
	fetch := func(accept string) (string, string) {
		req, _ := http.NewRequest("GET", srv.URL+"/metrics", nil)
		if accept != "" {
			req.Header.Set("Accept", accept)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			t.Fatalf("Accept %q: %d", accept, resp.StatusCode)
		}
		return resp.Header.Get("Content-Type"), string(b)
	}
	ct, body := fetch("")
	if !strings.HasPrefix(ct, "text/plain") || strings.Contains(body, "# EOF") {
		t.Errorf("no Accept: Content-Type %q, EOF marker %v", ct, strings.Contains(body, "# EOF"))
	}
	ct, body = fetch("application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5,*/*;q=0.1")
	if !strings.HasPrefix(ct, "application/openmetrics-text") || !strings.HasSuffix(body, "# EOF\n") {
		t.Errorf("OpenMetrics Accept: Content-Type %q, ends %q", ct, body[max(0, len(body)-20):])
	}
	// OpenMetrics names the counter family without _total.
	if !strings.Contains(body, "# TYPE xrnic_atomics counter") || !strings.Contains(body, `xrnic_atomics_total{operation="fetch_add",result="ok"} 0`) {
		t.Errorf("OpenMetrics body lacks the xrnic_atomics counter:\n%s", body[:min(len(body), 2000)])
	}
}

// selfSigned writes a certificate for 127.0.0.1 and its key to dir.
func selfSigned(t *testing.T, dir string) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "xrnicd test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "server.crt"), filepath.Join(dir, "server.key")
	os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644)
	os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600)
	cert, _ := x509.ParseCertificate(der)
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, pool
}

// TestWebConfig: with an exporter-toolkit web config file (TLS and basic
// auth) the metrics server refuses plain HTTP and requests without the
// password, and serves the scrape with it.
func TestWebConfig(t *testing.T) {
	r := newRig(t)
	dir := t.TempDir()
	certFile, keyFile, pool := selfSigned(t, dir)
	hash, err := bcrypt.GenerateFromPassword([]byte("s3cret"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "web.yml")
	os.WriteFile(cfg, []byte("tls_server_config:\n  cert_file: "+certFile+"\n  key_file: "+keyFile+"\nbasic_auth_users:\n  prometheus: "+string(hash)+"\n"), 0o600)
	if err := ValidateWebConfig(cfg); err != nil {
		t.Fatalf("ValidateWebConfig: %v", err)
	}
	bad := filepath.Join(dir, "bad.yml")
	os.WriteFile(bad, []byte("tls_server_config:\n  cert_file: "+filepath.Join(dir, "missing.crt")+"\n  key_file: "+keyFile+"\n"), 0o600)
	if err := ValidateWebConfig(bad); err == nil {
		t.Error("ValidateWebConfig accepted a missing certificate")
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	st := &ServerStats{Name: "metrics"}
	hs := NewHTTPServer(ln, HTTPHandler(r.state, NewRegistry(r.state, Options{NoProcess: true})), ServerConfig{Stats: st})
	done := make(chan error, 1)
	go func() { done <- hs.ServeWebConfig(cfg, nil) }()
	defer func() {
		hs.Shutdown(t.Context())
		if err := <-done; err != nil {
			t.Errorf("ServeWebConfig: %v", err)
		}
	}()
	url := "https://" + hs.Addr().String() + "/metrics"
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	do := func(user, pass string) (int, string) {
		req, _ := http.NewRequest("GET", url, nil)
		if user != "" {
			req.SetBasicAuth(user, pass)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, _ := do("", ""); code != http.StatusUnauthorized {
		t.Errorf("without credentials: %d, want 401", code)
	}
	if code, _ := do("prometheus", "wrong"); code != http.StatusUnauthorized {
		t.Errorf("wrong password: %d, want 401", code)
	}
	code, body := do("prometheus", "s3cret")
	if code != 200 || !strings.Contains(body, "xrnic_build_info{") {
		t.Errorf("with credentials: %d %.200s", code, body)
	}
	// Plain HTTP to the TLS port gets no metrics.
	if resp, err := http.Get("http://" + hs.Addr().String() + "/metrics"); err == nil {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == 200 || strings.Contains(string(b), "xrnic_") {
			t.Errorf("plain HTTP served: %d %.200s", resp.StatusCode, b)
		}
	}
	if st.Open() < 1 {
		t.Errorf("the TLS connections are not tracked by the listener: %d open", st.Open())
	}
}

// distinctXDP gives every XDPSocketStats field of queue 3 its own value.
type distinctXDP struct{ fakeSources }

func (distinctXDP) XDPSocketStats() []XDPSocketStats {
	return []XDPSocketStats{{Interface: "eth0", Queue: 3, RxDropped: 1, RxInvalidDescs: 2, TxInvalidDescs: 3,
		RxRingFull: 4, RxFillRingEmptyDescs: 5, TxRingEmptyDescs: 6, TxBusy: 7}}
}

// TestXDPSocketFamilies: each socket counter lands in its own family.
func TestXDPSocketFamilies(t *testing.T) {
	r := newRig(t)
	reg := NewRegistry(r.state, Options{NoProcess: true, XDP: distinctXDP{}})
	labels := map[string]string{"interface": "eth0", "queue": "3"}
	for i, fam := range []string{"xrnic_xdp_rx_dropped_total", "xrnic_xdp_rx_invalid_descriptors_total", "xrnic_xdp_tx_invalid_descriptors_total",
		"xrnic_xdp_rx_ring_full_total", "xrnic_xdp_fill_ring_empty_total", "xrnic_xdp_tx_ring_empty_total", "xrnic_xdp_tx_busy_total"} {
		if v := value(t, reg, fam, labels); v != float64(i+1) {
			t.Errorf("%s = %v, want %d", fam, v, i+1)
		}
	}
}
