package main

import (
	"io"
	"slices"
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
