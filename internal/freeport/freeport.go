// Package freeport picks a TCP port for a server that another process
// will bind (prometheus, an xrnic-perf server, xrnicd), where a listener
// cannot be handed over.
//
// The usual trick, listening on port 0 and closing, returns a port from
// the kernel's ephemeral range, which every outgoing connection on the
// host draws from too: under go test's parallel packages another test's
// connect() can take it before the server binds it. Pick draws from
// below that range (net.ipv4.ip_local_port_range), where only explicit
// binds go, at random, and checks the port is free now.
package freeport

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
)

// Pick returns a port in [low, ephemeral start) free for TCP on every
// address of this namespace at the time of the call.
func Pick() (int, error) {
	const low = 20000
	hi := ephemeralStart()
	if hi <= low+100 {
		hi = 32768
	}
	for range 200 {
		p := low + rand.IntN(hi-low)
		ln, err := net.Listen("tcp", ":"+strconv.Itoa(p))
		if err != nil {
			continue
		}
		ln.Close()
		return p, nil
	}
	return 0, fmt.Errorf("freeport: no free TCP port in [%d, %d) after 200 tries", low, hi)
}

// ephemeralStart is the first port of the kernel's ephemeral range
// (32768 when it cannot be read).
func ephemeralStart() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	f := strings.Fields(string(b))
	if len(f) < 1 {
		return 32768
	}
	n, err := strconv.Atoi(f[0])
	if err != nil {
		return 32768
	}
	return n
}
