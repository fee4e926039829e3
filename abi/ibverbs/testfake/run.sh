#!/bin/sh
# run.sh: builds libibverbs.so.1 against the fake engine (fake.c) in a
# temporary directory and runs test.c, check-symbols.sh, ibv_devices and
# ibv_devinfo -v (Debian's) on it, and the open-failure path. Needs cc and
# libibverbs-dev; exits non-zero on any failure.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
abi=$here/../..
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
F="-O2 -g -std=gnu11 -fPIC -Wall -Wextra -Werror -Wno-unused-parameter -fvisibility=hidden -I$abi/include -D_GNU_SOURCE"
cc $F -include stdlib.h -shared -Wl,-soname,libxrnic.so -o "$d/libxrnic.so" "$here/fake.c"
cc $F -shared -Wl,-z,defs -Wl,-soname,libibverbs.so.1 \
	-Wl,--version-script="$abi/ibverbs/libibverbs.map" \
	-o "$d/libibverbs.so.1" "$abi"/ibverbs/*.c -lpthread
# The engine is loaded on first use (dlopen), never a dependency.
! readelf -d "$d/libibverbs.so.1" | grep -q 'NEEDED.*libxrnic' || { echo "libibverbs.so.1 links libxrnic.so" >&2; exit 1; }
cc -O1 -g -Wall -I"$abi/include" -o "$d/test" "$here/test.c" "$d/libibverbs.so.1" "$d/libxrnic.so" -Wl,-rpath-link,"$d"
LD_LIBRARY_PATH=$d "$d/test"
# Again under AddressSanitizer/UBSan: no read behind a foreign pointer.
if echo 'int main(void){return 0;}' | cc -fsanitize=address,undefined -x c -o "$d/asan-probe" - 2>/dev/null; then
	mkdir "$d/asan"
	cc $F -fsanitize=address,undefined -include stdlib.h -shared -o "$d/asan/libxrnic.so" "$here/fake.c"
	cc $F -fsanitize=address,undefined -shared -Wl,-soname,libibverbs.so.1 \
		-Wl,--version-script="$abi/ibverbs/libibverbs.map" \
		-o "$d/asan/libibverbs.so.1" "$abi"/ibverbs/*.c -lpthread
	cc -g -fsanitize=address,undefined -I"$abi/include" -o "$d/asan/test" "$here/test.c" \
		"$d/asan/libibverbs.so.1" "$d/asan/libxrnic.so" -Wl,-rpath-link,"$d/asan"
	ASAN_OPTIONS=detect_leaks=0 UBSAN_OPTIONS=halt_on_error=1 LD_LIBRARY_PATH=$d/asan "$d/asan/test" | sed 's/^/asan: /'
fi
"$abi/ibverbs/check-symbols.sh" "$d"
LD_LIBRARY_PATH=$d ibv_devices | grep -q xrnic0
LD_LIBRARY_PATH=$d ibv_devinfo -v > "$d/devinfo"
grep -q 'hca_id:	xrnic0' "$d/devinfo"
grep -q 'transport:			iWARP (1)' "$d/devinfo"
grep -q 'link_layer:		Ethernet' "$d/devinfo"
echo "ibv_devices, ibv_devinfo -v: xrnic0"
# The engine's error text, once, on stderr; errno for the caller.
if FAKE_OPEN_FAIL=1 LD_LIBRARY_PATH=$d ibv_devinfo > "$d/out" 2> "$d/err"; then
	echo "ibv_devinfo succeeded with a failing engine" >&2; exit 1
fi
grep -q 'xrnic: opening xrnic0 (xrnic_open) failed: fake: no interface (set XRNIC_IFACE)' "$d/err"
[ "$(grep -c 'fake: no interface' "$d/err")" = 1 ]
echo "open failure: $(head -1 "$d/err")"
# No engine: found neither next to libibverbs.so.1 nor on the path.
mkdir "$d/noeng"
cp "$d/libibverbs.so.1" "$d/noeng/"
if LD_LIBRARY_PATH=$d/noeng ibv_devinfo > "$d/out" 2> "$d/err"; then
	echo "ibv_devinfo succeeded without an engine" >&2; exit 1
fi
grep -q '^xrnic: cannot load the engine: libxrnic.so: cannot open shared object file' "$d/err"
[ "$(grep -c 'xrnic:' "$d/err")" = 1 ]
echo "no engine: $(head -1 "$d/err")"
# The engine found next to libibverbs.so.1 (dladdr), not on the path.
mkdir "$d/own"
cp "$d/libibverbs.so.1" "$d/libxrnic.so" "$d/own/"
cc -O1 -g -o "$d/own/devs" -x c - -x none "$d/own/libibverbs.so.1" -Wl,-rpath,"$d/own" <<'EOF2'
#include <stdio.h>
#include <infiniband/verbs.h>
int main(void)
{
	int n = 0;
	struct ibv_device **l = ibv_get_device_list(&n);
	struct ibv_context *c = l && n == 1 ? ibv_open_device(l[0]) : NULL;

	return c && ibv_close_device(c) == 0 ? 0 : 1;
}
EOF2
env -u LD_LIBRARY_PATH "$d/own/devs"
echo "engine next to libibverbs.so.1: found"
