#!/bin/sh
# check-symbols.sh [LIBDIR]: every (symbol, version node, default or not)
# that Debian's libibverbs.so.1 exports must be exported by ours in LIBDIR
# (default: bin/lib of this tree), ours must export nothing beyond them
# except the XRNIC_PRIVATE_1 and XRNICDV_1.0 nodes (and signal and
# sigaction at GLIBC_2.2.5, signals.c), and those must hold
# what xrnic_private.h and infiniband/xrnicdv.h declare. Exit 1 with the
# differences otherwise, 2 if a library is missing.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
libdir=${1:-$here/../../bin/lib}
sys=${SYSLIBDIR:-/usr/lib/x86_64-linux-gnu}
lib=libibverbs.so.1
[ -e "$sys/$lib" ] || { echo "check-symbols: $sys/$lib missing: apt-get install libibverbs1" >&2; exit 2; }
[ -e "$libdir/$lib" ] || { echo "check-symbols: $libdir/$lib missing: run make abi" >&2; exit 2; }
syms() { # "name version" ("(version)" for a non-default one), defined only
	objdump -T "$1" | awk '$0 !~ /\*UND\*/ && ($3 == "DF" || $3 == "DO" || $2 == "DF" || $2 == "DO") {
		v = $(NF-1); w = v; gsub(/[()]/, "", w); if (w != $NF) print $NF, v }' | LC_ALL=C sort -u
}
decls() { # the function names a header declares
	sed -n 's/^[a-z].*[ *]\(xrnic[a-z0-9_]*\)(.*/\1/p' "$1" | LC_ALL=C sort -u
}
t=${TMPDIR:-/tmp}/check-symbols.$$
trap 'rm -f "$t".*' EXIT
syms "$sys/$lib" > "$t.want"
syms "$libdir/$lib" > "$t.have"
fail=0
missing=$(LC_ALL=C comm -23 "$t.want" "$t.have")
extra=$(LC_ALL=C comm -13 "$t.want" "$t.have" | grep -v ' XRNIC_PRIVATE_1$' | grep -v ' XRNICDV_1\.0$' |
	grep -vx 'signal GLIBC_2\.2\.5' | grep -vx 'sigaction GLIBC_2\.2\.5' || true)
if [ -n "$missing" ]; then
	echo "$lib: missing (symbol version):"; echo "$missing" | sed 's/^/  /'; fail=1
fi
if [ -n "$extra" ]; then
	echo "$lib: exported but not in Debian's:"; echo "$extra" | sed 's/^/  /'; fail=1
fi
for node in XRNIC_PRIVATE_1:$here/../include/xrnic_private.h XRNICDV_1.0:$here/../include/infiniband/xrnicdv.h; do
	v=${node%%:*}; h=${node#*:}
	decls "$h" > "$t.decl"
	grep " $v\$" "$t.have" | cut -d' ' -f1 | LC_ALL=C sort -u > "$t.node" || true
	d=$(LC_ALL=C comm -3 "$t.decl" "$t.node")
	if [ -n "$d" ]; then
		echo "$lib: $v differs from $(basename "$h") (left: declared only, right: exported only):"
		echo "$d" | sed 's/^/  /'; fail=1
	fi
done
[ $fail = 0 ] && echo "$lib: ok, $(wc -l < "$t.want") Debian (symbol, version) pairs, plus XRNIC_PRIVATE_1 and XRNICDV_1.0"
exit $fail
