// Package afxdp is the engine's kernel-bypass transport: the user-space
// TCP of package tcpstack over AF_XDP sockets (package xrnic/afxdp,
// imported here as xsk), with the XDP steering program of package bpf
// attached to one interface. It implements transport.Transport; its
// connections are transport.InlineConn values, so each queue's poll loop
// owns its socket, its TCP stack and both directions of every connection
// on it, and runs the QPs' transmit steps itself (loop.go).
//
// Files by role: device.go (Open, setup, stale attachments, teardown),
// owner.go (the per-interface owner lock, Healthy), channels_unsafe.go
// (the queue count check), config.go, loop.go (the poll loop), queue.go (one queue's stack and
// events), conn.go (a connection: receive delivery, FPDUs into segments),
// dial.go and listener.go, neigh.go (port reservations, routes and
// neighbours over netlink), link.go (the tcpstack.Link over the AF_XDP
// rings), stats.go (scrape-time counters), privileges.go, errors.go.
//
// # Coexistence with the kernel
//
// The interface stays the kernel's: its address, ARP, routes and every
// flow that is not ours. The steering program redirects only frames to our
// listen ports and our connections' 4-tuples; everything else (ARP
// included) is passed, so neighbours are learnt and answered by the
// kernel and we read them from its table over netlink (a missing entry is
// resolved by the kernel on our request: RTM_NEWNEIGH with NTF_USE starts
// ARP exactly as a packet to that address would). Routes and the MTU also
// come from netlink (the route's MTU metric, else the device's). The
// rtnetlink client is github.com/vishvananda/netlink, with a handle
// opened on Open's setup thread and so bound to the device's namespace.
//
// The ports we use are reserved in the kernel by a kernel TCP socket bound
// (not listening) to our address and that port: the kernel then never
// gives the port to another socket, neither by bind nor as an ephemeral
// port, so no kernel connection can ever share a 4-tuple with one of ours.
// Dials get their local port this way too (bind to port 0 lets the kernel
// pick a free one). A bound socket does not stop the kernel from answering
// a SYN or segment for that port with a RST, so the reservation is not
// what prevents RSTs: the steering program is, because it redirects our
// frames before the kernel's TCP sees them. Flows are therefore inserted
// into the flow map before the SYN is sent (Connect) or right when a
// connection is accepted (its frames also match the listen port until
// then), and removed only when the user-space TCP has forgotten the
// connection (after TIME-WAIT), so stray segments of a closing connection
// are not answered by the kernel either. (ip_local_reserved_ports would
// only keep the kernel from picking the ports as ephemeral ones; it does
// not stop a bind.) Frames that do bypass the program (a socket missing
// from the XSKMAP: NoSocket) get the kernel's RST, which is the truthful
// answer then.
//
// One process owns an interface: Open first takes an exclusive owner lock
// (flock(2) on /run/xrnic/afxdp-netns<inode>-if<ifindex>.lock, holding the
// owner's pid; released by Close and by the kernel when the process dies,
// see owner.go). Without it Open fails with ErrInUse ("another xrnic
// process (pid N, comm) holds IF") and changes nothing on the interface.
// With it, an XDP program already attached to Iface is inspected: if it
// is ours (named xrnic_steer) its owner is gone (a pinned bpf_link or a
// netlink attachment survives its process) and it is detached and
// replaced; any other program is an error. Healthy reports whether our
// program is still the attached one. Close detaches the program and
// unloads its maps, also when connections are still open.
//
// Open checks Queues against the device's receive queues (ethtool
// channels) before anything else, and every failure of Open releases what
// it took and returns promptly.
//
// # Queues
//
// Queue q (0 <= q < Queues) gets an AF_XDP socket, a TCP stack and a poll
// loop (loop.go). Connections stay on the queue where their frames arrive:
// Listen listens on every queue's stack, so a passive connection lives on
// the queue its SYN was received on (RSS keeps the rest of the flow
// there); Connect uses queue 0, which is only correct when the NIC
// delivers the flow's replies on queue 0 (one queue, or an ntuple rule).
package afxdp
