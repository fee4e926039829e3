#!/bin/sh
# run.sh: builds librdmacm.so.1 (abi/rdmacm) against the fake engine and
# libibverbs of this directory, with ASan and UBSan, and runs cmtest.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
abi=$here/../..
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
CC=${CC:-cc}
F="-std=gnu11 -g -O1 -fPIC -Wall -Wextra -Werror -Wno-unused-parameter -fvisibility=hidden \
   -fsanitize=address,undefined -fno-omit-frame-pointer -I$abi/include -D_GNU_SOURCE"
$CC $F -shared -Wl,-soname,libxrnic.so -o "$out/libxrnic.so" "$here/fake_engine.c"
$CC $F -shared -Wl,-soname,libibverbs.so.1 -o "$out/libibverbs.so.1" "$here/fake_verbs.c" -lpthread
$CC $F -shared -Wl,-z,defs -Wl,-soname,librdmacm.so.1 \
	-Wl,--version-script="$abi/rdmacm/librdmacm.map" -o "$out/librdmacm.so.1" \
	"$abi"/rdmacm/*.c "$out/libibverbs.so.1" -lpthread
# librdmacm reaches the engine only through libibverbs' table (dlopen).
! readelf -d "$out/librdmacm.so.1" | grep -q 'NEEDED.*libxrnic' || { echo "librdmacm.so.1 links libxrnic.so" >&2; exit 1; }
$CC $F -o "$out/cmtest" "$here/cmtest.c" "$out/librdmacm.so.1" "$out/libibverbs.so.1" \
	"$out/libxrnic.so" -lpthread
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1 LD_LIBRARY_PATH="$out" timeout 120 "$out/cmtest"
