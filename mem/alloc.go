package mem

import (
	"errors"
	"strconv"
	"sync/atomic"
)

// Backing is the kind of memory a Region obtained.
type Backing uint8

const (
	Backing4K        Backing = iota // ordinary 4 KiB pages
	BackingTHP                      // transparent hugepages requested with madvise
	BackingHugeTLB2M                // reserved 2 MiB hugetlb pages
	BackingHugeTLB1G                // reserved 1 GiB hugetlb pages
	NumBackings
)

func (b Backing) String() string {
	switch b {
	case Backing4K:
		return "4K"
	case BackingTHP:
		return "THP"
	case BackingHugeTLB2M:
		return "hugetlb-2M"
	case BackingHugeTLB1G:
		return "hugetlb-1G"
	}
	return "Backing(" + strconv.Itoa(int(b)) + ")"
}

// PageSize is the page size an allocation asks for.
type PageSize uint8

const (
	Page2M PageSize = iota // default: 2 MiB hugetlb, then THP, then 4K
	Page1G                 // 1 GiB hugetlb, then 2 MiB hugetlb, THP, 4K
	Page4K                 // ordinary pages only
)

// Page sizes in bytes.
const (
	Size4K = 4 << 10
	Size2M = 2 << 20
	Size1G = 1 << 30
)

// AllocOptions select how a Region is backed.
type AllocOptions struct {
	PageSize PageSize
	// NoFallback makes Alloc fail (naming the fix) instead of falling back
	// to smaller pages.
	NoFallback bool
	// Prefault populates every page at allocation (MADV_POPULATE_WRITE,
	// else touching each page), so the first packets do not fault.
	Prefault bool
	// Memfd backs the region with a memfd (MFD_HUGETLB for hugetlb pages;
	// no hugetlbfs mount is needed), mapped shared, so that its descriptor
	// (Region.Fd) can be passed to another process.
	Memfd bool
	// Name names the memfd (shown in /proc/PID/fd and maps); default "xrnic".
	Name string
}

// ErrNoHugepages is wrapped by the error of a NoFallback allocation that
// could not get the hugepages it asked for.
var ErrNoHugepages = errors.New("hugepages not available")

// ErrNotSupported is returned where the platform cannot allocate regions.
var ErrNotSupported = errors.New("mem: not supported on this platform")

// Region is a mapped memory region.
type Region struct {
	b        []byte
	backing  Backing
	pageSize int
	fd       int
	warning  string
	closed   atomic.Bool
}

// Bytes returns the mapped bytes (Size long). They are invalid after Close.
func (r *Region) Bytes() []byte { return r.b }

// Size returns the mapped size: the requested size rounded up to PageSize.
func (r *Region) Size() int { return len(r.b) }

// Backing returns what backs the region.
func (r *Region) Backing() Backing { return r.backing }

// PageSize returns the page size of the backing in bytes.
func (r *Region) PageSize() int { return r.pageSize }

// Fd returns the memfd of a Memfd region, or -1. The region owns it; Close
// closes it (dup it to keep it).
func (r *Region) Fd() int { return r.fd }

// Warning is empty when the region got the page size it asked for;
// otherwise it says why it fell back and what fixes it.
func (r *Region) Warning() string { return r.warning }

// AllocStats are process-wide allocation counters.
type AllocStats struct {
	Regions   [NumBackings]uint64 // live regions by backing
	Bytes     [NumBackings]uint64 // live mapped bytes by backing
	Fallbacks uint64              // allocations (cumulative) that got less than they asked for
}

var stats struct {
	regions   [NumBackings]atomic.Int64
	bytes     [NumBackings]atomic.Int64
	fallbacks atomic.Uint64
}

// Stats returns the process-wide allocation counters.
func Stats() AllocStats {
	var s AllocStats
	for i := range s.Regions {
		s.Regions[i] = uint64(stats.regions[i].Load())
		s.Bytes[i] = uint64(stats.bytes[i].Load())
	}
	s.Fallbacks = stats.fallbacks.Load()
	return s
}

func account(b Backing, n int, sign int64) {
	stats.regions[b].Add(sign)
	stats.bytes[b].Add(sign * int64(n))
}
