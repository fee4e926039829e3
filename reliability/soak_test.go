package reliability

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/crc64"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"xrnic/verbs"
)

// The soak client is this test binary re-executed with soakClientEnv set
// (TestMain hands it to soakClientMain). Its parameters come in the
// environment; it runs until killed (or until XRNIC_SOAK_FOR passes) and
// reports through two files:
//
//   - counts (XRNIC_SOAK_COUNTS): 16 bytes per QP, FetchAdds posted and
//     completed, written with pwrite: posted before the post, completed
//     after the completion, so after a SIGKILL the file brackets what
//     the daemon executed: completed <= executed <= posted;
//   - summary (XRNIC_SOAK_SUMMARY): JSON rewritten every 500 ms (write
//     and rename): operations, errors, latency percentiles.
const soakClientEnv = "XRNIC_SOAK_CLIENT"

type soakSummary struct {
	QPs       int                `json:"qps"`
	Connected int                `json:"connected"`
	Ops       map[string]int64   `json:"ops"`
	Errors    []string           `json:"errors"`
	P50us     map[string]float64 `json:"p50_us"`
	P99us     map[string]float64 `json:"p99_us"`
}

const (
	opWrite = iota
	opRead
	opSend
	opFetchAdd
	opMaskedFA
	opCmpSwap
	numOps
)

var opNames = [numOps]string{"write", "read", "send", "fetchadd", "masked_fetchadd", "cmpswap"}

// latency is a log-linear histogram in microseconds (8 sub-buckets per
// power of two), lock-free.
type latency struct{ b [40 * 8]atomic.Int64 }

func bucketOf(us int64) int {
	if us < 8 {
		return int(max(us, 0))
	}
	e := 63 - leadingZeros(uint64(us)) // us in [2^e, 2^(e+1))
	sub := int((us >> (e - 3)) & 7)
	return min((e-2)*8+sub, 40*8-1)
}

func leadingZeros(x uint64) int {
	n := 0
	for i := 63; i >= 0 && x&(1<<i) == 0; i-- {
		n++
	}
	return n
}

func bucketUpper(i int) float64 {
	if i < 8 {
		return float64(i + 1)
	}
	e, sub := i/8+2, i%8
	return float64(int64(1)<<e + int64(sub+1)<<(e-3))
}

func (l *latency) observe(d time.Duration) { l.b[bucketOf(d.Microseconds())].Add(1) }

func (l *latency) quantile(q float64) float64 {
	var tot int64
	for i := range l.b {
		tot += l.b[i].Load()
	}
	if tot == 0 {
		return 0
	}
	want := int64(q*float64(tot)) + 1
	var acc int64
	for i := range l.b {
		acc += l.b[i].Load()
		if acc >= want {
			return bucketUpper(i)
		}
	}
	return bucketUpper(len(l.b) - 1)
}

func envInt(k string) int {
	v, _ := strconv.Atoi(os.Getenv(k))
	return v
}

func envHex(k string) uint64 {
	v, _ := strconv.ParseUint(strings.TrimPrefix(os.Getenv(k), "0x"), 16, 64)
	return v
}

// soakClientMain is a client process: QPs connections to the daemon, each
// running Write+Read-back, Send, FetchAdd, masked FetchAdd and CmpSwap in
// turn, one WR outstanding at a time, every completion checked to be the
// one expected (its ID, status, and for Reads and CmpSwap the data).
func soakClientMain() int {
	addr := os.Getenv("XRNIC_SOAK_ADDR")
	nqp, client := envInt("XRNIC_SOAK_QPS"), envInt("XRNIC_SOAK_ID")
	dataSTag, counterSTag := uint32(envHex("XRNIC_SOAK_DATA_STAG")), uint32(envHex("XRNIC_SOAK_COUNTER_STAG"))
	dataTO, counterTO := envHex("XRNIC_SOAK_DATA_TO"), envHex("XRNIC_SOAK_COUNTER_TO")
	stop := time.Now().Add(time.Hour)
	if d, err := time.ParseDuration(os.Getenv("XRNIC_SOAK_FOR")); err == nil {
		stop = time.Now().Add(d)
	}
	counts, err := os.OpenFile(os.Getenv("XRNIC_SOAK_COUNTS"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	sumPath := os.Getenv("XRNIC_SOAK_SUMMARY")
	idle := os.Getenv("XRNIC_SOAK_IDLE") == "1"

	dev, err := verbs.Open(verbs.DeviceConfig{MaxQPs: nqp + 8})
	if err != nil {
		fmt.Fprintln(os.Stderr, "open:", err)
		return 1
	}
	pd, _ := dev.AllocPD()
	var ops [numOps]atomic.Int64
	var lat [numOps]latency
	var connected atomic.Int64
	var emu sync.Mutex
	var errs []string
	fail := func(format string, a ...any) {
		emu.Lock()
		if len(errs) < 20 {
			errs = append(errs, fmt.Sprintf(format, a...))
		}
		emu.Unlock()
	}
	report := func() {
		s := soakSummary{QPs: nqp, Connected: int(connected.Load()), Ops: map[string]int64{}, P50us: map[string]float64{}, P99us: map[string]float64{}}
		for i := range ops {
			s.Ops[opNames[i]] = ops[i].Load()
			s.P50us[opNames[i]] = lat[i].quantile(0.50)
			s.P99us[opNames[i]] = lat[i].quantile(0.99)
		}
		emu.Lock()
		s.Errors = slices.Clone(errs)
		emu.Unlock()
		b, _ := json.Marshal(s)
		os.WriteFile(sumPath+".tmp", b, 0o600)
		os.Rename(sumPath+".tmp", sumPath)
	}
	var wg sync.WaitGroup
	for q := 0; q < nqp; q++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			slot := client*nqp + q
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			cq, err := dev.CreateCQ(8)
			if err != nil {
				fail("qp %d: cq: %v", q, err)
				return
			}
			qp, err := pd.CreateQP(verbs.QPAttr{SendCQ: cq, RecvCQ: cq, SQDepth: 2, RQDepth: 1, MaxSGE: 1, SigAll: true})
			if err != nil {
				fail("qp %d: create: %v", q, err)
				return
			}
			mrLen := 4096
			if idle {
				mrLen = 2 * idleBulk
			}
			mr, err := pd.AllocMR(mrLen, verbs.AccessLocalWrite, verbs.AllocOptions{})
			if err != nil {
				fail("qp %d: mr: %v", q, err)
				return
			}
			// Stagger the connects a little: 1000 at once would overflow
			// the daemon's listen backlog.
			time.Sleep(time.Duration(q) * 2 * time.Millisecond)
			if err := qp.Dial(ctx, addr, verbs.ConnParam{}); err != nil {
				fail("qp %d: dial: %v", q, err)
				return
			}
			connected.Add(1)
			if idle {
				// A 64 KiB Write and Read (into one region all QPs share:
				// the data does not matter), as a QP that has moved data
				// before it idles, then nothing until the end.
				wc := make([]verbs.Completion, 2)
				if qp.PostWrite(1, mr.SGE(0, idleBulk), dataSTag, dataTO, verbs.FlagSignaled) != nil ||
					qp.PostRead(2, mr.SGE(idleBulk, idleBulk), dataSTag, dataTO, verbs.FlagSignaled) != nil {
					fail("qp %d: post", q)
					return
				}
				for n := 0; n < 2; {
					if cq.Wait(ctx) != nil {
						fail("qp %d: no completion", q)
						return
					}
					k := cq.Poll(wc)
					for _, c := range wc[:k] {
						if c.Status != verbs.StatusSuccess {
							fail("qp %d: %v", q, c.Status)
						}
					}
					n += k
				}
				ops[opWrite].Add(1)
				ops[opRead].Add(1)
				time.Sleep(time.Until(stop))
				qp.Close()
				return
			}
			rng := rand.New(rand.NewPCG(uint64(slot), 1))
			buf := mr.Bytes()
			wc := make([]verbs.Completion, 4)
			var id uint64
			cmpVal := uint64(0) // this QP's CmpSwap word starts at 0
			var countBuf [16]byte
			var faPosted, faDone uint64
			saveCounts := func() {
				binary.LittleEndian.PutUint64(countBuf[0:], faPosted)
				binary.LittleEndian.PutUint64(countBuf[8:], faDone)
				counts.WriteAt(countBuf[:], int64(q)*16)
			}
			// exec posts one WR and waits for its completion: exactly one,
			// with its ID and success.
			exec := func(op int, post func(id uint64) error) (verbs.Completion, bool) {
				id++
				t0 := time.Now()
				if err := post(id); err != nil {
					fail("qp %d: post %s: %v", q, opNames[op], err)
					return verbs.Completion{}, false
				}
				deadline := t0.Add(20 * time.Second)
				for {
					n := cq.Poll(wc)
					if n > 1 {
						fail("qp %d: %d completions for one WR", q, n)
						return verbs.Completion{}, false
					}
					if n == 1 {
						c := wc[0]
						if c.ID != id || c.Status != verbs.StatusSuccess {
							fail("qp %d: %s: completion id %d (want %d) status %v err %v", q, opNames[op], c.ID, id, c.Status, c.Err)
							return c, false
						}
						lat[op].observe(time.Since(t0))
						ops[op].Add(1)
						return c, true
					}
					if time.Now().After(deadline) {
						fail("qp %d: %s: no completion in 20 s (lost)", q, opNames[op])
						return verbs.Completion{}, false
					}
					wctx, wcancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
					cq.Wait(wctx)
					wcancel()
				}
			}
			const wlen = 256
			for time.Now().Before(stop) {
				// Write a fresh pattern to our slot of the data region and
				// read it back.
				for i := 0; i < wlen; i++ {
					buf[i] = byte(rng.Uint32())
				}
				want := crc64.Checksum(buf[:wlen], crcTab)
				rto := dataTO + uint64(slot)*wlen
				if _, ok := exec(opWrite, func(id uint64) error {
					return qp.PostWrite(id, mr.SGE(0, wlen), dataSTag, rto, verbs.FlagSignaled)
				}); !ok {
					return
				}
				clear(buf[wlen : 2*wlen])
				if _, ok := exec(opRead, func(id uint64) error {
					return qp.PostRead(id, mr.SGE(wlen, wlen), dataSTag, rto, verbs.FlagSignaled)
				}); !ok {
					return
				}
				if got := crc64.Checksum(buf[wlen:2*wlen], crcTab); got != want {
					fail("qp %d: read back a different checksum", q)
					return
				}
				copy(buf[1024:], "soak send payload")
				if _, ok := exec(opSend, func(id uint64) error {
					return qp.PostSendBuf(id, mr.SGE(1024, 64), verbs.FlagSignaled)
				}); !ok {
					return
				}
				faPosted++
				saveCounts()
				if _, ok := exec(opFetchAdd, func(id uint64) error {
					return qp.PostFetchAdd(id, mr.SGE(2048, 8), counterSTag, counterTO, 1, 0, verbs.FlagSignaled)
				}); !ok {
					return
				}
				faDone++
				saveCounts()
				// Word 1: two 32-bit counters in one word (carry stops at
				// bits 31 and 63).
				if _, ok := exec(opMaskedFA, func(id uint64) error {
					return qp.PostFetchAdd(id, mr.SGE(2056, 8), counterSTag, counterTO+8, 1<<32|1, 1<<31|1<<63, verbs.FlagSignaled)
				}); !ok {
					return
				}
				c, ok := exec(opCmpSwap, func(id uint64) error {
					return qp.PostCmpSwap(id, mr.SGE(2064, 8), counterSTag, counterTO+64+uint64(slot)*8, cmpVal, verbs.CmpSwapAll, cmpVal+1, verbs.CmpSwapAll, verbs.FlagSignaled)
				})
				if !ok {
					return
				}
				if c.AtomicOrig != cmpVal {
					fail("qp %d: cmpswap original %d, want %d", q, c.AtomicOrig, cmpVal)
					return
				}
				cmpVal++
			}
			qp.Close()
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	tick := time.NewTicker(500 * time.Millisecond)
	for {
		select {
		case <-done:
			report()
			return 0
		case <-tick.C:
			report()
		}
	}
}

// startSoakClient starts soak client c (argv: this test binary, maybe
// behind a wrapper) with perClient QPs to d; its files go into dir, extra
// is added to its environment.
func startSoakClient(t *testing.T, argv []string, d *daemon, c, perClient int, dir string, extra ...string) (*exec.Cmd, *syncBuf) {
	t.Helper()
	data, counter := d.regions["data"], d.regions["counter"]
	cmd := exec.Command(argv[0], append(argv[1:], "-test.run=^$")...)
	cmd.Env = append(append(os.Environ(), soakClientEnv+"=1",
		"XRNIC_SOAK_ADDR="+d.listen, "XRNIC_SOAK_QPS="+strconv.Itoa(perClient), "XRNIC_SOAK_ID="+strconv.Itoa(c),
		"XRNIC_SOAK_DATA_STAG="+data.STag, "XRNIC_SOAK_DATA_TO="+data.TO,
		"XRNIC_SOAK_COUNTER_STAG="+counter.STag, "XRNIC_SOAK_COUNTER_TO="+counter.TO,
		"XRNIC_SOAK_COUNTS="+filepath.Join(dir, fmt.Sprintf("counts%d", c)),
		"XRNIC_SOAK_SUMMARY="+filepath.Join(dir, fmt.Sprintf("summary%d.json", c))), extra...)
	out := &syncBuf{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return cmd, out
}

// procStatus reads VmRSS (KiB) and the open file descriptors of pid.
func procStatus(t testing.TB, pid int) (rssKiB int, fds int) {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmRSS:" {
			rssKiB, _ = strconv.Atoi(f[1])
		}
	}
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	return rssKiB, len(ents)
}

func (d *daemon) status(t testing.TB) (qps int) {
	t.Helper()
	var st struct {
		QPs int `json:"qps"`
	}
	out := d.mustCtl(t, "status", "-j")
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("status -j: %v: %s", err, out)
	}
	return st.QPs
}

// word reads the 8-byte word at TO off of a region with xrnicctl (host
// byte order, as the atomics see it) through a fresh connection.
func (d *daemon) word(t testing.TB, reg string, off uint64) uint64 {
	t.Helper()
	r := d.regions[reg]
	out := d.mustCtl(t, "read", d.listen, r.STag, fmt.Sprintf("0x%x", r.to(t)+off), "8", "-j")
	var res struct {
		Data string `json:"data"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil || len(res.Data) < 16 {
		t.Fatalf("read -j: %v %q", err, out)
	}
	var b [8]byte
	for i := 0; i < 8; i++ {
		v, _ := strconv.ParseUint(res.Data[2*i:2*i+2], 16, 8)
		b[i] = byte(v)
	}
	return binary.NativeEndian.Uint64(b[:])
}

// metric returns the value of one sample line of /metrics (name{labels}).
func (d *daemon) metric(t testing.TB, sample string) float64 {
	t.Helper()
	out, err := httpGet("http://" + d.metrics + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, sample+" ") {
			v, _ := strconv.ParseFloat(strings.TrimSpace(l[len(sample):]), 64)
			return v
		}
	}
	return -1
}

// TestIntegrationSoak: one xrnicd, clients x qps QPs from separate client
// processes running mixed operations; completions counted exactly once,
// RSS and latency reported; then every client is SIGKILLed at once and
// the daemon must end every QP, free their resources and keep serving.
func TestIntegrationSoak(t *testing.T) {
	clients, perClient, dur := 4, 50, 8*time.Second
	if *flagSoak || os.Getenv("XRNIC_SOAK") == "1" {
		perClient, dur = 250, 60*time.Second
	}
	if testing.Short() {
		perClient, dur = 10, 3*time.Second
	}
	total := clients * perClient
	d := startDaemon(t, "--max-qps", strconv.Itoa(total+64), "--max-setup-per-peer", strconv.Itoa(total+64), "--sink-depth", "32", "--sink-buffer", "1K",
		"--region", fmt.Sprintf("data:%d:rw", total*256), "--region", fmt.Sprintf("counter:%d:rwa", 64+total*8+64),
		"--log-level", "warn", "--conn-timeout", "5s")
	rss0, fd0 := procStatus(t, d.pid())
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	counter := d.regions["counter"]
	var procs []*exec.Cmd
	var outs []*syncBuf
	t0 := time.Now()
	for c := 0; c < clients; c++ {
		cmd, out := startSoakClient(t, []string{self}, d, c, perClient, dir)
		procs = append(procs, cmd)
		outs = append(outs, out)
	}
	killAll := func() {
		for _, p := range procs {
			p.Process.Signal(syscall.SIGKILL)
		}
		for _, p := range procs {
			p.Wait()
		}
	}
	defer func() {
		if procs[0].ProcessState == nil {
			killAll()
		}
	}()
	readSummaries := func() (s []soakSummary) {
		for c := 0; c < clients; c++ {
			var x soakSummary
			b, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("summary%d.json", c)))
			if err == nil {
				json.Unmarshal(b, &x)
			}
			s = append(s, x)
		}
		return s
	}
	// Run; sample the daemon midway and at the end.
	maxRSS, peakQPs := 0, 0
	for time.Since(t0) < dur {
		time.Sleep(500 * time.Millisecond)
		d.alive(t)
		rss, _ := procStatus(t, d.pid())
		maxRSS = max(maxRSS, rss)
		peakQPs = max(peakQPs, d.status(t))
		for c, p := range procs {
			if p.ProcessState != nil {
				t.Fatalf("client %d exited early:\n%s", c, outs[c].String())
			}
		}
	}
	rssRun, fdRun := procStatus(t, d.pid())
	sums := readSummaries()
	// SIGKILL every client at once.
	killAll()
	killedAt := time.Now()
	var ops [numOps]int64
	connected := 0
	for c, s := range sums {
		for _, e := range s.Errors {
			t.Errorf("client %d: %s", c, e)
		}
		connected += s.Connected
		for i, n := range opNames {
			ops[i] += s.Ops[n]
		}
	}
	if connected != total {
		t.Errorf("%d of %d QPs connected", connected, total)
	}
	// Every QP ends, promptly.
	var qpsLeft int
	for {
		qpsLeft = d.status(t)
		if qpsLeft == 0 || time.Since(killedAt) > 30*time.Second {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	endedIn := time.Since(killedAt)
	if qpsLeft != 0 {
		t.Fatalf("%d QPs left 30 s after every client was killed", qpsLeft)
	}
	if g := d.metric(t, `xrnic_qps{state="rts"}`); g > 0 {
		t.Errorf("xrnic_qps{state=\"rts\"} is %v after the clients died", g)
	}
	// fds back to the baseline (a few may be in use by the scrape itself).
	var rss1, fd1 int
	for i := 0; i < 50; i++ {
		rss1, fd1 = procStatus(t, d.pid())
		if fd1 <= fd0+4 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if fd1 > fd0+4 {
		t.Errorf("daemon fds %d before, %d after (leaked connections?)", fd0, fd1)
	}
	// The atomic counter: completed <= value <= posted.
	var faPosted, faDone uint64
	for c := 0; c < clients; c++ {
		b, _ := os.ReadFile(filepath.Join(dir, fmt.Sprintf("counts%d", c)))
		for i := 0; i+16 <= len(b); i += 16 {
			faPosted += binary.LittleEndian.Uint64(b[i:])
			faDone += binary.LittleEndian.Uint64(b[i+8:])
		}
	}
	final := d.word(t, "counter", 0)
	if final < faDone || final > faPosted {
		t.Errorf("counter %d outside [completed %d, posted %d]", final, faDone, faPosted)
	}
	masked := d.word(t, "counter", 8)
	if lo, hi := uint32(masked), uint32(masked>>32); lo != hi {
		t.Errorf("masked counter halves %d and %d differ (a carry crossed bit 31, or a masked add was torn)", lo, hi)
	}
	// A fresh client still works.
	if v := d.word(t, "counter", 0); v != final {
		t.Errorf("counter moved after every client died: %d -> %d", final, v)
	}
	d.mustCtl(t, "fetchadd", d.listen, counter.STag, counter.TO, "5")
	if v := d.word(t, "counter", 0); v != final+5 {
		t.Errorf("fresh client's FetchAdd: counter %d, want %d", v, final+5)
	}
	d.alive(t)
	el := dur.Seconds()
	var line []string
	for i, n := range opNames {
		var p50, p99 float64
		for _, s := range sums {
			p50 = max(p50, s.P50us[n])
			p99 = max(p99, s.P99us[n])
		}
		line = append(line, fmt.Sprintf("%s %d (%.0f/s) p50<=%.0fus p99<=%.0fus", n, ops[i], float64(ops[i])/el, p50, p99))
	}
	t.Logf("soak: %d clients x %d QPs for %v (peak %d QPs)", clients, perClient, dur, peakQPs)
	t.Logf("ops: %s", strings.Join(line, "; "))
	t.Logf("daemon RSS: %d MiB before, %d MiB at the end of the run (max %d MiB), %d MiB after the kill; fds %d / %d / %d",
		rss0>>10, rssRun>>10, maxRSS>>10, rss1>>10, fd0, fdRun, fd1)
	t.Logf("after SIGKILL of all clients: every QP ended in %v; counter %d in [completed %d, posted %d]",
		endedIn.Round(time.Millisecond), final, faDone, faPosted)
	if maxRSS > 2<<20 {
		t.Errorf("daemon RSS reached %d MiB", maxRSS>>10)
	}
}
