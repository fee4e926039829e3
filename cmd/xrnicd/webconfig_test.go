package main

import (
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"xrnic/internal/daemontest"
)

// TestWebConfigFile: --web.config.file puts basic auth on the metrics
// server, and a file that cannot be read fails start-up naming the flag.
func TestWebConfigFile(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing.yml")
	out, err := exec.Command(daemontest.Build(t).Xrnicd, "--listen", "127.0.0.1:0", "--metrics", "127.0.0.1:0",
		"--socket", filepath.Join(dir, "x.sock"), "--web.config.file", missing).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "--web.config.file "+missing) {
		t.Errorf("missing web config: %v\n%s", err, out)
	}

	hash, err := bcrypt.GenerateFromPassword([]byte("s3cret"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "web.yml")
	if err := os.WriteFile(cfg, []byte("basic_auth_users:\n  prometheus: "+string(hash)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	d := daemontest.Start(t, daemontest.Options{Args: []string{"--listen", "127.0.0.1:0", "--metrics", "127.0.0.1:0", "--web.config.file", cfg}})
	get := func(user, pass string) int {
		req, _ := http.NewRequest("GET", "http://"+d.Metrics+"/metrics", nil)
		if user != "" {
			req.SetBasicAuth(user, pass)
		}
		resp, err := (&http.Client{Timeout: 5 * time.Second}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := get("", ""); code != http.StatusUnauthorized {
		t.Errorf("without credentials: %d, want 401", code)
	}
	if code := get("prometheus", "s3cret"); code != http.StatusOK {
		t.Errorf("with credentials: %d, want 200", code)
	}
	d.Stop(t, 20*time.Second)
}
