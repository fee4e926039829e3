//go:build linux

package reliability

import (
	"fmt"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// setTxChecksum turns transmit checksum offload of ifname (in the calling
// thread's namespace) on or off with the legacy ETHTOOL_STXCSUM ioctl (the
// test image has no ethtool binary). With it off, a kernel TCP sender on
// veth fills in the full checksum (CHECKSUM_NONE) instead of leaving
// CHECKSUM_PARTIAL, which the receiving kernel would never verify: only
// then does a byte flipped on the wire meet the TCP checksum.
func setTxChecksum(ifname string, on bool) error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	v := struct{ cmd, data uint32 }{cmd: unix.ETHTOOL_STXCSUM}
	if on {
		v.data = 1
	}
	var ifr struct {
		name [unix.IFNAMSIZ]byte
		data uintptr
		_    [16]byte
	}
	copy(ifr.name[:], ifname)
	ifr.data = uintptr(unsafe.Pointer(&v))
	_, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.SIOCETHTOOL, uintptr(unsafe.Pointer(&ifr)))
	runtime.KeepAlive(&v)
	if e != 0 {
		return fmt.Errorf("ETHTOOL_STXCSUM %s: %w", ifname, e)
	}
	return nil
}
