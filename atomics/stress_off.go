//go:build !atomics_stress

package atomics

// stressYield marks the window between the load and the CompareAndSwap of
// every retry loop. It is empty and compiled away; building with
// -tags atomics_stress replaces it with one that yields the processor, so
// the concurrency tests see interleavings inside the window even on a
// machine with few free cores.
func stressYield() {}
