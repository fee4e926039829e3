//go:build linux

package mem

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

const (
	sysHugepages = "/sys/kernel/mm/hugepages/"
	sysTHP       = "/sys/kernel/mm/transparent_hugepage/enabled"
	sysShmemTHP  = "/sys/kernel/mm/transparent_hugepage/shmem_enabled"
)

// Alloc maps a region of at least size bytes as asked by o, falling back
// (unless o.NoFallback) along 1G -> 2M hugetlb -> THP -> 4K; see the
// package doc. Close the region to unmap it.
func Alloc(size int, o AllocOptions) (*Region, error) {
	if size <= 0 {
		return nil, fmt.Errorf("mem: alloc: size %d must be positive", size)
	}
	var chain []Backing
	switch o.PageSize {
	case Page2M:
		chain = []Backing{BackingHugeTLB2M, BackingTHP, Backing4K}
	case Page1G:
		chain = []Backing{BackingHugeTLB1G, BackingHugeTLB2M, BackingTHP, Backing4K}
	case Page4K:
		chain = []Backing{Backing4K}
	default:
		return nil, fmt.Errorf("mem: alloc: unknown page size option %d", o.PageSize)
	}
	if o.NoFallback {
		chain = chain[:1]
	}
	var why []string
	var errs []error
	for _, k := range chain {
		r, err := allocKind(k, size, &o)
		if err != nil {
			why = append(why, err.Error())
			errs = append(errs, err)
			continue
		}
		if o.Prefault {
			if err := prefault(r.b); err != nil {
				r.Close()
				return nil, fmt.Errorf("mem: prefault %d bytes of %v: %w", r.Size(), k, err)
			}
		}
		if len(why) > 0 {
			r.warning = strings.Join(why, "; ") + "; using " + k.String()
			stats.fallbacks.Add(1)
		}
		return r, nil
	}
	err := errors.Join(errs...)
	if chain[0] != Backing4K {
		err = fmt.Errorf("%w: %w", ErrNoHugepages, err)
	}
	return nil, fmt.Errorf("mem: alloc %d bytes: %w", size, err)
}

func roundUp(n, to int) int { return (n + to - 1) / to * to }

func allocKind(k Backing, size int, o *AllocOptions) (*Region, error) {
	name := o.Name
	if name == "" {
		name = "xrnic"
	}
	var page, mapFlags, mfdFlags int
	var align uintptr
	switch k {
	case BackingHugeTLB1G:
		page, mapFlags, mfdFlags = Size1G, unix.MAP_HUGETLB|unix.MAP_HUGE_1GB, unix.MFD_HUGETLB|unix.MFD_HUGE_1GB
	case BackingHugeTLB2M:
		page, mapFlags, mfdFlags = Size2M, unix.MAP_HUGETLB|unix.MAP_HUGE_2MB, unix.MFD_HUGETLB|unix.MFD_HUGE_2MB
	case BackingTHP:
		page, align = Size2M, Size2M
		if o.Memfd {
			if mode := sysfsMode(sysShmemTHP); mode == "never" || mode == "deny" || mode == "" {
				return nil, fmt.Errorf("shmem transparent hugepages are off (%q): echo advise > %s", mode, sysShmemTHP)
			}
		} else if mode := sysfsMode(sysTHP); mode == "never" || mode == "" {
			return nil, fmt.Errorf("transparent hugepages are off (%q): echo madvise > %s", mode, sysTHP)
		}
	default:
		page = os.Getpagesize()
	}
	n := roundUp(size, page)
	if n <= 0 || n < size {
		return nil, fmt.Errorf("size %d overflows when rounded to %d", size, page)
	}
	fd := -1
	if o.Memfd {
		var err error
		fd, err = unix.MemfdCreate(name, unix.MFD_CLOEXEC|mfdFlags)
		if err != nil {
			if mfdFlags != 0 {
				return nil, fmt.Errorf("memfd_create(MFD_HUGETLB, %s): %w (the kernel lacks hugetlb memfd support: needs Linux >= 4.14 with CONFIG_HUGETLBFS; no hugetlbfs mount is needed)", pageName(page), err)
			}
			return nil, fmt.Errorf("memfd_create: %w", err)
		}
		if err := unix.Ftruncate(fd, int64(n)); err != nil {
			unix.Close(fd)
			return nil, fmt.Errorf("memfd ftruncate %d: %w", n, err)
		}
	}
	b, err := mapAligned(uintptr(n), align, fd, mapFlags)
	if err != nil {
		if fd >= 0 {
			unix.Close(fd)
		}
		if k == BackingHugeTLB1G || k == BackingHugeTLB2M {
			return nil, hugeFix(page, n/page, err, o.Memfd)
		}
		return nil, fmt.Errorf("mmap %d bytes: %w", n, err)
	}
	if k == BackingTHP {
		if err := unix.Madvise(b, unix.MADV_HUGEPAGE); err != nil {
			unmap(b)
			if fd >= 0 {
				unix.Close(fd)
			}
			return nil, fmt.Errorf("madvise(MADV_HUGEPAGE): %w (kernel without CONFIG_TRANSPARENT_HUGEPAGE?)", err)
		}
	}
	if k == Backing4K {
		page = os.Getpagesize()
	}
	r := &Region{b: b, backing: k, pageSize: page, fd: fd}
	account(k, n, 1)
	return r, nil
}

// prefault populates every page, preferring MADV_POPULATE_WRITE (Linux
// 5.14), which reports a failure instead of raising SIGBUS.
func prefault(b []byte) error {
	err := unix.Madvise(b, unix.MADV_POPULATE_WRITE)
	if err == nil {
		return nil
	}
	if !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("madvise(MADV_POPULATE_WRITE): %w", err)
	}
	for i := 0; i < len(b); i += Size4K {
		b[i] = 0
	}
	return nil
}

// Close unmaps the region and closes its memfd. It is idempotent.
func (r *Region) Close() error {
	if r == nil || r.closed.Swap(true) {
		return nil
	}
	account(r.backing, len(r.b), -1)
	err := unmap(r.b)
	r.b = nil
	if r.fd >= 0 {
		if e := unix.Close(r.fd); err == nil {
			err = e
		}
		r.fd = -1
	}
	return err
}

func pageName(page int) string {
	if page == Size1G {
		return "1 GiB"
	}
	return "2 MiB"
}

// HugepagePool is the kernel's pool of one hugepage size.
type HugepagePool struct {
	Total int // reserved pages (nr_hugepages)
	Free  int // free pages not yet promised to a mapping (free - resv)
	// NrFile is the file that reserves them: /proc/sys/vm/nr_hugepages
	// for the default size, else the size's sysfs nr_hugepages.
	NrFile string
}

// Hugepages reads the pool of pages of size page (Size2M or Size1G); an
// error when the kernel has no such pool.
func Hugepages(page int) (HugepagePool, error) {
	kb := page >> 10
	dir := sysHugepages + "hugepages-" + strconv.Itoa(kb) + "kB/"
	p := HugepagePool{NrFile: dir + "nr_hugepages"}
	var err error
	if p.Total, err = readInt(p.NrFile); err != nil {
		return p, err
	}
	if p.Free, err = readInt(dir + "free_hugepages"); err != nil {
		return p, err
	}
	if rsvd, err := readInt(dir + "resv_hugepages"); err == nil {
		p.Free -= rsvd // free pages already promised to other mappings
	}
	if defaultHugepageKB() == kb {
		p.NrFile = "/proc/sys/vm/nr_hugepages"
	}
	return p, nil
}

// hugeFix explains a failed hugetlb mapping of need pages and names the fix.
func hugeFix(page, need int, err error, memfd bool) error {
	kb := page >> 10
	dir := sysHugepages + "hugepages-" + strconv.Itoa(kb) + "kB/"
	pool, perr := Hugepages(page)
	total, free, nrFile := pool.Total, pool.Free, dir+"nr_hugepages"
	var msg string
	switch {
	case perr != nil:
		msg = fmt.Sprintf("%s hugepages are not supported by this kernel/CPU (%s missing", pageName(page), dir)
		if page == Size1G {
			msg += "; 1 GiB pages need the CPU flag pdpe1gb"
		}
		msg += ")"
	case free < need:
		want := total + need - free
		if total == 0 {
			msg = fmt.Sprintf("no %s hugepages reserved (need %d)", pageName(page), need)
		} else {
			msg = fmt.Sprintf("too few %s hugepages (need %d, %d available of %d)", pageName(page), need, free, total)
		}
		fix := fmt.Sprintf("echo %d > %s", want, nrFile)
		if defaultHugepageKB() == kb {
			fix = fmt.Sprintf("sysctl -w vm.nr_hugepages=%d (or %s)", want, fix)
		}
		msg += ": " + fix
		if page == Size1G {
			msg += fmt.Sprintf("; if the kernel cannot find contiguous memory at run time, boot with hugepagesz=1G hugepages=%d", want)
		}
	default:
		msg = fmt.Sprintf("%s hugepages: %d available of %d, but the mapping failed (hugetlb cgroup limit? see hugetlb.%s.max and hugetlb.%s.rsvd.max)",
			pageName(page), free, total, cgroupSize(page), cgroupSize(page))
	}
	if memfd {
		msg += " [memfd MFD_HUGETLB: no hugetlbfs mount is needed, only reserved pages]"
	}
	return fmt.Errorf("%s: mmap %s hugetlb: %w", msg, pageName(page), err)
}

func cgroupSize(page int) string {
	if page == Size1G {
		return "1GB"
	}
	return "2MB"
}

func readInt(path string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(string(bytes.TrimSpace(b)))
}

// sysfsMode returns the bracketed choice of a sysfs mode file such as
// "always [madvise] never", or "" if unreadable.
func sysfsMode(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	s := string(b)
	i := strings.IndexByte(s, '[')
	j := strings.IndexByte(s, ']')
	if i < 0 || j < i {
		return strings.TrimSpace(s)
	}
	return s[i+1 : j]
}

// defaultHugepageKB returns the default hugepage size in kB (the one
// vm.nr_hugepages controls), or 0.
func defaultHugepageKB() int {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "Hugepagesize:"); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")))
			return n
		}
	}
	return 0
}
