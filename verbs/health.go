package verbs

import (
	"errors"
	"fmt"
)

// Errors of Open on the "afxdp" transport and of Healthy (wrapped with the
// details and what to do).
var (
	// ErrInUse: another xrnic process owns the interface (it holds the
	// interface's owner lock); the error names its pid and command.
	ErrInUse = errors.New("verbs: interface in use by another xrnic process")
	// ErrNotHealthy: the device no longer serves its interface (the afxdp
	// transport's XDP program was detached or replaced behind its back).
	ErrNotHealthy = errors.New("verbs: device not healthy")
)

// healthChecker is a transport that can tell whether it still serves
// (the afxdp transport: its XDP program is still attached).
type healthChecker interface{ Healthy() error }

// Healthy reports whether the device still serves: nil on the kernel
// transport; on the afxdp transport, nil while its XDP program is the one
// attached to the interface, else an error wrapping ErrNotHealthy (no
// frame reaches the device then: close and open it again). ErrClosed after
// Close. It makes one rtnetlink request, cheap enough for every readiness
// probe.
func (d *Device) Healthy() error {
	d.mu.Lock()
	done := d.done
	d.mu.Unlock()
	if done {
		return ErrClosed
	}
	if h, ok := d.p.transport().(healthChecker); ok {
		if err := h.Healthy(); err != nil {
			return fmt.Errorf("%w: %v", ErrNotHealthy, err)
		}
	}
	return nil
}
