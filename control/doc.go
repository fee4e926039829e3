// Package control is the operator side of xrnicd: the Prometheus
// collectors, the HTTP endpoints (/metrics, /healthz, /readyz) and the JSON
// control API served on a unix socket, plus the client xrnicctl uses.
//
// # Metrics
//
// Collectors read the engine's counters at scrape time (the per-QP
// counters of the engine, which are plain atomics, the STag table's check
// failure counters, mem's allocation counters and the daemon's own
// per-connection counters); nothing is counted per packet for metrics.
// Per-QP counters are summed over live QPs plus those already closed
// (State.RetireQP folds them in), so counters never go back. Labels are
// bounded: opcodes, directions, error triples, outcomes, states, page
// sizes; never a QP number, STag, peer address or CPU. Label values are
// lower snake_case, and every direction label is rx or tx (the ethtool
// convention: tx sent by xrnicd, rx received). All names carry the prefix
// xrnic_ and pass `promtool check metrics` and testutil's linter:
//
//	xrnic_build_info{version,revision,goversion}                 gauge 1
//	xrnic_transport_info{transport}                              gauge 1: kernel, afxdp
//	xrnic_rdmap_messages_total{direction,opcode}                 RDMAP messages (RFC 5040 §4.1, RFC 7306 §4.1 opcodes)
//	xrnic_rdmap_bytes_total{direction,opcode}                    DDP payload bytes
//	xrnic_mpa_fpdus_total{direction}, xrnic_llp_writes_total
//	xrnic_atomics_total{operation,result}                        fetch_add/ok, cmp_swap/matched|not_matched
//	xrnic_atomic_errors_total{reason}                            atomic targets refused (invalid_stag, access, bounds, misaligned, ...)
//	xrnic_memory_check_failures_total{access,reason}             every refused remote access
//	xrnic_terminates_total{direction,layer,type,code,reason}     e.g. tx/ddp/tagged/0x00/ddp_tagged_invalid_stag
//	xrnic_mpa_negotiations_total{outcome}                        accepted, rejected, malformed, negotiation_failed, timeout, failed
//	xrnic_connections_refused_total                              reset by --allow or --max-setup*
//	xrnic_qps{state}                                             init, connecting, rts, closing, error, closed
//	xrnic_registered_memory_bytes{page_size}                     4k, 2m, 1g
//	xrnic_memory_regions, xrnic_memory_page_fallbacks_total
//	xrnic_mapped_memory_bytes{backing}                           4k, thp, hugetlb_2m, hugetlb_1g
//	xrnic_sink_messages_total{kind}, xrnic_sink_bytes_total{kind}  the daemon's receive sink: send, immediate, write_immediate
//	xrnic_completion_latency_seconds{queue,opcode}               histogram, post to poll; possible pairs only, from their first completion
//	xrnic_server_connections{server}, xrnic_server_max_connections{server}   metrics, control: held now, cap
//	xrnic_server_connections_closed_total{server,reason}         idle_evicted, busy_timeout, credentials, over_limit (0) (Options.Servers)
//	xrnic_server_accept_waits_total{server}, xrnic_server_accept_wait_seconds_total{server}   at the cap, all busy: new connections wait in the listen backlog
//	xrnic_server_accept_errors_total{server}                     metrics, control, mpa
//	go_*, process_*                                              Go runtime and process collectors
//
// Every predeclared Terminate error (term.Known) and "unknown" has a
// series in both directions from the first scrape on, at 0 until one is
// sent or received, so rate() and increase() see the first one. layer is
// rdmap, ddp or mpa; type the error type by name (local_catastrophic,
// remote_protection, remote_operation; tagged, untagged; llp); code the
// error code as on the wire (RFC 5040 §4.8); reason names the error.
// The completion latency histogram has a series only for the (queue,
// opcode) pairs that can complete (ValidLatencyPair: send queue send,
// send_inv, write, write_imm, read, fetch_add, cmp_swap, imm, local_inv;
// recv queue recv, recv_imm, recv_write_imm), each created by its first
// observation: an idle daemon has none.
//
// With a TCPSource (the user-space TCP of the AF_XDP transport) the
// collector adds xrnic_tcp_segments_total{direction},
// xrnic_tcp_retransmitted_segments_total, xrnic_tcp_rto_events_total,
// xrnic_tcp_out_of_order_segments_total and the xrnic_tcp_rtt_seconds
// histogram of the user-space TCP's RTT samples; with an XDPSource every
// XDP_STATISTICS field per queue (xrnic_xdp_rx_dropped_total,
// xrnic_xdp_rx_invalid_descriptors_total,
// xrnic_xdp_tx_invalid_descriptors_total, xrnic_xdp_rx_ring_full_total,
// xrnic_xdp_fill_ring_empty_total, xrnic_xdp_tx_ring_empty_total, labels
// interface and queue), xrnic_xdp_tx_busy_total (TX wakeups that found the
// kernel or driver busy) and the XDP program's counters, summed over CPUs
// (xrnic_xdp_program_packets_total{interface,counter}). The kernel
// transport has neither, and the families are then absent.
// TransportSources adapts an afxdp transport to both sources (counter
// label values: redirected, passed, malformed, no_socket, fault_dropped,
// fault_corrupted).
//
// /metrics speaks the Prometheus text format and, when the scraper's
// Accept header asks for it (Prometheus does), OpenMetrics.
// HTTPServer.ServeWebConfig adds TLS and basic auth from an
// exporter-toolkit web configuration file (xrnicd --web.config.file).
//
// # Control API
//
// HTTP/1.1 with JSON bodies on a unix socket (mode 0660): GET /v1/status,
// /v1/qps, /v1/regions, /v1/stats. Each connection's peer credentials are
// read with SO_PEERCRED when it is accepted; DefaultPolicy admits root, the
// daemon's user and members of the socket's group, and a refused peer is
// closed at once (Client reports that as a refusal).
//
// # Bounds
//
// Both servers (NewHTTPServer, SocketServer.ServeConfig) take a
// ServerConfig: a connection cap enforced by LimitListener (at the cap a
// new connection replaces the longest idle one, or is closed when all are
// busy) and read, write and idle timeouts; accept errors are retried with
// backoff, never ending the server. What they close and every failed
// accept is counted in ServerStats and reported to a LogFunc, which the
// daemon rate-limits.
package control
