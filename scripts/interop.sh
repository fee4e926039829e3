#!/usr/bin/env bash
# make interop: the siw matrix (go test -v through interop-summary.sh).
#
# A case that failed because the siw guest's network died (its log says
# the guest agent at 198.18.60.2:7999 had no route, or holds the guest's
# post-mortem) is run once more, alone, on a freshly booted guest: the
# guest loss is not understood yet (it follows cases that put our afxdp
# transport on the guest's tap; see docs/INTEROP.md), and it must not hide
# the other results. Each retry is named; the run passes only if every
# retried case then passes, and any other failure fails at once.
set -uo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
log=$(mktemp)
trap 'rm -f "$log"' EXIT
XRNIC_INTEROP=1 "$GO" test -count=1 -timeout 20m -v ${INTEROP_RUN:-} ./interop/siw/ 2>&1 | tee "$log" | scripts/interop-summary.sh
[ $? -eq 0 ] && exit 0

# Each failed leaf case, and whether its output shows the guest lost.
mapfile -t cases < <(awk '
	/^=== (RUN|CONT|PAUSE|NAME)/ { cur = $3; next }
	/198\.18\.60\.2:7999.*no route to host|stopped answering|what became of the guest/ { lost[cur] = 1 }
	/^ *--- FAIL: [^ ]+\/[^ ]+ / { print $3 "\t" (($3 in lost) ? "lost" : "other") }
' "$log")
if [ ${#cases[@]} -eq 0 ]; then
	exit 1 # a build, TestMain or parent-level failure
fi
for c in "${cases[@]}"; do
	if [ "${c#*	}" != lost ]; then
		echo "interop: ${c%%	*} failed, not for a lost guest: no retry" >&2
		exit 1
	fi
done
for c in "${cases[@]}"; do
	name=${c%%	*}
	# -run takes one anchored, quoted regexp per level.
	re=$(awk -v n="$name" 'BEGIN {
		k = split(n, p, "/"); s = ""
		for (i = 1; i <= k; i++) { q = p[i]; gsub(/[][\\.^$*+?(){}|]/, "\\\\&", q); s = s (i > 1 ? "/" : "") "^" q "$" }
		print s }')
	echo "interop: $name lost the siw guest: running it once more on a fresh guest (-run '$re')"
	out=$(XRNIC_INTEROP=1 "$GO" test -count=1 -timeout 10m -v -run "$re" ./interop/siw/ 2>&1)
	rc=$?
	printf '%s\n' "$out"
	if [ $rc -ne 0 ] || ! printf '%s\n' "$out" | grep -qF -- "--- PASS: $name "; then
		echo "interop: FAIL: $name failed again on a fresh guest" >&2
		exit 1
	fi
	echo "interop: $name passed on a fresh guest (retried once after a lost guest)"
done
# The count again, each retried case now passed (make test reads the last
# count line of a step).
pass=$(grep -c -- '--- PASS: [^ ]*/' "$log")
fail=$(grep -c -- '--- FAIL: [^ ]*/' "$log")
skip=$(grep -c -- '--- SKIP: ' "$log")
echo "interop: every failure was a lost siw guest, and each case passed when run again: ${#cases[@]} retried"
echo "interop: $((pass + ${#cases[@]})) passed, $((fail - ${#cases[@]})) failed, $skip skipped (siw cases; ${#cases[@]} retried after a lost guest)"
