package vectors

import (
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	in := `# comment
vector a fpdu
source somewhere
bytes 00 0e c1 40
      00 00 00 01  0000000000000000
	eb d3 4c 5f

vector b cmpswap
source elsewhere
o 0000000000000001
c 0000000000000002
cm 0000000000000003
s 0000000000000004
sm 0000000000000005
n 0000000000000006
match 01
`
	v, err := Parse(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if len(v) != 2 || v[0].Name != "a" || v[0].Kind != "fpdu" || v[0].Source != "somewhere" || v[0].Line != 2 ||
		v[1].Name != "b" || v[1].Line != 8 {
		t.Fatalf("%+v", v)
	}
	if got := v[0].Bytes(t, "bytes"); len(got) != 20 || got[0] != 0x00 || got[2] != 0xc1 || got[7] != 0x01 || got[19] != 0x5f {
		t.Fatalf("bytes % x", got)
	}
	if v[1].Uint64(t, "sm") != 5 || !v[1].Bool(t, "match") {
		t.Fatal("cmpswap fields")
	}
	// Bytes hands out copies.
	v[0].Bytes(t, "bytes")[0] = 0xFF
	if v[0].Bytes(t, "bytes")[0] != 0 {
		t.Fatal("Bytes shares the stored slice")
	}
}

func TestParseErrors(t *testing.T) {
	head := "vector a fpdu\nsource s\n"
	for _, tt := range []struct{ name, in, want string }{
		{"no source", "vector a fpdu\nbytes 00\n", "no source"},
		{"two sources", head + "source t\nbytes 00\n", "one non-empty source"},
		{"empty source", "vector a fpdu\nsource\nbytes 00\n", "one non-empty source"},
		{"missing field", head, `lacks field "bytes"`},
		{"unknown field", head + "bytes 00\nwire 00\n", `has no field "wire"`},
		{"duplicate field", head + "bytes 00\nbytes 01\n", "duplicate field"},
		{"unknown kind", "vector a frame\nsource s\n", "unknown kind"},
		{"no kind", "vector a\n", "vector NAME KIND"},
		{"extra word", "vector a fpdu x\n", "vector NAME KIND"},
		{"duplicate name", head + "bytes 00\n" + head + "bytes 00\n", "duplicate vector a"},
		{"odd digits", head + "bytes 0\n", "bytes"},
		{"not hex", head + "bytes zz\n", "bytes"},
		{"no bytes", head + "bytes\n", "no bytes"},
		{"continuation first", "  00\n", "continuation without a field"},
		{"continuation after source", head + "  00\n", "continuation without a field"},
		{"continuation after blank", head + "bytes 00\n\n  00\n", "continuation without a field"},
		{"field outside", "bytes 00\n", "outside a vector"},
	} {
		_, err := Parse(strings.NewReader(tt.in))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: err %v, want %q", tt.name, err, tt.want)
		}
	}
}

// TestFile loads the repository's file: it parses, every vector names a
// source, and every FPDU's length agrees with its ULPDU_Length.
func TestFile(t *testing.T) {
	v, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]int{}
	for _, x := range v {
		kinds[x.Kind]++
		if x.Kind == "fpdu" || x.Kind == "fpdu-nocrc" {
			FPDU(t, x.Name)
		}
	}
	for k := range map[string]bool{"crc32c": true, "fpdu": true, "fpdu-markers": true, "mpa-frame": true, "fetchadd": true, "cmpswap": true} {
		if kinds[k] == 0 {
			t.Errorf("no %s vectors", k)
		}
	}
}
