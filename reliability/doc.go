// Package reliability holds xrnic's whole-system hostile-input, security
// and load tests (issue 9): they drive the engine in process, the xrnicd
// daemon as a process, and many client processes at once, and check what
// SECURITY.md promises. The package has no API; everything is in its
// tests.
//
//   - stag_test.go: STag guessing (RFC 5042 §5, §6.2). In process, a raw
//     iWARP peer (datapath/datapathtest) guesses STags against an engine
//     holding registered regions, one connection per guess over an
//     in-memory LLP (net.Pipe): every guess must be answered with the
//     Terminate of an invalid STag, and the regions must be untouched.
//     CI runs 100,000 guesses; XRNIC_LONG=1 (or -long) runs 1,000,000.
//     Against a real xrnicd over loopback TCP a smaller number (1,000;
//     10,000 in the long mode).
//   - security_test.go: PD isolation, access rights per operation (the
//     full matrix of refusals is datapath/negative_test.go), invalidated
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
//
// Tests that start processes are named TestIntegration*; they need no
// privileges except the control-socket test, which runs xrnicctl as the
// user nobody and skips unless root.
package reliability
