// Package bpf is the XDP steering program of xrnic and its loader.
//
// The program (xdp.c, compiled by cilium/ebpf's bpf2go into the committed
// xdp_bpfel.o/xdp_bpfeb.o and their Go wrappers; `make generate` rebuilds
// them and needs clang) looks at every received frame:
//
//	Ethernet [one 802.1Q tag] -> IPv4 -> TCP
//
// and redirects it to the AF_XDP socket of its receive queue (the XSKMAP
// entry rx_queue_index) only when the TCP destination port is in the listen
// map or the 4-tuple (local ip, remote ip, local port, remote port, network
// byte order) is in the flow map. Everything else is XDP_PASS: ARP, IPv6,
// stacked VLAN tags (0x88a8, which wire/eth does not understand either),
// non-TCP, other TCP, and IPv4 fragments, which the kernel reassembles (we
// never see a fragmented iWARP flow in practice; MPA sits on TCP segments).
//
// # Verdicts and counters
//
// Every frame increments exactly one per-CPU counter: Redirected, Passed
// (not ours), Malformed (an Ethernet, VLAN, IPv4 or TCP header that is
// truncated or inconsistent: version != 4, IHL < 5, total length below the
// headers, TCP data offset < 5 or beyond the frame), NoSocket (steered, but
// the queue has no socket in the XSKMAP) or FaultDropped. Malformed frames
// are passed to the kernel, which drops and counts them in its own MIB
// counters. The IPv4 total length is not compared with the frame length
// (with multi-buffer frames the program sees only the first buffer); the
// user-space parser (wire/ipv4) does that.
//
// NoSocket frames are passed to the kernel rather than dropped. The kernel
// then answers a SYN to an xrnic port with a RST (nobody listens), and a
// segment of an xrnic connection with a RST as well, which is the truthful
// answer when the socket of that queue is gone. Dropping would instead
// black-hole traffic for as long as the socket is missing. Callers insert
// the socket into the XSKMAP before adding listen ports and flows.
//
// # Fault injection
//
// SetFault sets drop and corrupt probabilities in parts per million for
// steered frames (it is off, all zero, after Load). Corruption flips one
// byte (xor 0xff) of the TCP payload at a random position within the first
// buffer, or the low byte of the TCP checksum when the segment has no
// payload there, so the TCP checksum or the MPA CRC catches it. Fault
// injection happens before the socket lookup.
//
// # Attach modes
//
// Attach uses a bpf_link. ModeNative and ModeGeneric force the mode;
// ModeAuto picks generic (SKB) mode on veth, because native XDP on veth
// was measured to slow the kernel's own TCP through that veth by 4-5x while
// generic costs about 25%, and native mode elsewhere, falling back to
// generic when the driver has no native XDP. The choice and its reason are
// logged and returned in the Attachment.
//
// # Multi-buffer
//
// The program is marked frags-aware (SEC("xdp.frags"),
// BPF_F_XDP_HAS_FRAGS) so it can be attached to devices with an MTU beyond
// a page and feed AF_XDP sockets bound with XDP_USE_SG. Headers must be in
// the first buffer (they always are). On kernels without frags support
// Load retries without the flag and reports it in Program.Frags.
//
// Tests run the program on crafted frames with BPF_PROG_TEST_RUN (root).
//
// # The faulty wire (tests only)
//
// wire.c (Wire, LoadWire) is a second, test-only program: a tcx ingress
// program that joins two devices of one namespace back to back, so a
// middle namespace between two veth pairs becomes a cable with faults.
// The middle is needed because an AF_XDP sender's frames skip tc egress
// (the generic AF_XDP transmit path calls __dev_direct_xmit) and frames
// that XDP steers never reach tc ingress; in the middle every frame of
// either transport passes. It drops, flips a byte (caught by the TCP
// checksum), swaps two 16-bit words at even TCP offsets (the ones'
// complement checksum stays valid: only the MPA CRC can catch it),
// duplicates (bpf_clone_redirect, then the original) and reorders
// IPv4/TCP frames, each with its own probability in parts per million.
//
// Reordering is done in the kernel, with real frames and no user-space
// relay: a frame drawn for it is copied into a per-direction map slot and
// dropped; after Gap later frames of that direction, the later frame is
// sent first as a clone and its own skb is then rewritten
// (bpf_skb_change_tail, bpf_skb_store_bytes) into the held frame and sent
// after it. A held frame waits for as long as no frame follows (TCP's
// retransmission timer guarantees one eventually). One frame per
// direction is held at a time; the slot is claimed and released with
// BPF atomics (cmpxchg), so CPUs racing for it never mix two frames.
// Per-direction per-CPU counters record every verdict.
package bpf
