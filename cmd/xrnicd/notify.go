package main

import (
	"errors"
	"net"
	"os"
)

// sdNotify sends state ("READY=1", "STOPPING=1") to the service manager
// that started the daemon: one datagram to the unix socket named by
// $NOTIFY_SOCKET, the protocol of sd_notify(3) that Type=notify units
// wait for. Without $NOTIFY_SOCKET (not started by systemd, or not
// Type=notify) it does nothing. A name starting with '@' is in the
// abstract namespace; Go's unix socket addresses map the '@' to the
// leading NUL byte themselves.
func sdNotify(state string) error {
	name := os.Getenv("NOTIFY_SOCKET")
	if name == "" {
		return nil
	}
	if name[0] != '/' && name[0] != '@' {
		return errors.New("NOTIFY_SOCKET " + name + ": only unix socket paths and abstract names (@) are supported")
	}
	c, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: name, Net: "unixgram"})
	if err != nil {
		return err
	}
	defer c.Close()
	_, err = c.Write([]byte(state))
	return err
}

// notify is sdNotify that logs a failure: the daemon serves either way,
// but systemd then reports the start as timed out.
func (d *daemon) notify(state string) {
	if err := sdNotify(state); err != nil {
		d.log.Warn("could not notify the service manager", "state", state, "err", err)
	}
}
