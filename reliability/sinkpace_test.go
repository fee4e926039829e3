package reliability

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"xrnic/internal/netnstest"
	"xrnic/verbs"
)

// TestIntegrationSinkPacedSends: the reliability issue's sender, against
// a running xrnicd (kernel transport, loopback), optionally while `nice
// stress-ng --cpu 2` keeps the CPUs busy. It sends 100,000 Sends, 16 per FetchAdd
// round trip with two batches in flight: it never has more than 32
// (--sink-depth) Sends beyond the last FetchAdd response it has seen,
// which is what SECURITY.md asks of a Send sender. Every Send must be
// accepted (no Terminate, whichever side) and counted by the sink. When
// a goroutine of the daemon reposted the sink's buffers, a run of four
// ended with Terminate DDP 1/2/0x02 (no buffer available).
//
// XRNIC_SINK_SENDS sets the number of Sends (-short: 10,000);
// XRNIC_SINK_STRESS=1 adds the CPU load (stress-ng), as the run
// had it; off by default, since make unit's parallel packages load the
// machine already and a test should not slow the others on purpose. The
// old reposting goroutine failed without it too (3 of 3 runs).
func TestIntegrationSinkPacedSends(t *testing.T) {
	d := startDaemon(t, "--region", "counter:4K:rwa", "--sink-depth", strconv.Itoa(sinkDepth), "--log-level", "warn")
	dev, err := verbs.Open(verbs.DeviceConfig{ConnTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	sinkPaced(t, d, dev, d.listen, func(f func() error) error { return f() })
}

// TestIntegrationSinkPacedSendsAFXDP: the same against xrnicd on the
// afxdp transport in namespace A (our TCP, the poll loop runs the
// receive path), the sender a kernel-transport device in namespace B.
func TestIntegrationSinkPacedSendsAFXDP(t *testing.T) {
	e := newWireEnv(t, false)
	listen := rlIPA.String() + ":7306"
	d := nsDaemon(t, e.nsA, t.TempDir(), "--transport", "afxdp", "--iface", e.devA, "--listen", listen,
		"--region", "counter:4K:rwa", "--sink-depth", strconv.Itoa(sinkDepth), "--log-level", "warn")
	var dev *verbs.Device
	if err := netnstest.In(t, e.nsB, func() (err error) {
		dev, err = verbs.Open(verbs.DeviceConfig{ConnTimeout: 10 * time.Second})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	sinkPaced(t, d, dev, listen, func(f func() error) error { return netnstest.In(t, e.nsB, f) })
}

const sinkDepth = 32 // the daemon's --sink-depth in these tests (its default)

// sinkPaced connects a QP of dev to the daemon d at addr (dialling
// through in) and sends the Sends, 16 per FetchAdd, two batches in
// flight, under CPU load; then checks the daemon's counters.
func sinkPaced(t *testing.T, d *daemon, dev *verbs.Device, addr string, in func(func() error) error) {
	const batch, size = 16, 64
	sends := 100_000
	if testing.Short() {
		sends = 10_000
	}
	if n, err := strconv.Atoi(os.Getenv("XRNIC_SINK_SENDS")); err == nil && n > 0 {
		sends = n
	}
	batches := (sends + batch - 1) / batch
	sends = batches * batch
	counter := d.regions["counter"]

	pd, err := dev.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	const sq = 2 * (batch + 1)
	scq, err := dev.CreateCQ(sq)
	if err != nil {
		t.Fatal(err)
	}
	rcq, err := dev.CreateCQ(1)
	if err != nil {
		t.Fatal(err)
	}
	qp, err := pd.CreateQP(verbs.QPAttr{SendCQ: scq, RecvCQ: rcq, SQDepth: sq, RQDepth: 1, MaxSGE: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer qp.Close()
	mr, err := pd.RegMR(make([]byte, 4096), verbs.AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	err = in(func() error { return qp.Dial(ctx, addr, verbs.ConnParam{}) })
	cancel()
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	if os.Getenv("XRNIC_SINK_STRESS") == "1" {
		cpuLoad(t)
	}

	// Up to two batches in flight: batch k+2 is posted once batch k's
	// FetchAdd has completed, so at most 2*16 = 32 Sends are beyond the
	// last response seen. Sends are unsignalled; a FetchAdd completes
	// after the Sends before it (in order).
	start := time.Now()
	wc := make([]verbs.Completion, sq)
	posted, done := 0, 0
	for done < batches {
		for posted < batches && posted-done < 2 {
			for i := range batch {
				if err := qp.PostSendBuf(uint64(posted*batch+i), mr.SGE(0, size), 0); err != nil {
					t.Fatalf("batch %d: post Send %d: %v", posted, i, err)
				}
			}
			if err := qp.PostFetchAdd(uint64(posted), mr.SGE(1024+8*(posted%2), 8), counter.stag(t), counter.to(t), 1, 0, verbs.FlagSignaled); err != nil {
				t.Fatalf("batch %d: post FetchAdd: %v", posted, err)
			}
			posted++
		}
		wctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		err := scq.Wait(wctx)
		cancel()
		if err != nil {
			t.Fatalf("after %d of %d Sends: no completion: %v (QP error %v)", done*batch, sends, err, qp.Err())
		}
		for _, e := range wc[:scq.Poll(wc)] {
			if e.Status != verbs.StatusSuccess {
				t.Fatalf("after %d of %d Sends: WR %d: %v; the QP's Terminate: %v (peer's: %v)", done*batch, sends, e.ID, e.Status, qp.Err(), qp.PeerTerminate())
			}
			if e.Op != verbs.OpFetchAdd || e.ID != uint64(done) || e.AtomicOrig != uint64(done) {
				t.Fatalf("completion %+v, want FetchAdd %d returning %d", e, done, done)
			}
			done++
		}
	}
	took := time.Since(start)
	t.Logf("%d Sends of %d bytes, 16 per FetchAdd round trip, in %v (%.0f Sends/s)", sends, size, took.Round(time.Millisecond), float64(sends)/took.Seconds())
	if err := qp.Err(); err != nil {
		t.Fatalf("the client's QP: %v", err)
	}

	// The daemon counted every Send and sent or received no Terminate.
	var st struct {
		Terminates   []struct{ Direction, Error string } `json:"terminates"`
		SinkMessages map[string]uint64                   `json:"sink_messages"`
	}
	out := d.mustCtl(t, "stats", "-j")
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("stats: %v\n%s", err, out)
	}
	if got := st.SinkMessages["send"]; got != uint64(sends) {
		t.Errorf("the sink counted %d Sends, want %d", got, sends)
	}
	if len(st.Terminates) != 0 {
		t.Errorf("the daemon's Terminates: %+v", st.Terminates)
	}
	if strings.Contains(d.log.String(), "QP closed by error") {
		t.Errorf("the daemon closed a QP by error")
	}
}

// cpuLoad runs `nice stress-ng --cpu 2` until the test ends (skipped,
// with a log line, when stress-ng is not installed).
func cpuLoad(t *testing.T) {
	t.Helper()
	path, err := exec.LookPath("stress-ng")
	if err != nil {
		t.Log("stress-ng not installed: no CPU load")
		return
	}
	cmd := exec.Command("nice", path, "--cpu", "2", "--timeout", "30m", "--quiet")
	// Its own process group, so that its workers go with it; and it dies
	// with the test binary.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("stress-ng: %v", err)
	}
	pgid := cmd.Process.Pid
	t.Cleanup(func() {
		syscall.Kill(-pgid, syscall.SIGKILL)
		cmd.Wait()
	})
	t.Logf("CPU load: nice stress-ng --cpu 2 (pid %d)", pgid)
	time.Sleep(200 * time.Millisecond) // let the workers start
}
