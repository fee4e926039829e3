//go:build !linux

package mem

// Alloc is only implemented on Linux.
func Alloc(size int, o AllocOptions) (*Region, error) { return nil, ErrNotSupported }

// Close is a no-op where Alloc is not implemented.
func (r *Region) Close() error { return nil }

// HugepagePool is the kernel's pool of one hugepage size (Linux only).
type HugepagePool struct {
	Total, Free int
	NrFile      string
}

// Hugepages is only implemented on Linux.
func Hugepages(page int) (HugepagePool, error) { return HugepagePool{}, ErrNotSupported }
