#!/bin/sh
# run.sh [LIBDIR]: builds loopback.c and pingpong.c against the real
# libibverbs.so.1 and libxrnic.so in LIBDIR (default bin/lib; make abi
# first) and runs them: an RC pair in one process over 127.0.0.1 through
# the ibverbs ABI, then ib_write_lat's memory-polling ping-pong between two
# processes, initiator first and responder first. Exits non-zero on failure.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
libdir=${1:-$here/../../../bin/lib}
[ -e "$libdir/libibverbs.so.1" ] && [ -e "$libdir/libxrnic.so" ] || { echo "run.sh: $libdir has no libibverbs.so.1/libxrnic.so: run make abi" >&2; exit 2; }
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
cc -O1 -g -Wall -Wno-missing-field-initializers -I"$here/../../include" -o "$d/loopback" \
	"$here/loopback.c" "$libdir/libibverbs.so.1" -L"$libdir" -lxrnic
cc -O1 -g -Wall -Wno-missing-field-initializers -I"$here/../../include" -o "$d/pingpong" \
	"$here/pingpong.c" "$libdir/libibverbs.so.1" -L"$libdir" -lxrnic
LD_LIBRARY_PATH=$libdir "$d/loopback"
LD_LIBRARY_PATH=$libdir timeout 120 "$d/pingpong" 1000
LD_LIBRARY_PATH=$libdir RESPONDER_FIRST=1 timeout 120 "$d/pingpong" 1000
