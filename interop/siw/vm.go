package siw

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"xrnic/internal/netns"
)

// Cmd and Result are the guest agent's protocol (interop/siw/guest).
type Cmd struct {
	Args       []string
	Env        []string
	Stdin      string
	Timeout    time.Duration
	Background bool
}

// Result is what a guest command did.
type Result struct {
	ID       int
	Stdout   string
	Stderr   string
	Exit     int
	Error    string
	Duration time.Duration
}

// OK tells whether the command ran and exited 0.
func (r Result) OK() bool { return r.Exit == 0 && r.Error == "" }

func (r Result) String() string {
	return fmt.Sprintf("exit %d %s\nstdout:\n%s\nstderr:\n%s", r.Exit, r.Error, r.Stdout, r.Stderr)
}

// Options describe a guest.
type Options struct {
	Cache  string // prepare.sh's cache directory ("" = $XRNIC_SIW_CACHE or /var/cache/xrnic/siw)
	MTU    int    // of the tap and the guest's eth0 (default 1500)
	Memory int    // MiB (default 768)
	Log    func(format string, a ...any)
}

// Guest is a running QEMU guest with siw, joined to namespace NS by a tap.
type Guest struct {
	NS        string
	Tap       string
	HostAddr  netip.Addr // the tap's address in NS
	GuestAddr netip.Addr // the guest's eth0 (siw0's netdev)
	MTU       int
	Console   string // the guest's serial console log
	Pcap      string // every frame of the guest's NIC (QEMU filter-dump, libpcap format)
	Dir       string // artifacts: the prepared guest (rdma-core headers and libraries)

	work    string
	monitor string // QEMU's human monitor (a unix socket)
	dead    bool   // PostMortem has run: the guest is to be booted anew
	cmd     *exec.Cmd
	exited  chan struct{}
	client  *http.Client
	log     func(string, ...any)
}

// NSPrefix names the namespaces guests use; stale ones of killed runs are
// removed before a new one is made.
const NSPrefix = "xrnicsiw-"

var (
	hostAddr  = netip.MustParseAddr("198.18.60.1")
	guestAddr = netip.MustParseAddr("198.18.60.2")
)

// ErrNoQEMU means QEMU is not installed: the suite skips (fails under
// CI=true, internal/require).
var ErrNoQEMU = errors.New("qemu-system-x86_64 not found (Debian: apt-get install qemu-system-x86)")

// Prepare runs prepare.sh (fetching and building only what the cache lacks)
// and returns the directory of the prepared guest.
func Prepare(cache string, log func(string, ...any)) (string, error) {
	if cache == "" {
		cache = os.Getenv("XRNIC_SIW_CACHE")
	}
	if cache == "" {
		cache = "/var/cache/xrnic/siw"
	}
	_, self, _, _ := runtime.Caller(0)
	script := filepath.Join(filepath.Dir(self), "prepare.sh")
	cmd := exec.Command("bash", script, cache)
	var stdout bytes.Buffer
	cmd.Stdout = &stdout
	cmd.Stderr = logWriter{log}
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("prepare.sh: %w", err)
	}
	lines := strings.Fields(stdout.String())
	if len(lines) == 0 {
		return "", errors.New("prepare.sh printed no directory")
	}
	return lines[len(lines)-1], nil
}

type logWriter struct{ log func(string, ...any) }

func (w logWriter) Write(p []byte) (int, error) {
	for _, l := range strings.Split(strings.TrimRight(string(p), "\n"), "\n") {
		w.log("%s", l)
	}
	return len(p), nil
}

// Boot prepares (if needed) and boots a guest and waits for its agent.
// extra, if not nil, names files to add to the initramfs (guest path ->
// host path); it gets the prepared directory (for rdma-core's headers).
func Boot(ctx context.Context, o Options, extra func(dir string) (map[string]string, error)) (*Guest, error) {
	if o.Log == nil {
		o.Log = func(string, ...any) {}
	}
	if o.MTU == 0 {
		o.MTU = 1500
	}
	if o.Memory == 0 {
		o.Memory = 768
	}
	qemu, err := exec.LookPath("qemu-system-x86_64")
	if err != nil {
		return nil, ErrNoQEMU
	}
	dir, err := Prepare(o.Cache, o.Log)
	if err != nil {
		return nil, err
	}
	work, err := os.MkdirTemp("", "xrnic-siw-")
	if err == nil {
		err = os.Chmod(work, 0o755)
	}
	if err != nil {
		return nil, err
	}
	g := &Guest{Dir: dir, work: work, MTU: o.MTU, HostAddr: hostAddr, GuestAddr: guestAddr,
		Tap: "tapsiw0", Console: filepath.Join(work, "console.log"), Pcap: filepath.Join(work, "nic.pcap"), monitor: filepath.Join(work, "monitor.sock"),
		log: o.Log, exited: make(chan struct{})}
	ok := false
	defer func() {
		if !ok {
			g.Close()
		}
	}()

	agent := filepath.Join(work, "init")
	build := exec.Command("go", "build", "-trimpath", "-o", agent, "xrnic/interop/siw/guest")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("build the guest agent: %v\n%s", err, out)
	}
	files := map[string]string{"/init": agent}
	if extra != nil {
		more, err := extra(dir)
		if err != nil {
			return nil, err
		}
		for k, v := range more {
			files[k] = v
		}
	}
	initrd := filepath.Join(work, "initrd.cpio")
	if err := writeInitramfs(initrd, filepath.Join(dir, "root"), files); err != nil {
		return nil, fmt.Errorf("initramfs: %w", err)
	}

	if err := netns.RemoveStale(NSPrefix); err != nil {
		o.Log("remove stale namespaces: %v", err)
	}
	g.NS = fmt.Sprintf("%s%d-1-host", NSPrefix, os.Getpid())
	if err := netns.IP("netns", "add", g.NS); err != nil {
		g.NS = ""
		return nil, err
	}
	for _, args := range [][]string{
		{"link", "set", "lo", "up"},
		{"tuntap", "add", "dev", g.Tap, "mode", "tap"},
		{"link", "set", g.Tap, "mtu", fmt.Sprint(o.MTU)},
		{"addr", "add", g.HostAddr.String() + "/24", "dev", g.Tap},
		{"link", "set", g.Tap, "up"},
	} {
		if err := netns.IP(append([]string{"-n", g.NS}, args...)...); err != nil {
			return nil, err
		}
	}

	// Offloads off on both sides of the tap: every frame on it is final
	// (checksummed, at most one MTU), as a capture or XDP wants it.
	netdev := "tap,id=n0,ifname=" + g.Tap + ",script=no,downscript=no,vnet_hdr=off"
	nic := "virtio-net-pci,netdev=n0,mac=52:54:00:c0:12:02,csum=off,gso=off,guest_csum=off," +
		"guest_tso4=off,guest_tso6=off,guest_ecn=off,guest_ufo=off,host_tso4=off,host_tso6=off," +
		"host_ecn=off,host_ufo=off,mrg_rxbuf=off"
	args := []string{
		"-nodefaults", "-no-user-config", "-no-reboot", "-display", "none",
		"-machine", "q35,accel=tcg", "-cpu", "max", "-smp", "1", "-m", fmt.Sprint(o.Memory),
		"-kernel", filepath.Join(dir, "vmlinuz"), "-initrd", initrd,
		"-append", fmt.Sprintf("console=ttyS0 panic=-1 quiet loglevel=4 xrnic.addr=%s/24 xrnic.mtu=%d", g.GuestAddr, o.MTU),
		"-serial", "file:" + g.Console,
		"-netdev", netdev, "-device", nic,
		// Every frame of the guest's NIC, as QEMU sees it: also those an
		// XDP program on the tap redirects past the host's packet taps.
		"-object", "filter-dump,id=dump0,netdev=n0,file=" + g.Pcap,
		// The human monitor, for PostMortem when the guest stops answering.
		"-monitor", "unix:" + g.monitor + ",server=on,wait=off",
	}
	g.cmd = netns.Command(g.NS, qemu, args...)
	// QEMU dies with us (a killed test leaves no guest): Pdeathsig fires
	// when the forking *thread* exits, and the runtime ends threads whose
	// goroutine exits locked (as namespace switches do), so QEMU is
	// forked and waited for on a thread of its own, locked throughout.
	g.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	qlog, err := os.Create(filepath.Join(work, "qemu.log"))
	if err != nil {
		return nil, err
	}
	g.cmd.Stdout, g.cmd.Stderr = qlog, qlog
	start := time.Now()
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		err := g.cmd.Start()
		started <- err
		if err == nil {
			g.cmd.Wait()
		}
		qlog.Close()
		close(g.exited)
	}()
	if err := <-started; err != nil {
		return nil, err
	}

	g.client = &http.Client{Transport: &http.Transport{
		DisableKeepAlives: true,
		DialContext: func(ctx context.Context, network, addr string) (c net.Conn, err error) {
			err = netns.Do(g.NS, func() error {
				var d net.Dialer
				c, err = d.DialContext(ctx, network, addr)
				return err
			})
			return c, err
		},
	}}
	for {
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		r, err := g.Run(rctx, Cmd{Args: []string{"cat", "/sys/class/infiniband/siw0/node_type"}})
		cancel()
		if err == nil {
			if !r.OK() {
				return nil, fmt.Errorf("guest up but no siw0 device: %v\nconsole:\n%s", r, g.ConsoleTail(40))
			}
			break
		}
		select {
		case <-g.exited:
			return nil, fmt.Errorf("qemu exited: %s\nconsole:\n%s", g.readFile("qemu.log"), g.ConsoleTail(40))
		case <-ctx.Done():
			return nil, fmt.Errorf("guest did not come up: %w\nconsole:\n%s", ctx.Err(), g.ConsoleTail(40))
		case <-time.After(300 * time.Millisecond):
		}
	}
	o.Log("guest up in %v (TCG), siw0 on %s", time.Since(start).Round(100*time.Millisecond), g.GuestAddr)
	ok = true
	return g, nil
}

func (g *Guest) readFile(name string) string {
	b, _ := os.ReadFile(filepath.Join(g.work, name))
	return string(b)
}

// ConsoleTail is the end of the guest's console log.
func (g *Guest) ConsoleTail(lines int) string {
	b, _ := os.ReadFile(g.Console)
	l := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(l) > lines {
		l = l[len(l)-lines:]
	}
	return strings.Join(l, "\n")
}

func (g *Guest) post(ctx context.Context, path string, body any) (Result, error) {
	var buf bytes.Buffer
	if body != nil {
		if err := json.NewEncoder(&buf).Encode(body); err != nil {
			return Result{}, err
		}
	}
	url := "http://" + netip.AddrPortFrom(g.GuestAddr, 7999).String() + path
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, &buf)
	if err != nil {
		return Result{}, err
	}
	resp, err := g.client.Do(req)
	if err != nil {
		return Result{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return Result{}, fmt.Errorf("guest agent %s: %s: %s", path, resp.Status, b)
	}
	var r Result
	return r, json.NewDecoder(resp.Body).Decode(&r)
}

// Run runs c in the guest and waits for it.
func (g *Guest) Run(ctx context.Context, c Cmd) (Result, error) {
	c.Background = false
	return g.post(ctx, "/run", c)
}

// Sh runs a shell command line in the guest (busybox sh).
func (g *Guest) Sh(ctx context.Context, line string) (Result, error) {
	return g.Run(ctx, Cmd{Args: []string{"sh", "-c", line}})
}

// Proc is a command running in the guest in the background.
type Proc struct {
	g  *Guest
	id int
}

// Start starts c in the background.
func (g *Guest) Start(ctx context.Context, c Cmd) (*Proc, error) {
	c.Background = true
	r, err := g.post(ctx, "/run", c)
	if err != nil {
		return nil, err
	}
	return &Proc{g: g, id: r.ID}, nil
}

// Wait waits for the command to end.
func (p *Proc) Wait(ctx context.Context) (Result, error) {
	return p.g.post(ctx, fmt.Sprintf("/wait?id=%d", p.id), nil)
}

// Kill kills the command (its process group) and returns what it did.
func (p *Proc) Kill(ctx context.Context) (Result, error) {
	return p.g.post(ctx, fmt.Sprintf("/kill?id=%d", p.id), nil)
}

// Alive tells whether the guest still answers: QEMU runs and its agent
// runs a command within timeout.
func (g *Guest) Alive(ctx context.Context, timeout time.Duration) error {
	select {
	case <-g.exited:
		return fmt.Errorf("qemu exited (%v): %s", g.cmd.ProcessState, strings.TrimSpace(g.readFile("qemu.log")))
	default:
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	r, err := g.Run(ctx, Cmd{Args: []string{"sh", "-c", "true"}, Timeout: timeout})
	if err != nil {
		return fmt.Errorf("guest agent: %w", err)
	}
	if !r.OK() {
		return fmt.Errorf("guest agent ran true: %v", r)
	}
	return nil
}

// PostMortem says what became of a guest that stopped answering, for the
// log: the host side of the tap (has the guest sent anything, is an XDP
// program attached, how often it lost its carrier, does QEMU still hold
// it), whether QEMU still runs and where its vCPU is, QEMU's log, and
// the guest kernel's own account: the agent makes an unknown NMI panic
// (guest/), so the NMI sent here prints the backtrace of whatever the
// guest was doing to the console. It leaves the guest dead: boot anew.
func (g *Guest) PostMortem() string {
	g.dead = true
	var b strings.Builder
	// The tap first: QEMU may exit once the NMI below panics the guest.
	if g.NS != "" {
		for _, args := range [][]string{{"-s", "-d", "link", "show", "dev", g.Tap}, {"neigh", "show", "dev", g.Tap}} {
			out, err := exec.Command("ip", append([]string{"-n", g.NS}, args...)...).CombinedOutput()
			fmt.Fprintf(&b, "ip %s: %s%v\n", strings.Join(args, " "), out, errOrEmpty(err))
		}
		// A tap loses its carrier when no descriptor of it is attached: say
		// how often that happened, and whether QEMU still holds one.
		out, err := exec.Command("ip", "netns", "exec", g.NS, "cat", "/sys/class/net/"+g.Tap+"/carrier_changes").CombinedOutput()
		fmt.Fprintf(&b, "%s carrier_changes: %s%v\n", g.Tap, bytes.TrimSpace(out), errOrEmpty(err))
		fmt.Fprintf(&b, "qemu's descriptors of %s: %s\n", g.Tap, g.tapHolders())
	}
	select {
	case <-g.exited:
		fmt.Fprintf(&b, "qemu exited (%v); qemu.log:\n%s\n", g.cmd.ProcessState, g.readFile("qemu.log"))
	default:
		for _, c := range []string{"info status", "info registers", "nmi"} {
			out, err := g.hmp(c)
			if err != nil {
				out = err.Error()
			}
			if c == "info registers" { // the general registers; not FPU or vector
				if i := strings.Index(out, "\nFCW="); i >= 0 {
					out = out[:i]
				}
			}
			fmt.Fprintf(&b, "qemu monitor, %s:\n%s\n", c, out)
		}
		// The panic's backtrace goes out on the emulated UART: give it time.
		select {
		case <-g.exited:
		case <-time.After(5 * time.Second):
		}
	}
	fmt.Fprintf(&b, "qemu.log (last 2 KiB): %s\n", tail(g.readFile("qemu.log"), 2048))
	fmt.Fprintf(&b, "console (last 60 lines):\n%s", g.ConsoleTail(60))
	return b.String()
}

// tapHolders lists QEMU's descriptors attached to the tap (tun's fdinfo
// names the interface: "iff:\tNAME"), or says there are none.
func (g *Guest) tapHolders() string {
	if g.cmd == nil || g.cmd.Process == nil {
		return "no qemu process"
	}
	dir := fmt.Sprintf("/proc/%d/fdinfo", g.cmd.Process.Pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err.Error()
	}
	var fds []string
	for _, e := range ents {
		info, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err == nil && bytes.Contains(info, []byte("iff:\t"+g.Tap+"\n")) {
			fds = append(fds, e.Name())
		}
	}
	if len(fds) == 0 {
		return "none (the tap is detached from QEMU)"
	}
	return "fd " + strings.Join(fds, ", ")
}

// tail is the last n bytes of s.
func tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}

// Dead tells whether PostMortem has run on g.
func (g *Guest) Dead() bool { return g.dead }

func errOrEmpty(err error) any {
	if err == nil {
		return ""
	}
	return err
}

// hmp runs one human monitor command and returns its output.
func (g *Guest) hmp(cmd string) (string, error) {
	c, err := net.DialTimeout("unix", g.monitor, 2*time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	const prompt = "(qemu) "
	until := func() (string, error) {
		var out []byte
		buf := make([]byte, 4096)
		for !bytes.HasSuffix(out, []byte(prompt)) {
			n, err := c.Read(buf)
			out = append(out, buf[:n]...)
			if err != nil {
				return string(out), err
			}
		}
		return string(out[:len(out)-len(prompt)]), nil
	}
	if _, err := until(); err != nil { // the banner
		return "", err
	}
	if _, err := io.WriteString(c, cmd+"\n"); err != nil {
		return "", err
	}
	out, err := until()
	// The monitor echoes the command line (with terminal escapes) first.
	if i := strings.IndexByte(out, '\n'); i >= 0 {
		out = out[i+1:]
	}
	return strings.TrimSpace(out), err
}

// forgetFrames gives back the disk space of Pcap's frames before offset
// end (a hole; QEMU's offsets stay).
func (g *Guest) forgetFrames(end int64) error {
	const page = 4096
	from, to := int64(page), end&^(page-1) // the first page holds the pcap header
	if to <= from {
		return nil
	}
	f, err := os.OpenFile(g.Pcap, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, from, to-from); err != nil {
		return fmt.Errorf("punch a hole into %s: %w", g.Pcap, err)
	}
	return nil
}

// Close stops the guest and removes its namespace, tap and files.
func (g *Guest) Close() error {
	if g == nil {
		return nil
	}
	if g.cmd != nil && g.cmd.Process != nil {
		g.cmd.Process.Kill()
	}
	if g.cmd != nil {
		<-g.exited
	}
	var err error
	if g.NS != "" {
		err = netns.IP("netns", "del", g.NS)
		g.NS = ""
	}
	if g.work != "" && os.Getenv("XRNIC_SIW_KEEP") == "" {
		os.RemoveAll(g.work)
	}
	return err
}

// LoadSiw replaces the guest's siw module by a variant built by prepare.sh
// ("stock", "crc", "p2p", "rev1": siw's MPA choices are compile-time
// constants) and adds siw0 again.
func (g *Guest) LoadSiw(ctx context.Context, variant string) error {
	r, err := g.Sh(ctx, fmt.Sprintf("rdma link delete siw0; rmmod siw && insmod /lib/modules/siw-variants/%s/siw.ko && "+
		"rdma link add siw0 type siw netdev eth0", variant))
	if err != nil {
		return err
	}
	if !r.OK() {
		return fmt.Errorf("load siw %s: %v", variant, r)
	}
	return nil
}
