package hugetest

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unsafe"
)

// Mapping is one VMA of /proc/PID/smaps. Sizes are in bytes.
type Mapping struct {
	Start, End     uint64
	Perms          string // "rw-p"
	Path           string // "/anon_hugepage (deleted)", "/memfd:xrnic (deleted)", "" for anonymous memory
	KernelPageSize int    // the page size backing the VMA: 2 MiB or 1 GiB for hugetlb
	MMUPageSize    int
	Rss            int64 // resident, hugetlb pages excluded
	AnonHugePages  int64 // anonymous memory on transparent hugepages
	ShmemPmdMapped int64 // shmem (memfd) memory mapped by transparent hugepages
	FilePmdMapped  int64
	PrivateHugetlb int64 // hugetlb pages faulted in and mapped by this process only
	SharedHugetlb  int64 // hugetlb pages faulted in and mapped by others too
	VmFlags        []string
}

// Size is the length of the VMA.
func (m Mapping) Size() int64 { return int64(m.End - m.Start) }

// Flag reports whether VmFlags has f (proc(5): ht hugetlb, hg
// MADV_HUGEPAGE, nr no space reserved, sd soft-dirty, ...).
func (m Mapping) Flag(f string) bool { return slices.Contains(m.VmFlags, f) }

// Hugetlb reports whether hugetlb pages back the VMA.
func (m Mapping) Hugetlb() bool { return m.Flag("ht") }

// HugetlbBytes is the hugetlb memory faulted in.
func (m Mapping) HugetlbBytes() int64 { return m.PrivateHugetlb + m.SharedHugetlb }

// THPBytes is the memory mapped by transparent hugepages.
func (m Mapping) THPBytes() int64 { return m.AnonHugePages + m.ShmemPmdMapped + m.FilePmdMapped }

func (m Mapping) String() string {
	return fmt.Sprintf("%x-%x %s %q (%s): KernelPageSize %d kB, Rss %d kB, AnonHugePages %d kB, ShmemPmdMapped %d kB, Private_Hugetlb %d kB, Shared_Hugetlb %d kB, VmFlags %s",
		m.Start, m.End, m.Perms, m.Path, SizeName(int(m.Size())), m.KernelPageSize>>10, m.Rss>>10, m.AnonHugePages>>10, m.ShmemPmdMapped>>10,
		m.PrivateHugetlb>>10, m.SharedHugetlb>>10, strings.Join(m.VmFlags, " "))
}

func procDir(pid int) string {
	if pid == 0 {
		return "/proc/self"
	}
	return "/proc/" + strconv.Itoa(pid)
}

// Mappings reads /proc/PID/smaps (pid 0: this process). A process that is
// gone gives an error satisfying errors.Is(err, fs.ErrNotExist).
func Mappings(pid int) ([]Mapping, error) {
	b, err := os.ReadFile(procDir(pid) + "/smaps")
	if err != nil {
		return nil, err
	}
	if len(b) == 0 && pid != 0 {
		// A process that exited but is not reaped yet has no mm.
		return nil, fmt.Errorf("%s/smaps is empty (the process exited): %w", procDir(pid), fs.ErrNotExist)
	}
	return ParseSmaps(b)
}

// ParseSmaps parses the text of /proc/PID/smaps.
func ParseSmaps(b []byte) ([]Mapping, error) {
	var ms []Mapping
	for n, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if !strings.HasSuffix(f[0], ":") {
			// 7f0000000000-7f0000600000 rw-p 00000000 00:10 1234 /anon_hugepage (deleted)
			lo, hi, ok := strings.Cut(f[0], "-")
			if !ok || len(f) < 5 {
				return nil, fmt.Errorf("smaps line %d: %q", n+1, line)
			}
			var m Mapping
			var e1, e2 error
			m.Start, e1 = strconv.ParseUint(lo, 16, 64)
			m.End, e2 = strconv.ParseUint(hi, 16, 64)
			if e1 != nil || e2 != nil {
				return nil, fmt.Errorf("smaps line %d: %q", n+1, line)
			}
			m.Perms = f[1]
			// The path is what follows the inode (the fifth field),
			// spaces included.
			rest := line
			for range 5 {
				rest = strings.TrimLeft(rest, " ")
				if i := strings.IndexByte(rest, ' '); i >= 0 {
					rest = rest[i:]
				} else {
					rest = ""
				}
			}
			m.Path = strings.TrimSpace(rest)
			ms = append(ms, m)
			continue
		}
		if len(ms) == 0 {
			return nil, fmt.Errorf("smaps line %d before any mapping: %q", n+1, line)
		}
		m := &ms[len(ms)-1]
		key := strings.TrimSuffix(f[0], ":")
		if key == "VmFlags" {
			m.VmFlags = f[1:]
			continue
		}
		if len(f) != 3 || f[2] != "kB" {
			continue // THPeligible, ProtectionKey: not sizes
		}
		kb, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("smaps line %d: %q", n+1, line)
		}
		v := kb << 10
		switch key {
		case "KernelPageSize":
			m.KernelPageSize = int(v)
		case "MMUPageSize":
			m.MMUPageSize = int(v)
		case "Rss":
			m.Rss = v
		case "AnonHugePages":
			m.AnonHugePages = v
		case "ShmemPmdMapped":
			m.ShmemPmdMapped = v
		case "FilePmdMapped":
			m.FilePmdMapped = v
		case "Private_Hugetlb":
			m.PrivateHugetlb = v
		case "Shared_Hugetlb":
			m.SharedHugetlb = v
		}
	}
	return ms, nil
}

// MappingOf returns this process's VMA that holds all of b (a region's
// bytes), failing the test if there is none.
func MappingOf(t testing.TB, b []byte) Mapping {
	t.Helper()
	if len(b) == 0 {
		t.Fatal("hugetest: MappingOf an empty slice")
	}
	lo := uint64(uintptr(unsafe.Pointer(unsafe.SliceData(b))))
	hi := lo + uint64(len(b))
	ms, err := Mappings(0)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		if m.Start <= lo && lo < m.End {
			if hi > m.End {
				t.Fatalf("hugetest: %x-%x spans more than the VMA %v", lo, hi, m)
			}
			return m
		}
	}
	t.Fatalf("hugetest: no VMA of this process holds %x", lo)
	return Mapping{}
}

// MappingStartingWith returns the one VMA of process pid whose first bytes
// are marker: a test writes a random marker at offset 0 of a region of
// another process (a daemon's region, through the wire) to find its VMA.
// Only VMAs with memory faulted in are read (/proc/PID/mem; root), so the
// search itself maps nothing new.
func MappingStartingWith(t testing.TB, pid int, marker []byte) Mapping {
	t.Helper()
	if len(marker) < 8 {
		t.Fatalf("hugetest: a marker of %d bytes is too short to be unique", len(marker))
	}
	ms, err := Mappings(pid)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(procDir(pid) + "/mem")
	if err != nil {
		t.Fatalf("hugetest: %v", err)
	}
	defer f.Close()
	var found []Mapping
	buf := make([]byte, len(marker))
	for _, m := range ms {
		if !strings.HasPrefix(m.Perms, "r") || m.Rss+m.HugetlbBytes() == 0 || m.Size() < int64(len(marker)) {
			continue
		}
		if n, _ := f.ReadAt(buf, int64(m.Start)); n == len(buf) && bytes.Equal(buf, marker) {
			found = append(found, m)
		}
	}
	switch len(found) {
	case 0:
		t.Fatalf("hugetest: no VMA of process %d starts with the marker %x (%d VMAs)", pid, marker, len(ms))
	case 1:
		return found[0]
	}
	t.Fatalf("hugetest: %d VMAs of process %d start with the marker %x: %v", len(found), pid, marker, found)
	return Mapping{}
}

// AssertHugetlb checks that hugetlb pages of pageSize back the VMA m,
// whose pages the kernel reserved when it was mapped (no nr VmFlag: a
// hugetlb mmap without MAP_NORESERVE reserves every page or fails), and
// that faulted bytes of it are faulted in (Private_Hugetlb +
// Shared_Hugetlb). It reports what differs and returns false.
func AssertHugetlb(t testing.TB, m Mapping, pageSize int, faulted int64) bool {
	t.Helper()
	var bad []string
	if !m.Hugetlb() {
		bad = append(bad, "no ht VmFlag (not hugetlb)")
	}
	if m.KernelPageSize != pageSize {
		bad = append(bad, fmt.Sprintf("KernelPageSize %d kB, want %d kB", m.KernelPageSize>>10, pageSize>>10))
	}
	if m.Flag("nr") {
		bad = append(bad, "nr VmFlag (MAP_NORESERVE: no pages reserved)")
	}
	if m.HugetlbBytes() != faulted {
		bad = append(bad, fmt.Sprintf("%d kB of hugetlb pages faulted in, want %d kB", m.HugetlbBytes()>>10, faulted>>10))
	}
	if len(bad) > 0 {
		t.Errorf("not a %s hugetlb mapping with %d kB faulted in: %s\n\t%v", SizeName(pageSize), faulted>>10, strings.Join(bad, "; "), m)
		return false
	}
	return true
}

// AssertNotHugetlb checks that ordinary (base size) pages back m.
func AssertNotHugetlb(t testing.TB, m Mapping) bool {
	t.Helper()
	if m.Hugetlb() || m.KernelPageSize != os.Getpagesize() || m.HugetlbBytes() != 0 {
		t.Errorf("hugetlb pages back a mapping that fell back: %v", m)
		return false
	}
	return true
}

// AssertTHP checks that m is an ordinary mapping madvised for transparent
// hugepages (hg VmFlag) and, when backed is set, that transparent
// hugepages map some of it (AnonHugePages / ShmemPmdMapped).
func AssertTHP(t testing.TB, m Mapping, backed bool) bool {
	t.Helper()
	ok := AssertNotHugetlb(t, m)
	if !m.Flag("hg") {
		t.Errorf("no hg VmFlag: not madvised MADV_HUGEPAGE: %v", m)
		ok = false
	}
	if backed && m.THPBytes() == 0 {
		t.Errorf("no transparent hugepage maps any of it: %v", m)
		ok = false
	}
	return ok
}

// AssertReleased checks that the hugetlb VMA m of process pid (0: this
// process) is gone: the process has exited, or no hugetlb VMA of it
// overlaps m any more.
func AssertReleased(t testing.TB, pid int, m Mapping) bool {
	t.Helper()
	ms, err := Mappings(pid)
	if errors.Is(err, fs.ErrNotExist) {
		return true
	}
	if err != nil {
		t.Errorf("hugetest: %v", err)
		return false
	}
	for _, n := range ms {
		if n.Hugetlb() && n.Start < m.End && m.Start < n.End {
			t.Errorf("hugetlb mapping still there: %v", n)
			return false
		}
	}
	return true
}
