#!/usr/bin/env bash
# Runs every native Go fuzz target in the module for $FUZZTIME each (default 3s).
# New corpus entries that crash are written to the package's testdata/fuzz and
# fail the run, so a finding is never lost.
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime=${FUZZTIME:-3s}
count=0
failed=0
while IFS= read -r line; do
	file=${line%%:*}
	name=$(sed -E 's/^func (Fuzz[A-Za-z0-9_]*).*/\1/' <<<"${line#*:}")
	pkg=$(dirname "$file")
	count=$((count + 1))
	echo "fuzz $pkg $name ($fuzztime)"
	if ! go test -run='^$' -fuzz="^${name}\$" -fuzztime="$fuzztime" "$pkg" >/tmp/xrnic-fuzz.$$ 2>&1; then
		cat /tmp/xrnic-fuzz.$$
		failed=$((failed + 1))
	fi
done < <(grep -rHE '^func Fuzz[A-Za-z0-9_]*\(f \*testing\.F\)' --include='*_test.go' . | sort)
rm -f /tmp/xrnic-fuzz.$$
echo "fuzz: $count targets, $failed failed"
[ "$failed" -eq 0 ]
