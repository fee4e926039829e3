//go:build linux

package reliability

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"xrnic/bpf"
	"xrnic/internal/daemontest"
	"xrnic/internal/engine"
	"xrnic/internal/netnstest"
	"xrnic/mem"
)

// Restart safety (issue 9, item 6): xrnicd with the afxdp transport in
// namespace A serves a counter region; four QPs of a kernel-transport
// device in namespace B run FetchAdds against it. The daemon is killed
// with SIGKILL mid-traffic: every peer QP must fail with an error within
// a bound (the daemon's user-space TCP died with it, so the peer's
// segments reach A's kernel, which answers them with RSTs), never hang.
// Then xrnicd is started again on the same interface: exactly one XDP
// program is attached (a new one), the log states what happened to the
// old attachment, and a fresh connection's FetchAdds work.

const restartBound = 20 * time.Second

// nsDaemon starts xrnicd in namespace ns through `ip netns exec` (which
// execs, so the pid is the daemon's).
func nsDaemon(t *testing.T, ns, dir string, args ...string) *daemon {
	t.Helper()
	buildBins(t)
	d := &daemon{dir: dir, socket: filepath.Join(dir, "xrnicd.sock"), log: &syncBuf{}, done: make(chan error, 1)}
	all := append([]string{"netns", "exec", ns, xrnicd, "--socket", d.socket, "--metrics", "off", "--hugepages", "off", "--lock-dir", daemontest.LockDir(t)}, args...)
	d.cmd = exec.Command("ip", all...)
	d.cmd.Stdout, d.cmd.Stderr = d.log, d.log
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { d.done <- d.cmd.Wait() }()
	t.Cleanup(func() {
		if d.cmd.ProcessState == nil {
			d.cmd.Process.Kill()
			<-d.done
		}
		if t.Failed() {
			t.Logf("xrnicd log:\n%s", d.log.String())
		}
	})
	deadline := time.Now().Add(15 * time.Second)
	for {
		var st struct {
			Ready bool `json:"ready"`
		}
		out, err := d.ctl("status", "-j")
		if err == nil && json.Unmarshal([]byte(out), &st) == nil && st.Ready {
			break
		}
		select {
		case err := <-d.done:
			t.Fatalf("xrnicd exited during start-up: %v\n%s", err, d.log.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("xrnicd not ready: %v %s\n%s", err, out, d.log.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	var rs []regionInfo
	out, err := d.ctl("region", "list", "-j")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(out), &rs); err != nil {
		t.Fatalf("region list -j: %v\n%s", err, out)
	}
	d.regions = map[string]regionInfo{}
	for _, r := range rs {
		d.regions[r.Name] = r
	}
	return d
}

var xdpProgRE = regexp.MustCompile(`prog/xdp id (\d+)`)

// xdpProgs lists the ids of the XDP programs attached to dev in ns.
func xdpProgs(t *testing.T, ns, dev string) []string {
	t.Helper()
	out, err := exec.Command("ip", "-n", ns, "-d", "link", "show", dev).CombinedOutput()
	if err != nil {
		t.Fatalf("ip link show: %v %s", err, out)
	}
	var ids []string
	for _, m := range xdpProgRE.FindAllStringSubmatch(string(out), -1) {
		ids = append(ids, m[1])
	}
	return ids
}

type restartPeer struct {
	qp  *engine.QP
	cq  *engine.CQ
	buf []byte
	mr  *mem.MR
	ok  atomic.Int64 // FetchAdds completed by fetchAdds so far
}

func newRestartPeer(t *testing.T, e *wireEnv, dev *engine.Device, addr string) *restartPeer {
	t.Helper()
	p := &restartPeer{buf: make([]byte, 64*8)}
	pd := dev.AllocPD()
	var err error
	if p.mr, err = dev.RegMR(p.buf, mem.MROptions{PD: pd, Access: mem.LocalWrite}); err != nil {
		t.Fatal(err)
	}
	p.cq, _ = dev.CreateCQ(64)
	if p.qp, err = dev.CreateQP(engine.QPAttr{PD: pd, SendCQ: p.cq, RecvCQ: p.cq, SQDepth: 32, RQDepth: 4}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := netnstest.In(t, e.nsB, func() error { return p.qp.Connect(ctx, addr, engine.ConnParams{}) }); err != nil {
		t.Fatalf("connect to xrnicd at %s: %v", addr, err)
	}
	return p
}

// fetchAdds runs FetchAdds of 1 (8 outstanding) until one fails or stop
// closes; it returns the number that succeeded and the first error.
func (p *restartPeer) fetchAdds(stag uint32, to uint64, stop <-chan struct{}, bound time.Duration) (int, error) {
	wc := make([]engine.Completion, 16)
	outstanding, ok, k := 0, 0, 0
	for {
		select {
		case <-stop:
			return ok, nil
		default:
		}
		for outstanding < 8 {
			err := p.qp.PostSend(&engine.SendWR{ID: uint64(k), Op: engine.OpFetchAdd, Flags: engine.FlagSignaled,
				SGL: []engine.SGE{{Addr: p.mr.BaseTO() + uint64(k%64)*8, Length: 8, LKey: p.mr.STag()}}, RemoteSTag: stag, RemoteTO: to, CompareAdd: 1})
			if err != nil {
				return ok, fmt.Errorf("post: %w", err)
			}
			outstanding++
			k++
		}
		ctx, cancel := context.WithTimeout(context.Background(), bound)
		for p.cq.Poll(wc[:1]) == 0 {
			if err := p.cq.Wait(ctx); err != nil {
				cancel()
				return ok, fmt.Errorf("no completion within %v (QP state %v): hang", bound, p.qp.State())
			}
		}
		cancel()
		outstanding--
		if wc[0].Status != engine.StatusSuccess {
			return ok, fmt.Errorf("completion %v: %v", wc[0].Status, errOr(wc[0].Err, termOf(p.qp)))
		}
		ok++
		p.ok.Add(1)
	}
}

func TestIntegrationRestart(t *testing.T) {
	e := newWireEnv(t, false)
	dir := t.TempDir()
	listen := rlIPA.String() + ":7306"
	args := []string{"--transport", "afxdp", "--iface", e.devA, "--listen", listen, "--region", "counter:4K:rwa", "--conn-timeout", "5s"}
	d1 := nsDaemon(t, e.nsA, dir, args...)
	before := xdpProgs(t, e.nsA, e.devA)
	if len(before) != 1 {
		t.Fatalf("XDP programs on %s after start: %v", e.devA, before)
	}
	ctr := d1.regions["counter"]

	// The peer: a kernel-transport device in B (no GSO beyond one
	// segment there, as the daemon's AF_XDP socket is single-buffer).
	var peer *engine.Device
	if err := netnstest.In(t, e.nsB, func() (err error) {
		peer, err = engine.Open(engine.Config{ConnTimeout: 5 * time.Second})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	const n = 4
	peers := make([]*restartPeer, n)
	for i := range peers {
		peers[i] = newRestartPeer(t, e, peer, listen)
	}
	type result struct {
		ok  int
		err error
		at  time.Time
	}
	res := make([]result, n)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for i, p := range peers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ok, err := p.fetchAdds(ctr.stag(t), ctr.to(t), stop, restartBound)
			res[i] = result{ok, err, time.Now()}
		}()
	}
	// Kill once every peer has completed FetchAdds (not after a fixed
	// sleep, which a loaded machine may spend before the first one).
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		done := true
		for _, p := range peers {
			done = done && p.ok.Load() > 0
		}
		if done {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("not every peer completed a FetchAdd within 30 s of starting")
		}
	}
	killed := time.Now()
	if err := d1.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-d1.done
	d1.done <- nil
	waited := make(chan struct{})
	go func() { wg.Wait(); close(waited) }()
	select {
	case <-waited:
	case <-time.After(restartBound + 10*time.Second):
		close(stop)
		<-waited
		t.Fatalf("peer QPs still running %v after the daemon was killed", time.Since(killed))
	}
	for i, r := range res {
		if r.err == nil || strings.Contains(r.err.Error(), "hang") {
			t.Errorf("peer QP %d: %d FetchAdds, then %v: want an error, not a hang", i, r.ok, r.err)
			continue
		}
		if r.ok == 0 {
			t.Errorf("peer QP %d: no FetchAdd succeeded before the kill", i)
		}
		t.Logf("peer QP %d: %d FetchAdds, failed %v after the kill: %v", i, r.ok, r.at.Sub(killed).Round(time.Millisecond), r.err)
	}
	afterKill := xdpProgs(t, e.nsA, e.devA)
	t.Logf("XDP programs on %s after SIGKILL: %v (before: %v)", e.devA, afterKill, before)
	for _, p := range peers {
		p.qp.Close()
	}

	// The killed daemon's bpf_link died with it, so the kill leaves no
	// program behind. An attachment that survives its process (netlink,
	// or a pinned link) is what a crash can leave: put one there, as
	// that, and the restart must replace it.
	stale := afterKill
	if len(stale) == 0 {
		var sp *bpf.Program
		if err := netnstest.In(t, e.nsA, func() error {
			p, err := bpf.Load(bpf.Options{})
			if err != nil {
				return err
			}
			sp = p
			l, err := netlink.LinkByName(e.devA)
			if err != nil {
				return err
			}
			return netlink.LinkSetXdpFdWithFlags(l, p.Prog().FD(), unix.XDP_FLAGS_SKB_MODE)
		}); err != nil {
			t.Fatalf("stale attachment: %v", err)
		}
		sp.Close() // the attachment holds the program
		stale = xdpProgs(t, e.nsA, e.devA)
		if len(stale) != 1 {
			t.Fatalf("stale attachment not in place: %v", stale)
		}
	}

	// Restart on the same interface.
	d2 := nsDaemon(t, e.nsA, dir, args...)
	progs := xdpProgs(t, e.nsA, e.devA)
	if len(progs) != 1 || progs[0] == before[0] || progs[0] == stale[0] {
		t.Errorf("XDP programs after the restart: %v (the killed daemon's was %s, the stale one %s): want exactly one, new", progs, before[0], stale[0])
	}
	var attachLine string
	for _, l := range strings.Split(d2.log.String(), "\n") {
		if strings.Contains(l, "XDP attached") {
			attachLine = l
		}
	}
	if attachLine == "" {
		t.Errorf("no \"XDP attached\" line in the restarted daemon's log")
	}
	if !strings.Contains(attachLine, "replaced=") || strings.Contains(attachLine, `replaced=""`) {
		t.Errorf("a stale program (%v) was attached, but the restart does not say it replaced it: %s", stale, attachLine)
	}
	t.Logf("restart: %s", attachLine)
	ctr2 := d2.regions["counter"]
	p := newRestartPeer(t, e, peer, listen)
	defer p.qp.Close()
	for i := range 100 {
		if err := p.qp.PostSend(&engine.SendWR{ID: uint64(i), Op: engine.OpFetchAdd, Flags: engine.FlagSignaled,
			SGL: []engine.SGE{{Addr: p.mr.BaseTO(), Length: 8, LKey: p.mr.STag()}}, RemoteSTag: ctr2.stag(t), RemoteTO: ctr2.to(t), CompareAdd: 1}); err != nil {
			t.Fatal(err)
		}
		wc := make([]engine.Completion, 1)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		for p.cq.Poll(wc) == 0 {
			if err := p.cq.Wait(ctx); err != nil {
				cancel()
				t.Fatalf("FetchAdd %d after the restart: no completion", i)
			}
		}
		cancel()
		if wc[0].Status != engine.StatusSuccess || wc[0].AtomicOrig != uint64(i) {
			t.Fatalf("FetchAdd %d after the restart: %v, original %d", i, wc[0].Status, wc[0].AtomicOrig)
		}
	}
}
