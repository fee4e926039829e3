package bpf

import "fmt"

// CountersPerCPU returns the verdict counters per possible CPU (Counters
// sums them), for metrics that keep them apart.
func (p *Program) CountersPerCPU() ([]Counters, error) {
	var per []xdpCounters
	if err := p.objs.Stats.Lookup(uint32(0), &per); err != nil {
		return nil, fmt.Errorf("bpf: read counters: %w", err)
	}
	out := make([]Counters, len(per))
	for i, v := range per {
		out[i] = Counters{Redirected: v.Redirected, Passed: v.Passed, Malformed: v.Malformed,
			NoSocket: v.NoSocket, FaultDropped: v.FaultDropped, FaultCorrupted: v.FaultCorrupted}
	}
	return out, nil
}
