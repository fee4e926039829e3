package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"os"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"xrnic/transport"
	"xrnic/verbs"
)

// The last failure's text, for xrnic_last_error.
var lastErr struct {
	mu  sync.Mutex
	msg string
	err error // a sentinel set on the hot path (no formatting)
}

// fail records a failure and returns its errno.
func fail(errno syscall.Errno, format string, args ...any) int {
	msg := fmt.Sprintf(format, args...)
	lastErr.mu.Lock()
	lastErr.msg, lastErr.err = msg, nil
	lastErr.mu.Unlock()
	debugf("error: %s", msg)
	return int(errno)
}

// failErr records err without formatting (post paths).
func failErr(errno syscall.Errno, err error) int {
	lastErr.mu.Lock()
	lastErr.msg, lastErr.err = "", err
	lastErr.mu.Unlock()
	return int(errno)
}

func lastError() string {
	lastErr.mu.Lock()
	defer lastErr.mu.Unlock()
	if lastErr.err != nil {
		return lastErr.err.Error()
	}
	return lastErr.msg
}

var debugOn bool

func debugf(format string, args ...any) {
	if debugOn {
		log.Printf("xrnic: "+format, args...)
	}
}

// The device: one per process, refcounted by xrnic_open/xrnic_close.
var dev struct {
	mu   sync.Mutex
	refs int
	d    *verbs.Device
	attr deviceAttr
	a    verbs.Attributes
	// ifname is the interface the port stands for (its state is read on
	// every query).
	ifname string
}

// configKeys are the keys config knows (docs/VERBS-ABI.md).
var configKeys = []string{"XRNIC_TRANSPORT", "XRNIC_IFACE", "XRNIC_DEBUG", "XRNIC_NO_INLINE_TX", "XRNIC_DRIVE", "XRNIC_SPIN", "XRNIC_RX_SPIN"}

// config reads the XRNIC_* keys from the environment and XRNIC_CONFIG.
func config() (map[string]string, error) {
	cfg := map[string]string{}
	if path := os.Getenv("XRNIC_CONFIG"); path != "" {
		f, err := os.Open(path)
		if err != nil {
			return nil, fmt.Errorf("XRNIC_CONFIG: %v (unset it or name a readable file of KEY=VALUE lines)", err)
		}
		defer f.Close()
		sc := bufio.NewScanner(f)
		for n := 1; sc.Scan(); n++ {
			line := strings.TrimSpace(sc.Text())
			if line == "" || line[0] == '#' {
				continue
			}
			k, v, ok := strings.Cut(line, "=")
			if !ok {
				return nil, fmt.Errorf("XRNIC_CONFIG %s:%d: want KEY=VALUE, got %q", path, n, line)
			}
			cfg[strings.TrimSpace(k)] = strings.TrimSpace(v)
		}
		if err := sc.Err(); err != nil {
			return nil, fmt.Errorf("XRNIC_CONFIG %s: %v", path, err)
		}
	}
	for _, k := range configKeys {
		if v, ok := os.LookupEnv(k); ok {
			cfg[k] = v
		}
	}
	for k := range cfg {
		if !slices.Contains(configKeys, k) {
			return nil, fmt.Errorf("XRNIC_CONFIG: unknown key %s (known: %s)", k, strings.Join(configKeys, ", "))
		}
	}
	return cfg, nil
}

// pickIface returns the named interface, or the first up non-loopback
// interface with an IPv4 address, else lo.
func pickIface(name string) (*net.Interface, error) {
	if name != "" {
		ifi, err := net.InterfaceByName(name)
		if err != nil {
			return nil, fmt.Errorf("XRNIC_IFACE=%s: %v (ip link lists the interfaces)", name, err)
		}
		return ifi, nil
	}
	ifs, err := net.Interfaces()
	if err != nil {
		return nil, fmt.Errorf("list network interfaces: %v", err)
	}
	var lo *net.Interface
	for i := range ifs {
		ifi := &ifs[i]
		if ifi.Flags&net.FlagLoopback != 0 {
			if lo == nil {
				lo = ifi
			}
			continue
		}
		if ifi.Flags&net.FlagUp != 0 && ipv4Of(ifi) != nil {
			return ifi, nil
		}
	}
	if lo == nil {
		return nil, errors.New("no network interface (not even lo): set XRNIC_IFACE")
	}
	return lo, nil
}

func ipv4Of(ifi *net.Interface) net.IP {
	addrs, _ := ifi.Addrs()
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			if v4 := n.IP.To4(); v4 != nil {
				return v4
			}
		}
	}
	return nil
}

// mtuEnum is the largest IB MTU (256..4096) that fits the interface MTU
// less the IPv4 and TCP headers.
func mtuEnum(ifmtu int) int32 {
	m := ifmtu - 40
	switch {
	case m >= 4096:
		return IBV_MTU_4096
	case m >= 2048:
		return IBV_MTU_2048
	case m >= 1024:
		return IBV_MTU_1024
	case m >= 512:
		return IBV_MTU_512
	}
	return IBV_MTU_256
}

func version() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "devel"
}

const (
	maxInline  = 256
	vendorXrn  = 0x78726e // "xrn"
	maxIRDORD8 = 255
)

func openDevice() int {
	dev.mu.Lock()
	defer dev.mu.Unlock()
	if dev.refs > 0 {
		dev.refs++
		return 0
	}
	cfg, err := config()
	if err != nil {
		return fail(syscall.EINVAL, "xrnic: %v", err)
	}
	debugOn = cfg["XRNIC_DEBUG"] == "1"
	if debugOn {
		dumpOnSignal()
	}
	ifi, err := pickIface(cfg["XRNIC_IFACE"])
	if err != nil {
		return fail(syscall.ENODEV, "xrnic: %v", err)
	}
	dc := verbs.DeviceConfig{Transport: cfg["XRNIC_TRANSPORT"], NoInlineTx: cfg["XRNIC_NO_INLINE_TX"] == "1"}
	if v := cfg["XRNIC_RX_SPIN"]; v != "" {
		us, err := strconv.Atoi(v)
		if err != nil || us < 0 {
			return fail(syscall.EINVAL, "xrnic: XRNIC_RX_SPIN=%q: want microseconds a QP's reader polls its socket after the last data (kernel transport; 0, the default: never)", v)
		}
		dc.RxSpin = time.Duration(us) * time.Microsecond
	}
	switch dc.Transport {
	case "", "kernel":
		dc.Transport = "kernel"
	case "afxdp":
		if cfg["XRNIC_IFACE"] == "" {
			return fail(syscall.EINVAL, "xrnic: XRNIC_TRANSPORT=afxdp needs XRNIC_IFACE=<interface> (the one to attach XDP to)")
		}
		dc.XDP.Iface = ifi.Name
		if v := cfg["XRNIC_SPIN"]; v != "" {
			us, err := strconv.Atoi(v)
			if err != nil || us < 0 {
				return fail(syscall.EINVAL, "xrnic: XRNIC_SPIN=%q: want microseconds the poll loop spins before it sleeps (0: never; default 50)", v)
			}
			dc.XDP.Spin = time.Duration(us) * time.Microsecond
			if us == 0 {
				dc.XDP.Spin = -1
			}
		}
		if !debugOn {
			// The application's stderr is its own: the attach
			// report only with XRNIC_DEBUG=1.
			dc.XDP.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
		}
	default:
		return fail(syscall.EINVAL, "xrnic: XRNIC_TRANSPORT=%q: want kernel or afxdp", dc.Transport)
	}
	d, err := verbs.Open(dc)
	if err != nil {
		errno := syscall.EIO
		switch {
		case errors.Is(err, verbs.ErrPrivileges):
			errno = syscall.EPERM
		case errors.Is(err, verbs.ErrNoInterface):
			errno = syscall.ENODEV
		case errors.Is(err, verbs.ErrInUse):
			errno = syscall.EBUSY
		case errors.Is(err, verbs.ErrXDPAttach):
			errno = syscall.EOPNOTSUPP
		}
		return fail(errno, "xrnic: open the %s transport: %v", dc.Transport, err)
	}
	a := d.Attributes()
	var at deviceAttr
	copy(at.FwVer[:len(at.FwVer)-1], "xrnic "+version())
	copy(at.Ifname[:len(at.Ifname)-1], ifi.Name)
	copy(at.MAC[:], ifi.HardwareAddr)
	if a.XDP != nil && a.XDP.Addr.Is4() {
		v4 := a.XDP.Addr.As4()
		copy(at.IPv4[:], v4[:])
	} else {
		copy(at.IPv4[:], ipv4Of(ifi))
	}
	at.MaxMRSize = a.MaxMRSize
	at.PageSizeCap = 4096
	at.VendorID = vendorXrn
	at.MaxQP = clamp32(a.MaxQPs)
	at.MaxQPWR = clamp32(a.MaxWR)
	at.MaxSGE = clamp32(a.MaxSGE)
	at.MaxCQ = clamp32(a.MaxQPs * 2)
	at.MaxCQE = clamp32(a.MaxCQE)
	at.MaxMR = clamp32(a.MaxMR)
	at.MaxPD = clamp32(a.MaxQPs)
	at.MaxQPRdAtom = int32(min(a.MaxIRD, maxIRDORD8))
	at.MaxQPInitRdAtom = int32(min(a.MaxORD, maxIRDORD8))
	at.MaxResRdAtom = clamp32(a.MaxIRD * a.MaxQPs)
	at.MaxInlineData = maxInline
	at.MaxMsgSz = a.MaxMsgSize
	if a.AtomicCap == verbs.AtomicGlob {
		at.AtomicCap = IBV_ATOMIC_GLOB
	} else {
		at.AtomicCap = int32(a.AtomicCap)
	}
	if a.MaskedAtomics {
		at.MaskedAtomics = 1
	}
	at.PortState = portState(ifi.Flags)
	dev.ifname = ifi.Name
	mtu := ifi.MTU
	if a.XDP != nil && a.XDP.MTU > 0 {
		mtu = a.XDP.MTU
	}
	at.IfMTU = int32(mtu)
	at.ActiveMTU = mtuEnum(mtu)
	if a.LLP == "afxdp" {
		at.AFXDP = 1
	}
	dev.d, dev.a, dev.attr, dev.refs = d, a, at, 1
	if dr, ok := d.Transport().(transport.Driver); ok && cfg["XRNIC_DRIVE"] != "0" {
		driver.Store(&driveBox{dr})
	} else {
		driveCQs.Store(cfg["XRNIC_DRIVE"] != "0")
	}
	debugf("opened: transport %s, interface %s, MTU %d", a.LLP, ifi.Name, mtu)
	return 0
}

func clamp32(v int) int32 {
	return int32(min(max(v, 0), 1<<31-1))
}

func closeDevice() int {
	dev.mu.Lock()
	defer dev.mu.Unlock()
	if dev.refs == 0 {
		return fail(syscall.EINVAL, "xrnic_close: the device is not open")
	}
	dev.refs--
	if dev.refs > 0 {
		return 0
	}
	driver.Store(nil)
	driveCQs.Store(false)
	err := dev.d.Close()
	dev.d = nil
	if err != nil {
		return fail(syscall.EIO, "xrnic: close the device: %v", err)
	}
	return 0
}

// driver is the open device's transport when it can be driven by the
// application's threads (afxdp): posts and empty polls step it, arming a
// CQ hands it back (transport.Driver).
var driver atomic.Pointer[driveBox]

type driveBox struct{ d transport.Driver }

// driveCQs: the device is on the kernel transport and XRNIC_DRIVE is not
// 0, so an empty poll reads the sockets of the CQ's QPs itself.
var driveCQs atomic.Bool

// drive steps the transport on the calling thread: xrnic_drive. On the
// kernel transport it reads the sockets of cq's QPs (verbs.CQ.Drive);
// their readers stay, so an idle step reports 0 ("the engine polls"): the
// poller yields and sleeps as it would without driving.
func drive(h uint64) int {
	if b := driver.Load(); b != nil {
		return int(b.d.Drive())
	}
	if !driveCQs.Load() {
		return -1
	}
	c := getT[cqObj](h)
	if c == nil {
		return -1
	}
	if c.cq.Drive() == transport.DriveWork {
		return int(transport.DriveWork)
	}
	return int(transport.DriveNone)
}

// device returns the open device, or nil.
func device() *verbs.Device {
	dev.mu.Lock()
	defer dev.mu.Unlock()
	return dev.d
}

func queryDevice(out *deviceAttr) int {
	dev.mu.Lock()
	defer dev.mu.Unlock()
	if dev.d == nil {
		return fail(syscall.ENODEV, "xrnic_query_device: the device is not open (xrnic_open first)")
	}
	// The port's state is the interface's now, not at open (a link that
	// came up since is ACTIVE).
	if ifi, err := net.InterfaceByName(dev.ifname); err == nil {
		dev.attr.PortState = portState(ifi.Flags)
	} else {
		dev.attr.PortState = IBV_PORT_DOWN
	}
	*out = dev.attr
	return 0
}

func portState(f net.Flags) int32 {
	if f&net.FlagUp != 0 && (f&net.FlagRunning != 0 || f&net.FlagLoopback != 0) {
		return IBV_PORT_ACTIVE
	}
	return IBV_PORT_DOWN
}
