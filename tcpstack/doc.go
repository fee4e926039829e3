// Package tcpstack is xrnic's own TCP (RFC 9293) for the kernel-bypass data
// path. It runs over a batch-shaped Ethernet frame Link and knows nothing of
// AF_XDP: the afxdp transport (transport/afxdp, over the AF_XDP rings of
// package afxdp) implements Link in production, sim implements it in memory
// for deterministic tests.
//
// # Ownership and driving
//
// One goroutine owns a Stack, its Link and every Conn of it. The owner calls
// Poll in its loop: Poll drains received frames in batches, processes them,
// fires expired timers, transmits, and returns the time of the next timer so
// the owner can sleep (or spin) until then or until the link has frames. There
// are no goroutines inside the stack and no per-connection timers: every
// connection has a few deadlines (retransmission or persist, delayed ACK,
// TIME-WAIT) and the stack keeps connections in a min-heap by their earliest
// one. Time comes from an injectable Clock, so tests run on a virtual clock.
//
// Received frames are owned by the stack from RecvBatch until it hands them
// back with Link.Release; frames holding in-order payload stay held until the
// consumer releases the bytes (zero-copy receive), out-of-order frames stay
// held in the out-of-order queue. Frames passed to Link.SendBatch are the
// link's only for the duration of the call.
//
// # What is implemented
//
//   - Active and passive open, listeners with a bounded accept backlog and a
//     bounded number of half-open (SYN-RECEIVED) connections; simultaneous
//     open is handled by the RFC 9293 state machine. A half-open entry
//     retransmits its SYN-ACK Config.SynAckRetries times (default 3, gone
//     after 15 s) and holds no queues until the handshake completes.
//   - SYN cookies (RFC 4987 §3.6, cookie.go) beyond a listener's
//     MaxHalfOpen: the SYN is answered statelessly, the MSS (rounded down
//     to a table of eight), window scale and SACK-permitted (in the low
//     bits of our TSval, when the peer sent timestamps) and the 4-tuple and
//     ISNs are bound by a SipHash-2-4 of a per-period crypto/rand secret
//     (28 bits of it in our ISS), valid for two 64 s periods; a final ACK
//     with a valid cookie creates the connection, an invalid one is dropped
//     and counted (Stats.SynCookies*).
//   - Options: MSS (§3.7.1), Window Scale and Timestamps (RFC 7323) with RTT
//     measurement and PAWS, SACK-Permitted and SACK blocks (RFC 2018). The
//     receiver reports out-of-order data in SACK blocks on pure ACKs and on
//     data segments alike, the block with the latest arrival first, as many
//     as the option space and the peer's MSS leave room for (a segment is
//     never split to make room, so a full one carries none; if an ACK is
//     owed, a pure ACK with every block follows it).
//   - Retransmission timer per RFC 6298 (SRTT/RTTVAR, Karn's rule without
//     timestamps, exponential backoff, MinRTO/MaxRTO configurable), fast
//     retransmit; with SACK, loss recovery per RFC 6675 (a per-segment
//     scoreboard, pipe, NextSeg: lost segments first, then new data, then
//     other holes below the highest SACKed segment; an ACK that SACKs new
//     data counts as a duplicate even if it carries data, and only such an
//     ACK does), early retransmit for flights of fewer than four segments
//     (RFC 5827), the tail loss probe of RFC 8985 §7 and, when its timer
//     fires, RACK's time-based loss inference (a segment sent later was
//     SACKed, §6.2) also for a lost retransmission; without SACK (or
//     with Config.NewRenoRecovery) NewReno fast recovery (RFC 6582); slow
//     start and congestion avoidance with byte counting (RFC 5681), initial
//     window of 10 segments (RFC 6928).
//   - Flow control with window scaling, receiver silly-window avoidance, a
//     never-shrinking advertised right edge, and zero-window probes (an ACK
//     carrying SND.UNA-1, as Linux sends, which every RFC 9293 receiver
//     answers with its current window). A window smaller than the next segment
//     with nothing in flight is used by sending a prefix of the segment.
//   - Delayed ACKs (every second full segment or a timer), immediate ACKs for
//     out-of-order data and gap fills, an out-of-order queue that holds
//     frames, FIN/RST handling, TIME-WAIT, and RFC 5961 protections: RST
//     accepted only at exactly RCV.NXT (a challenge ACK otherwise), a
//     challenge ACK for SYN in a synchronized state, and the ACK acceptability
//     test against MAX.SND.WND.
//   - IPv4 header and TCP checksum generation and verification; optionally
//     (Config.AcceptPartialChecksum) the half-done checksums of a Linux veth
//     peer with checksum offload are recognised and completed (see package
//     xrnic/wire/tcp).
//   - Sequence numbers are tcp.Seq throughout (modulo 2^32 comparisons).
//
// # The iWARP interface
//
// MPA (RFC 5044 §4.1, "FPDU alignment") wants every TCP segment to start with
// an FPDU. Conn.Segment hands the sender the payload area of one
// maximum-sized segment buffer (the effective send MSS, after options), the
// sender writes whole FPDUs into it and calls Conn.Commit with the number of
// bytes used. The buffer becomes one TCP segment and is never merged with
// another; it keeps its headroom, so the stack writes the Ethernet, IPv4 and
// TCP headers in front of the payload and transmits it in place.
// Retransmissions resend the stored bytes; the layer above never runs again.
// Only when the peer's window is smaller than a segment and nothing is in
// flight does the stack send a prefix of a segment (the rest follows as its
// own segment); a peer that behaves so has given up alignment anyway.
//
// On receive, Conn.Views returns the in-order payload as views into the
// received frames, and Conn.Release tells the stack how many bytes from the
// front the consumer is done with; fully released frames go back to the Link.
// Read and Write are byte-stream conveniences built on the same queues.
//
// # Not implemented
//
// IPv6, IP fragments (dropped), IP options on transmit, urgent data (the URG
// flag is ignored), keepalives, ECN, path MTU discovery, D-SACK, the RFC 6675 rescue retransmission, and
// the rest of RACK (RFC 8985): no reordering timer of its own and no
// adaptive reordering window; RACK's inference runs when the probe timer
// fires, whose timeout (2*SRTT and more) exceeds SRTT plus a reordering
// window.
package tcpstack
