package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestConfig(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "xrnic.conf")
	os.WriteFile(path, []byte("# comment\nXRNIC_TRANSPORT = afxdp\n\nXRNIC_IFACE=veth0\nXRNIC_DEBUG=1\n"), 0o644)
	t.Setenv("XRNIC_CONFIG", path)
	t.Setenv("XRNIC_IFACE", "eth9") // the environment wins
	for _, k := range []string{"XRNIC_TRANSPORT", "XRNIC_DEBUG"} {
		t.Setenv(k, "") // restored afterwards
		os.Unsetenv(k)
	}
	cfg, err := config()
	if err != nil {
		t.Fatal(err)
	}
	if cfg["XRNIC_TRANSPORT"] != "afxdp" || cfg["XRNIC_IFACE"] != "eth9" || cfg["XRNIC_DEBUG"] != "1" {
		t.Fatalf("config %v", cfg)
	}
	os.WriteFile(path, []byte("XRNIC_TRANSPROT=afxdp\n"), 0o644)
	if _, err := config(); err == nil || !strings.Contains(err.Error(), "unknown key XRNIC_TRANSPROT") {
		t.Fatalf("misspelt key: %v", err)
	}
	os.WriteFile(path, []byte("afxdp\n"), 0o644)
	if _, err := config(); err == nil || !strings.Contains(err.Error(), "KEY=VALUE") {
		t.Fatalf("line without =: %v", err)
	}
	t.Setenv("XRNIC_CONFIG", filepath.Join(dir, "missing"))
	if _, err := config(); err == nil {
		t.Fatal("missing XRNIC_CONFIG file accepted")
	}
}

func TestPickIface(t *testing.T) {
	ifi, err := pickIface("")
	if err != nil {
		t.Fatal(err)
	}
	if ifi.Name == "" {
		t.Fatal("no interface picked")
	}
	if _, err := pickIface("no-such-if0"); err == nil || !strings.Contains(err.Error(), "XRNIC_IFACE=no-such-if0") {
		t.Fatalf("unknown interface: %v", err)
	}
}
