#!/usr/bin/env bash
# perf-profile.sh: where the CPU goes during one xrnic-perf run. It runs
# the test's server and client on a veth pair between two network
# namespaces (198.18.92.1/.2), records every CPU with perf for DUR seconds
# (default 3) starting DELAY seconds (default 1.5) after the client starts,
# and prints each process's cores and the share of its samples by class:
# inside sendto (on afxdp: the kernel's copy-mode transmit, which on veth
# also runs the receiving side's XDP and copy), our TCP checksum, CRC32c,
# engine copies, tcpstack, the engine, the poll loop, the Go scheduler.
# Root; needs `make bin` and perf. Removes its namespaces on exit.
#
#   sudo scripts/perf-profile.sh write_bw -D 6
#   sudo MTU=9000 TRANSPORT=afxdp scripts/perf-profile.sh write_bw -D 6
#   sudo scripts/perf-profile.sh xdp_bw -D 6          (raw AF_XDP baseline)
#   KEEP=out.data ...                                 (keep perf's data file)
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "perf-profile: needs root (network namespaces, perf -a)" >&2; exit 1; }
[ $# -ge 1 ] || { sed -n 2,16p "$0" >&2; exit 2; }
command -v perf >/dev/null || { echo "perf-profile: apt-get install linux-perf" >&2; exit 1; }
PERF=$PWD/bin/xrnic-perf
[ -x "$PERF" ] || { echo "perf-profile: run make bin first" >&2; exit 1; }
TR=${TRANSPORT:-kernel}
A=xrprof-$$-a B=xrprof-$$-b
data=${KEEP:-$(mktemp /tmp/xrnic-profile.XXXXXX)}
cleanup() {
	ip netns del "$A" 2>/dev/null || true
	ip netns del "$B" 2>/dev/null || true
	[ -n "${KEEP:-}" ] || rm -f "$data"
}
trap cleanup EXIT
ip netns add "$A"; ip netns add "$B"
ip link add xrpa0 netns "$A" type veth peer name xrpb0 netns "$B"
ip -n "$A" addr add 198.18.92.1/24 dev xrpa0; ip -n "$B" addr add 198.18.92.2/24 dev xrpb0
for ns in "$A" "$B"; do ip -n "$ns" link set lo up; done
ip -n "$A" link set xrpa0 mtu "${MTU:-1500}" up; ip -n "$B" link set xrpb0 mtu "${MTU:-1500}" up
sleep 1
xa=() xb=()
if [[ $1 == xdp_* ]] || [ "$TR" = afxdp ]; then xa=(--iface xrpa0); xb=(--iface xrpb0); fi
if [[ $1 != xdp_* && $1 != tcp_* ]]; then xa+=(--transport "$TR"); xb+=(--transport "$TR"); fi
ip netns exec "$A" timeout 120 "$PERF" "$@" "${xa[@]}" --quiet >/dev/null 2>&1 &
srv=$!
sleep 1
(sleep "${DELAY:-1.5}"; perf record -q -e cpu-clock -F 2999 -g -a -o "$data" -- sleep "${DUR:-3}" >/dev/null 2>&1) &
rec=$!
ip netns exec "$B" timeout 120 "$PERF" "$@" "${xb[@]}" --quiet 198.18.92.1 | awk '$1 ~ /^[0-9]+$/'
wait "$rec"
wait "$srv" || true
perf script -i "$data" -F comm,pid,tid,ip,sym 2>/dev/null | awk -v dur="${DUR:-3}" '
BEGIN { RS = ""; FS = "\n" }
{
	split($1, h, " "); split(h[2], pt, "/"); p = h[1] " " pt[1]
	s = $0; c = "other"
	if (s ~ /sys_sendto/) c = "sendto (kernel transmit + peer receive)"
	else if (s ~ /sys_(recvfrom|epoll|read|write|futex|nanosleep|sched_yield|ppoll)/) c = "other system calls"
	else if (s ~ /castagnoli/) c = "MPA CRC32c"
	else if (s ~ /inet\.sum16|Checksum/) c = "TCP checksum"
	else if (s ~ /runtime\.memmove/ && s ~ /xrnic\/internal\/engine/) c = "engine copies"
	else if (s ~ /xrnic\/internal\/engine/) c = "engine"
	else if (s ~ /xrnic\/tcpstack/) c = "tcpstack"
	else if (s ~ /xrnic\/transport|xrnic\/afxdp/) c = "transport loop"
	else if (s ~ /runtime\.(schedule|findRunnable|gosched|mcall|park)/) c = "Go scheduler"
	else if (h[1] == "swapper") c = "idle"
	n[p] += 1; k[p, c] += 1; cls[c] = 1
}
END {
	for (p in n) if (p ~ /^xrnic-perf/) {
		printf "%s: %.2f cores\n", p, n[p] / (2999 * dur)
		for (c in cls) if (k[p, c] > 0) printf "  %5.1f%%  %s\n", 100 * k[p, c] / n[p], c
	}
}' | awk '/cores$/ { if (blk) print blk | "sort -rn"; close("sort -rn"); print; blk = ""; next } { blk = blk (blk ? "\n" : "") $0 } END { if (blk) print blk | "sort -rn" }'
