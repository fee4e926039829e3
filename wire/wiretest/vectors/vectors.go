// Package vectors reads the golden test vectors of wire/testdata/vectors.txt
// for the tests of the wire packages and of atomics.
//
// The vectors live in one text file so that a reader can check them against
// their sources (docs/spec/vectors.md) without reading Go. The file format
// is documented at its top. Every accessor takes a testing.TB and fails the
// test when a vector or field is missing: a vector test never skips.
//
// The package imports only the standard library, so the internal tests of
// mpa, ddp, rdmap and term can use it (package wiretest imports those).
package vectors

import (
	"bufio"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

// Path is the vectors file relative to the module root.
const Path = "wire/testdata/vectors.txt"

// kinds lists the fields each kind of vector must have, and no others.
var kinds = map[string][]string{
	"crc32c":         {"in", "crc", "wire"},
	"crc32c-residue": {"crc"},
	"fpdu":           {"bytes"},
	"fpdu-nocrc":     {"bytes"},
	"fpdu-markers":   {"bytes", "crc"},
	"mpa-frame":      {"bytes"},
	"fetchadd":       {"o", "a", "m", "n"},
	"cmpswap":        {"o", "c", "cm", "s", "sm", "n", "match"},
}

// Vector is one entry of the file.
type Vector struct {
	Name   string
	Kind   string
	Source string
	Line   int // line of its "vector" line
	fields map[string][]byte
}

// Parse reads a vectors file. It is strict: anything it does not
// understand is an error, so a typo cannot silently drop a vector.
func Parse(r io.Reader) ([]Vector, error) {
	var (
		out  []Vector
		cur  *Vector
		last string // field that an indented line continues
		seen = map[string]bool{}
	)
	finish := func() error {
		if cur == nil {
			return nil
		}
		if cur.Source == "" {
			return fmt.Errorf("line %d: vector %s has no source", cur.Line, cur.Name)
		}
		for _, f := range kinds[cur.Kind] {
			if _, ok := cur.fields[f]; !ok {
				return fmt.Errorf("line %d: vector %s (%s) lacks field %q", cur.Line, cur.Name, cur.Kind, f)
			}
		}
		out = append(out, *cur)
		cur = nil
		return nil
	}
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		if trimmed == "" || strings.HasPrefix(trimmed, "#") {
			last = ""
			continue
		}
		if line[0] == ' ' || line[0] == '\t' {
			if cur == nil || last == "" {
				return nil, fmt.Errorf("line %d: continuation without a field", n)
			}
			b, err := decodeHex(trimmed)
			if err != nil {
				return nil, fmt.Errorf("line %d: %s: %v", n, last, err)
			}
			cur.fields[last] = append(cur.fields[last], b...)
			continue
		}
		key, rest, _ := strings.Cut(trimmed, " ")
		rest = strings.TrimSpace(rest)
		last = ""
		switch key {
		case "vector":
			if err := finish(); err != nil {
				return nil, err
			}
			name, kind, ok := strings.Cut(rest, " ")
			kind = strings.TrimSpace(kind)
			if !ok || name == "" || strings.ContainsAny(kind, " \t") {
				return nil, fmt.Errorf("line %d: want \"vector NAME KIND\"", n)
			}
			if _, ok := kinds[kind]; !ok {
				return nil, fmt.Errorf("line %d: unknown kind %q", n, kind)
			}
			if seen[name] {
				return nil, fmt.Errorf("line %d: duplicate vector %s", n, name)
			}
			seen[name] = true
			cur = &Vector{Name: name, Kind: kind, Line: n, fields: map[string][]byte{}}
		case "source":
			if cur == nil || cur.Source != "" || rest == "" {
				return nil, fmt.Errorf("line %d: want one non-empty source per vector", n)
			}
			cur.Source = rest
		default:
			if cur == nil {
				return nil, fmt.Errorf("line %d: field %q outside a vector", n, key)
			}
			if !slices.Contains(kinds[cur.Kind], key) {
				return nil, fmt.Errorf("line %d: kind %s has no field %q", n, cur.Kind, key)
			}
			if _, dup := cur.fields[key]; dup {
				return nil, fmt.Errorf("line %d: duplicate field %q", n, key)
			}
			b, err := decodeHex(rest)
			if err != nil {
				return nil, fmt.Errorf("line %d: %s: %v", n, key, err)
			}
			cur.fields[key] = b
			last = key
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if err := finish(); err != nil {
		return nil, err
	}
	return out, nil
}

func decodeHex(s string) ([]byte, error) {
	s = strings.Join(strings.Fields(s), "")
	if s == "" {
		return nil, errors.New("no bytes")
	}
	return hex.DecodeString(s)
}

var load struct {
	once sync.Once
	v    []Vector
	err  error
}

// Load reads and parses the module's vectors file once per process. The
// file is found from the working directory upwards (go test runs in the
// package directory).
func Load() ([]Vector, error) {
	load.once.Do(func() {
		load.v, load.err = loadFile()
	})
	return load.v, load.err
}

func loadFile() ([]Vector, error) {
	dir, err := os.Getwd()
	if err != nil {
		return nil, err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			break
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return nil, errors.New("vectors: no go.mod above the working directory")
		}
		dir = parent
	}
	f, err := os.Open(filepath.Join(dir, Path))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	v, err := Parse(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", Path, err)
	}
	return v, nil
}

func all(t testing.TB) []Vector {
	t.Helper()
	v, err := Load()
	if err != nil {
		t.Fatalf("test vectors: %v", err)
	}
	return v
}

// Get returns the vector called name; the test fails if there is none.
func Get(t testing.TB, name string) Vector {
	t.Helper()
	for _, v := range all(t) {
		if v.Name == name {
			return v
		}
	}
	t.Fatalf("test vector %s missing from %s", name, Path)
	return Vector{}
}

// Kind returns the vectors of kind in the order of names, and fails the
// test unless names are exactly the vectors of that kind in the file: a
// vector the test does not know about fails it as much as a missing one.
func Kind(t testing.TB, kind string, names ...string) []Vector {
	t.Helper()
	var have []string
	for _, v := range all(t) {
		if v.Kind == kind {
			have = append(have, v.Name)
		}
	}
	want := slices.Clone(names)
	slices.Sort(have)
	slices.Sort(want)
	if !slices.Equal(have, want) {
		t.Fatalf("%s vectors in %s: %v; the test knows %v", kind, Path, have, want)
	}
	out := make([]Vector, len(names))
	for i, n := range names {
		out[i] = Get(t, n)
	}
	return out
}

// Bytes returns a copy of the field; the test fails if it is missing.
func (v Vector) Bytes(t testing.TB, field string) []byte {
	t.Helper()
	b, ok := v.fields[field]
	if !ok {
		t.Fatalf("test vector %s has no field %q", v.Name, field)
	}
	return slices.Clone(b)
}

func (v Vector) sized(t testing.TB, field string, n int) []byte {
	t.Helper()
	b := v.Bytes(t, field)
	if len(b) != n {
		t.Fatalf("test vector %s: field %q has %d bytes, want %d", v.Name, field, len(b), n)
	}
	return b
}

// Uint32 returns a 4-byte big-endian field.
func (v Vector) Uint32(t testing.TB, field string) uint32 {
	t.Helper()
	return binary.BigEndian.Uint32(v.sized(t, field, 4))
}

// Uint64 returns an 8-byte big-endian field.
func (v Vector) Uint64(t testing.TB, field string) uint64 {
	t.Helper()
	return binary.BigEndian.Uint64(v.sized(t, field, 8))
}

// Bool returns a 1-byte field that must be 00 or 01.
func (v Vector) Bool(t testing.TB, field string) bool {
	t.Helper()
	b := v.sized(t, field, 1)[0]
	if b > 1 {
		t.Fatalf("test vector %s: field %q is %#x, want 00 or 01", v.Name, field, b)
	}
	return b == 1
}

// FPDU returns the bytes of the fpdu or fpdu-nocrc vector name after
// checking that its length matches its ULPDU_Length (2 + n + pad + 4).
func FPDU(t testing.TB, name string) []byte {
	t.Helper()
	v := Get(t, name)
	if v.Kind != "fpdu" && v.Kind != "fpdu-nocrc" {
		t.Fatalf("test vector %s is %s, not an FPDU", name, v.Kind)
	}
	b := v.Bytes(t, "bytes")
	if len(b) < 2 {
		t.Fatalf("test vector %s: %d bytes", name, len(b))
	}
	l := int(b[0])<<8 | int(b[1])
	if pad := (4 - (2+l)%4) % 4; len(b) != 2+l+pad+4 {
		t.Fatalf("test vector %s: FPDU length %d does not match ULPDU_Length %d", name, len(b), l)
	}
	return b
}

// ULPDU returns the ULPDU (one DDP segment) of the FPDU vector name: bytes
// 2 .. 2+ULPDU_Length.
func ULPDU(t testing.TB, name string) []byte {
	t.Helper()
	b := FPDU(t, name)
	return b[2 : 2+(int(b[0])<<8|int(b[1]))]
}
