//go:build linux

package afxdp

import (
	"errors"
	"fmt"
	"sync"

	"xrnic/mem"
)

// UMEMOptions size a UMEM.
type UMEMOptions struct {
	// FrameSize is the chunk size: 2048 or 4096 (the default). A 1500-byte
	// MTU frame fits either; larger frames span several chunks with
	// multi-buffer sockets.
	FrameSize int
	// Frames is the number of chunks (default 4096).
	Frames int
	// Headroom is reserved at the start of every chunk for the application
	// (default 0). The kernel adds XDP_PACKET_HEADROOM of its own on RX.
	Headroom int
	// Memory selects the backing; the zero value asks for 2 MiB hugetlb
	// pages and falls back to THP and 4 KiB pages (see package mem).
	Memory mem.AllocOptions
}

// UMEM is packet memory shared by the AF_XDP sockets of one or more
// queues. Its chunks are partitioned among the sockets: each socket owns the
// chunks it was given at Open and recycles them through its own fill and
// completion rings.
type UMEM struct {
	mu        sync.Mutex
	region    *mem.Region
	buf       []byte
	frameSize uint64
	headroom  uint32
	free      []uint64 // chunks not given to any socket
	sockets   []*Socket
	bind      bindState // of the kernel UMEM the live sockets share
	closed    bool
}

// bindState is what the first bind of a kernel UMEM obtained; sockets
// sharing it inherit it (the kernel forbids bind flags on shared sockets).
type bindState struct {
	zeroCopy, sg, needWakeup bool
}

// Errors of the control path.
var (
	ErrClosed       = errors.New("afxdp: closed")
	ErrNoFrames     = errors.New("afxdp: no free UMEM frames left for another socket (raise UMEMOptions.Frames)")
	ErrQueueInUse   = errors.New("afxdp: this UMEM already has a socket on that device queue")
	ErrNotSupported = errors.New("afxdp: not supported")
)

// NewUMEM allocates packet memory. No kernel object exists until the first
// socket is opened (the kernel registers a UMEM on a socket).
func NewUMEM(o UMEMOptions) (*UMEM, error) {
	if o.FrameSize == 0 {
		o.FrameSize = 4096
	}
	if o.FrameSize != 2048 && o.FrameSize != 4096 {
		return nil, fmt.Errorf("afxdp: frame size %d: want 2048 or 4096 (aligned chunks of at most a page)", o.FrameSize)
	}
	if o.Frames == 0 {
		o.Frames = 4096
	}
	if o.Frames < 0 || o.Headroom < 0 || o.Headroom > o.FrameSize/2 {
		return nil, fmt.Errorf("afxdp: bad UMEM options %+v", o)
	}
	r, err := mem.Alloc(o.Frames*o.FrameSize, o.Memory)
	if err != nil {
		return nil, fmt.Errorf("afxdp: allocate UMEM: %w", err)
	}
	u := &UMEM{
		region:    r,
		buf:       r.Bytes()[:o.Frames*o.FrameSize],
		frameSize: uint64(o.FrameSize),
		headroom:  uint32(o.Headroom),
		free:      make([]uint64, o.Frames),
	}
	// Hand out low addresses first.
	for i := range u.free {
		u.free[i] = uint64(o.Frames-1-i) * u.frameSize
	}
	return u, nil
}

// Backing reports the memory backing the UMEM.
func (u *UMEM) Backing() mem.Backing { return u.region.Backing() }

// Warning explains a fallback to smaller pages ("" if none).
func (u *UMEM) Warning() string { return u.region.Warning() }

// FrameSize returns the chunk size.
func (u *UMEM) FrameSize() int { return int(u.frameSize) }

// FreeFrames returns how many chunks are not yet given to a socket.
func (u *UMEM) FreeFrames() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return len(u.free)
}

// Bytes returns the whole UMEM (for tests and diagnostics).
func (u *UMEM) Bytes() []byte { return u.buf }

// Close releases the memory once every socket of the UMEM is closed (at
// once if there is none). Sockets stay usable until they are closed.
func (u *UMEM) Close() error {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.closed {
		return nil
	}
	u.closed = true
	if len(u.sockets) == 0 {
		return u.region.Close()
	}
	return nil
}

// takeFrames reserves n chunks for a new socket.
func (u *UMEM) takeFrames(n int) ([]uint64, error) {
	if n > len(u.free) {
		if len(u.free) == 0 {
			return nil, ErrNoFrames
		}
		n = len(u.free)
	}
	out := make([]uint64, n)
	copy(out, u.free[len(u.free)-n:])
	u.free = u.free[:len(u.free)-n]
	return out, nil
}

// release returns the chunks and the slot of a closed socket.
func (u *UMEM) release(s *Socket) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	for i, x := range u.sockets {
		if x == s {
			u.sockets = append(u.sockets[:i], u.sockets[i+1:]...)
			break
		}
	}
	u.free = append(u.free, s.owned...)
	if u.closed && len(u.sockets) == 0 {
		return u.region.Close()
	}
	return nil
}
