package deploy

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"xrnic/internal/daemontest"
	"xrnic/internal/require"
)

const (
	unitPath     = "systemd/xrnicd.service"
	sysusersPath = "systemd/xrnicd.sysusers"
	sysctlPath   = "systemd/xrnicd-hugepages.conf"
	// maxExposure is `systemd-analyze security --offline=true` of the
	// unit as hardened (2.3 with systemd 252; 4.7 before): a change that
	// loosens the unit fails here.
	maxExposure = 2.3
)

func systemdAnalyze(t *testing.T) string {
	t.Helper()
	// No systemd as PID 1 is needed.
	return require.Tool(t, "systemd-analyze", "systemd")
}

// unitLines are the key=value lines of the unit, comments left out.
func unitLines(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(unitPath)
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, l := range strings.Split(string(b), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			lines = append(lines, l)
		}
	}
	return lines
}

// TestSystemdUnitVerify: systemd-analyze verify finds nothing to say about
// the unit, with ExecStart pointing at a built xrnicd (verify checks that
// the binary exists). Unknown keys and bad values are only warnings, with
// exit status 0: any output naming the unit fails.
func TestSystemdUnitVerify(t *testing.T) {
	sa := systemdAnalyze(t)
	b, err := os.ReadFile(unitPath)
	if err != nil {
		t.Fatal(err)
	}
	const exec0 = "ExecStart=/usr/local/bin/xrnicd "
	if !strings.Contains(string(b), exec0) {
		t.Fatalf("%s: no %q line", unitPath, exec0)
	}
	unit := filepath.Join(t.TempDir(), "xrnicd.service")
	text := strings.Replace(string(b), exec0, "ExecStart="+daemontest.Build(t).Xrnicd+" ", 1)
	if err := os.WriteFile(unit, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(sa, "verify", unit).CombinedOutput()
	t.Logf("systemd-analyze verify %s: %v\n%s", unitPath, err, out)
	if err != nil {
		t.Errorf("systemd-analyze verify %s failed: %v", unitPath, err)
	}
	for _, l := range strings.Split(string(out), "\n") {
		if strings.Contains(l, unit) {
			t.Errorf("systemd-analyze verify %s: %s", unitPath, strings.ReplaceAll(l, unit, unitPath))
		}
	}
}

// TestSystemdUnitSecurity logs the unit's exposure score and fails when it
// rises above maxExposure.
func TestSystemdUnitSecurity(t *testing.T) {
	sa := systemdAnalyze(t)
	ver, _ := exec.Command(sa, "--version").Output()
	if m := regexp.MustCompile(`^systemd (\d+)`).FindSubmatch(ver); m != nil {
		if n, _ := strconv.Atoi(string(m[1])); n < 252 {
			require.Unavailable(t, "systemd-analyze security --offline needs systemd >= 252, have %s (Debian 12 has 252)", m[1])
		}
	}
	out, err := exec.Command(sa, "security", "--offline=true", "--no-pager", unitPath).CombinedOutput()
	if err != nil {
		t.Fatalf("systemd-analyze security --offline=true %s: %v\n%s", unitPath, err, out)
	}
	m := regexp.MustCompile(`Overall exposure level for \S+: (\d+\.\d+)`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("no overall exposure level in:\n%s", out)
	}
	score, _ := strconv.ParseFloat(string(m[1]), 64)
	t.Logf("systemd-analyze security --offline=true %s: exposure %.1f (at most %.1f)", unitPath, score, maxExposure)
	if score > maxExposure {
		t.Errorf("exposure %.1f is above %.1f: the unit lost hardening\n%s", score, maxExposure, out)
	}
}

// TestSystemdUnitFiles checks what the unit promises against its companion
// files: readiness by sd_notify, the user from sysusers.d, hugepages from
// sysctl.d instead of a reservation at each start, no bpffs access (the
// afxdp transport pins nothing).
func TestSystemdUnitFiles(t *testing.T) {
	keys := map[string]string{}
	for _, l := range unitLines(t) {
		if k, v, ok := strings.Cut(l, "="); ok {
			if k == "ExecStartPre" {
				t.Errorf("%s: %s (hugepages come from %s)", unitPath, l, sysctlPath)
			}
			if strings.Contains(v, "/sys/fs/bpf") {
				t.Errorf("%s: %s (nothing is pinned under /sys/fs/bpf)", unitPath, l)
			}
			keys[k] = v
		}
	}
	for k, want := range map[string]string{"Type": "notify", "User": "xrnic", "Group": "xrnic", "RuntimeDirectory": "xrnic",
		"AmbientCapabilities": "CAP_BPF CAP_PERFMON CAP_NET_ADMIN CAP_NET_RAW CAP_IPC_LOCK"} {
		if keys[k] != want {
			t.Errorf("%s: %s=%q, want %q", unitPath, k, keys[k], want)
		}
	}
	if keys["CapabilityBoundingSet"] != keys["AmbientCapabilities"] {
		t.Errorf("%s: CapabilityBoundingSet=%q differs from AmbientCapabilities=%q", unitPath, keys["CapabilityBoundingSet"], keys["AmbientCapabilities"])
	}

	b, err := os.ReadFile(sysusersPath)
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^u xrnic - "[^"]+"`).Match(b) {
		t.Errorf("%s: no `u xrnic - \"...\"` line (sysusers.d(5)) for User=xrnic:\n%s", sysusersPath, b)
	}
	// A subtest: without systemd-sysusers only it skips (fails under CI).
	t.Run("sysusers-dry-run", func(t *testing.T) {
		p := require.Tool(t, "systemd-sysusers", "systemd")
		// --dry-run parses the file and writes nothing.
		abs, _ := filepath.Abs(sysusersPath) // a relative name is looked up in sysusers.d
		out, err := exec.Command(p, "--dry-run", abs).CombinedOutput()
		if err != nil || strings.Contains(string(out), "ignoring") {
			t.Errorf("systemd-sysusers --dry-run %s: %v\n%s", sysusersPath, err, out)
		}
	})

	b, err = os.ReadFile(sysctlPath)
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^vm\.nr_hugepages = (\d+)$`).FindSubmatch(b)
	if m == nil {
		t.Fatalf("%s: no `vm.nr_hugepages = N` line", sysctlPath)
	}
	if n, _ := strconv.Atoi(string(m[1])); n < 9 {
		t.Errorf("%s: vm.nr_hugepages = %d, the regions of systemd/xrnicd.conf need 9 2-MiB pages", sysctlPath, n)
	}
}
