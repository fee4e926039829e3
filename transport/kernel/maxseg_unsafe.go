package kernel

import (
	"net"

	"golang.org/x/sys/unix"
)

// tcpMaxSeg returns TCP_MAXSEG of c (the MSS the kernel uses to segment),
// or 0 if it cannot be read.
func tcpMaxSeg(c *net.TCPConn) int {
	rc, err := c.SyscallConn()
	if err != nil {
		return 0
	}
	mss := 0
	rc.Control(func(fd uintptr) {
		v, err := unix.GetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_MAXSEG)
		if err == nil {
			mss = v
		}
	})
	return mss
}

// tcpAdvMSS returns the MSS c advertised (TCP_INFO tcpi_advmss), or 0.
func tcpAdvMSS(c *net.TCPConn) int {
	rc, err := c.SyscallConn()
	if err != nil {
		return 0
	}
	mss := 0
	rc.Control(func(fd uintptr) {
		if ti, err := unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO); err == nil {
			mss = int(ti.Advmss)
		}
	})
	return mss
}
