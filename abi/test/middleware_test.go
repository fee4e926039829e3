package abitest

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"xrnic/internal/netns"
	"xrnic/internal/require"
	"xrnic/wire/wiretest"
)

// tcpListening tells whether a TCP socket in ns listens on port (ss: a
// probe connection would be taken for a client).
func tcpListening(ns string, port int) bool {
	out, err := netns.Command(ns, "ss", "-Hltn", fmt.Sprintf("sport = :%d", port)).Output()
	return err == nil && strings.TrimSpace(string(out)) != ""
}

// fiRow is one row of fi_pingpong's table: bytes, transfers sent and
// acknowledged, MB/sec and microseconds per transfer.
type fiRow struct {
	size       int
	sent, ackd string
	mbps, usec float64
}

// fiRows parses fi_pingpong's result table ("bytes #sent #ack total time
// MB/sec usec/xfer Mxfers/sec"); sizes are written 64, 1k, 1m.
func fiRows(out string) []fiRow {
	var rows []fiRow
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if len(f) != 8 {
			continue
		}
		mult := 1
		s := f[0]
		switch {
		case strings.HasSuffix(s, "k"):
			mult, s = 1<<10, strings.TrimSuffix(s, "k")
		case strings.HasSuffix(s, "m"):
			mult, s = 1<<20, strings.TrimSuffix(s, "m")
		}
		n, err := strconv.Atoi(s)
		mb, err2 := strconv.ParseFloat(f[5], 64)
		us, err3 := strconv.ParseFloat(f[6], 64)
		if err != nil || err2 != nil || err3 != nil {
			continue
		}
		rows = append(rows, fiRow{n * mult, f[1], strings.TrimPrefix(f[2], "="), mb, us})
	}
	return rows
}

// TestFiPingpong runs Debian's unmodified libfabric fi_pingpong over
// xrnic's verbs device, server in one namespace and client in the
// other, every size with data checks (-c): the verbs provider's MSG
// endpoint, and ofi_rxm's RDM endpoint over it (what Open MPI's ofi MTL
// uses).
func TestFiPingpong(t *testing.T) {
	cases := []struct {
		name string
		args []string
		env  []string
	}{
		{"msg", []string{"-p", "verbs", "-e", "msg"}, nil},
		{"rdm", []string{"-p", "verbs;ofi_rxm", "-e", "rdm"}, nil},
		// ofi_rxm's shared receive context: one SRQ under its connections.
		{"rdm-srx", []string{"-p", "verbs;ofi_rxm", "-e", "rdm"}, []string{"FI_OFI_RXM_USE_SRX=1"}},
	}
	forEachTransport(t, []string{"fi_pingpong", "ss"}, func(t *testing.T, e *env) {
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				ctl := e.nextPort()
				args := append([]string{"-c", "-I", "20", "-B", strconv.Itoa(ctl)}, c.args...)
				srv := e.start(t, e.pair.NSA, 2*time.Minute, c.env, "fi_pingpong", args...)
				deadline := time.Now().Add(30 * time.Second)
				for !tcpListening(e.pair.NSA, ctl) {
					if srv.exited() || time.Now().After(deadline) {
						t.Fatalf("fi_pingpong server never listened on its control port %d\n%s", ctl, srv.describe())
					}
					time.Sleep(20 * time.Millisecond)
				}
				cargs := append([]string{"-c", "-I", "20", "-P", strconv.Itoa(ctl)}, c.args...)
				cli := e.start(t, e.pair.NSB, 2*time.Minute, c.env, "fi_pingpong", append(cargs, ipA.String())...)
				cerr, serr := cli.wait(), srv.waitAfter(cli)
				if cerr != nil || serr != nil {
					t.Fatalf("client: %v, server: %v\n%s\n%s", cerr, serr, cli.describe(), srv.describe())
				}
				rows := fiRows(cli.out.String())
				// fi_pingpong's "all": 64 B to 1 MiB (the MSG endpoint also
				// from 1 byte); each row must have every transfer acked.
				seen := map[int]bool{}
				for _, r := range rows {
					if r.sent != "20" || r.ackd != "20" || r.usec <= 0 {
						t.Errorf("row %+v: want 20 sent, 20 acked, a time per transfer", r)
					}
					seen[r.size] = true
				}
				for _, n := range []int{64, 256, 1 << 10, 4 << 10, 64 << 10, 1 << 20} {
					if !seen[n] {
						t.Errorf("no row for %d bytes\n%s", n, cli.out.String())
					}
				}
				for _, r := range rows {
					if r.size == 64 || r.size == 64<<10 {
						t.Logf("%d bytes: %.1f MB/s, %.1f us per transfer", r.size, r.mbps, r.usec)
					}
				}
			})
		}
	})
}

// mpiChecks are the checks c/mpitest.c reports.
var mpiChecks = []string{"pingpong", "exchange", "allreduce", "bcast", "allgather", "alltoall", "barrier", "onesided"}

// TestMPI runs Open MPI (Debian's openmpi-bin, unmodified) with one rank
// in each namespace over xrnic, on each transport: pml cm with the ofi MTL on libfabric's
// verbs;ofi_rxm, so MPI's messages have no other path than xrnic's QPs
// (no BTL carries point-to-point under pml cm; on the kernel transport a
// capture shows them as MPA FPDUs). mpirun runs in namespace
// A and starts the second rank through an rsh agent that enters
// namespace B. It runs c/mpitest.c (every result checked) and then
// Debian's NetPIPE (NPopenmpi) up to 1 MiB, whose table is checked.
func TestMPI(t *testing.T) {
	forEachTransport(t, []string{"mpirun", "mpicc", "NPopenmpi", "ss"}, func(t *testing.T, e *env) {
		dir := t.TempDir()
		bin := filepath.Join(dir, "mpitest")
		src := filepath.Join(moduleRoot(t), "abi", "test", "c", "mpitest.c")
		if out, err := exec.Command("mpicc", "-O2", "-Wall", "-Wextra", "-Werror", "-o", bin, src).CombinedOutput(); err != nil {
			t.Fatalf("mpicc: %v\n%s", err, out)
		}
		agent := filepath.Join(dir, "nsrsh")
		script := fmt.Sprintf(`#!/bin/sh
# mpirun's rsh agent: host %[1]s is namespace %[2]s (interface %[3]s),
# %[4]s is %[5]s (%[6]s); the rank there takes its own interface.
host=$1; shift
case $host in %[1]s) ns=%[2]s dev=%[3]s;; %[4]s) ns=%[5]s dev=%[6]s;; *) echo "nsrsh: unknown host $host" >&2; exit 1;; esac
exec ip netns exec "$ns" env XRNIC_IFACE="$dev" sh -c "$*"
`, ipA, e.pair.NSA, e.pair.DevA, ipB, e.pair.NSB, e.pair.DevB)
		if err := os.WriteFile(agent, []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
		hosts := filepath.Join(dir, "hosts")
		if err := os.WriteFile(hosts, []byte(fmt.Sprintf("%s slots=1\n%s slots=1\n", ipA, ipB)), 0o644); err != nil {
			t.Fatal(err)
		}
		mpirun := func(prog ...string) []string {
			return append([]string{"--allow-run-as-root", "-np", "2", "--hostfile", hosts,
				"--mca", "plm_rsh_agent", agent,
				"-x", "LD_LIBRARY_PATH", "-x", "XRNIC_DEBUG", "-x", "XRNIC_TRANSPORT",
				// Debian's openmpi-mca-params.conf excludes the ofi MTL
				// and pt2pt one-sided; the command line wins.
				"--mca", "pml", "cm", "--mca", "mtl", "ofi",
				"--mca", "mtl_ofi_provider_include", "verbs;ofi_rxm",
				"--mca", "osc", "pt2pt"}, prog...)
		}

		t.Run("mpitest", func(t *testing.T) {
			// On the kernel transport the veth's packet taps see the
			// ranks' TCP: a capture shows MPI's bytes went as MPA FPDUs.
			// (afxdp's frames pass the taps by; there the engines' logs
			// below are the proof.)
			var stopCapture func() int
			if !e.tr.afxdp {
				stopCapture = captureFPDUs(t, e.pair.NSA, e.pair.DevA)
			}
			p := e.start(t, e.pair.NSA, 3*time.Minute, []string{"XRNIC_DEBUG=1", "XRNIC_TRANSPORT=" + e.tr.name}, "mpirun", mpirun(bin)...)
			err := p.wait()
			out := p.out.String()
			order, res := checks(out)
			for _, name := range mpiChecks {
				lines, ok := res[name]
				if !ok {
					t.Errorf("%s: not reported", name)
					continue
				}
				for _, l := range lines {
					if strings.HasPrefix(l, "FAIL ") {
						t.Error(l)
					} else {
						t.Log(l)
					}
				}
			}
			if err != nil || !strings.Contains(out, "mpitest: 0 failed") {
				t.Errorf("mpirun: %v (checks %v)\n%s", err, order, out)
			}
			// Each rank's engine opened the device on its own namespace's
			// veth end and connected a QP (rdma_cm ESTABLISHED is event 9).
			for _, dev := range []string{e.pair.DevA, e.pair.DevB} {
				if !strings.Contains(out, "xrnic: opened: transport "+e.tr.name+", interface "+dev) {
					t.Errorf("no rank opened xrnic on %s\n%s", dev, out)
				}
			}
			if n := strings.Count(out, ": event 9 status 0"); n < 2 {
				t.Errorf("%d connections established over xrnic, want one per rank at least\n%s", n, out)
			}
			if stopCapture != nil {
				// mpitest sends a few hundred messages, each at least one
				// FPDU (tshark 4.0 decodes the first FPDU of each TCP
				// segment, and veth segments are large); a TCP fallback
				// would show none.
				if n := stopCapture(); n < 200 {
					t.Errorf("the capture on %s shows %d MPA FPDUs, want one per MPI message at least", e.pair.DevA, n)
				} else {
					t.Logf("capture on %s: %d MPA FPDUs (tshark)", e.pair.DevA, n)
				}
			}
		})

		t.Run("netpipe", func(t *testing.T) {
			table := filepath.Join(dir, "np.out")
			p := e.start(t, e.pair.NSA, 3*time.Minute, []string{"XRNIC_DEBUG=0", "XRNIC_TRANSPORT=" + e.tr.name}, "mpirun", mpirun("NPopenmpi", "-p", "0", "-u", "1048576", "-o", table)...)
			if err := p.wait(); err != nil {
				t.Fatalf("NPopenmpi: %v\n%s", err, p.describe())
			}
			b, err := os.ReadFile(table)
			if err != nil {
				t.Fatal(err)
			}
			// NetPIPE's table: bytes, Mbps, seconds per transfer, one row
			// per size (-p 0: no perturbed sizes beside each).
			rows, last := 0, 0
			for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
				f := strings.Fields(l)
				if len(f) != 3 {
					t.Fatalf("NetPIPE row %q: want bytes, Mbps, seconds", l)
				}
				n, err1 := strconv.Atoi(f[0])
				mbps, err2 := strconv.ParseFloat(f[1], 64)
				if err1 != nil || err2 != nil || mbps <= 0 {
					t.Fatalf("NetPIPE row %q: want a size and a positive rate", l)
				}
				if n == 1 || n == 1024 || n == 65536 || n == 1048576 {
					t.Logf("NetPIPE %8d bytes: %9.1f Mbps, %s s per transfer", n, mbps, f[2])
				}
				rows, last = rows+1, n
			}
			if rows < 30 || last < 1048576 {
				t.Errorf("NetPIPE: %d rows up to %d bytes, want the whole table to 1 MiB\n%s", rows, last, b)
			}
		})
	})
}

// captureFPDUs captures dev's TCP in namespace ns with dumpcap until the
// returned function is called, which decodes the capture with tshark and
// returns the number of MPA FPDUs it found (its MPA dissector follows a
// connection from its MPA Request and Reply).
func captureFPDUs(t *testing.T, ns, dev string) func() int {
	t.Helper()
	tshark := require.Tool(t, "tshark", "tshark")
	dumpcap := require.Tool(t, "dumpcap", "tshark")
	pcap := filepath.Join(t.TempDir(), "mpi.pcapng")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	cmd := netns.CommandContext(ctx, ns, dumpcap, "-q", "-i", dev, "-f", "tcp", "-w", pcap)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ready := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if strings.Contains(sc.Text(), "Capturing on") {
				ready <- true
			}
		}
		ready <- false
	}()
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			cmd.Process.Signal(os.Interrupt)
			cmd.Wait()
			cancel()
		}
	}
	t.Cleanup(stop)
	select {
	case ok := <-ready:
		if !ok {
			t.Fatal("dumpcap ended before it captured")
		}
	case <-time.After(15 * time.Second):
		t.Fatal("dumpcap did not start capturing in 15 s")
	}
	return func() int {
		// dumpcap retires the kernel's capture blocks on a timeout and
		// drops what it has not read when interrupted: give it a second.
		time.Sleep(time.Second)
		stop()
		args := append(append([]string{}, wiretest.TsharkOptions...), "-r", pcap,
			"-Y", "iwarp_mpa.ulpdulength", "-T", "fields", "-e", "frame.number")
		out, err := exec.Command(tshark, args...).Output()
		if err != nil {
			t.Fatalf("tshark: %v", err)
		}
		return len(strings.Fields(string(out)))
	}
}
