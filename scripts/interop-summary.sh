#!/usr/bin/env bash
# Passes `go test -v` output through and ends with the matrix's pass and
# fail counts (each leaf case), keeping go test's exit status.
set -o pipefail
pass=0 fail=0 skip=0
while IFS= read -r line; do
	printf '%s\n' "$line"
	case "$line" in
	*"--- PASS: "*/*) pass=$((pass + 1)) ;;
	*"--- FAIL: "*/*) fail=$((fail + 1)) ;;
	*"--- SKIP: "*) skip=$((skip + 1)) ;;
	esac
done
echo "interop: $pass passed, $fail failed, $skip skipped (siw cases)"
