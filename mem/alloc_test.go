//go:build linux

package mem

import (
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"xrnic/internal/hugetest"
	"xrnic/internal/require"
)

const (
	sys2M = sysHugepages + "hugepages-2048kB/"
	sys1G = sysHugepages + "hugepages-1048576kB/"
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

// The hugepage pools are host-wide and go test runs packages in parallel:
// the tests below change or depend on them only through internal/hugetest
// (under its lock, restored at cleanup even after a kill), and prove what
// backs a region from this process's own VMA in /proc/self/smaps, never
// from HugePages_* or free_hugepages, which other tests move meanwhile.

// regionMapping returns the VMA of a hugetlb region, which must be exactly
// the region.
func regionMapping(t *testing.T, r *Region) hugetest.Mapping {
	t.Helper()
	m := hugetest.MappingOf(t, r.Bytes())
	if m.Start != addrOf(r.Bytes()) || m.Size() != int64(r.Size()) {
		t.Errorf("VMA %v is not the region (%x, %d bytes)", m, addrOf(r.Bytes()), r.Size())
	}
	return m
}

func TestIntegrationHugetlb2M(t *testing.T) {
	hugetest.Reserve(t, Size2M, 4)
	before := Stats()
	r := mustAlloc(t, 5<<20, AllocOptions{NoFallback: true})
	if r.Backing() != BackingHugeTLB2M || r.PageSize() != Size2M || r.Size() != 6<<20 || r.Warning() != "" {
		t.Fatalf("got %v page %d size %d warning %q", r.Backing(), r.PageSize(), r.Size(), r.Warning())
	}
	// Independent oracle: our own VMA is three 2 MiB hugetlb pages the
	// kernel reserved at mmap (no nr flag), none faulted in yet.
	m := regionMapping(t, r)
	hugetest.AssertHugetlb(t, m, Size2M, 0)
	if s := Stats(); s.Bytes[BackingHugeTLB2M] != before.Bytes[BackingHugeTLB2M]+6<<20 {
		t.Errorf("stats bytes %d -> %d", before.Bytes[BackingHugeTLB2M], s.Bytes[BackingHugeTLB2M])
	}
	if addrOf(r.Bytes())%Size2M != 0 {
		t.Error("hugetlb region not 2 MiB aligned")
	}
	touchEveryPage(t, r)
	// Touching faulted in exactly the three hugetlb pages.
	hugetest.AssertHugetlb(t, regionMapping(t, r), Size2M, 6<<20)
	r.Close()
	hugetest.AssertReleased(t, 0, m)

	// Prefaulted and memfd variants.
	p := mustAlloc(t, 2<<20, AllocOptions{Prefault: true})
	if p.Backing() != BackingHugeTLB2M {
		t.Fatalf("prefault: %v %q", p.Backing(), p.Warning())
	}
	// Prefault faulted the page in before anything touched it.
	hugetest.AssertHugetlb(t, regionMapping(t, p), Size2M, 2<<20)
	touchEveryPage(t, p)
	mf := mustAlloc(t, 3<<20, AllocOptions{Memfd: true, Name: "xrnic-test"})
	if mf.Backing() != BackingHugeTLB2M || mf.Size() != 4<<20 || mf.Warning() != "" {
		t.Fatalf("memfd: %v size %d %q", mf.Backing(), mf.Size(), mf.Warning())
	}
	mm := regionMapping(t, mf)
	if !strings.Contains(mm.Path, "memfd:xrnic-test") {
		t.Errorf("memfd region's VMA %v is not the memfd", mm)
	}
	hugetest.AssertHugetlb(t, mm, Size2M, 0)
	touchEveryPage(t, mf)
	hugetest.AssertHugetlb(t, regionMapping(t, mf), Size2M, 4<<20)
	checkShared(t, mf)
}

// noFree2M makes sure that no 2 MiB hugetlb page is available to a new
// mapping until the test ends: as root by emptying the pool (restored at
// cleanup); otherwise under the lock, skipping when the host keeps pages
// free that only root may take away.
func noFree2M(t *testing.T) {
	t.Helper()
	if os.Geteuid() == 0 {
		if p := hugetest.Set(t, Size2M, 0); p.Available() != 0 || p.Overcommit != 0 {
			t.Fatalf("emptied the 2 MiB pool, yet pages are available: %v", p)
		}
		return
	}
	hugetest.Lock(t)
	p, err := hugetest.ReadPool(Size2M)
	require.NoError(t, err, "2 MiB hugepages")
	if p.Available() != 0 || p.Overcommit != 0 {
		// The host's own reservation; as root the test empties it.
		t.Skipf("2 MiB hugepages are available (%v): only root may take them away for the test", p)
	}
}

// fallbackChecks expects 2 MiB hugepages to be unavailable (none free).
func fallbackChecks(t *testing.T) {
	nr := readSysInt(t, sys2M+"nr_hugepages")
	before := Stats()
	r := mustAlloc(t, 3<<20, AllocOptions{})
	if r.Backing() != BackingTHP && r.Backing() != Backing4K {
		t.Fatalf("got %v with no hugepages free", r.Backing())
	}
	// What the kernel mapped agrees: ordinary pages, madvised for THP
	// when the region says THP.
	if r.Backing() == BackingTHP {
		hugetest.AssertTHP(t, hugetest.MappingOf(t, r.Bytes()), false)
	} else {
		hugetest.AssertNotHugetlb(t, hugetest.MappingOf(t, r.Bytes()))
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
	hugetest.AssertNotHugetlb(t, hugetest.MappingOf(t, m.Bytes()))
	if sysfsMode(sysShmemTHP) == "never" && (m.Backing() != Backing4K || !strings.Contains(m.Warning(), "echo advise > "+sysShmemTHP)) {
		t.Errorf("memfd with shmem THP off: %v %q", m.Backing(), m.Warning())
	}
	checkShared(t, m)
}

// TestHugepageFallbackUnreserved runs the fallback checks on the host as
// it is, as any user, when it has no 2 MiB page to give.
func TestHugepageFallbackUnreserved(t *testing.T) {
	hugetest.Lock(t) // no test adds pages until this one ends
	if p, err := hugetest.ReadPool(Size2M); err != nil || p.Available() != 0 || p.Overcommit != 0 {
		// The host's own reservation; TestIntegrationHugepageFallback empties it as root.
		t.Skipf("2 MiB hugepages are available (%v, %v); TestIntegrationHugepageFallback covers this as root", p, err)
	}
	fallbackChecks(t)
}

func TestIntegrationHugepageFallback(t *testing.T) {
	if p := hugetest.Set(t, Size2M, 0); p.Available() != 0 || p.Overcommit != 0 {
		t.Fatalf("emptied the 2 MiB pool, yet pages are available: %v", p)
	}
	fallbackChecks(t)
}

// TestTHPBacked: a prefaulted THP region really gets huge pages (checked in
// /proc/self/smaps), when THP and defrag permit it.
func TestTHPBacked(t *testing.T) {
	if m := sysfsMode(sysTHP); m == "never" || m == "" {
		// The host's THP policy, which the test does not override.
		t.Skipf("THP off (%q)", m)
	}
	if d := sysfsMode("/sys/kernel/mm/transparent_hugepage/defrag"); d == "never" {
		// Whether a huge page is found at fault time is then up to the moment.
		t.Skip("THP defrag is never: huge pages at fault time are not guaranteed")
	}
	noFree2M(t) // else the region gets hugetlb pages
	r := mustAlloc(t, 8<<20, AllocOptions{PageSize: Page2M, Prefault: true})
	if r.Backing() != BackingTHP {
		t.Fatalf("got %v with no 2 MiB hugetlb page available: %q", r.Backing(), r.Warning())
	}
	m := hugetest.MappingOf(t, r.Bytes())
	if hugetest.AssertTHP(t, m, true) {
		t.Logf("AnonHugePages %d kB of %d", m.AnonHugePages>>10, r.Size()>>10)
	}
}

// 1 GiB pages need the CPU flag pdpe1gb, which a VM does not always pass
// through: no package provides it, so its absence skips even under CI.
func need1G(t *testing.T) {
	t.Helper()
	if !hugetest.Supported(Size1G) {
		t.Skipf("no 1 GiB hugepage support (%s missing: no pdpe1gb CPU flag?)", sys1G)
	}
}

func TestIntegrationHugetlb1G(t *testing.T) {
	need1G(t)
	if added, p := hugetest.TryReserve(t, Size1G, 1); added < 1 || p.Available() < 1 {
		// 1 GiB of contiguous memory is what the kernel may not find at run time.
		t.Skipf("kernel could not provide a 1 GiB page (%v): memory too fragmented; boot with hugepagesz=1G hugepages=1", p)
	}
	r := mustAlloc(t, 100<<20, AllocOptions{PageSize: Page1G, NoFallback: true, Prefault: true})
	if r.Backing() != BackingHugeTLB1G || r.PageSize() != Size1G || r.Size() != Size1G {
		t.Fatalf("got %v page %d size %d", r.Backing(), r.PageSize(), r.Size())
	}
	if addrOf(r.Bytes())%Size1G != 0 {
		t.Error("1 GiB region not 1 GiB aligned")
	}
	m := regionMapping(t, r)
	hugetest.AssertHugetlb(t, m, Size1G, Size1G) // prefaulted
	touchEveryPage(t, r)
	r.Close()
	hugetest.AssertReleased(t, 0, m)

	// All 1 GiB pages taken: a second region falls back, naming the fix.
	r1 := mustAlloc(t, Size1G, AllocOptions{PageSize: Page1G, NoFallback: true})
	r2 := mustAlloc(t, 4<<20, AllocOptions{PageSize: Page1G})
	if r2.Backing() == BackingHugeTLB1G {
		t.Fatalf("second 1 GiB region with one page reserved: %v", r2.Backing())
	}
	if m := hugetest.MappingOf(t, r2.Bytes()); m.KernelPageSize == Size1G {
		t.Errorf("the fallen back region is on 1 GiB pages: %v", m)
	}
	w := r2.Warning()
	t.Logf("warning: %s", w)
	if !strings.Contains(w, sys1G+"nr_hugepages") || !strings.Contains(w, "hugepagesz=1G hugepages=") {
		t.Errorf("warning %q does not name the 1 GiB fix", w)
	}
	_ = r1
}

func TestIntegrationHugetlb1GFallsBackTo2M(t *testing.T) {
	need1G(t)
	if p := hugetest.Set(t, Size1G, 0); p.Available() != 0 {
		t.Fatalf("emptied the 1 GiB pool, yet pages are available: %v", p)
	}
	hugetest.Reserve(t, Size2M, 2)
	r := mustAlloc(t, 3<<20, AllocOptions{PageSize: Page1G, Memfd: true})
	if r.Backing() != BackingHugeTLB2M || r.Size() != 4<<20 {
		t.Fatalf("got %v size %d warning %q", r.Backing(), r.Size(), r.Warning())
	}
	hugetest.AssertHugetlb(t, regionMapping(t, r), Size2M, 0)
	if w := r.Warning(); !strings.Contains(w, "1 GiB") || !strings.Contains(w, "using hugetlb-2M") {
		t.Errorf("warning %q", w)
	}
	checkShared(t, r)
}

// TestIntegrationMemfdTHP: with no hugetlb pages and shmem THP enabled, a
// memfd region falls back to THP on a 2 MiB aligned shared mapping.
func TestIntegrationMemfdTHP(t *testing.T) {
	if p := hugetest.Set(t, Size2M, 0); p.Available() != 0 || p.Overcommit != 0 {
		t.Fatalf("emptied the 2 MiB pool, yet pages are available: %v", p)
	}
	hugetest.SetTHP(t, "shmem_enabled", "advise")
	r := mustAlloc(t, 3<<20, AllocOptions{Memfd: true, Prefault: true})
	if r.Backing() != BackingTHP || r.Size() != 4<<20 || addrOf(r.Bytes())%Size2M != 0 {
		t.Fatalf("got %v size %d warning %q", r.Backing(), r.Size(), r.Warning())
	}
	// The kernel's view: an ordinary shared mapping madvised for THP.
	m := hugetest.MappingOf(t, r.Bytes())
	hugetest.AssertTHP(t, m, false)
	t.Logf("ShmemPmdMapped %d kB of %d", m.ShmemPmdMapped>>10, r.Size()>>10)
	touchEveryPage(t, r)
	checkShared(t, r)
}
