//go:build linux

package afxdp

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

func setsockopt(fd, opt int, p unsafe.Pointer, size uintptr) error {
	_, _, e := unix.Syscall6(unix.SYS_SETSOCKOPT, uintptr(fd), unix.SOL_XDP, uintptr(opt), uintptr(p), size, 0)
	if e != 0 {
		return e
	}
	return nil
}

func getsockopt(fd, opt int, p unsafe.Pointer, size uintptr) (uintptr, error) {
	l := uint32(size)
	_, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), unix.SOL_XDP, uintptr(opt), uintptr(p), uintptr(unsafe.Pointer(&l)), 0)
	if e != 0 {
		return 0, e
	}
	return uintptr(l), nil
}

// kick makes the kernel process the TX ring (sendto with no data). It is
// on the hot path: a raw syscall that allocates nothing. EAGAIN, EBUSY and
// ENOBUFS mean the kernel is busy or out of buffers and will be kicked
// again with the next batch; ENETDOWN and ENXIO mean the device went away.
func kickTX(fd int) unix.Errno {
	_, _, e := unix.Syscall6(unix.SYS_SENDTO, uintptr(fd), 0, 0, unix.MSG_DONTWAIT, 0, 0)
	return e
}

// kickRX makes the kernel refill its RX descriptors from the fill ring
// (recvfrom with no buffer), as need_wakeup asks.
func kickRX(fd int) unix.Errno {
	_, _, e := unix.Syscall6(unix.SYS_RECVFROM, uintptr(fd), 0, 0, unix.MSG_DONTWAIT, 0, 0)
	return e
}

// pollIn waits until the socket of p is readable (the RX ring has entries)
// or timeoutMS passes (-1: forever). It reports whether it is readable.
func pollIn(p *[1]unix.PollFd, timeoutMS int) (bool, error) {
	p[0].Events, p[0].Revents = unix.POLLIN, 0
	for {
		_, err := unix.Poll(p[:], timeoutMS)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return false, err
		}
		return p[0].Revents&unix.POLLIN != 0, nil
	}
}
