// Package reliability holds xrnic's whole-system hostile-input, security
// and load tests (issue 9): they drive the engine in process, the xrnicd
// daemon as a process, and many client processes at once, and check what
// SECURITY.md promises. The package has no API; everything is in its
// tests.
//
//   - stag_test.go: STag guessing (RFC 5042 §5, §6.2). In process, a raw
//     iWARP peer (internal/engine/enginetest) guesses STags against an engine
//     holding registered regions, one connection per guess over an
//     in-memory LLP (net.Pipe): every guess must be answered with the
//     Terminate of an invalid STag, and the regions must be untouched.
//     CI runs 100,000 guesses; XRNIC_LONG=1 (or -long) runs 1,000,000.
//     Against a real xrnicd over loopback TCP a smaller number (1,000;
//     10,000 in the long mode).
//   - security_test.go: PD isolation, access rights per operation (the
//     full matrix of refusals is internal/engine/negative_test.go), invalidated
//     STags, key rotation on re-registration, the daemon's QP limits
//     (--max-qps, --max-qps-per-peer), registered-bytes limit, the control
//     socket refusing another user's process, and no memory contents or
//     private data in the daemon's logs.
//   - soak_test.go: one xrnicd, many QPs from several client processes
//     (this test binary re-executed with XRNIC_SOAK_CLIENT set) running
//     mixed operations with every completion counted once; then every
//     client is killed at once and the daemon must free every QP and stay
//     healthy. Short in CI (8 s, 4 x 50 QPs); XRNIC_SOAK=1 (or -soak)
//     runs 60 s with 4 x 250 QPs.
//   - wire_faults_test.go (root): two hosts joined through a middle
//     namespace whose tcx program (bpf/wire.c) drops, flips, swaps,
//     duplicates and reorders frames; mixed workloads on both transports
//     at each fault level must complete every WR exactly once with exact
//     data and counters, and a CRC-valid-checksum corruption must be
//     caught by the MPA CRC with nothing placed. 4 x 2,500 FetchAdds per
//     level in CI, 4 x 25,000 with XRNIC_LONG=1.
//   - restart_test.go (root): kill -9 of xrnicd mid-traffic; peers fail
//     in bounded time, the stale XDP program is replaced at restart and
//     traffic resumes.
//   - malformed_test.go (root): malformed FPDUs against an afxdp listener
//     get their Terminates while another QP keeps working: out-of-order
//     untagged segments (receives flushed, never completed), a partial
//     FPDU followed by silence (ended after the FPDU timeout), a ULPDU
//     longer than the MULPDU.
//   - setup_test.go (root): silent connections from one address hold at
//     most the per-peer setup bound and delay no other client.
//   - synflood_test.go (root): 100,000+ spoofed SYNs against the afxdp
//     listener (SYN cookies) while a client connects and runs FetchAdds.
//   - bounds_test.go: idle HTTP and control-socket connections, a refused
//     user and floods of refused or malformed MPA connections hold bounded
//     descriptors and log lines.
//   - owner_test.go (root): one xrnicd per interface, /readyz when the
//     attachment disappears, --queues beyond the device fails promptly.
//
// Tests that start processes are named TestIntegration*; they need no
// privileges except the control-socket test, which runs xrnicctl as the
// user nobody, and the namespace tests above; all skip unless root.
package reliability
