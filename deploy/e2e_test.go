package deploy

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"xrnic/control"
	"xrnic/internal/daemontest"
	"xrnic/internal/freeport"
	"xrnic/internal/hugetest"
	"xrnic/internal/require"
	"xrnic/verbs"
)

func TestMain(m *testing.M) { daemontest.Main(m) }

// daemon is a running xrnicd with the walk-through's helpers.
type daemon struct{ *daemontest.Daemon }

// startDaemon starts xrnicd on loopback with ephemeral ports and waits
// until it is ready.
func startDaemon(t *testing.T, extra ...string) *daemon {
	t.Helper()
	return &daemon{daemontest.Start(t, daemontest.Options{ReadyTimeout: 10 * time.Second,
		Args: append([]string{"--listen", "127.0.0.1:0", "--metrics", "127.0.0.1:0", "--log-level", "debug"}, extra...)})}
}

// atomic runs fetchadd or cmpswap with -j and returns the original value.
func (d *daemon) atomic(t *testing.T, args ...string) uint64 {
	t.Helper()
	out := d.MustCtl(t, append(args, "-j")...)
	var r struct {
		Original string `json:"original"`
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil || !regexp.MustCompile(`^0x[0-9a-f]{16}$`).MatchString(r.Original) {
		t.Fatalf("%v: output %q", args, out)
	}
	v, _ := strconv.ParseUint(r.Original[2:], 16, 64)
	return v
}

// word reads the 8-byte word at TO 0 of a region (host byte order, as the
// atomics see it).
func (d *daemon) word(t *testing.T, reg string, to int) uint64 {
	t.Helper()
	r := d.Regions[reg]
	out := d.MustCtl(t, "read", d.Listen, r.STag, strconv.Itoa(to), "8", "-j")
	var res struct {
		Data string `json:"data"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatal(err)
	}
	b, err := hex.DecodeString(res.Data)
	if err != nil || len(b) != 8 {
		t.Fatalf("read data %q", res.Data)
	}
	return binary.NativeEndian.Uint64(b)
}

func (d *daemon) setWord(t *testing.T, reg string, to int, v uint64) {
	t.Helper()
	b := binary.NativeEndian.AppendUint64(nil, v)
	d.MustCtl(t, "write", d.Listen, d.Regions[reg].STag, strconv.Itoa(to), hex.EncodeToString(b))
}

// scrape returns the samples of /metrics at addr as name{labels} -> value.
func scrape(t *testing.T, addr string) map[string]float64 {
	t.Helper()
	return scrapeWith(t, http.DefaultClient, addr)
}

// scrapeWith is scrape through client c.
func scrapeWith(t *testing.T, c *http.Client, addr string) map[string]float64 {
	t.Helper()
	m := map[string]float64{}
	for _, line := range strings.Split(string(metricsBody(t, c, addr)), "\n") {
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("metrics line %q", line)
		}
		m[line[:i]] = v
	}
	return m
}

// metricsBody fetches /metrics at addr through client c.
func metricsBody(t *testing.T, c *http.Client, addr string) []byte {
	t.Helper()
	resp, err := c.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// sum adds the samples of family name whose labels include every pair.
func sum(m map[string]float64, name string, pairs ...string) float64 {
	var s float64
	found := false
outer:
	for k, v := range m {
		if k != name && !strings.HasPrefix(k, name+"{") {
			continue
		}
		for i := 0; i+1 < len(pairs); i += 2 {
			if !strings.Contains(k, pairs[i]+`="`+pairs[i+1]+`"`) {
				continue outer
			}
		}
		s += v
		found = true
	}
	if !found {
		return -1
	}
	return s
}

// TestIntegrationDaemon is the walk-through of deploy/README.md: xrnicd
// with two regions on loopback, xrnicctl operations checked by value, the
// metrics moving accordingly, a real Prometheus scraping the daemon, and a
// clean SIGTERM.
func TestIntegrationDaemon(t *testing.T) {
	// The regions (--hugepages prefer) map any free 2 MiB pages: not
	// while another test process has some reserved for itself.
	hugetest.Share(t)
	d := startDaemon(t, "--region", "counter:4K:rwa", "--region", "buf:64K:rw")
	peer := d.Listen
	c, b := d.Regions["counter"], d.Regions["buf"]
	if c.Length != 4096 || c.Access != "rwa" || c.TO != "0x0000000000000000" || !regexp.MustCompile(`^0x[0-9a-f]{8}$`).MatchString(c.STag) ||
		b.Length != 65536 || b.Access != "rw" {
		t.Fatalf("regions %+v", d.Regions)
	}
	before := scrape(t, d.Metrics)

	// probe: FetchAdd of 0 to the counter, and to STag 0 (refused, which
	// still proves the peer parsed the RFC 7306 request).
	if out := d.MustCtl(t, "probe", peer, c.STag, "0"); !strings.HasPrefix(out, "supported") {
		t.Fatalf("probe: %q", out)
	}
	out := d.MustCtl(t, "probe", peer, "-j")
	var pr struct {
		Supported bool   `json:"supported"`
		Terminate string `json:"terminate"`
	}
	if json.Unmarshal([]byte(out), &pr); !pr.Supported || !strings.Contains(pr.Terminate, "invalid STag") {
		t.Fatalf("probe of STag 0: %q", out)
	}

	// Masked FetchAdd: two 32-bit counters in one word (carry stops at bit
	// 31 and 63): the low half wraps without carrying into the high half.
	d.setWord(t, "counter", 0, 0x00000001_ffffffff)
	if got := d.atomic(t, "fetchadd", peer, c.STag, "0", "0x0000000100000001", "--mask", "0x8000000080000000"); got != 0x00000001_ffffffff {
		t.Fatalf("masked fetchadd original %#x", got)
	}
	if w := d.word(t, "counter", 0); w != 0x00000002_00000000 {
		t.Fatalf("after masked fetchadd: %#x", w)
	}
	// Plain FetchAdd, decimal and a negative ADD.
	if got := d.atomic(t, "fetchadd", peer, c.STag, "8", "5"); got != 0 {
		t.Fatalf("fetchadd original %d", got)
	}
	if got := d.atomic(t, "fetchadd", peer, c.STag, "8", "-2"); got != 5 {
		t.Fatalf("fetchadd original %d", got)
	}
	if w := d.word(t, "counter", 8); w != 3 {
		t.Fatalf("counter %d", w)
	}
	// CmpSwap: a miss leaves the word, a hit swaps, a masked one swaps
	// only the bits of the swap mask when the masked compare matches.
	if got := d.atomic(t, "cmpswap", peer, c.STag, "8", "4", "100"); got != 3 {
		t.Fatalf("cmpswap miss original %d", got)
	}
	if got := d.atomic(t, "cmpswap", peer, c.STag, "8", "3", "42"); got != 3 {
		t.Fatalf("cmpswap original %d", got)
	}
	if got := d.atomic(t, "cmpswap", peer, c.STag, "0x8", "0x12a", "0xab00", "--compare-mask", "0xff", "--swap-mask", "0xff00"); got != 42 {
		t.Fatalf("masked cmpswap original %d", got)
	}
	if w := d.word(t, "counter", 8); w != 0xab2a {
		t.Fatalf("after masked cmpswap: %#x", w)
	}
	// Write and Read.
	d.MustCtl(t, "write", peer, b.STag, "0x100", "00112233445566778899")
	out = d.MustCtl(t, "read", peer, b.STag, "0xfe", "14")
	if strings.TrimSpace(out) != "000000112233445566778899"+"0000" {
		t.Fatalf("read: %q", out)
	}
	// Send, Immediate Data, Write with Immediate.
	d.MustCtl(t, "send", peer, "hello", "daemon")
	d.MustCtl(t, "imm", peer, "0x1234")
	d.MustCtl(t, "imm", peer, "7", "--write", b.STag, "0", "cafe")
	if out := d.MustCtl(t, "read", peer, b.STag, "0", "2"); strings.TrimSpace(out) != "cafe" {
		t.Fatalf("write-with-immediate data: %q", out)
	}

	// Errors exit non-zero with the status and the Terminate in words.
	_, err := d.Ctl.Run("fetchadd", peer, b.STag, "0", "1")
	if err == nil || !strings.Contains(err.Error(), "exit status 1") || !strings.Contains(err.Error(), "remote access error") ||
		!strings.Contains(err.Error(), "Terminate RDMAP/0x1/0x02 access rights violation") {
		t.Fatalf("fetchadd without atomic access: %v", err)
	}
	_, err = d.Ctl.Run("read", peer, c.STag, "4090", "8")
	if err == nil || !strings.Contains(err.Error(), "base or bounds") {
		t.Fatalf("read out of bounds: %v", err)
	}
	if _, err := d.Ctl.Run("fetchadd", peer, c.STag, "zero", "1"); err == nil || !strings.Contains(err.Error(), "exit status 2") {
		t.Fatalf("usage error: %v", err)
	}

	// The metrics moved accordingly (the daemon's counters lag its
	// responses by nothing: they are counted before the response is sent).
	waitFor(t, "metrics", func() string {
		after := scrape(t, d.Metrics)
		checks := []struct {
			name  string
			pairs []string
			want  float64
		}{
			{"xrnic_atomics_total", []string{"operation", "fetch_add", "result", "ok"}, 4}, // probe + 3
			{"xrnic_atomics_total", []string{"operation", "cmp_swap", "result", "matched"}, 2},
			{"xrnic_atomics_total", []string{"operation", "cmp_swap", "result", "not_matched"}, 1},
			{"xrnic_atomic_errors_total", []string{"reason", "invalid_stag"}, 1},
			{"xrnic_atomic_errors_total", []string{"reason", "access"}, 1},
			{"xrnic_terminates_total", []string{"direction", "tx"}, 3},
			// The probe of STag 0: an RDMAP invalid STag Terminate.
			{"xrnic_terminates_total", []string{"direction", "tx", "reason", "rdmap_invalid_stag"}, 1},
			{"xrnic_rdmap_messages_total", []string{"direction", "rx", "opcode", "atomic_request"}, 9},
			{"xrnic_rdmap_messages_total", []string{"direction", "rx", "opcode", "write"}, 3},
			// 5 reads, and the zero-length Read with which each of the 5
			// writes, sends and imms confirms the daemon accepted it.
			{"xrnic_rdmap_messages_total", []string{"direction", "tx", "opcode", "read_response"}, 5 + 5},
			{"xrnic_sink_messages_total", []string{"kind", "send"}, 1},
			{"xrnic_sink_messages_total", []string{"kind", "immediate"}, 1},
			{"xrnic_sink_messages_total", []string{"kind", "write_immediate"}, 1},
			{"xrnic_sink_bytes_total", []string{"kind", "send"}, float64(len("hello daemon"))},
			{"xrnic_completion_latency_seconds_count", []string{"queue", "recv"}, 3},
		}
		for _, c := range checks {
			if got := sum(after, c.name, c.pairs...) - max(sum(before, c.name, c.pairs...), 0); got != c.want {
				return fmt.Sprintf("%s%v grew by %v, want %v", c.name, c.pairs, got, c.want)
			}
		}
		if n := sum(after, "xrnic_registered_memory_bytes"); n != 4096+65536 {
			return fmt.Sprintf("registered bytes %v", n)
		}
		if n := sum(after, "xrnic_mpa_negotiations_total", "outcome", "accepted"); n < 18 {
			return fmt.Sprintf("accepted MPA negotiations %v", n)
		}
		if n := sum(after, "xrnic_qps", "state", "rts"); n != 0 {
			return fmt.Sprintf("QPs in RTS after every xrnicctl exited: %v", n)
		}
		return ""
	})

	t.Run("prometheus", func(t *testing.T) { testPrometheus(t, d) })
	t.Run("dashboard", func(t *testing.T) { testDashboard(t, scrape(t, d.Metrics)) })

	// SIGTERM: exit 0, the socket file is gone, no XDP program on lo.
	d.Stop(t, 20*time.Second)
	if !strings.Contains(d.Log.String(), "xrnicd stopped") {
		t.Errorf("no orderly stop in the log")
	}
	if out, err := exec.Command("ip", "link", "show", "lo").CombinedOutput(); err == nil && strings.Contains(string(out), "xdp") {
		t.Errorf("XDP program left on lo: %s", out)
	}
}

func waitFor(t *testing.T, what string, f func() string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		msg := f()
		if msg == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %s", what, msg)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func freePort(t *testing.T) string {
	t.Helper()
	p, err := freeport.Pick()
	if err != nil {
		t.Fatal(err)
	}
	return "127.0.0.1:" + strconv.Itoa(p)
}

// promQuery returns the single value of an instant query, or an error
// message.
func promQuery(addr, q string) (float64, string) {
	resp, err := http.Get("http://" + addr + "/api/v1/query?query=" + url.QueryEscape(q))
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	var r struct {
		Status string `json:"status"`
		Data   struct {
			Result []struct {
				Value [2]any `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	body, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(body, &r); err != nil || r.Status != "success" {
		return 0, "query " + q + ": " + string(body)
	}
	if len(r.Data.Result) != 1 {
		return 0, fmt.Sprintf("query %s: %d results", q, len(r.Data.Result))
	}
	s, _ := r.Data.Result[0].Value[1].(string)
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0, err.Error()
	}
	return v, ""
}

// testPrometheus runs Debian's prometheus on loopback with deploy's scrape
// config (pointed at the daemon) and sees the atomic counter grow.
func testPrometheus(t *testing.T, d *daemon) {
	prom := require.Tool(t, "prometheus", "prometheus")
	dir := t.TempDir()
	cfg, err := os.ReadFile("prometheus/prometheus.yml")
	if err != nil {
		t.Fatal(err)
	}
	s := strings.Replace(string(cfg), "'127.0.0.1:9736'", "'"+d.Metrics+"'", 1)
	s = strings.Replace(s, "scrape_interval: 15s", "scrape_interval: 1s", 1)
	if s == string(cfg) {
		t.Fatal("prometheus.yml: default target or interval not found")
	}
	rules, _ := os.ReadFile("prometheus/xrnic.rules.yml")
	os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(s), 0o644)
	os.WriteFile(filepath.Join(dir, "xrnic.rules.yml"), rules, 0o644)
	web := freePort(t)
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, prom, "--config.file="+filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path="+filepath.Join(dir, "data"), "--web.listen-address="+web, "--log.level=warn")
	log := &daemontest.Buffer{}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cancel()
		cmd.Wait()
		if t.Failed() {
			t.Logf("prometheus log:\n%s", log.String())
		}
	}()
	q := `sum(xrnic_atomics_total{job="xrnicd",operation="fetch_add"})`
	var base float64
	waitFor(t, "prometheus scrape", func() string {
		if v, msg := promQuery(web, `up{job="xrnicd"}`); msg != "" || v != 1 {
			return fmt.Sprintf("up=%v %s", v, msg)
		}
		v, msg := promQuery(web, q)
		base = v
		if msg != "" || v < 4 {
			return fmt.Sprintf("fetch_add=%v %s", v, msg)
		}
		return ""
	})
	for range 3 {
		d.atomic(t, "fetchadd", d.Listen, d.Regions["counter"].STag, "16", "1")
	}
	waitFor(t, "counter growth in prometheus", func() string {
		v, msg := promQuery(web, q)
		if msg != "" || v != base+3 {
			return fmt.Sprintf("fetch_add=%v (base %v) %s", v, base, msg)
		}
		return ""
	})
}

var metricName = regexp.MustCompile(`\b(xrnic_[a-z0-9_]+|go_[a-z0-9_]+|process_[a-z0-9_]+|up)\b`)

var (
	selector  = regexp.MustCompile(`\b(xrnic_[a-z0-9_]+)\{([^}]*)\}`)
	labelPair = regexp.MustCompile(`[a-z_]+="[^"]*"`)
)

// stand-in afxdp sources for afxdpSeries.
type fakeTCP struct{}

func (fakeTCP) TCPStats() control.TCPStats {
	return control.TCPStats{SegmentsIn: 1, SegmentsOut: 1, RTTBounds: []float64{0.001}, RTTBuckets: []uint64{1}, RTTCount: 1}
}

type fakeXDP struct{}

func (fakeXDP) XDPSocketStats() []control.XDPSocketStats {
	return []control.XDPSocketStats{{Interface: "eth0", Queue: 0}}
}

func (fakeXDP) XDPProgramCounters() []control.XDPProgramCounter {
	var out []control.XDPProgramCounter
	for _, n := range []string{"redirected", "passed", "malformed", "no_socket", "fault_dropped", "fault_corrupted"} {
		out = append(out, control.XDPProgramCounter{Interface: "eth0", Name: n, PerCPU: []uint64{0, 0}})
	}
	return out
}

// afxdpSeries returns the xrnic_tcp_* and xrnic_xdp_* series the collector
// exports with the afxdp transport's sources, as served.
func afxdpSeries(t *testing.T) map[string]float64 {
	t.Helper()
	dev, err := verbs.Open(verbs.DeviceConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	st := control.NewState(dev)
	srv := httptest.NewServer(control.HTTPHandler(st, control.NewRegistry(st, control.Options{NoProcess: true, TCP: fakeTCP{}, XDP: fakeXDP{}})))
	defer srv.Close()
	out := map[string]float64{}
	for k, v := range scrape(t, strings.TrimPrefix(srv.URL, "http://")) {
		if strings.HasPrefix(k, "xrnic_tcp_") || strings.HasPrefix(k, "xrnic_xdp_") {
			out[k] = v
		}
	}
	if len(out) < 10 {
		t.Fatalf("only %d afxdp series from the collector", len(out))
	}
	return out
}

// testDashboard checks that every metric the Grafana dashboard queries is
// exported by the daemon (histogram queries name the _bucket series), the
// afxdp families by the collector with stand-in sources, and that every
// label value a selector matches exactly exists.
func testDashboard(t *testing.T, exported map[string]float64) {
	b, err := os.ReadFile("grafana/xrnic-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Definition string `json:"definition"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatal(err)
	}
	// The afxdp families are absent from a kernel daemon: take them from
	// the collector with stand-in sources.
	all := map[string]float64{}
	for k, v := range exported {
		all[k] = v
	}
	for k, v := range afxdpSeries(t) {
		all[k] = v
	}
	names := map[string]bool{"up": true} // added by Prometheus itself
	pairs := map[string]bool{}           // name label="value"
	for k := range all {
		name, labels := k, ""
		if i := strings.IndexByte(k, '{'); i >= 0 {
			name, labels = k[:i], k[i+1:len(k)-1]
		}
		names[name] = true
		for _, lp := range labelPair.FindAllString(labels, -1) {
			pairs[name+" "+lp] = true
		}
	}
	var exprs []string
	for _, p := range dash.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			exprs = append(exprs, tg.Expr)
		}
	}
	for _, v := range dash.Templating.List {
		exprs = append(exprs, v.Definition)
	}
	checked := 0
	for _, e := range exprs {
		for _, n := range metricName.FindAllString(e, -1) {
			checked++
			if !names[n] {
				t.Errorf("dashboard queries %s, which the daemon does not export (in %q)", n, e)
			}
		}
		// Every label="value" a selector matches exactly names a series.
		for _, m := range selector.FindAllStringSubmatch(e, -1) {
			for _, lp := range labelPair.FindAllString(m[2], -1) {
				if strings.HasPrefix(lp, "instance=") || strings.HasPrefix(lp, "job=") {
					continue
				}
				if !pairs[m[1]+" "+lp] {
					t.Errorf("dashboard selects %s{%s}, which no exported series has (in %q)", m[1], lp, e)
				}
			}
		}
	}
	if checked < 20 {
		t.Fatalf("only %d metric names found in the dashboard", checked)
	}
}

// TestPromtool checks the scrape config and rules and runs the rule unit
// tests.
func TestPromtool(t *testing.T) {
	promtool := require.Tool(t, "promtool", "prometheus")
	for _, args := range [][]string{
		{"check", "config", "prometheus.yml"},
		{"check", "rules", "xrnic.rules.yml"},
		{"test", "rules", "xrnic.rules.test.yml"},
	} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = "prometheus"
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}
