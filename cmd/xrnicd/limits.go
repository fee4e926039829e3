package main

import (
	"net/netip"
	"sync"
)

// peerQPs counts the QPs of each peer address (the IP, whatever the port)
// for --max-qps-per-peer, so one client cannot take every QP of
// --max-qps. The zero value is ready; max 0 means no per-peer limit.
type peerQPs struct {
	mu sync.Mutex
	n  map[string]int
}

// peerKey is the address part of a "host:port" peer string.
func peerKey(peer string) string {
	if ap, err := netip.ParseAddrPort(peer); err == nil {
		return ap.Addr().Unmap().String()
	}
	return peer
}

// acquire counts one more QP of peer unless it already has max; the
// returned release undoes it.
func (p *peerQPs) acquire(peer string, max int) (release func(), ok bool) {
	if max <= 0 {
		return func() {}, true
	}
	k := peerKey(peer)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.n[k] >= max {
		return nil, false
	}
	if p.n == nil {
		p.n = map[string]int{}
	}
	p.n[k]++
	return func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.n[k]--; p.n[k] <= 0 {
			delete(p.n, k)
		}
	}, true
}
