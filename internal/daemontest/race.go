//go:build race

package daemontest

// raceBuild: this test binary is built with -race, so Build builds xrnicd
// and xrnicctl with it too (XRNIC_DAEMON_RACE overrides).
const raceBuild = true
