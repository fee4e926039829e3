package afxdp

import (
	"errors"
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ethtoolChannels is struct ethtool_channels (linux/ethtool.h), which
// x/sys/unix lacks.
type ethtoolChannels struct {
	Cmd                                    uint32
	MaxRx, MaxTx, MaxOther, MaxCombined    uint32
	RxCount, TxCount, OtherCount, Combined uint32
}

// ifreqData is struct ifreq with ifr_data set (SIOCETHTOOL).
type ifreqData struct {
	name [unix.IFNAMSIZ]byte
	data unsafe.Pointer
	_    [unsafe.Sizeof(unix.Ifreq{}) - unix.IFNAMSIZ - unsafe.Sizeof(uintptr(0))]byte
}

// channels reads the device's channel counts (ETHTOOL_GCHANNELS through
// the SIOCETHTOOL ioctl, as `ethtool -l IF` does) on a socket of the
// calling thread's network namespace.
func channels(iface string) (ethtoolChannels, error) {
	v := ethtoolChannels{Cmd: unix.ETHTOOL_GCHANNELS}
	if len(iface) >= unix.IFNAMSIZ {
		return v, unix.EINVAL
	}
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return v, err
	}
	defer unix.Close(fd)
	var ifr ifreqData
	copy(ifr.name[:], iface)
	ifr.data = unsafe.Pointer(&v)
	_, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.SIOCETHTOOL, uintptr(unsafe.Pointer(&ifr)))
	if e != 0 {
		return v, e
	}
	return v, nil
}

// queueCheck is checkQueues (a test turns it off to reach the socket
// bind failure).
var queueCheck = checkQueues

// checkQueues refuses Config.Queues above the device's receive queues
// (rx plus combined channels): an AF_XDP socket cannot bind to a queue the
// device does not have. A device without ETHTOOL_GCHANNELS is not checked
// here; binding the socket then reports it (OpSocket).
func checkQueues(iface string, want int) error {
	ch, err := channels(iface)
	if errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.ENOTSUP) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read the channels (ethtool -l %s): %w", iface, err)
	}
	have := int(ch.RxCount + ch.Combined)
	if have == 0 || want <= have {
		return nil
	}
	return fmt.Errorf("%w: Queues %d, but %s has %d receive queue(s) (ethtool -l %s: rx %d, combined %d; maximum rx %d, combined %d): use Queues %d or fewer, or raise the device's queues with `ethtool -L %s combined %d` (`rx %d` where the driver has no combined channels)",
		ErrQueues, want, iface, have, iface, ch.RxCount, ch.Combined, ch.MaxRx, ch.MaxCombined, have, iface, want, want)
}
