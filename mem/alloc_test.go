//go:build linux

package mem

import (
	"bufio"
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

const (
	sys2M        = sysHugepages + "hugepages-2048kB/"
	sys1G        = sysHugepages + "hugepages-1048576kB/"
	procNrHuge2M = "/proc/sys/vm/nr_hugepages"
)

func mustAlloc(t *testing.T, size int, o AllocOptions) *Region {
	t.Helper()
	r, err := Alloc(size, o)
	if err != nil {
		t.Fatalf("Alloc(%d, %+v): %v", size, o, err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// touchEveryPage writes a distinct value into the first and last byte of
// every page and reads them all back.
func touchEveryPage(t *testing.T, r *Region) {
	t.Helper()
	b, ps := r.Bytes(), r.PageSize()
	for p := 0; p < len(b); p += ps {
		b[p], b[p+ps-1] = byte(p/ps+1), byte(p/ps+2)
	}
	for p := 0; p < len(b); p += ps {
		if b[p] != byte(p/ps+1) || b[p+ps-1] != byte(p/ps+2) {
			t.Fatalf("page %d does not read back", p/ps)
		}
	}
}

func TestAlloc4K(t *testing.T) {
	before := Stats()
	r, err := Alloc(10000, AllocOptions{PageSize: Page4K})
	if err != nil {
		t.Fatal(err)
	}
	if r.Backing() != Backing4K || r.PageSize() != os.Getpagesize() || r.Size() != 12288 || r.Warning() != "" || r.Fd() != -1 {
		t.Fatalf("got %v page %d size %d warning %q fd %d", r.Backing(), r.PageSize(), r.Size(), r.Warning(), r.Fd())
	}
	if addrOf(r.Bytes())%uint64(os.Getpagesize()) != 0 {
		t.Fatal("region not page aligned")
	}
	touchEveryPage(t, r)
	mid := Stats()
	if mid.Regions[Backing4K] != before.Regions[Backing4K]+1 || mid.Bytes[Backing4K] != before.Bytes[Backing4K]+12288 {
		t.Fatalf("stats %+v -> %+v", before, mid)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if err := r.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if after := Stats(); after.Bytes[Backing4K] != before.Bytes[Backing4K] || after.Regions[Backing4K] != before.Regions[Backing4K] {
		t.Fatalf("stats after Close %+v, before %+v", after, before)
	}
	for _, bad := range []int{0, -1} {
		if _, err := Alloc(bad, AllocOptions{}); err == nil {
			t.Errorf("Alloc(%d) succeeded", bad)
		}
	}
	if _, err := Alloc(1, AllocOptions{PageSize: 9}); err == nil {
		t.Error("unknown page size accepted")
	}
}

// checkShared proves a memfd region is the file: bytes written through the
// mapping are read back through the descriptor.
func checkShared(t *testing.T, r *Region) {
	t.Helper()
	if r.Fd() < 0 {
		t.Fatal("memfd region without fd")
	}
	var st unix.Stat_t
	if err := unix.Fstat(r.Fd(), &st); err != nil || st.Size != int64(r.Size()) {
		t.Fatalf("fstat size %d err %v, region %d", st.Size, err, r.Size())
	}
	off := r.Size() - 5
	copy(r.Bytes()[off:], "hello")
	got := make([]byte, 5)
	if n, err := unix.Pread(r.Fd(), got, int64(off)); err != nil || n != 5 || string(got) != "hello" {
		t.Fatalf("pread: %q %d %v", got, n, err)
	}
}

func TestAllocMemfd4K(t *testing.T) {
	r := mustAlloc(t, 5000, AllocOptions{PageSize: Page4K, Memfd: true, Prefault: true})
	if r.Backing() != Backing4K || r.Size() != 8192 {
		t.Fatalf("%v %d", r.Backing(), r.Size())
	}
	checkShared(t, r)
	fd := r.Fd()
	r.Close()
	if r.Fd() != -1 {
		t.Error("fd still reported after Close")
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); !errors.Is(err, unix.EBADF) {
		t.Errorf("memfd not closed: %v", err)
	}
}

// statmRSS returns the resident set size in bytes.
func statmRSS(t testing.TB) int64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(b))
	n, _ := strconv.ParseInt(f[1], 10, 64)
	return n * int64(os.Getpagesize())
}

// TestRegister1GiBNoRSS: allocating and registering 1 GiB must not touch
// every page.
func TestRegister1GiBNoRSS(t *testing.T) {
	before := statmRSS(t)
	r := mustAlloc(t, Size1G, AllocOptions{PageSize: Page4K})
	tb, _ := NewTable(4)
	pd := tb.AllocPD()
	m, err := tb.Register(r.Bytes(), MROptions{PD: pd, Access: LocalWrite | RemoteWrite | RemoteRead, TO: TOZeroBased})
	if err != nil {
		t.Fatal(err)
	}
	w, e := tb.Check(m.STag(), pd, 0, RemoteWrite, Size1G-4096, 4096, OpWrite)
	if e != nil {
		t.Fatal(e)
	}
	w[0] = 1
	after := statmRSS(t)
	t.Logf("RSS %d -> %d", before, after)
	if after-before > 64<<20 {
		t.Fatalf("RSS grew by %d MiB", (after-before)>>20)
	}
	tb.Deregister(m)
}

func BenchmarkRegister1GiB(b *testing.B) {
	r, err := Alloc(Size1G, AllocOptions{PageSize: Page4K})
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	tb, _ := NewTable(4)
	pd := tb.AllocPD()
	b.ReportAllocs()
	for b.Loop() {
		m, err := tb.Register(r.Bytes(), MROptions{PD: pd, Access: LocalWrite | RemoteWrite})
		if err != nil {
			b.Fatal(err)
		}
		tb.Deregister(m)
	}
}

func readSysInt(t *testing.T, path string) int {
	t.Helper()
	n, err := readInt(path)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// setHugepages writes n into a nr_hugepages file and restores the old
// value at cleanup (also on failure). It returns the count the kernel
// actually provided.
func setHugepages(t *testing.T, path string, n int) int {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skipf("needs root to reserve hugepages: writes %s", path)
	}
	old, err := readInt(path)
	if err != nil {
		t.Skipf("hugepage size not supported: %v", err)
	}
	t.Cleanup(func() {
		if err := os.WriteFile(path, []byte(strconv.Itoa(old)), 0); err != nil {
			t.Errorf("restore %s to %d: %v", path, old, err)
		}
		if got, _ := readInt(path); got != old {
			t.Errorf("restore %s: %d, want %d", path, got, old)
		}
	})
	if err := os.WriteFile(path, []byte(strconv.Itoa(n)), 0); err != nil {
		t.Fatalf("write %s: %v", path, err)
	}
	return readSysInt(t, path)
}

func TestIntegrationHugetlb2M(t *testing.T) {
	total := setHugepages(t, procNrHuge2M, readSysInt(t, sys2M+"nr_hugepages")+4)
	if free := readSysInt(t, sys2M+"free_hugepages"); free < 3 {
		t.Skipf("kernel provided only %d free 2 MiB pages (asked %d)", free, total)
	}
	rsvd := readSysInt(t, sys2M+"resv_hugepages")
	before := Stats()
	r := mustAlloc(t, 5<<20, AllocOptions{NoFallback: true})
	if r.Backing() != BackingHugeTLB2M || r.PageSize() != Size2M || r.Size() != 6<<20 || r.Warning() != "" {
		t.Fatalf("got %v page %d size %d warning %q", r.Backing(), r.PageSize(), r.Size(), r.Warning())
	}
	// Independent oracle: the kernel reserved three 2 MiB pages for us.
	if got := readSysInt(t, sys2M+"resv_hugepages"); got != rsvd+3 {
		t.Errorf("resv_hugepages %d -> %d, want +3", rsvd, got)
	}
	if s := Stats(); s.Bytes[BackingHugeTLB2M] != before.Bytes[BackingHugeTLB2M]+6<<20 {
		t.Errorf("stats bytes %d -> %d", before.Bytes[BackingHugeTLB2M], s.Bytes[BackingHugeTLB2M])
	}
	if addrOf(r.Bytes())%Size2M != 0 {
		t.Error("hugetlb region not 2 MiB aligned")
	}
	freeBefore := readSysInt(t, sys2M+"free_hugepages")
	touchEveryPage(t, r)
	if got := readSysInt(t, sys2M+"free_hugepages"); got != freeBefore-3 {
		t.Errorf("free_hugepages %d -> %d after touching, want -3", freeBefore, got)
	}
	r.Close()
	if got := readSysInt(t, sys2M+"resv_hugepages"); got != rsvd {
		t.Errorf("resv_hugepages %d after Close, want %d", got, rsvd)
	}

	// Prefaulted and memfd variants.
	p := mustAlloc(t, 2<<20, AllocOptions{Prefault: true})
	if p.Backing() != BackingHugeTLB2M {
		t.Fatalf("prefault: %v %q", p.Backing(), p.Warning())
	}
	touchEveryPage(t, p)
	m := mustAlloc(t, 3<<20, AllocOptions{Memfd: true, Name: "xrnic-test"})
	if m.Backing() != BackingHugeTLB2M || m.Size() != 4<<20 || m.Warning() != "" {
		t.Fatalf("memfd: %v size %d %q", m.Backing(), m.Size(), m.Warning())
	}
	touchEveryPage(t, m)
	checkShared(t, m)
}

// fallbackChecks expects 2 MiB hugepages to be unavailable (none free).
func fallbackChecks(t *testing.T) {
	nr := readSysInt(t, sys2M+"nr_hugepages")
	before := Stats()
	r := mustAlloc(t, 3<<20, AllocOptions{})
	if r.Backing() != BackingTHP && r.Backing() != Backing4K {
		t.Fatalf("got %v with no hugepages free", r.Backing())
	}
	w := r.Warning()
	t.Logf("warning: %s", w)
	want := "echo " + strconv.Itoa(nr+2) + " > " + sys2M + "nr_hugepages"
	if !strings.Contains(w, want) || !strings.Contains(w, "using "+r.Backing().String()) {
		t.Errorf("warning %q does not name %q", w, want)
	}
	if defaultHugepageKB() == 2048 && !strings.Contains(w, "sysctl -w vm.nr_hugepages="+strconv.Itoa(nr+2)) {
		t.Errorf("warning %q does not name the sysctl", w)
	}
	if r.Backing() == BackingTHP && addrOf(r.Bytes())%Size2M != 0 {
		t.Error("THP region not 2 MiB aligned")
	}
	if r.Size()%r.PageSize() != 0 || r.Size() < 3<<20 {
		t.Errorf("size %d page %d", r.Size(), r.PageSize())
	}
	touchEveryPage(t, r)
	if Stats().Fallbacks != before.Fallbacks+1 {
		t.Error("fallback not counted")
	}
	_, err := Alloc(3<<20, AllocOptions{NoFallback: true})
	if !errors.Is(err, ErrNoHugepages) || !errors.Is(err, unix.ENOMEM) || !strings.Contains(err.Error(), want) {
		t.Errorf("NoFallback error %v", err)
	}
	m := mustAlloc(t, 1<<20, AllocOptions{Memfd: true})
	if !strings.Contains(m.Warning(), "no hugetlbfs mount is needed") || m.Backing() == BackingHugeTLB2M {
		t.Errorf("memfd fallback: %v %q", m.Backing(), m.Warning())
	}
	if sysfsMode(sysShmemTHP) == "never" && (m.Backing() != Backing4K || !strings.Contains(m.Warning(), "echo advise > "+sysShmemTHP)) {
		t.Errorf("memfd with shmem THP off: %v %q", m.Backing(), m.Warning())
	}
	checkShared(t, m)
}

func TestHugepageFallbackUnreserved(t *testing.T) {
	if n, err := readInt(sys2M + "free_hugepages"); err != nil || n != 0 {
		t.Skipf("2 MiB hugepages are free (%d, %v); TestIntegrationHugepageFallback covers this as root", n, err)
	}
	fallbackChecks(t)
}

func TestIntegrationHugepageFallback(t *testing.T) {
	if got := setHugepages(t, procNrHuge2M, 0); got != 0 {
		t.Skipf("cannot release 2 MiB hugepages (in use: %d)", got)
	}
	fallbackChecks(t)
}

// anonHugeKB returns AnonHugePages of the mapping containing addr.
func anonHugeKB(t *testing.T, addr uint64) int {
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	in := false
	for sc.Scan() {
		line := sc.Text()
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if lo, hi, ok := strings.Cut(f[0], "-"); ok && !strings.HasSuffix(f[0], ":") {
			a, e1 := strconv.ParseUint(lo, 16, 64)
			b, e2 := strconv.ParseUint(hi, 16, 64)
			if e1 == nil && e2 == nil {
				in = a <= addr && addr < b
				continue
			}
		}
		if v, ok := strings.CutPrefix(line, "AnonHugePages:"); ok && in {
			n, _ := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")))
			return n
		}
	}
	return -1
}

// TestTHPBacked: a prefaulted THP region really gets huge pages (checked in
// /proc/self/smaps), when THP and defrag permit it.
func TestTHPBacked(t *testing.T) {
	if m := sysfsMode(sysTHP); m == "never" || m == "" {
		t.Skipf("THP off (%q)", m)
	}
	if d := sysfsMode("/sys/kernel/mm/transparent_hugepage/defrag"); d == "never" {
		t.Skip("THP defrag is never: huge pages at fault time are not guaranteed")
	}
	r := mustAlloc(t, 8<<20, AllocOptions{PageSize: Page2M, Prefault: true})
	if r.Backing() != BackingTHP {
		t.Skipf("got %v (hugetlb pages reserved?)", r.Backing())
	}
	if kb := anonHugeKB(t, addrOf(r.Bytes())); kb <= 0 {
		t.Errorf("AnonHugePages %d kB for a prefaulted THP region", kb)
	} else {
		t.Logf("AnonHugePages %d kB of %d", kb, r.Size()>>10)
	}
}

func TestIntegrationHugetlb1G(t *testing.T) {
	if _, err := os.Stat(sys1G); err != nil {
		t.Skipf("no 1 GiB hugepage support: %v", err)
	}
	old := readSysInt(t, sys1G+"nr_hugepages")
	got := setHugepages(t, sys1G+"nr_hugepages", old+1)
	if free := readSysInt(t, sys1G+"free_hugepages"); got <= old || free < 1 {
		t.Skipf("kernel could not provide a 1 GiB page (nr_hugepages %d -> %d, free %d): memory too fragmented; boot with hugepagesz=1G hugepages=1", old, got, free)
	}
	r := mustAlloc(t, 100<<20, AllocOptions{PageSize: Page1G, NoFallback: true, Prefault: true})
	if r.Backing() != BackingHugeTLB1G || r.PageSize() != Size1G || r.Size() != Size1G {
		t.Fatalf("got %v page %d size %d", r.Backing(), r.PageSize(), r.Size())
	}
	if addrOf(r.Bytes())%Size1G != 0 {
		t.Error("1 GiB region not 1 GiB aligned")
	}
	touchEveryPage(t, r)
	r.Close()

	// All 1 GiB pages taken: a second region falls back, naming the fix.
	r1 := mustAlloc(t, Size1G, AllocOptions{PageSize: Page1G, NoFallback: true})
	r2 := mustAlloc(t, 4<<20, AllocOptions{PageSize: Page1G})
	if r2.Backing() == BackingHugeTLB1G {
		t.Fatalf("second 1 GiB region with one page reserved: %v", r2.Backing())
	}
	w := r2.Warning()
	t.Logf("warning: %s", w)
	if !strings.Contains(w, sys1G+"nr_hugepages") || !strings.Contains(w, "hugepagesz=1G hugepages=") {
		t.Errorf("warning %q does not name the 1 GiB fix", w)
	}
	_ = r1
}

func TestIntegrationHugetlb1GFallsBackTo2M(t *testing.T) {
	if _, err := os.Stat(sys1G); err != nil {
		t.Skipf("no 1 GiB hugepage support: %v", err)
	}
	if got := setHugepages(t, sys1G+"nr_hugepages", 0); got != 0 {
		t.Skipf("1 GiB pages in use (%d)", got)
	}
	setHugepages(t, procNrHuge2M, readSysInt(t, sys2M+"nr_hugepages")+2)
	if free := readSysInt(t, sys2M+"free_hugepages"); free < 2 {
		t.Skipf("kernel provided only %d free 2 MiB pages", free)
	}
	r := mustAlloc(t, 3<<20, AllocOptions{PageSize: Page1G, Memfd: true})
	if r.Backing() != BackingHugeTLB2M || r.Size() != 4<<20 {
		t.Fatalf("got %v size %d warning %q", r.Backing(), r.Size(), r.Warning())
	}
	if w := r.Warning(); !strings.Contains(w, "1 GiB") || !strings.Contains(w, "using hugetlb-2M") {
		t.Errorf("warning %q", w)
	}
	checkShared(t, r)
}

// TestIntegrationMemfdTHP: with no hugetlb pages and shmem THP enabled, a
// memfd region falls back to THP on a 2 MiB aligned shared mapping.
func TestIntegrationMemfdTHP(t *testing.T) {
	if got := setHugepages(t, procNrHuge2M, 0); got != 0 {
		t.Skipf("cannot release 2 MiB hugepages (in use: %d)", got)
	}
	old := sysfsMode(sysShmemTHP)
	if old == "" {
		t.Skip("no shmem THP support")
	}
	t.Cleanup(func() {
		if err := os.WriteFile(sysShmemTHP, []byte(old), 0); err != nil {
			t.Errorf("restore %s to %s: %v", sysShmemTHP, old, err)
		}
	})
	if err := os.WriteFile(sysShmemTHP, []byte("advise"), 0); err != nil {
		t.Skipf("cannot enable shmem THP: %v", err)
	}
	r := mustAlloc(t, 3<<20, AllocOptions{Memfd: true, Prefault: true})
	if r.Backing() != BackingTHP || r.Size() != 4<<20 || addrOf(r.Bytes())%Size2M != 0 {
		t.Fatalf("got %v size %d warning %q", r.Backing(), r.Size(), r.Warning())
	}
	touchEveryPage(t, r)
	checkShared(t, r)
}
