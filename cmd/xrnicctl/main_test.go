package main

import (
	"io"
	"slices"
	"strings"
	"testing"
)

func TestParseNum(t *testing.T) {
	cases := []struct {
		in   string
		want uint64
		ok   bool
	}{
		{"0", 0, true}, {"42", 42, true}, {"0x2A", 42, true}, {"-1", ^uint64(0), true},
		{"-0x2", ^uint64(1), true}, {"010", 10, true}, {"0xffffffffffffffff", ^uint64(0), true},
		{"", 0, false}, {"-", 0, false}, {"0x", 0, false}, {"12a", 0, false}, {"18446744073709551616", 0, false},
	}
	for _, c := range cases {
		got, err := parseNum("N", c.in)
		if (err == nil) != c.ok || (c.ok && got != c.want) {
			t.Errorf("parseNum(%q) = %#x, %v; want %#x ok=%v", c.in, got, err, c.want, c.ok)
		}
	}
}

func TestParseInterleaved(t *testing.T) {
	c, pos, err := parse([]string{"fetchadd", "-j", "h:1", "--mask", "0x80", "0x10", "0", "-5", "--socket", "/s"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if !c.json || c.mask != "0x80" || c.socket != "/s" || !slices.Equal(pos, []string{"fetchadd", "h:1", "0x10", "0", "-5"}) {
		t.Fatalf("parsed %+v %q", c, pos)
	}
	c, pos, err = parse([]string{"imm", "h:1", "7", "--write", "0x1", "0", "ab"}, io.Discard)
	if err != nil || !slices.Equal(c.write, []string{"0x1", "0", "ab"}) || !slices.Equal(pos, []string{"imm", "h:1", "7"}) {
		t.Fatalf("imm --write: %+v %q %v", c, pos, err)
	}
	if _, _, err := parse([]string{"imm", "h:1", "7", "--write", "1"}, io.Discard); err == nil {
		t.Fatal("short --write accepted")
	}
	if code := run([]string{"fetchadd", "h:1"}, io.Discard, io.Discard); code != 2 {
		t.Fatalf("usage error exit %d", code)
	}
	if code := run([]string{"--socket", "/nonexistent/x.sock", "status"}, io.Discard, io.Discard); code != 1 {
		t.Fatalf("unreachable daemon exit %d", code)
	}
	if code := run([]string{"--transport", "afxdp", "--iface", "lo", "probe", "127.0.0.1:1"}, io.Discard, io.Discard); code != 1 {
		t.Fatalf("afxdp exit %d", code)
	}
}

// TestPeerAddr: PEER may leave out the port; it is xrnicd's default 7306.
func TestPeerAddr(t *testing.T) {
	for in, want := range map[string]string{
		"10.0.0.1": "10.0.0.1:7306", "10.0.0.1:9": "10.0.0.1:9", "host": "host:7306", "host:7000": "host:7000",
		"::1": "[::1]:7306", "[::1]": "[::1]:7306", "[::1]:9": "[::1]:9", "fe80::1%eth0": "[fe80::1%eth0]:7306",
	} {
		if got := peerAddr(in); got != want {
			t.Errorf("peerAddr(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestUsageErrorLast: a usage error is the last thing printed, once, after
// the commands but not the ~40 lines of options; enumerated options list
// their values.
func TestUsageErrorLast(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--bogus", "status"}, "xrnicctl: flag provided but not defined: -bogus"},
		{[]string{"--transport", "dpdk", "probe", "h"}, `xrnicctl: --transport "dpdk": want kernel or afxdp`},
		{[]string{"--mpa-rev", "3", "probe", "h"}, "xrnicctl: --mpa-rev 3: want 2 (RFC 6581) or 1 (RFC 5044)"},
		{[]string{"fetchadd", "h"}, "xrnicctl: fetchadd: want PEER STAG TO ADD [--mask M]"},
	} {
		var stderr strings.Builder
		code := run(c.args, io.Discard, &stderr)
		lines := strings.Split(strings.TrimSuffix(stderr.String(), "\n"), "\n")
		if code != 2 || len(lines) < 2 || lines[len(lines)-2] != c.want || lines[len(lines)-1] != "run xrnicctl --help for the options" ||
			strings.Count(stderr.String(), c.want) != 1 || strings.Contains(stderr.String(), "-socket path") || len(lines) > 16 {
			t.Errorf("xrnicctl %v: exit %d, stderr\n%s\nwant exit 2 ending in %q and the --help hint", c.args, code, stderr.String(), c.want)
		}
	}
	var stderr strings.Builder
	if code := run([]string{"--help"}, io.Discard, &stderr); code != 0 || !strings.Contains(stderr.String(), "-socket path") {
		t.Errorf("--help: exit %d:\n%s", code, stderr.String())
	}
}

// TestHelpVersionCompletion: per-command help (help CMD and CMD --help),
// --version and the shell completion scripts.
func TestHelpVersionCompletion(t *testing.T) {
	for _, args := range [][]string{{"help", "fetchadd"}, {"fetchadd", "--help"}, {"fetchadd", "-h"}} {
		var stderr strings.Builder
		if code := run(args, io.Discard, &stderr); code != 0 || !strings.Contains(stderr.String(), "-m, --mask M") ||
			!strings.Contains(stderr.String(), "--socket path") {
			t.Errorf("xrnicctl %v: exit %d:\n%s", args, code, stderr.String())
		}
	}
	var stdout strings.Builder
	if code := run([]string{"--version"}, &stdout, io.Discard); code != 0 || !strings.HasPrefix(stdout.String(), "xrnicctl version ") {
		t.Errorf("--version: exit %d: %q", code, stdout.String())
	}
	for sh, want := range map[string]string{"bash": "complete -o default -F __start_xrnicctl xrnicctl", "zsh": "#compdef xrnicctl", "fish": "complete -c xrnicctl"} {
		stdout.Reset()
		if code := run([]string{"completion", sh}, &stdout, io.Discard); code != 0 || !strings.Contains(stdout.String(), want) {
			t.Errorf("completion %s: exit %d, no %q", sh, code, want)
		}
	}
	// -m is --mask; a negative value right after it is its value.
	c, pos, err := parse([]string{"fetchadd", "-m", "-1", "h", "1", "0", "-2"}, io.Discard)
	if err != nil || c.mask != "-1" || !slices.Equal(pos, []string{"fetchadd", "h", "1", "0", "-2"}) {
		t.Errorf("fetchadd -m -1: %+v %q %v", c, pos, err)
	}
	if _, _, err := parse([]string{"fetchadd", "--swap-mask", "1", "h", "1", "0", "2"}, io.Discard); err == nil {
		t.Error("fetchadd --swap-mask accepted")
	}
}
