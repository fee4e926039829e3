package afxdp

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// Privileges of the afxdp transport.

// Linux capability numbers (linux/capability.h) that x/sys/unix lacks on
// some architectures' generated files.
const (
	capNetAdmin = 12
	capNetRaw   = 13
	capIPCLock  = 14
	capSysAdmin = 21
	capPerfmon  = 38
	capBPF      = 39
)

// ErrPrivileges is wrapped by Privileges when the process may not
// use the afxdp transport.
var ErrPrivileges = errors.New("afxdp: the afxdp transport needs root or CAP_NET_ADMIN, CAP_BPF, CAP_PERFMON and CAP_NET_RAW")

// Privileges reports whether this process may use the afxdp transport:
// nil for root (effective UID 0 with its capabilities) or a process that
// holds CAP_NET_ADMIN (attach XDP), CAP_BPF (load the program; CAP_SYS_ADMIN
// also does), CAP_PERFMON (without it the verifier refuses the program's
// pointer arithmetic to a process that is not root) and CAP_NET_RAW
// (AF_XDP sockets) in its effective set.
// Otherwise the error names what is missing and how to grant it.
func Privileges() error {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return fmt.Errorf("%w: cannot read the process's capabilities: %v", ErrPrivileges, err)
	}
	has := func(c uint) bool { return data[c/32].Effective&(1<<(c%32)) != 0 }
	var missing []string
	if !has(capNetAdmin) {
		missing = append(missing, "CAP_NET_ADMIN")
	}
	if !has(capBPF) && !has(capSysAdmin) {
		missing = append(missing, "CAP_BPF")
	}
	if !has(capPerfmon) && !has(capSysAdmin) {
		missing = append(missing, "CAP_PERFMON")
	}
	if !has(capNetRaw) {
		missing = append(missing, "CAP_NET_RAW")
	}
	if len(missing) == 0 {
		return nil
	}
	who := "this process"
	if os.Geteuid() != 0 {
		who = "this process (not root)"
	}
	return fmt.Errorf("%w: %s lacks %v: run as root, or grant them (systemd: AmbientCapabilities=CAP_NET_ADMIN CAP_BPF CAP_PERFMON CAP_NET_RAW CAP_IPC_LOCK; a binary: setcap cap_net_admin,cap_bpf,cap_perfmon,cap_net_raw,cap_ipc_lock+ep PATH), or use the kernel transport, which needs none",
		ErrPrivileges, who, missing)
}

// memlockNeeded reports whether the AF_XDP UMEM of bytes would exceed
// RLIMIT_MEMLOCK (the kernel charges UMEM pages to it unless the process
// has CAP_IPC_LOCK).
func memlockNeeded(bytes uint64) error {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err == nil && data[capIPCLock/32].Effective&(1<<(capIPCLock%32)) != 0 {
		return nil
	}
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_MEMLOCK, &rl); err != nil || rl.Cur == unix.RLIM_INFINITY || rl.Cur >= bytes {
		return nil
	}
	return fmt.Errorf("%w: the AF_XDP memory (%d MiB) exceeds RLIMIT_MEMLOCK (%d KiB): grant CAP_IPC_LOCK, or raise the limit (ulimit -l unlimited; systemd: LimitMEMLOCK=infinity)",
		ErrPrivileges, bytes>>20, rl.Cur>>10)
}

// Memlock checks RLIMIT_MEMLOCK against the UMEM the afxdp transport
// maps for cfg (frames × queues × 4 KiB chunks).
func Memlock(cfg Config) error {
	cfg.setDefaults()
	return memlockNeeded(uint64(cfg.Frames) * uint64(cfg.Queues) * 4096)
}
