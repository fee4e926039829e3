package mem

import (
	"math/rand/v2"
	"testing"
)

// newTestRand returns a seeded generator and prints the seed if the test fails.
func newTestRand(t *testing.T) *rand.Rand {
	const seed = 20261130
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("random seed: %d", seed)
		}
	})
	return rand.New(rand.NewPCG(seed, 0x9E3779B97F4A7C15))
}
