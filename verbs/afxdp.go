package verbs

import (
	"errors"
	"fmt"
	"net"
	"strings"

	"golang.org/x/sys/unix"

	"xrnic/internal/engine"
)

// openAFXDP opens the engine over the "afxdp" transport. What commonly goes
// wrong is checked first and reported with what to do: a missing
// interface name, an unknown interface, missing privileges, a low
// RLIMIT_MEMLOCK, and an XDP attach the kernel or driver refuses.
func openAFXDP(cfg DeviceConfig) (provider, error) {
	x := cfg.XDP
	if x.Iface == "" {
		return nil, fmt.Errorf("%w: the afxdp transport needs DeviceConfig.XDP.Iface, the interface whose queues it serves (`ip link` lists them); or use Transport \"kernel\"", ErrNotSupported)
	}
	switch x.Mode {
	case "", "auto", "native", "generic":
	default:
		return nil, fmt.Errorf("%w: XDPConfig.Mode %q: want auto, native or generic", ErrBadAttr, x.Mode)
	}
	if x.Queues < 0 || x.MTU < 0 {
		return nil, fmt.Errorf("%w: XDPConfig.Queues and MTU must not be negative", ErrBadAttr)
	}
	if x.Addr.IsValid() && !x.Addr.Unmap().Is4() {
		return nil, fmt.Errorf("%w: XDPConfig.Addr %v: the afxdp transport is IPv4 only", ErrBadAttr, x.Addr)
	}
	if err := engine.XDPPrivileges(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrPrivileges, err)
	}
	if _, err := net.InterfaceByName(x.Iface); err != nil {
		return nil, fmt.Errorf("%w: %q (`ip link` lists the interfaces; the device is opened in the network namespace of the thread calling Open): %v",
			ErrNoInterface, x.Iface, err)
	}
	dx := engine.XDPConfig{Iface: x.Iface, Queues: x.Queues, Mode: x.Mode, MTU: x.MTU, Logger: x.Logger}
	if x.Addr.IsValid() {
		dx.Addr = x.Addr.Unmap()
	}
	if err := engine.XDPMemlock(dx); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrPrivileges, err)
	}
	dc := engineConfig(cfg)
	dc.Transport = engine.TransportAFXDP
	dc.XDP = dx
	d, err := engine.Open(dc)
	if err != nil {
		return nil, classifyXDPError(x, err)
	}
	info, _ := d.XDPInfo()
	return &kernelDev{d: d, llp: "afxdp", xdp: &XDPAttributes{
		Iface: x.Iface, Ifindex: info.Ifindex, Addr: info.Addr, MTU: info.MTU, Queues: info.Queues,
		Mode: info.Mode, Reason: info.Reason, ZeroCopy: info.ZeroCopy, Replaced: info.Replaced,
	}}, nil
}

// classifyXDPError maps an engine Open error of the afxdp transport to the
// verbs error saying what to do.
func classifyXDPError(x XDPConfig, err error) error {
	msg := err.Error()
	switch {
	case errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES):
		return fmt.Errorf("%w: %v (run as root, or grant CAP_NET_ADMIN, CAP_BPF, CAP_NET_RAW and CAP_IPC_LOCK)", ErrPrivileges, err)
	case strings.Contains(msg, "another XDP program"):
		return fmt.Errorf("%w: %v", ErrXDPAttach, err)
	case strings.Contains(msg, "bpf: attach"):
		hint := "try XDPConfig.Mode \"generic\", which every driver supports"
		if x.Mode == "generic" {
			hint = "check `ip link show " + x.Iface + "` for another XDP program and the kernel log (dmesg) for the driver's reason"
		}
		return fmt.Errorf("%w on %s: %v (%s)", ErrXDPAttach, x.Iface, err, hint)
	case strings.Contains(msg, "AF_XDP socket"):
		return fmt.Errorf("%w: %v (the kernel needs CONFIG_XDP_SOCKETS; XDPConfig.Queues must not exceed the interface's queues, see `ethtool -l %s`)", ErrNotSupported, err, x.Iface)
	}
	return fmt.Errorf("verbs: open afxdp device on %s: %w", x.Iface, err)
}
