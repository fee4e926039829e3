package main

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"

	"xrnic/internal/require"
	"xrnic/wire/wiretest"
)

// The tour writes the capture, stays under 60 lines, and its exit status
// follows the cross-check: 0 for the canonical session, 1 with a damaged
// CRC (when tshark is installed).
func TestTour(t *testing.T) {
	dir := t.TempDir()
	var out bytes.Buffer
	code := run(&out, filepath.Join(dir, "tour.pcap"), 1, 0)
	lines := strings.Count(out.String(), "\n")
	if code != 0 || lines >= 60 || !strings.Contains(out.String(), "Atomic Request FetchAdd") {
		t.Fatalf("exit %d, %d lines:\n%s", code, lines, out.String())
	}
	_, err := wiretest.FindTshark()
	require.NoError(t, err, "the rest needs tshark")
	if !strings.Contains(out.String(), "summary: 14 of 14 groups agree") {
		t.Errorf("no full agreement:\n%s", out.String())
	}
	out.Reset()
	if code := run(&out, filepath.Join(dir, "bad.pcap"), 1, 3); code != 1 || !strings.Contains(out.String(), "DIFFER") {
		t.Errorf("corrupted CRC: exit %d\n%s", code, out.String())
	}
}
