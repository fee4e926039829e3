package main

import (
	"strings"
	"testing"
	"time"

	"xrnic/internal/daemontest"
)

func TestMain(m *testing.M) { daemontest.Main(m) }

// TestRefusalsAreErrors: write, send and imm report the peer's refusal
// (its Terminate) and exit non-zero, where they once printed success
// because the work request completed locally; accepted operations still
// succeed. Runs against a real xrnicd on loopback, unprivileged.
func TestRefusalsAreErrors(t *testing.T) {
	if testing.Short() { // -short: not about the machine
		t.Skip("starts xrnicd")
	}
	d := daemontest.Start(t, daemontest.Options{Args: []string{"--listen", "127.0.0.1:0", "--metrics", "off",
		"--region", "scratch:4K:rw", "--sink-buffer", "8K", "--hugepages", "off"}})
	defer d.Stop(t, 20*time.Second)
	r := d.Regions["scratch"]
	peer := d.Listen
	ok := func(args ...string) {
		t.Helper()
		if out, err := d.Ctl.Run(args...); err != nil {
			t.Fatalf("xrnicctl %v: %v\n%s", args, err, out)
		}
	}
	refused := func(want string, args ...string) {
		t.Helper()
		out, err := d.Ctl.Run(args...)
		if err == nil {
			t.Fatalf("xrnicctl %v succeeded (%q); want the peer's refusal", args, out)
		}
		if msg := err.Error(); !strings.Contains(msg, "refused") || !strings.Contains(msg, want) {
			t.Fatalf("xrnicctl %v: %v; want it to say the peer refused it (%s)", args, err, want)
		}
	}
	ok("write", peer, r.STag, "0xff0", "aabb")
	refused("Terminate", "write", peer, r.STag, "0xfff", "aabb")   // one byte past the end
	refused("Terminate", "write", peer, "0x00000000", "0", "aabb") // no such STag
	ok("send", peer, "hello")
	refused("Terminate", "send", peer, strings.Repeat("x", 9000)) // longer than the 8 KiB sink buffer
	ok("imm", peer, "42")
	refused("Terminate", "imm", peer, "42", "--write", r.STag, "0xfff", "aabb")
}
