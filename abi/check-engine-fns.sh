#!/bin/sh
# check-engine-fns.sh: every function abi/include/xrnic_engine.h declares
# must be in abi/include/xrnic_engine_fns.h (the table libibverbs.so.1
# fills with dlsym), and nothing else. Run by make abi-libs; exit 1 with
# the differences.
set -eu
inc=$(cd "$(dirname "$0")" && pwd)/include
t=${TMPDIR:-/tmp}/check-engine-fns.$$
trap 'rm -f "$t".*' EXIT
# Declarations: "<type> [*]xrnic_<name>(" at the start of a line.
sed -n 's/^[a-z].*[ *]xrnic_\([a-z0-9_]*\)(.*/\1/p' "$inc/xrnic_engine.h" | LC_ALL=C sort -u > "$t.h"
# The list: "XRNIC_FN(kind, ret, name, ..." at the start of a line.
sed -n 's/^XRNIC_FN([A-Z], *[a-z0-9_ *]*, *\([a-z0-9_]*\),.*/\1/p' "$inc/xrnic_engine_fns.h" | LC_ALL=C sort -u > "$t.l"
[ -s "$t.h" ] && [ -s "$t.l" ] || { echo "check-engine-fns: no functions found (header format changed?)" >&2; exit 1; }
d=$(LC_ALL=C comm -3 "$t.h" "$t.l")
if [ -n "$d" ]; then
	echo "xrnic_engine_fns.h differs from xrnic_engine.h (left: declared in xrnic_engine.h only, right: listed only):" >&2
	echo "$d" | sed 's/^/  xrnic_/; s/^  xrnic_\t/\t  xrnic_/' >&2
	echo "add each new engine function to abi/include/xrnic_engine_fns.h (XRNIC_FN)" >&2
	exit 1
fi
echo "xrnic_engine_fns.h: ok, $(wc -l < "$t.h") engine functions"
