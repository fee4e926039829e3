package require

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestUnavailable runs a test that calls Unavailable in a child process,
// with and without CI=true, and checks that it skips or fails.
func TestUnavailable(t *testing.T) {
	if os.Getenv("XRNIC_REQUIRE_CHILD") == "1" {
		Unavailable(t, "frobnicator missing")
		t.Fatal("Unavailable returned")
	}
	for _, tc := range []struct {
		ci       string
		fail     bool
		contains string
	}{
		{"", false, "--- SKIP: TestUnavailable"},
		{"false", false, "--- SKIP: TestUnavailable"},
		{"true", true, "CI=true: failing instead of skipping"},
	} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestUnavailable$", "-test.v")
		cmd.Env = append(os.Environ(), "XRNIC_REQUIRE_CHILD=1", "CI="+tc.ci)
		out, err := cmd.CombinedOutput()
		if failed := err != nil; failed != tc.fail {
			t.Errorf("CI=%q: failed %v, want %v:\n%s", tc.ci, failed, tc.fail, out)
		}
		if !strings.Contains(string(out), tc.contains) || !strings.Contains(string(out), "frobnicator missing") {
			t.Errorf("CI=%q: output lacks %q and the message:\n%s", tc.ci, tc.contains, out)
		}
	}
}
