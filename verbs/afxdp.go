package verbs

import (
	"errors"
	"fmt"
	"net"

	"golang.org/x/sys/unix"

	"xrnic/internal/engine"
	"xrnic/transport/afxdp"
)

// openAFXDP opens the engine over the "afxdp" transport. What commonly goes
// wrong is checked first and reported with what to do: a missing
// interface name, an unknown interface, missing privileges, a low
// RLIMIT_MEMLOCK, an interface another xrnic process owns (ErrInUse),
// more queues than the interface has, and an XDP attach the kernel or
// driver refuses.
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
	if err := afxdp.Privileges(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrPrivileges, err)
	}
	if _, err := net.InterfaceByName(x.Iface); err != nil {
		return nil, fmt.Errorf("%w: %q (`ip link` lists the interfaces; the device is opened in the network namespace of the thread calling Open): %v",
			ErrNoInterface, x.Iface, err)
	}
	ac := afxdp.Config{Iface: x.Iface, Queues: x.Queues, Mode: x.Mode, MTU: x.MTU, Logger: x.Logger, LockDir: x.LockDir, Spin: x.Spin}
	if x.Addr.IsValid() {
		ac.Addr = x.Addr.Unmap()
	}
	if err := afxdp.Memlock(ac); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrPrivileges, err)
	}
	tr, err := afxdp.Open(ac)
	if err != nil {
		return nil, classifyXDPError(x, err)
	}
	dc := engineConfig(cfg)
	dc.Transport = tr
	d, err := engine.Open(dc)
	if err != nil {
		tr.Close()
		return nil, fmt.Errorf("verbs: open afxdp device on %s: %w", x.Iface, err)
	}
	info := tr.Info()
	return &kernelDev{d: d, llp: "afxdp", xdp: &XDPAttributes{
		Iface: x.Iface, Ifindex: info.Ifindex, Addr: info.Addr, MTU: info.MTU, Queues: info.Queues,
		Mode: info.Mode, Reason: info.Reason, ZeroCopy: info.ZeroCopy, Replaced: info.Replaced,
	}}, nil
}

// classifyXDPError maps an error of afxdp.Open to the verbs error saying
// what to do, by the step that failed (afxdp.OpError) and its cause.
func classifyXDPError(x XDPConfig, err error) error {
	var op *afxdp.OpError
	errors.As(err, &op)
	switch {
	case errors.Is(err, afxdp.ErrInUse):
		return fmt.Errorf("%w: %v (one xrnic process per interface: stop that one first, e.g. `systemctl stop xrnicd`, or serve another interface)", ErrInUse, err)
	case errors.Is(err, afxdp.ErrQueues):
		return fmt.Errorf("%w: XDPConfig.Queues: %v", ErrBadAttr, err)
	case errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES):
		return fmt.Errorf("%w: %v (run as root, or grant CAP_NET_ADMIN, CAP_BPF, CAP_PERFMON, CAP_NET_RAW and CAP_IPC_LOCK)", ErrPrivileges, err)
	case errors.Is(err, afxdp.ErrOtherProgram):
		return fmt.Errorf("%w: %v", ErrXDPAttach, err)
	case op != nil && op.Op == afxdp.OpAttach:
		hint := "try XDPConfig.Mode \"generic\", which every driver supports"
		if x.Mode == "generic" {
			hint = "check `ip link show " + x.Iface + "` for another XDP program and the kernel log (dmesg) for the driver's reason"
		}
		return fmt.Errorf("%w on %s: %v (%s)", ErrXDPAttach, x.Iface, err, hint)
	case op != nil && op.Op == afxdp.OpSocket:
		return fmt.Errorf("%w: %v (the kernel needs CONFIG_XDP_SOCKETS; XDPConfig.Queues must not exceed the interface's queues, see `ethtool -l %s`)", ErrNotSupported, err, x.Iface)
	}
	return fmt.Errorf("verbs: open afxdp device on %s: %w", x.Iface, err)
}
