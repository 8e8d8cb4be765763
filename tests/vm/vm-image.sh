# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
# shellcheck shell=bash
#
# vm-image.sh: the part of the VM harness that run-vm.sh (one VM) and run-twovm.sh (two
# VMs on one virtual network) share, sourced by both: the kernel and initrd cache, the
# environment file a guest reads, and qemu's common arguments. The sourcing script sets
# prog, cache_root, and defines skip (exit 77) and die (exit 99) before calling these.
# shellcheck disable=SC2154,SC2034 # prog, cache_root, qemu, ... are the sourcing script's

# Bump when build_cache changes what it puts in the cache.
CACHE_FORMAT=2

# Modules loaded at boot, in this order (with their dependencies). Built-in ones and ones
# the kernel does not have are left out with a note. virtio_net is for run-twovm.sh's NIC
# (a VM of run-vm.sh has none).
MODULES=(crc32_generic virtio_pci virtio_rng virtio_net 9p 9pnet_virtio overlay veth inet_diag
	tcp_diag udp_diag unix_diag rdma_rxe ib_uverbs rdma_ucm ib_umad smc smc_diag sch_netem)

# ------------------------------------------------------------------ kernel and initrd

# The initrd's /init: load the modules, mount the host's root (9p, read-only) under a
# tmpfs overlay and hand over to the guest init script named on the kernel command line.
# Its text is part of the cache key.
read -r -d '' INITRD_INIT <<'EOF' || true
#!/bin/busybox sh
# The fixed part of the guest's setup runs here, from memory: every program started
# later comes through 9p under emulation and costs a tenth of a second or more.
/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
for m in $(cat /mods/order); do
	insmod "/mods/$m" || echo "smc-vm: insmod $m failed"
done
arg() { sed -n "s/.*[[:space:]]$1=\([^[:space:]]*\).*/\1/p" /proc/cmdline; }
die() { echo "smc-vm: $*"; poweroff -f; }
init=$(arg smcvm.init)
cgroup2=$(arg smcvm.cgroup2)
mkdir -p /lower /upper /newroot
mount -t 9p -o trans=virtio,version=9p2000.L,ro,cache=loose,msize=512000 hostroot /lower ||
	die "cannot mount the host's root"
mount -t tmpfs -o mode=0755 tmpfs /upper
mkdir -p /upper/u /upper/w
mount -t overlay overlay -o lowerdir=/lower,upperdir=/upper/u,workdir=/upper/w /newroot ||
	die "overlay mount failed"
for d in proc sys dev; do mount --move /$d /newroot/$d; done
cd /newroot
mount -t tmpfs -o mode=0755 tmpfs run
mkdir -p run/smcvm
mount -t 9p -o trans=virtio,version=9p2000.L,cache=none smcvmx run/smcvm ||
	die "cannot mount the exchange directory"
# /tmp stays the overlay's (writable, in guest memory): a fresh tmpfs there would hide
# a source or build tree under the host's /tmp (CI may check out there)
mkdir -p dev/pts dev/shm
mount -t devpts -o newinstance,ptmxmode=0666 devpts dev/pts
mount -t tmpfs -o mode=1777 tmpfs dev/shm
mount -t bpf -o mode=0755 bpf sys/fs/bpf
if [ "$cgroup2" != /sys/fs/cgroup ]; then
	mount -t tmpfs -o mode=0755 tmpfs sys/fs/cgroup
	mkdir -p "./$cgroup2"
fi
mount -t cgroup2 cgroup2 "./$cgroup2"
mount -t debugfs debugfs sys/kernel/debug
hostname smc-vm
ip link set lo up
# No CR before LF on the serial console: logs on the host stay plain text.
stty -onlcr </dev/console
cd /
exec switch_root /newroot /bin/bash "$init"
EOF

# kernel_package: prints the versioned kernel package linux-image-amd64 depends on.
kernel_package() {
	apt-cache depends linux-image-amd64 2>/dev/null |
		awk '/Depends: linux-image-[0-9]/ { print $2; exit }'
}

# module_list MODDIR: the .ko paths (relative to MODDIR) to load, dependencies first.
module_list() {
	local moddir=$1 want
	want=$(printf '%s\n' "${MODULES[@]}")
	awk -v want="$want" '
		function norm(p) { sub(/.*\//, "", p); sub(/\.ko.*/, "", p); gsub(/-/, "_", p); return p }
		function add(k,   i, n, d) {
			if (k in seen) return
			seen[k] = 1
			n = split(deps[k], d, " ")
			for (i = n; i >= 1; i--) add(d[i])
			print k
		}
		FILENAME ~ /modules.dep$/ { k = $1; sub(/:$/, "", k); $1 = ""; deps[k] = $0; path[norm(k)] = k; next }
		{ builtin[norm($0)] = 1 }
		END {
			n = split(want, w, "\n")
			for (i = 1; i <= n; i++) {
				if (w[i] in path) add(path[w[i]])
				else if (!(w[i] in builtin)) printf "smc-vm: kernel has no module %s\n", w[i] > "/dev/stderr"
			}
		}' "$moddir/modules.dep" "$moddir/modules.builtin"
}

# extract_vmlinux BZIMAGE OUT: the ELF kernel compressed inside a bzImage (xz, gzip or
# zstd as Debian may build it), if it has a PVH entry note.
extract_vmlinux() {
	python3 - "$1" "$2" <<'PY' 2>/dev/null
import gzip, lzma, subprocess, sys
data = open(sys.argv[1], "rb").read()
def xz(b): return lzma.LZMADecompressor().decompress(b)
def gz(b): return gzip.GzipFile(fileobj=__import__("io").BytesIO(b)).read()
def zst(b): return subprocess.run(["zstd", "-dc"], input=b, capture_output=True).stdout
for magic, dec in ((b"\xfd7zXZ\x00", xz), (b"\x1f\x8b\x08", gz), (b"\x28\xb5\x2f\xfd", zst)):
    at = data.find(magic)
    while at >= 0:
        try:
            out = dec(data[at:])
        except Exception:
            out = b""
        if out[:4] == b"\x7fELF" and b"Xen" in out:
            open(sys.argv[2], "wb").write(out)
            sys.exit(0)
        at = data.find(magic, at + 1)
sys.exit(1)
PY
}

# build_cache DEB DIR: kernel and initrd from the kernel package DEB into DIR.
build_cache() {
	local deb=$1 dir=$2 work kv moddir m
	work=$(mktemp -d "${TMPDIR:-/tmp}/smc-vm-build.XXXXXX")
	dpkg-deb -x "$deb" "$work/root"
	kv=$(ls "$work/root/lib/modules")
	moddir=$work/root/lib/modules/$kv
	depmod -b "$work/root" "$kv"
	mkdir -p "$work/initrd/bin" "$work/initrd/mods" "$work/initrd/proc" "$work/initrd/sys" \
		"$work/initrd/dev"
	cp "$(command -v busybox)" "$work/initrd/bin/busybox"
	module_list "$moddir" >"$work/mods.txt"
	: >"$work/initrd/mods/order"
	while read -r m; do
		cp "$moddir/$m" "$work/initrd/mods/"
		basename -- "$m" >>"$work/initrd/mods/order"
	done <"$work/mods.txt"
	printf '%s\n' "$INITRD_INIT" >"$work/initrd/init"
	chmod 755 "$work/initrd/init"
	# Uncompressed: decompressing under emulation costs more than reading it.
	(cd "$work/initrd" && find . | cpio -o -H newc --quiet) >"$work/initrd.cpio"
	# The ELF kernel inside the bzImage boots directly (PVH entry): no firmware
	# and no decompression under emulation, 3-5 s less per boot. The bzImage stays
	# the fallback.
	cp "$work/root/boot/vmlinuz-$kv" "$work/kernel"
	extract_vmlinux "$work/kernel" "$work/vmlinux" || rm -f "$work/vmlinux"
	mkdir -p "$dir"
	mv "$work/kernel" "$work/initrd.cpio" "$dir/"
	[ -f "$work/vmlinux" ] && mv "$work/vmlinux" "$dir/"
	rm -rf "$work"
}

# prepare_kernel: sets kernel and initrd, building the cache entry when needed.
prepare_kernel() {
	local key pkg deb dl dir
	for c in dpkg-deb depmod cpio python3 busybox; do
		command -v "$c" >/dev/null 2>&1 ||
			skip "'$c' is not installed (Debian: busybox-static cpio kmod)"
	done
	[[ $'\n'$(busybox --list 2>/dev/null)$'\n' == *$'\n'insmod$'\n'* ]] || skip "busybox lacks insmod (install busybox-static)"
	# The cache key: the initrd recipe and module list, plus the kernel package.
	key=$(printf '%s\n' "$CACHE_FORMAT" "$INITRD_INIT" "${MODULES[@]}" | sha256sum | cut -c1-12)
	mkdir -p "$cache_root" 2>/dev/null || skip "cannot create the cache $cache_root"
	exec 9>"$cache_root/.lock"
	flock 9 # concurrent tests: one builds, the others wait and reuse
	if [ -n "${SMC_VM_KERNEL_DEB:-}" ]; then
		deb=$SMC_VM_KERNEL_DEB
		[ -f "$deb" ] || skip "SMC_VM_KERNEL_DEB=$deb: no such file"
		dir=$cache_root/$(basename -- "$deb" .deb)-$key
	else
		# A kernel built before with this recipe is used as is (asking apt which
		# kernel is current costs most of a second); SMC_VM_REFRESH=1 asks again.
		dir=$(find "$cache_root" -maxdepth 1 -name "linux-image-*-$key" 2>/dev/null | sort | tail -n 1)
		if [ -z "$dir" ] || [ ! -f "$dir/initrd.cpio" ] || [ "${SMC_VM_REFRESH:-0}" = 1 ]; then
			pkg=$(kernel_package)
			[ -n "$pkg" ] ||
				skip "no kernel package known to apt (apt-get update?) and nothing cached in $cache_root"
			dir=$cache_root/$pkg-$key
		fi
	fi
	if [ ! -f "$dir/initrd.cpio" ]; then
		if [ -z "${deb:-}" ]; then
			dl=$(mktemp -d "${TMPDIR:-/tmp}/smc-vm-dl.XXXXXX")
			(cd "$dl" && apt-get download "$pkg" >/dev/null 2>&1) ||
				{ rm -rf "$dl"; skip "cannot download $pkg (apt-get download)"; }
			deb=$(ls "$dl"/*.deb)
		fi
		echo "$prog: building kernel and initrd from $(basename -- "$deb") into $dir" >&2
		build_cache "$deb" "$dir" || { rm -rf "${dl:-}"; die "building the VM image failed"; }
		# Entries of older recipes or kernels are of no use any more.
		for old in "$cache_root"/linux-image-*; do
			[ "$old" = "$dir" ] || rm -rf -- "$old"
		done
		[ -n "${dl:-}" ] && rm -rf "$dl"
	fi
	exec 9>&-
	kernel=$dir/kernel
	[ -f "$dir/vmlinux" ] && kernel=$dir/vmlinux
	initrd=$dir/initrd.cpio
}

# vm_write_env FILE NAME...: the guest's environment file: the host's SMC_*, top_srcdir,
# top_builddir, srcdir, LANG, LC_*, ASAN_OPTIONS, UBSAN_OPTIONS and the variables NAME...,
# then SMC_IN_VM=1 and a cd to the caller's working directory.
vm_write_env() {
	local file=$1 v
	shift
	{
		for v in $(compgen -e); do
			case $v in
			SMC_* | top_srcdir | top_builddir | srcdir | LANG | LC_* | ASAN_OPTIONS | UBSAN_OPTIONS) ;;
			*) continue ;;
			esac
			printf 'export %s=%q\n' "$v" "${!v}"
		done
		for v in "$@"; do
			[ -n "${!v+set}" ] && printf 'export %s=%q\n' "$v" "${!v}"
		done
		echo "export SMC_IN_VM=1"
		printf 'cd %q || exit 99\n' "$PWD"
	} >"$file"
}

# vm_qemu_argv XDIR: sets qemu_argv to the qemu command line of a VM (without -append)
# booting $kernel and $initrd (prepare_kernel) with $accel, $smp, $mem, the host's root
# read-only and XDIR read-write (tag smcvmx, /run/smcvm in the guest) over 9p, and the
# serial console on stdout.
vm_qemu_argv() {
	qemu_argv=("$qemu" -accel "$accel" -smp "$smp" -m "$mem"
		-display none -monitor none -serial stdio -no-reboot -nodefaults
		-kernel "$kernel" -initrd "$initrd"
		-device virtio-rng-pci
		-virtfs "local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap"
		-virtfs "local,path=$1,mount_tag=smcvmx,security_model=none")
}
