#!/bin/sh
# check-symbols.sh [LIBDIR]: every (symbol, version node) that Debian's
# librdmacm.so.1, libmlx5.so.1 and libefa.so.1 export must be exported by
# ours in LIBDIR (default: bin/lib of this tree), and ours must export
# nothing beyond them. Exit 1 with the differences otherwise.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
libdir=${1:-$here/../../bin/lib}
sys=${SYSLIBDIR:-/usr/lib/x86_64-linux-gnu}
syms() { # name version, one per line, defined functions and objects only
	objdump -T "$1" | awk '$0 !~ /\*UND\*/ && ($3 == "DF" || $3 == "DO" || $2 == "DF" || $2 == "DO") {
		v = $(NF-1); gsub(/[()]/, "", v); if (v != $NF) print $NF, v }' | sort -u
}
fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for lib in librdmacm.so.1 libmlx5.so.1 libefa.so.1; do
	[ -e "$sys/$lib" ] || { echo "check-symbols: $sys/$lib missing: apt-get install librdmacm1 ibverbs-providers" >&2; exit 2; }
	[ -e "$libdir/$lib" ] || { echo "check-symbols: $libdir/$lib missing: run make abi" >&2; exit 2; }
	syms "$sys/$lib" > "$tmp/want"
	syms "$libdir/$lib" > "$tmp/have"
	missing=$(comm -23 "$tmp/want" "$tmp/have")
	extra=$(comm -13 "$tmp/want" "$tmp/have")
	n=$(wc -l < "$tmp/want")
	if [ -n "$missing" ]; then
		echo "$lib: missing (symbol version):"; echo "$missing" | sed 's/^/  /'; fail=1
	fi
	if [ -n "$extra" ]; then
		echo "$lib: exported but not in Debian's:"; echo "$extra" | sed 's/^/  /'; fail=1
	fi
	[ -z "$missing$extra" ] && echo "$lib: ok, $n (symbol, version) pairs"
done
exit $fail
