// Package perfsuite is xrnic-perf's orchestration: the demo behind
// `make demo` (xrnic-perf demo) and the benchmark sweep behind
// `make bench` (xrnic-perf bench). Both start real processes, the way a
// user would: xrnicd, xrnicctl and xrnic-perf servers and clients from
// the directory of the running executable, in two network namespaces
// joined by a veth as root and over loopback otherwise, and read back the
// perftest JSON the clients write (package perfjson).
//
// Files by role: topology.go the two ends (namespaces, veth, loopback),
// procs.go the processes and one server/client run, demo.go the demo and
// its comparison, tour.go xrnicd and the xrnicctl tour, sweep.go the
// sweep, charts.go and svg.go its charts, summary.go SUMMARY.md and the
// section of docs/PERFORMANCE.md, goals.go the goal table of issue 16
// (bench --goals, and after the full sweep) and its section of the doc.
package perfsuite
