//go:build !race

package daemontest

// raceBuild: this test binary is built without -race (race.go).
const raceBuild = false
