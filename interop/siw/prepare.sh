#!/usr/bin/env bash
# prepare.sh builds what the siw guest boots: Debian's own kernel, siw.ko
# built out of tree from Debian's linux-source of exactly that kernel, and an
# initramfs with the kernel modules and Debian's rdma-core tools, perftest
# and qperf. Packages are fetched with `apt-get download` and unpacked with
# `dpkg -x`: nothing is installed on the host. Everything lands in the cache
# directory (argument 1, default /var/cache/xrnic/siw); a warm run fetches
# and builds nothing.
#
# Output (printed on the last line): DIR containing vmlinuz, root/ (the
# initramfs tree; the harness packs it with its own agent) and rdma-core/
# (headers and libraries for compiling the C peer).
set -euo pipefail

cache=${1:-/var/cache/xrnic/siw}
mkdir -p "$cache"
log() { echo "siw-prepare: $*" >&2; }

# Which kernel: the one Debian's linux-image-amd64 points at now. Resolving
# needs the package lists; one `apt-get update` if they are missing.
resolve() {
	apt-cache depends linux-image-amd64 2>/dev/null | sed -n 's/.*Depends: linux-image-\(6\.1\.[0-9]*-[0-9]*-amd64\)$/\1/p' | head -1
}
kabi=$(resolve || true)
if [ -z "$kabi" ]; then
	log "package lists missing: apt-get update"
	apt-get update -qq >&2
	kabi=$(resolve)
fi
[ -n "$kabi" ] || { log "cannot resolve Debian's linux-image-amd64"; exit 1; }
kver=$(apt-cache show "linux-image-$kabi" | sed -n 's/^Version: //p' | head -1)
srcver=$(apt-cache show linux-source-6.1 | sed -n 's/^Version: //p' | head -1)
if [ "$kver" != "$srcver" ]; then
	log "linux-image-$kabi is $kver but linux-source-6.1 is $srcver: siw.ko must be built from the same version"
	exit 1
fi
# The script's own hash is part of the name: a changed guest is rebuilt.
out="$cache/$kabi-$kver-$(sha256sum "$0" | cut -c1-12)"
if [ -e "$out/.done" ]; then
	echo "$out"
	exit 0
fi
# Cold: the lists may name versions the archive no longer serves.
if [ -z "${XRNIC_SIW_UPDATED:-}" ]; then
	log "apt-get update (nothing built for $kabi $kver yet)"
	apt-get update -qq >&2 || log "apt-get update failed; trying with the lists as they are"
	XRNIC_SIW_UPDATED=1 exec bash "$0" "$cache"
fi
log "building the guest for $kabi ($kver) in $out"
rm -rf "$cache/$kabi-"* # older builds

mkdir -p "$out"
kflav=${kabi%-amd64}
# Packages per kernel version: a new kernel fetches everything anew.
debs="$cache/debs/$kabi-$kver"
for d in "$cache"/debs/*; do
	[ -d "$d" ] && [ "$d" != "$debs" ] && rm -rf "$d"
done
mkdir -p "$debs"

pkgs=(
	"linux-image-$kabi" "linux-headers-$kabi" "linux-headers-$kflav-common" linux-kbuild-6.1 linux-source-6.1
	libibverbs1 librdmacm1 ibverbs-providers rdmacm-utils ibverbs-utils perftest qperf
	libibverbs-dev librdmacm-dev libnl-3-200 libnl-route-3-200 libibumad3 libpci3 busybox-static
)
(
	cd "$debs"
	missing=()
	for p in "${pkgs[@]}"; do
		ls "${p}"_*.deb >/dev/null 2>&1 || missing+=("$p")
	done
	if [ ${#missing[@]} -gt 0 ]; then
		log "apt-get download ${missing[*]}"
		apt-get download -q "${missing[@]}" >&2 2>&1 | grep -v '^W: Download is performed unsandboxed' >&2 || true
	fi
	for p in "${pkgs[@]}"; do
		ls "${p}"_*.deb >/dev/null 2>&1 || { log "download of $p failed"; exit 1; }
	done
)
deb() { ls "$debs/$1"_*.deb | sort -V | tail -1; }

# siw.ko: the driver's sources from linux-source, built against the headers.
work="$out/work"
mkdir -p "$work/hdr" "$work/siw"
for p in "linux-headers-$kabi" "linux-headers-$kflav-common" linux-kbuild-6.1; do
	dpkg -x "$(deb "$p")" "$work/hdr"
done
hdr="$work/hdr/usr/src/linux-headers-$kabi"
# The flavour's Makefile includes the common tree by absolute path.
sed -i "s|/usr/src/linux-headers-$kflav-common|$work/hdr/usr/src/linux-headers-$kflav-common|" "$hdr/Makefile"
dpkg-deb --fsys-tarfile "$(deb linux-source-6.1)" | tar -xO ./usr/src/linux-source-6.1.tar.xz |
	tar -xJ -C "$work/siw" --strip-components=5 --wildcards 'linux-source-6.1/drivers/infiniband/sw/siw/*'
# siw's MPA choices are compile-time constants (siw_main.c): one module per
# variant the suite needs as an initiator.
variant() { # name, sed expression on siw_main.c
	local d="$work/siw-$1"
	cp -r "$work/siw" "$d"
	[ -z "$2" ] || sed -i "$2" "$d/siw_main.c"
	if [ -n "$2" ] && cmp -s "$work/siw/siw_main.c" "$d/siw_main.c"; then
		log "variant $1: the expression '$2' changed nothing in siw_main.c"
		exit 1
	fi
	log "make siw.ko ($1)"
	make -s -C "$hdr" M="$d" CONFIG_RDMA_SIW=m modules >&2 2>"$d/build.log" || { cat "$d/build.log" >&2; exit 1; }
	mkdir -p "$out/siw/$1"
	cp "$d/siw.ko" "$out/siw/$1/siw.ko"
}
variant stock ''
variant crc 's/^const bool mpa_crc_required;/const bool mpa_crc_required = true;/'
variant p2p 's/^const bool peer_to_peer;/const bool peer_to_peer = true;/'
variant rev1 's/^u_char mpa_version = MPA_REVISION_2;/u_char mpa_version = MPA_REVISION_1;/'

# The kernel and the modules the guest loads, in dependency order.
dpkg -x "$(deb "linux-image-$kabi")" "$work/img"
cp "$work/img/boot/vmlinuz-$kabi" "$out/vmlinuz"
depmod -b "$work/img" "$kabi"
root="$work/root"
mkdir -p "$root"/{proc,sys,dev,tmp,run,etc,lib/modules,usr/bin,usr/lib/x86_64-linux-gnu,lib64,root}
: >"$root/lib/modules/order"
for m in virtio_pci virtio_net crc32c_generic libcrc32c ib_uverbs rdma_ucm; do
	modprobe -d "$work/img" -S "$kabi" --show-depends "$m" | sed -n 's/^insmod //p' | while read -r f; do
		b=$(basename "$f")
		grep -qx "$b" "$root/lib/modules/order" && continue
		cp "$f" "$root/lib/modules/$b"
		echo "$b" >>"$root/lib/modules/order"
	done
done
cp "$out/siw/stock/siw.ko" "$root/lib/modules/siw.ko"
echo siw.ko >>"$root/lib/modules/order"
cp -r "$out/siw" "$root/lib/modules/siw-variants"

# rdma-core and the tools, from Debian's packages.
rc="$out/rdma-core"
mkdir -p "$rc"
for p in libibverbs1 librdmacm1 ibverbs-providers rdmacm-utils ibverbs-utils perftest qperf \
	libibverbs-dev librdmacm-dev libnl-3-200 libnl-route-3-200 libibumad3 libpci3 busybox-static; do
	dpkg -x "$(deb "$p")" "$rc"
done
# Only the siw provider is configured: nothing else can match a device here.
mkdir -p "$root/etc/libibverbs.d" "$root/usr/lib/x86_64-linux-gnu/libibverbs"
cp "$rc/etc/libibverbs.d/siw.driver" "$root/etc/libibverbs.d/"
cp -a "$rc"/usr/lib/x86_64-linux-gnu/libibverbs/libsiw-rdmav*.so "$root/usr/lib/x86_64-linux-gnu/libibverbs/"
cp "$rc/bin/busybox" "$root/usr/bin/busybox"

bins=("$rc"/usr/bin/rping "$rc"/usr/bin/ibv_devinfo "$rc"/usr/bin/ibv_devices "$rc"/usr/bin/ib_*_{bw,lat} "$rc"/usr/bin/qperf /usr/bin/rdma)
libpath="$rc/usr/lib/x86_64-linux-gnu:$rc/lib/x86_64-linux-gnu"
for b in "${bins[@]}"; do
	cp "$b" "$root/usr/bin/"
	LD_LIBRARY_PATH=$libpath ldd "$b" | awk '/=>/ {print $3} /^\t\/lib64/ {print $1}' | while read -r l; do
		[ -n "$l" ] && [ -e "$l" ] || { log "$b: unresolved library ($l)"; exit 1; }
		case "$l" in
		"$rc"/*) dst=${l#"$rc"} ;;
		*) dst=$l ;;
		esac
		dst=/usr/lib/x86_64-linux-gnu/$(basename "$dst")
		[ "$(basename "$l")" = ld-linux-x86-64.so.2 ] && dst=/lib64/ld-linux-x86-64.so.2
		[ -e "$root$dst" ] || cp -L "$l" "$root$dst"
	done
done
# The provider is dlopen()ed: its own needs as well.
LD_LIBRARY_PATH=$libpath ldd "$root"/usr/lib/x86_64-linux-gnu/libibverbs/libsiw-rdmav*.so | awk '/=>/ {print $3}' | while read -r l; do
	dst=/usr/lib/x86_64-linux-gnu/$(basename "$l")
	[ -e "$root$dst" ] || cp -L "$l" "$root$dst"
done
# libgcc_s is dlopen()ed by glibc when a thread is cancelled (rping does).
cp -L /lib/x86_64-linux-gnu/libgcc_s.so.1 "$root/usr/lib/x86_64-linux-gnu/"
ln -s usr/lib/x86_64-linux-gnu "$root/lib/x86_64-linux-gnu"
ln -s ../lib64/ld-linux-x86-64.so.2 "$root/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2" 2>/dev/null || true
for a in sh cat dmesg ip ls ps kill sleep netstat insmod rmmod lsmod grep tail head; do
	ln -sf busybox "$root/usr/bin/$a"
done
ln -s usr/bin "$root/bin"
ln -s usr/bin "$root/sbin"
echo "root:x:0:0:root:/root:/bin/sh" >"$root/etc/passwd"

mv "$root" "$out/root"
rm -rf "$work"
touch "$out/.done"
log "done: $(du -sh "$out/root" | cut -f1) guest root"
echo "$out"
