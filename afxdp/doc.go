// Package afxdp is xrnic's AF_XDP implementation on golang.org/x/sys/unix:
// UMEM packet memory, sockets bound to one device queue each, and the four
// rings (fill, completion, RX, TX) shared with the kernel.
//
// # Memory
//
// A UMEM is allocated with xrnic/mem on 2 MiB hugetlb pages, falling back to
// THP and 4 KiB pages exactly as registered memory does (UMEM.Backing and
// UMEM.Warning report it). Chunks are aligned, 2048 or 4096 bytes. One UMEM
// serves the sockets of several queues (XDP_SHARED_UMEM, each socket with
// its own fill and completion rings, Linux 5.10+): the chunks are
// partitioned at Open, so each queue's goroutine owns its frames and never
// synchronises with the others. The kernel registers a UMEM on a socket;
// the first Open does that, later ones share the kernel UMEM of any live
// socket, and if all sockets were closed the next Open registers it again.
//
// # Rings
//
// Ring indices live in memory shared with the kernel and are read and
// written only with sync/atomic. The side we own keeps cached copies of
// both indices: the kernel's index is loaded only when the cached copy says
// the ring is full (producer) or empty (consumer), and ours is published
// with one store per batch. Indices are free running uint32 values, so
// their wrap-around at 2^32 needs no special case (tests start rings near
// it). All batch methods (Receive, Free, Refill, Alloc, Transmit, Complete)
// copy descriptors into or out of caller slices and allocate nothing.
//
// # Wakeups, modes, multi-buffer
//
// Sockets use XDP_USE_NEED_WAKEUP by default: Refill issues a recvfrom and
// Transmit a sendto only when the kernel flags the ring. A busy kernel
// (EAGAIN, EBUSY, ENOBUFS) is not an error on that path: the frames stay
// queued (Stats.TXBusy counts it) and the owner's next Retry, once per
// poll iteration, kicks again; other failures are counted in
// Stats.KickErrors (nothing on the per-packet path panics or allocates).
//
// BindAuto tries zero-copy first and falls back to copy mode
// (Socket.ZeroCopy reports the result; veth only supports copy mode).
// SocketOptions.MultiBuffer asks for XDP_USE_SG so packets larger than a
// chunk (jumbo MTUs) arrive and leave as runs of descriptors with the
// OptMore bit (Desc.More); where the kernel or driver refuses it, the
// socket falls back to single-buffer and Socket.MultiBuffer says so.
// Sockets sharing a UMEM inherit the first socket's flags: the kernel
// refuses bind flags on shared sockets.
//
// Socket.Stats reads XDP_STATISTICS (drops for a full RX ring, an empty
// fill ring, invalid descriptors) with our wakeup counters.
//
// # Ownership
//
// A Socket belongs to one goroutine. Frames move between four owners: the
// socket's pool, the kernel (fill and TX rings), and the caller (between
// Receive and Free, between Alloc and Transmit). Free returns a frame to
// the pool only when the caller is done with it (after placement).
//
// Integration tests (TestIntegration*, root) build a veth pair between two
// network namespaces and exchange frames with the kernel's TCP.
package afxdp
