package bpf

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"
)

// cpuCounters is the per-CPU value of the program's "stats" map (struct
// counters in xdp.c).
type cpuCounters struct {
	Redirected, Passed, Malformed, NoSocket, FaultDropped, FaultCorrupted uint64
}

// CountersPerCPU returns the verdict counters per possible CPU (Counters
// sums them). It finds the "stats" map through the kernel's program info,
// so it reads exactly what the loaded program counts.
func (p *Program) CountersPerCPU() ([]Counters, error) {
	m, err := p.statsMap()
	if err != nil {
		return nil, err
	}
	defer m.Close()
	var per []cpuCounters
	if err := m.Lookup(uint32(0), &per); err != nil {
		return nil, fmt.Errorf("bpf: read the XDP program's counters: %w", err)
	}
	out := make([]Counters, len(per))
	for i, v := range per {
		out[i] = Counters{Redirected: v.Redirected, Passed: v.Passed, Malformed: v.Malformed,
			NoSocket: v.NoSocket, FaultDropped: v.FaultDropped, FaultCorrupted: v.FaultCorrupted}
	}
	return out, nil
}

// statsMap opens the program's "stats" map (the caller closes it).
func (p *Program) statsMap() (*ebpf.Map, error) {
	info, err := p.Prog().Info()
	if err != nil {
		return nil, fmt.Errorf("bpf: XDP program info: %w", err)
	}
	ids, ok := info.MapIDs()
	if !ok {
		return nil, errors.New("bpf: the kernel does not report the XDP program's maps")
	}
	for _, id := range ids {
		m, err := ebpf.NewMapFromID(id)
		if err != nil {
			continue
		}
		mi, err := m.Info()
		if err == nil && mi.Name == "stats" && mi.Type == ebpf.PerCPUArray {
			return m, nil
		}
		m.Close()
	}
	return nil, errors.New("bpf: the XDP program has no per-CPU stats map")
}
