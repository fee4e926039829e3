package main

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// fdReserve is the number of file descriptors kept free beyond those open
// at start-up and the connection bounds: the daemon's own files (regions,
// /proc reads for peer credentials, the afxdp sockets and maps, log
// output) and the few connections accepted and closed again at once when
// a bound is reached.
const fdReserve = 64

// raiseNoFile raises the RLIMIT_NOFILE soft limit to the hard limit and
// returns both as they are after. (The Go runtime does the same at start;
// doing it here makes it explicit, logged, and independent of that.)
func raiseNoFile() (before, after unix.Rlimit, err error) {
	if err = unix.Getrlimit(unix.RLIMIT_NOFILE, &before); err != nil {
		return before, before, err
	}
	after = before
	if before.Cur < before.Max {
		after.Cur = before.Max
		if err = unix.Setrlimit(unix.RLIMIT_NOFILE, &after); err != nil {
			return before, before, err
		}
	}
	return before, after, nil
}

// openFDs counts the process's open file descriptors.
func openFDs() int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return 16
	}
	return len(ents)
}

// fdBudget splits a file descriptor limit between the servers: the metrics
// port and the control socket hold at most their caps, the MPA listener
// at most --max-setup connections in setup plus --max-qps QPs (one socket
// each on the kernel transport). When these do not fit in the limit less
// what is open and fdReserve, --max-setup and --max-qps are lowered in
// proportion (per peer too), so that a flood on one listener leaves the
// others their descriptors. It fails when even that leaves no room.
type fdBudget struct {
	Limit, Open, Reserve int
	MPA                  int // descriptors left for MPA connections
	Lowered              bool
	// Before lowering, for the log.
	MaxSetup, MaxQPs int
}

func planFDs(c *config, limit uint64, open int) (fdBudget, error) {
	b := fdBudget{Open: open, Reserve: fdReserve, MaxSetup: c.MaxSetup, MaxQPs: c.MaxQPs}
	b.Limit = int(min(limit, 1<<30))
	servers := c.SocketMaxConns
	if c.Metrics != "" && c.Metrics != "off" {
		servers += c.HTTPMaxConns
	}
	b.MPA = b.Limit - open - fdReserve - servers
	const minMPA = 16
	if b.MPA < minMPA {
		return b, fmt.Errorf("RLIMIT_NOFILE %d is too low: %d open, %d reserved, --http-max-conns + --socket-max-conns %d leave %d for MPA connections (want at least %d): raise the limit (LimitNOFILE= in the unit, ulimit -n) or lower the caps",
			b.Limit, open, fdReserve, servers, b.MPA, minMPA)
	}
	if sum := c.MaxSetup + c.MaxQPs; sum > b.MPA {
		setup := max(1, c.MaxSetup*b.MPA/sum)
		c.MaxSetup, c.MaxQPs = setup, max(1, b.MPA-setup)
		c.MaxSetupPeer = min(c.MaxSetupPeer, c.MaxSetup)
		if c.MaxQPsPerPeer > c.MaxQPs {
			c.MaxQPsPerPeer = c.MaxQPs
		}
		b.Lowered = true
	}
	return b, nil
}

// planFDs raises the descriptor limit, fits the connection bounds into
// it (planFDs above) and logs the outcome.
func (d *daemon) planFDs() error {
	before, after, err := raiseNoFile()
	if err != nil {
		d.log.Warn("RLIMIT_NOFILE: could not raise the soft limit to the hard limit", "err", err)
	}
	b, perr := planFDs(&d.cfg, after.Cur, openFDs())
	d.log.Info("file descriptor limit", "soft_before", before.Cur, "soft", after.Cur, "hard", after.Max, "raised", after.Cur > before.Cur,
		"open", b.Open, "reserve", b.Reserve, "http_max_conns", d.cfg.HTTPMaxConns, "socket_max_conns", d.cfg.SocketMaxConns, "mpa", b.MPA)
	if perr != nil {
		return perr
	}
	if b.Lowered {
		d.log.Warn("connection bounds lowered to fit the file descriptor limit (raise LimitNOFILE / ulimit -n to keep them)",
			"max_setup", d.cfg.MaxSetup, "max_setup_was", b.MaxSetup, "max_qps", d.cfg.MaxQPs, "max_qps_was", b.MaxQPs,
			"max_setup_per_peer", d.cfg.MaxSetupPeer, "max_qps_per_peer", d.cfg.MaxQPsPerPeer)
	}
	return nil
}
