#!/usr/bin/env bash
# abi-vs-perf.sh: Debian's perftest through xrnic's C ABI (bin/lib) against
# xrnic-perf, the same test, size and transport, side by side on one veth
# pair between two network namespaces (198.18.90.1/.2), REPS interleaved
# repetitions (which tool runs first alternates), medians and their ratio. Root; needs `make abi bin` and
# Debian's perftest. Removes its namespaces on exit.
#
#   scripts/abi-vs-perf.sh [REPS]        (default 3)
#   TRANSPORT=afxdp scripts/abi-vs-perf.sh
#   ONLY='_lat' scripts/abi-vs-perf.sh   (the tests whose label matches)
#   RAW=1 scripts/abi-vs-perf.sh          (also every repetition's value)
#   BW_ITERS=20000 scripts/abi-vs-perf.sh (messages per bandwidth run, default 5000:
#                                          longer runs, less start-up in the average)
set -euo pipefail
cd "$(dirname "$0")/.."
REPS=${1:-3}
TR=${TRANSPORT:-kernel}
LIB=$PWD/bin/lib
PERF=$PWD/bin/xrnic-perf
[ "$(id -u)" = 0 ] || { echo "abi-vs-perf: needs root (network namespaces)" >&2; exit 1; }
[ -e "$LIB/libibverbs.so.1" ] && [ -x "$PERF" ] || { echo "abi-vs-perf: run make abi bin first" >&2; exit 1; }
command -v ib_write_bw >/dev/null || { echo "abi-vs-perf: apt-get install perftest" >&2; exit 1; }
A=xrabiperf-$$-a B=xrabiperf-$$-b
cleanup() { ip netns del "$A" 2>/dev/null || true; ip netns del "$B" 2>/dev/null || true; }
trap cleanup EXIT
ip netns add "$A"; ip netns add "$B"
ip link add xrap0 netns "$A" type veth peer name xrbp0 netns "$B"
ip -n "$A" addr add 198.18.90.1/24 dev xrap0; ip -n "$B" addr add 198.18.90.2/24 dev xrbp0
for ns in "$A" "$B"; do ip -n "$ns" link set lo up; done
ip -n "$A" link set xrap0 up; ip -n "$B" link set xrbp0 up
sleep 1 # linkwatch: the port reads ACTIVE once the veth runs
envA=(env LD_LIBRARY_PATH="$LIB" XRNIC_IFACE=xrap0) envB=(env LD_LIBRARY_PATH="$LIB" XRNIC_IFACE=xrbp0)
xpA=(--transport "$TR") xpB=(--transport "$TR")
if [ "$TR" = afxdp ]; then
	envA+=(XRNIC_TRANSPORT=afxdp); envB+=(XRNIC_TRANSPORT=afxdp)
	xpA+=(--iface xrap0); xpB+=(--iface xrbp0)
fi
port=23000
pt() { # perftest pair; prints the result column $1 of the first result row
	local col=$1; shift
	local try out
	# perftest 4.5's client may dial its test connection before the
	# server listens again after the handshake (refused): try again.
	for try in 1 2 3; do
		port=$((port + 1))
		ip netns exec "$A" "${envA[@]}" ${PTENV:-} timeout 60 "$@" -R -p $port >/dev/null 2>&1 &
		local srv=$!
		for _ in $(seq 50); do ip netns exec "$A" ss -Hltn "sport = :$port" | grep -q . && break; sleep 0.1; done
		[ "$TR" = afxdp ] && sleep 1 # the afxdp listener is in user space, not in ss
		out=$(ip netns exec "$B" "${envB[@]}" ${PTENV:-} timeout 60 "$@" -R -p $port 198.18.90.1 2>/dev/null |
			awk -v c="$col" '$1 ~ /^[0-9]+$/ && NF >= 5 {print $c; exit}')
		if [ -n "$out" ]; then
			wait $srv || true
			echo "$out"
			return
		fi
		kill $srv 2>/dev/null || true
		wait $srv 2>/dev/null || true
		pkill -f -- "-R -p $port\$" 2>/dev/null || true
	done
}
xp() { # xrnic-perf pair, same options, result column $1
	local col=$1; shift; port=$((port + 1))
	ip netns exec "$A" timeout 60 "$PERF" "$@" "${xpA[@]}" -p $port --quiet >/dev/null 2>&1 &
	local srv=$!
	sleep 1
	ip netns exec "$B" timeout 60 "$PERF" "$@" "${xpB[@]}" -p $port --quiet 198.18.90.1 2>/dev/null |
		awk -v c="$col" '$1 ~ /^[0-9]+$/ && NF >= 5 {print $c; exit}'
	wait $srv || true
}
median() { sort -g | awk '{v[NR]=$1} END {if (NR) print v[int((NR+1)/2)]; else print "-"}'; }
printf '%-26s %12s %12s %7s\n' "test ($TR)" perftest xrnic-perf ratio
run() { # run LABEL COL TOOL XPTEST ARGS...
	local label=$1 col=$2 tool=$3 xt=$4; shift 4
	[[ $label =~ ${ONLY:-.} ]] || return 0
	local a=() b=() r
	for r in $(seq "$REPS"); do
		# Alternate which runs first: no order effect in the medians.
		if ((r % 2)); then
			a+=("$(pt "$col" "$tool" "$@")"); b+=("$(xp "$col" "$xt" "$@")")
		else
			b+=("$(xp "$col" "$xt" "$@")"); a+=("$(pt "$col" "$tool" "$@")")
		fi
	done
	local ma mb
	ma=$(printf '%s\n' "${a[@]}" | grep -E '^[0-9.]+$' | median); mb=$(printf '%s\n' "${b[@]}" | grep -E '^[0-9.]+$' | median)
	[ -z "${RAW:-}" ] || printf '  %s: perftest %s; xrnic-perf %s\n' "$label" "${a[*]}" "${b[*]}"
	printf '%-26s %12s %12s %7s\n' "$label" "$ma" "$mb" "$(awk -v x="$ma" -v y="$mb" 'BEGIN{ if (x+0 > 0 && y+0 > 0) printf "%.2f", x/y; else print "-" }')"
}
# bandwidth: column 4 (BW average, MiB/s in both); latency: column 5 (t_typical, us)
run "write_bw 64 KiB [MiB/s]" 4 ib_write_bw write_bw -s 65536 -n "${BW_ITERS:-5000}"
run "read_bw 64 KiB [MiB/s]" 4 ib_read_bw read_bw -s 65536 -n "${BW_ITERS:-5000}"
run "send_bw 64 KiB [MiB/s]" 4 ib_send_bw send_bw -s 65536 -n "${BW_ITERS:-5000}"
run "send_lat 2 B [us]" 5 ib_send_lat send_lat -s 2 -n 5000
run "write_lat 2 B [us]" 5 ib_write_lat write_lat -s 2 -n 5000
if [ "$TR" = afxdp ]; then
	# ib_write_lat spins on memory in both processes: the poll loops'
	# spinning takes their cores (docs/VERBS-ABI.md, XRNIC_SPIN).
	PTENV=XRNIC_SPIN=0 run "write_lat 2 B XRNIC_SPIN=0 [us]" 5 ib_write_lat write_lat -s 2 -n 5000
fi
run "read_lat 2 B [us]" 5 ib_read_lat read_lat -s 2 -n 5000
run "atomic_lat FetchAdd [us]" 5 ib_atomic_lat atomic_lat -n 5000
echo "ratio: perftest / xrnic-perf (bandwidth: higher is better for perftest; latency: lower)"
