#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#
# run-vm.sh: run one command inside a throw-away qemu VM that boots Debian's stock kernel
# (it has smc.ko, rdma_rxe, ib_uverbs) over this machine's own root filesystem, and exit
# with the command's exit status.
#
#   run-vm.sh [-t SECONDS] [-e NAME]... [--] COMMAND [ARGS...]
#
#   -t SECONDS  hard limit for the whole VM, boot included (default $SMC_VM_TIMEOUT or 600)
#   -e NAME     pass the host's variable NAME into the VM (repeatable); always passed:
#               SMC_*, top_srcdir, top_builddir, srcdir, LANG, LC_*, ASAN_OPTIONS,
#               UBSAN_OPTIONS
#
# Exit status: the command's; 77 when qemu or the kernel cannot be had (automake's skip);
# 124 when the VM did not finish in time; 99 when the VM crashed or never ran the command.
#
# What the command sees (tests/vm/guest-init.sh sets it up):
#   - the host's / read-only through 9p with a tmpfs overlay on top, so the source and
#     build trees are at the same paths and writable (writes vanish with the VM); fresh
#     tmpfs on /run, /dev/shm (/tmp is the overlay's, so a tree under /tmp is seen);
#   - bpffs on /sys/fs/bpf, cgroup2 on $SMC_VM_CGROUP2 (default /sys/fs/cgroup/unified,
#     as on the project's machines; tmpfs on /sys/fs/cgroup under it), so
#     `smc_preload.sh --setup` can load and attach the eBPF program;
#   - loopback up, a Soft-RoCE device "rxelo" on lo (rdma_rxe), modules smc, smc_diag,
#     rdma_ucm, veth, the sock_diag families loaded (the VM cannot load modules later:
#     its /lib/modules is the host's);
#   - SMC_IN_VM=1 in the environment, the working directory of the caller, stdin
#     /dev/null; stdout and stderr go to the VM's serial console, which is this
#     script's stdout.
#
# Kernel and initrd are built once (apt-get download of linux-image-amd64's kernel, a
# busybox initrd with the modules) and cached in $SMC_VM_CACHE (default
# /var/tmp/smc-preload-vm); a later run boots in a few seconds. SMC_VM_KERNEL_DEB=FILE
# uses that kernel package instead of downloading one. No KVM: nested KVM hung at boot on
# the project's machines, so the VM runs under TCG (SMC_VM_ACCEL overrides); SMC_VM_MEM
# (MiB, default 2048) and SMC_VM_SMP (default 2) size it; SMC_VM_QEMU names the qemu
# binary.

set -euo pipefail

prog=${0##*/}
here=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)
guest_init=$here/guest-init.sh

timeout_s=${SMC_VM_TIMEOUT:-600}
cache_root=${SMC_VM_CACHE:-/var/tmp/smc-preload-vm}
mem=${SMC_VM_MEM:-2048}
smp=${SMC_VM_SMP:-2}
accel=${SMC_VM_ACCEL:-tcg}
qemu=${SMC_VM_QEMU:-qemu-system-x86_64}
cgroup2=${SMC_VM_CGROUP2:-/sys/fs/cgroup/unified}
pass_vars=()

# Bump when build_cache changes what it puts in the cache.
CACHE_FORMAT=2

# Modules loaded at boot, in this order (with their dependencies). Built-in ones and ones
# the kernel does not have are left out with a note.
MODULES=(crc32_generic virtio_pci virtio_rng 9p 9pnet_virtio overlay veth inet_diag tcp_diag
	udp_diag unix_diag rdma_rxe ib_uverbs rdma_ucm ib_umad smc smc_diag sch_netem)

usage() {
	sed -n '4,15{s/^# \{0,1\}//;p}' "$0"
}

skip() {
	printf '%s: SKIP: %s\n' "$prog" "$*" >&2
	exit 77
}

die() {
	printf '%s: %s\n' "$prog" "$*" >&2
	exit 99
}

while [ $# -gt 0 ]; do
	case $1 in
	-t) [ $# -ge 2 ] || { usage >&2; exit 2; }; timeout_s=$2; shift 2 ;;
	-e) [ $# -ge 2 ] || { usage >&2; exit 2; }; pass_vars+=("$2"); shift 2 ;;
	-h | --help) usage; exit 0 ;;
	--) shift; break ;;
	-*) usage >&2; exit 2 ;;
	*) break ;;
	esac
done
[ $# -gt 0 ] || { usage >&2; exit 2; }
case $timeout_s in '' | *[!0-9]*) die "bad timeout '$timeout_s'" ;; esac

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

# ------------------------------------------------------------------ run

[ "$(uname -m)" = x86_64 ] || skip "the VM harness only knows x86_64 hosts"
command -v "$qemu" >/dev/null 2>&1 || skip "$qemu is not installed (Debian: qemu-system-x86)"
[ -f "$guest_init" ] || die "missing $guest_init"
case $guest_init$cgroup2 in *[[:space:]]*) die "paths on the kernel command line must not contain blanks: $guest_init $cgroup2" ;; esac
prepare_kernel

# The exchange directory, shared read-write with the guest: the command and its
# environment go in, the exit status comes out.
xdir=$(mktemp -d "${TMPDIR:-/tmp}/smc-vm.XXXXXX")
trap 'rm -rf "$xdir"' EXIT

{
	for v in $(compgen -e); do
		case $v in
		SMC_* | top_srcdir | top_builddir | srcdir | LANG | LC_* | ASAN_OPTIONS | UBSAN_OPTIONS) ;;
		*) continue ;;
		esac
		printf 'export %s=%q\n' "$v" "${!v}"
	done
	for v in "${pass_vars[@]}"; do
		[ -n "${!v+set}" ] && printf 'export %s=%q\n' "$v" "${!v}"
	done
	echo "export SMC_IN_VM=1"
	printf 'cd %q || exit 99\n' "$PWD"
} >"$xdir/env"
printf '%q ' "$@" >"$xdir/cmd"
echo >>"$xdir/cmd"

start=$EPOCHREALTIME
# The console is the command's stdout; kernel messages are quiet after boot. qemu gets
# /dev/null as stdin so it never puts a terminal into raw mode.
set +e
timeout -k 5 "$timeout_s" "$qemu" -accel "$accel" -smp "$smp" -m "$mem" \
	-display none -monitor none -serial stdio -no-reboot -nodefaults \
	-kernel "$kernel" -initrd "$initrd" \
	-device virtio-rng-pci \
	-virtfs "local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap" \
	-virtfs "local,path=$xdir,mount_tag=smcvmx,security_model=none" \
	-append "console=ttyS0 quiet loglevel=3 panic=-1 smcvm.init=$guest_init smcvm.cgroup2=$cgroup2" \
	</dev/null | tr -d '\r' | sed -u '/^\[ *[0-9.]*\] \(sysrq: Power Off\|reboot: Power down\)$/d'
qrc=${PIPESTATUS[0]}
set -e
elapsed=$(awk -v a="$start" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }')
if [ -f "$xdir/rc" ]; then
	rc=$(cat "$xdir/rc")
	[ -n "${SMC_VM_VERBOSE:-}" ] && echo "$prog: VM ran for ${elapsed}s, command exit status $rc" >&2
	exit "$rc"
fi
if [ "$qrc" = 124 ] || [ "$qrc" = 137 ]; then
	echo "$prog: the VM did not finish within ${timeout_s}s" >&2
	exit 124
fi
echo "$prog: the VM stopped (qemu status $qrc) without running the command to its end" >&2
exit 99
