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
# busybox initrd with the modules; vm-image.sh, shared with run-twovm.sh) and cached in
# $SMC_VM_CACHE (default /var/tmp/smc-preload-vm); a later run boots in a few seconds. SMC_VM_KERNEL_DEB=FILE
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

# kernel, initrd and the guest environment: vm-image.sh
# shellcheck source=tests/vm/vm-image.sh
. "$here/vm-image.sh"

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

vm_write_env "$xdir/env" "${pass_vars[@]}"
printf '%q ' "$@" >"$xdir/cmd"
echo >>"$xdir/cmd"

start=$EPOCHREALTIME
# The console is the command's stdout; kernel messages are quiet after boot. qemu gets
# /dev/null as stdin so it never puts a terminal into raw mode.
set +e
vm_qemu_argv "$xdir"
timeout -k 5 "$timeout_s" "${qemu_argv[@]}" \
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
