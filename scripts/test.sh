#!/usr/bin/env bash
# make test: the steps CI runs, each one whatever became of the others;
# every failed step is named at the end, with each step's time, and the
# exit status is non-zero if any failed. The last line adds up the
# steps' "NAME: N passed, N failed, N skipped" lines (go test's counts
# from make unit, the interop cases).
set -uo pipefail
cd "$(dirname "$0")/.."
MAKE=${MAKE:-make}
failed=()
times=()
log=$(mktemp)
trap 'rm -f "$log"' EXIT
for s in check abi-libs unit interop fuzz-short; do
	start=$SECONDS
	echo "== make $s"
	if "$MAKE" --no-print-directory "$s" 2>&1 | tee -a "$log"; then
		r=ok
	else
		r=FAILED
		failed+=("$s")
	fi
	times+=("$s $r $((SECONDS - start))s")
	echo "== make $s: $r ($((SECONDS - start)) s)"
done
echo "== make test:"
printf '   %s\n' "${times[@]}"
# The last count line of each name (make interop prints a second one
# after retrying a case that lost the siw guest).
read -r p f k < <(sed -nE 's/^([a-z-]+): ([0-9]+) passed, ([0-9]+) failed, ([0-9]+) skipped.*/\1 \2 \3 \4/p' "$log" |
	awk '{c[$1] = $2 " " $3 " " $4} END {for (n in c) {split(c[n], v, " "); p += v[1]; f += v[2]; k += v[3]} print p + 0, f + 0, k + 0}')
if [ ${#failed[@]} -gt 0 ]; then
	echo "test: FAILED steps: ${failed[*]}"
else
	echo "test: every step passed"
fi
echo "test: $p passed, $f failed, $k skipped"
[ ${#failed[@]} -eq 0 ]
