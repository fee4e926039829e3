//go:build !race

package main

// raceEnabled: the race detector cannot see that write_lat's polled bytes
// are ordered by the network, so tests skip that one test under -race.
const raceEnabled = false
