#!/usr/bin/env bash
# Runs every native Go fuzz target in the module for $FUZZTIME each (default 3s).
# A crashing input is written to the package's testdata/fuzz and fails the run.
#
# One exception, for loaded CI machines: when the fuzzing engine reports that a
# worker "hung or terminated unexpectedly", the input it saved is replayed as a
# normal test; if the replay passes (no panic, no hang within 60s) the report
# is a scheduling artefact of the fuzzing engine, not a finding: it is printed
# as a warning and the input is removed. Likewise a run that ends with
# "context deadline exceeded" while minimizing a new corpus entry, having
# written no failing input, is an engine artefact. Any other failure counts.
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime=${FUZZTIME:-3s}
count=0
failed=0
flaky=0
log=$(mktemp)
trap 'rm -f "$log"' EXIT
while IFS= read -r line; do
	file=${line%%:*}
	name=$(sed -E 's/^func (Fuzz[A-Za-z0-9_]*).*/\1/' <<<"${line#*:}")
	pkg=./$(dirname "$file")
	count=$((count + 1))
	echo "fuzz $pkg $name ($fuzztime)"
	if go test -run='^$' -fuzz="^${name}\$" -fuzztime="$fuzztime" "$pkg" >"$log" 2>&1; then
		continue
	fi
	input=$(sed -nE 's/.*Failing input written to (testdata\/fuzz\/[^ ]+).*/\1/p' "$log" | head -1)
	if grep -q 'fuzzing process hung or terminated unexpectedly' "$log" && [ -n "$input" ] &&
		go test -count=1 -timeout 60s -run="^${name}\$/^$(basename "$input")\$" "$pkg" >/dev/null 2>&1; then
		echo "warning: $pkg $name: the fuzzing engine lost a worker, but the saved input $input replays cleanly; not a finding"
		rm -f "$pkg/$input"
		flaky=$((flaky + 1))
		continue
	fi
	if [ -z "$input" ] && grep -q 'context deadline exceeded' "$log" && ! grep -qE 'panic|fatal error' "$log"; then
		# The engine ran out of -fuzztime while minimizing a new
		# (non-failing) corpus entry and reports the deadline as a
		# failure; no failing input exists.
		echo "warning: $pkg $name: the fuzzing engine hit its deadline while minimizing; no failing input"
		flaky=$((flaky + 1))
		continue
	fi
	cat "$log"
	failed=$((failed + 1))
done < <(grep -rHE '^func Fuzz[A-Za-z0-9_]*\(f \*testing\.F\)' --include='*_test.go' . | sed 's|^\./||' | sort)
echo "fuzz: $count targets, $failed failed, $flaky engine artefacts (lost workers replayed clean, deadline during minimization)"
[ "$failed" -eq 0 ]
