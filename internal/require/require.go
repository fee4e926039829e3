// Package require is the one place where a test decides that what it
// needs is missing. On a developer's machine a test that needs root, a
// tool or a kernel feature skips with a message that says how to get it;
// under CI=true (.ci/run exports it) the same test fails instead, because
// CI installs and provides everything the suite needs: a skip there would
// be a test that passed by checking nothing.
//
// Skips that are not about the machine (a helper process's entry point,
// testing.Short) stay plain t.Skip.
package require

import (
	"fmt"
	"os"
	"os/exec"
	"testing"
)

// CI reports whether the tests run under CI (CI=true).
func CI() bool { return os.Getenv("CI") == "true" }

// Unavailable skips the test with the message, or fails it under CI.
func Unavailable(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if CI() {
		t.Fatal(msg + " (CI=true: failing instead of skipping; CI provides this)")
	}
	t.Skip(msg)
}

// Root requires root; why says what the test does with it.
func Root(t testing.TB, why string) {
	t.Helper()
	if os.Geteuid() != 0 {
		Unavailable(t, "needs root to %s (CI runs it as root)", why)
	}
}

// Tool requires the program name on the PATH and returns its path; pkg is
// the Debian package that has it.
func Tool(t testing.TB, name, pkg string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		Unavailable(t, "needs %s (Debian: apt-get install %s; .ci/run installs it)", name, pkg)
	}
	return p
}

// NoError requires err to be nil: the missing thing it describes skips
// the test, or fails it under CI.
func NoError(t testing.TB, err error, what string) {
	t.Helper()
	if err != nil {
		Unavailable(t, "%s: %v", what, err)
	}
}
