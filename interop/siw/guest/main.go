// Command guest is /init of the siw test guest: it mounts the pseudo file
// systems, loads the kernel modules listed in /lib/modules/order (siw last),
// brings up eth0 with the address the kernel command line names
// (xrnic.addr=A/N), adds the siw device on it and then serves the host's
// commands over HTTP on xrnic.agent (default :7999). It is built static
// (CGO_ENABLED=0) by the harness in package interop/siw.
//
// The protocol is package siw's: POST /run with a JSON Cmd runs it and
// answers a Result; with Background set it answers at once with an ID that
// /wait and /kill take.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Cmd is one command for the guest.
type Cmd struct {
	Args       []string
	Env        []string
	Stdin      string
	Timeout    time.Duration // 0: 5 minutes
	Background bool
}

// Result is what the command did.
type Result struct {
	ID       int
	Stdout   string
	Stderr   string
	Exit     int // -1: did not run or was killed
	Error    string
	Duration time.Duration
}

func main() {
	log := func(format string, a ...any) { fmt.Fprintf(os.Stderr, "xrnic-guest: "+format+"\n", a...) }
	if err := setup(log); err != nil {
		log("setup: %v", err)
	}
	addr := param("xrnic.agent", ":7999")
	log("ready: agent on %s", addr)
	s := &server{procs: map[int]*proc{}}
	s.last.Store(time.Now().UnixNano())
	go watchNet(log, &s.last)
	mux := http.NewServeMux()
	mux.HandleFunc("/run", s.run)
	mux.HandleFunc("/wait", s.wait)
	mux.HandleFunc("/kill", s.kill)
	for {
		err := http.ListenAndServe(addr, s.touch(mux))
		log("agent: %v", err)
		time.Sleep(time.Second)
	}
}

// watchNet writes eth0's counters to the console every 2 s while no
// request has come for 4 s: the console outlives the network, so when the
// host loses the guest, its post-mortem shows whether frames still reached
// the guest's driver (virtio interrupts, rx) and whether it still sent.
func watchNet(log func(string, ...any), last *atomic.Int64) {
	stat := func(n string) string {
		b, _ := os.ReadFile("/sys/class/net/eth0/statistics/" + n)
		return strings.TrimSpace(string(b))
	}
	irqs := func() string {
		b, _ := os.ReadFile("/proc/interrupts")
		var out []string
		for _, l := range strings.Split(string(b), "\n") {
			if f := strings.Fields(l); len(f) > 2 && strings.Contains(l, "virtio") && strings.Contains(l, "put") {
				out = append(out, f[len(f)-1]+"="+f[1])
			}
		}
		return strings.Join(out, " ")
	}
	for range time.Tick(2 * time.Second) {
		idle := time.Since(time.Unix(0, last.Load()))
		if idle < 4*time.Second {
			continue
		}
		log("net: no request for %v; eth0 rx %s tx %s rx_dropped %s tx_dropped %s; irqs %s",
			idle.Round(time.Second), stat("rx_packets"), stat("tx_packets"),
			stat("rx_dropped"), stat("tx_dropped"), irqs())
	}
}

func param(key, def string) string {
	b, _ := os.ReadFile("/proc/cmdline")
	for _, f := range strings.Fields(string(b)) {
		if v, ok := strings.CutPrefix(f, key+"="); ok {
			return v
		}
	}
	return def
}

func setup(log func(string, ...any)) error {
	for _, m := range []struct{ src, dst, typ string }{
		{"proc", "/proc", "proc"}, {"sysfs", "/sys", "sysfs"}, {"devtmpfs", "/dev", "devtmpfs"},
		{"tmpfs", "/tmp", "tmpfs"}, {"tmpfs", "/run", "tmpfs"},
	} {
		if err := unix.Mount(m.src, m.dst, m.typ, 0, ""); err != nil {
			log("mount %s: %v", m.dst, err)
		}
	}
	_ = os.MkdirAll("/dev/pts", 0o755)
	_ = unix.Mount("devpts", "/dev/pts", "devpts", 0, "")
	_ = unix.Mount("configfs", "/sys/kernel/config", "configfs", 0, "")
	// For the host's post-mortem of a guest that stopped answering
	// (Guest.PostMortem): its NMI panics, and the backtrace (printed at
	// the default level, made 3 here) reaches the console, which still
	// shows only errors and worse.
	for f, v := range map[string]string{"kernel/unknown_nmi_panic": "1", "kernel/printk": "4 3 1 7"} {
		if err := os.WriteFile("/proc/sys/"+f, []byte(v), 0); err != nil {
			log("sysctl %s: %v", f, err)
		}
	}
	// Registered memory is pinned: the tests register tens of MiB.
	inf := &unix.Rlimit{Cur: unix.RLIM_INFINITY, Max: unix.RLIM_INFINITY}
	if err := unix.Setrlimit(unix.RLIMIT_MEMLOCK, inf); err != nil {
		log("RLIMIT_MEMLOCK: %v", err)
	}
	os.Setenv("PATH", "/usr/bin")
	os.Setenv("HOME", "/root")

	order, err := os.ReadFile("/lib/modules/order")
	if err != nil {
		return err
	}
	for _, m := range strings.Fields(string(order)) {
		f, err := os.Open("/lib/modules/" + m)
		if err != nil {
			return err
		}
		err = unix.FinitModule(int(f.Fd()), "", 0)
		f.Close()
		if err != nil && err != unix.EEXIST {
			log("load %s: %v", m, err) // e.g. crc32c-intel without SSE4.2: the generic one serves
		}
	}

	lo, err := netlink.LinkByName("lo")
	if err == nil {
		_ = netlink.LinkSetUp(lo)
	}
	var eth netlink.Link
	for i := 0; i < 50; i++ {
		if eth, err = netlink.LinkByName("eth0"); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		return fmt.Errorf("eth0: %w", err)
	}
	if mtu := param("xrnic.mtu", ""); mtu != "" {
		var n int
		fmt.Sscan(mtu, &n)
		if err := netlink.LinkSetMTU(eth, n); err != nil {
			log("mtu %d: %v", n, err)
		}
	}
	a, err := netlink.ParseAddr(param("xrnic.addr", "198.18.77.2/30"))
	if err != nil {
		return err
	}
	if err := netlink.AddrAdd(eth, a); err != nil {
		return err
	}
	if err := netlink.LinkSetUp(eth); err != nil {
		return err
	}
	out, err := exec.Command("rdma", "link", "add", "siw0", "type", "siw", "netdev", "eth0").CombinedOutput()
	if err != nil {
		return fmt.Errorf("rdma link add: %v: %s", err, out)
	}
	return nil
}

type proc struct {
	cmd    *exec.Cmd
	done   chan struct{}
	res    Result
	cancel context.CancelFunc
}

type server struct {
	mu    sync.Mutex
	next  int
	procs map[int]*proc
	last  atomic.Int64 // unix ns of the last request's start or end
}

// touch notes each request for watchNet.
func (s *server) touch(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.last.Store(time.Now().UnixNano())
		defer func() { s.last.Store(time.Now().UnixNano()) }()
		h.ServeHTTP(w, r)
	})
}

func (s *server) run(w http.ResponseWriter, r *http.Request) {
	var c Cmd
	if err := json.NewDecoder(r.Body).Decode(&c); err != nil || len(c.Args) == 0 {
		http.Error(w, "want a JSON Cmd with Args", http.StatusBadRequest)
		return
	}
	if c.Timeout <= 0 {
		c.Timeout = 5 * time.Minute
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.Timeout)
	p := &proc{done: make(chan struct{}), cancel: cancel}
	p.cmd = exec.CommandContext(ctx, c.Args[0], c.Args[1:]...)
	p.cmd.Env = append(os.Environ(), c.Env...)
	p.cmd.Stdin = strings.NewReader(c.Stdin)
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	p.cmd.Cancel = func() error { return syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL) }
	var stdout, stderr bytes.Buffer
	p.cmd.Stdout, p.cmd.Stderr = &stdout, &stderr
	s.mu.Lock()
	s.next++
	p.res.ID = s.next
	s.procs[p.res.ID] = p
	s.mu.Unlock()
	start := time.Now()
	if err := p.cmd.Start(); err != nil {
		p.res.Exit, p.res.Error = -1, err.Error()
		close(p.done)
		cancel()
	} else {
		go func() {
			err := p.cmd.Wait()
			cancel()
			p.res.Duration = time.Since(start)
			p.res.Stdout, p.res.Stderr = stdout.String(), stderr.String()
			p.res.Exit = p.cmd.ProcessState.ExitCode()
			if err != nil && p.res.Exit == 0 {
				p.res.Error = err.Error()
			}
			if ctx.Err() == context.DeadlineExceeded {
				p.res.Error = "timed out after " + c.Timeout.String()
			}
			close(p.done)
		}()
	}
	if c.Background {
		reply(w, Result{ID: p.res.ID})
		return
	}
	<-p.done
	s.forget(p.res.ID)
	reply(w, p.res)
}

func (s *server) lookup(w http.ResponseWriter, r *http.Request) *proc {
	var id int
	fmt.Sscan(r.URL.Query().Get("id"), &id)
	s.mu.Lock()
	p := s.procs[id]
	s.mu.Unlock()
	if p == nil {
		http.Error(w, "no such process", http.StatusNotFound)
	}
	return p
}

func (s *server) forget(id int) {
	s.mu.Lock()
	delete(s.procs, id)
	s.mu.Unlock()
}

func (s *server) wait(w http.ResponseWriter, r *http.Request) {
	if p := s.lookup(w, r); p != nil {
		<-p.done
		s.forget(p.res.ID)
		reply(w, p.res)
	}
}

func (s *server) kill(w http.ResponseWriter, r *http.Request) {
	if p := s.lookup(w, r); p != nil {
		if p.cmd.Process != nil {
			_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		}
		<-p.done
		s.forget(p.res.ID)
		reply(w, p.res)
	}
}

func reply(w http.ResponseWriter, res Result) {
	w.Header().Set("Content-Type", "application/json")
	bw := bufio.NewWriter(w)
	_ = json.NewEncoder(bw).Encode(res)
	_ = bw.Flush()
}
