package abitest

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestCLibraries runs the C libraries' own checks: their symbol versions
// against Debian's libraries, libibverbs and librdmacm against fake
// engines (also under ASan/UBSan where the compiler has it), and an RC
// pair on the real engine through libibverbs alone (loopback).
func TestCLibraries(t *testing.T) {
	lib := requireLibs(t)
	root := moduleRoot(t)
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"ibverbs-symbols", []string{"abi/ibverbs/check-symbols.sh", lib}},
		{"rdmacm-symbols", []string{"abi/rdmacm/check-symbols.sh", lib}},
		{"ibverbs-fake-engine", []string{"abi/ibverbs/testfake/run.sh"}},
		{"rdmacm-fake-engine", []string{"abi/rdmacm/testfake/run.sh"}},
		{"ibverbs-loopback", []string{"abi/ibverbs/test/run.sh"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, "sh", tc.args...)
			cmd.Dir = root
			cmd.Env = append(cmd.Environ(), "LD_LIBRARY_PATH="+lib)
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("%s: %v\n%s", filepath.Base(tc.args[0]), err, out)
			}
			lines := strings.Split(strings.TrimSpace(string(out)), "\n")
			t.Log(lines[len(lines)-1])
		})
	}
}
