#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#
# run-twovm.sh: run one command in two throw-away qemu VMs at once, joined by a virtual
# network, each with a Soft-RoCE device on its NIC, and exit with the commands' status.
#
#   run-twovm.sh [-t SECONDS] [-o DIR] [-e NAME]... [--] COMMAND [ARGS...]
#
#   -t SECONDS  hard limit for each VM, boot included (default $SMC_VM_TIMEOUT or 300)
#   -o DIR      save the consoles there as vm1.console and vm2.console (default: a
#               directory that is printed, kept when the run fails)
#   -e NAME     pass the host's variable NAME into the VMs (repeatable); always passed:
#               as with run-vm.sh (SMC_*, top_srcdir, top_builddir, ...)
#
# Exit status: 0 when the command exited 0 in both VMs; else the first failure (VM 1's
# before VM 2's), 124 when a VM did not finish in time, 99 when a VM stopped without
# finishing the command, 77 when one skipped or qemu or the kernel cannot be had.
#
# Each VM is run-vm.sh's (same kernel, initrd and cache, vm-image.sh) with another init,
# twovm-init.sh: eth0 is a virtio NIC on a qemu socket netdev (VM 1 listens on a port of
# 127.0.0.1, VM 2 connects to it), so the two eth0 are one Ethernet segment; VM ID has
# 10.99.0.ID/24 and rxe0 on eth0 (RoCE v2 GID ::ffff:10.99.0.ID). The command gets
# SMC_VM_ID (1 or 2), SMC_VM_ADDR, SMC_VM_PEER_ADDR and SMC_IN_VM=1; it branches on
# SMC_VM_ID and syncs with the other VM through files in /run/smcvm/sync, the exchange
# directory both VMs share with the host (9p, cache=none: a file one writes, the other sees
# at once); vm-lib.sh has the helpers (twovm_enter, twovm_put, twovm_get).
#
# A VM that stays up after its command ended (its power-off can hang behind a process
# stuck in the kernel) is stopped 15 s later; one still running SMC_TWOVM_GRACE seconds
# (default 60) after the other VM stopped is stopped too: a peer that is gone cannot be
# waited for. A pair whose VM has not started the command SMC_TWOVM_BOOT_SECS (90) after
# its start is stopped and booted once more. One pair runs at a time on a host (a lock
# in the cache directory; the wait is not part of -t).

set -euo pipefail

prog=${0##*/}
here=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)
guest_init=$here/twovm-init.sh

timeout_s=${SMC_VM_TIMEOUT:-300}
cache_root=${SMC_VM_CACHE:-/var/tmp/smc-preload-vm}
# Two VMs on two host cores (often shared with other jobs): less memory than run-vm.sh's
mem=${SMC_VM_MEM:-1536}
smp=${SMC_VM_SMP:-2}
accel=${SMC_VM_ACCEL:-tcg}
qemu=${SMC_VM_QEMU:-qemu-system-x86_64}
cgroup2=${SMC_VM_CGROUP2:-/sys/fs/cgroup/unified}
grace=${SMC_TWOVM_GRACE:-60}
pass_vars=()
outdir=

usage() {
	sed -n '4,17{s/^# \{0,1\}//;p}' "$0"
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
	-o) [ $# -ge 2 ] || { usage >&2; exit 2; }; outdir=$2; shift 2 ;;
	-e) [ $# -ge 2 ] || { usage >&2; exit 2; }; pass_vars+=("$2"); shift 2 ;;
	-h | --help) usage; exit 0 ;;
	--) shift; break ;;
	-*) usage >&2; exit 2 ;;
	*) break ;;
	esac
done
[ $# -gt 0 ] || { usage >&2; exit 2; }
case $timeout_s in '' | *[!0-9]*) die "bad timeout '$timeout_s'" ;; esac

# shellcheck source=tests/vm/vm-image.sh
. "$here/vm-image.sh"

[ "$(uname -m)" = x86_64 ] || skip "the VM harness only knows x86_64 hosts"
command -v "$qemu" >/dev/null 2>&1 || skip "$qemu is not installed (Debian: qemu-system-x86)"
command -v ss >/dev/null 2>&1 || skip "ss is not installed (Debian: iproute2)"
[ -f "$guest_init" ] || die "missing $guest_init"
case $guest_init$cgroup2 in *[[:space:]]*) die "paths on the kernel command line must not contain blanks: $guest_init $cgroup2" ;; esac
prepare_kernel

# The exchange directory, shared read-write with both guests: command and environment in,
# the sync files between the VMs, the exit statuses (rc.1, rc.2) out.
xdir=$(mktemp -d "${TMPDIR:-/tmp}/smc-twovm.XXXXXX")
[ -n "$outdir" ] || outdir=$xdir/consoles
mkdir -p "$outdir" || die "cannot create $outdir"
vm_write_env "$xdir/env" "${pass_vars[@]}"
printf '%q ' "$@" >"$xdir/cmd"
echo >>"$xdir/cmd"

# timeout makes its own process group: an interrupt of this script reaches neither it
# nor qemu, so the exit trap stops both VMs (and the console printers) itself.
declare -A qpid=() tpid=()
# shellcheck disable=SC2317 # called by the trap
stop_all() {
	local n
	for n in "${qpid[@]}" "${tpid[@]}"; do kill "$n" 2>/dev/null || true; done
}
trap 'stop_all' EXIT
trap 'exit 130' INT TERM

# start_vm ID NETDEV: VM ID in the background, its console into $outdir/vmID.console and,
# prefixed with "vmID| ", on stdout as it comes.
start_vm() {
	local id=$1 net=$2
	vm_qemu_argv "$xdir"
	: >"$outdir/vm$id.console"
	timeout -k 5 "$timeout_s" "${qemu_argv[@]}" \
		-netdev "$net,id=n0" -device "virtio-net-pci,netdev=n0,mac=52:54:00:99:00:0$id" \
		-append "console=ttyS0 quiet loglevel=3 panic=-1 smcvm.init=$guest_init smcvm.cgroup2=$cgroup2 smcvm.id=$id" \
		</dev/null >"$outdir/vm$id.console" 2>&1 &
	qpid[$id]=$!
	tail -n +1 -F --pid="${qpid[$id]}" "$outdir/vm$id.console" 2>/dev/null |
		sed -u -e 's/\r$//' -e '/^\[ *[0-9.]*\] \(sysrq: Power Off\|reboot: Power down\)$/d' \
			-e "s/^/vm$id| /" &
	tpid[$id]=$!
}

# One pair at a time on this host: two VMs under TCG already keep two cores busy, and a
# third or fourth VM slowed every one of them so that a guest's kernel sat in a soft lockup
# before its init for minutes (see below). The wait does not count against -t.
exec 8>"$cache_root/.twovm.lock"
if ! flock -n 8; then
	echo "$prog: waiting for another pair of VMs to finish" >&2
	flock -w "${SMC_TWOVM_LOCK_WAIT:-1200}" 8 || echo "$prog: still waiting: starting anyway" >&2
fi

# free_port: sets port to one of 127.0.0.1 nothing listens on, for the socket netdev.
free_port() {
	local p
	port=
	for _ in $(seq 100); do
		p=$((20000 + (RANDOM * 32768 + RANDOM) % 30000))
		[ -z "$(ss -Htan "( sport = :$p or dport = :$p )")" ] && { port=$p; return 0; }
	done
	die "no free port on 127.0.0.1 for the VMs' network"
}

alive() { kill -0 "${qpid[$1]}" 2>/dev/null; }

# run_pair: boots both VMs and returns when both have stopped, setting qrc, stopped and
# boot_hung (a VM that had not started its command, twovm-init.sh's up.ID, within
# SMC_TWOVM_BOOT_SECS of its start: both VMs are then stopped).
run_pair() {
	local n i why ended=0 t0=$SECONDS
	free_port
	echo "$prog: VM 1 and VM 2 on 127.0.0.1:$port, limit ${timeout_s}s each, consoles in $outdir" >&2
	start_vm 1 "socket,listen=127.0.0.1:$port"
	# VM 2's qemu gives up at once when nothing listens yet
	for ((i = 0; i < 100; i++)); do
		[ -n "$(ss -Hltn "sport = :$port")" ] && break
		kill -0 "${qpid[1]}" 2>/dev/null || break
		sleep 0.1
	done
	[ -n "$(ss -Hltn "sport = :$port")" ] || die "VM 1's qemu does not listen on 127.0.0.1:$port"
	start_vm 2 "socket,connect=127.0.0.1:$port"
	done_at=([1]=0 [2]=0) stopped=([1]=0 [2]=0) boot_hung=0
	while alive 1 || alive 2; do
		for n in 1 2; do
			if ! alive "$n"; then
				[ "$ended" -gt 0 ] || ended=$SECONDS
				continue
			fi
			[ "${done_at[$n]}" -gt 0 ] || [ ! -f "$xdir/rc.$n" ] || done_at[$n]=$SECONDS
			[ "${stopped[$n]}" = 0 ] || continue
			why=
			if [ "${done_at[$n]}" -gt 0 ] && [ $((SECONDS - done_at[$n])) -ge 15 ]; then
				why="did not power off within 15 s of its command's end"
			elif [ "$ended" -gt 0 ] && [ $((SECONDS - ended)) -ge "$grace" ]; then
				why="still runs ${grace}s after the other VM stopped"
			elif [ ! -f "$xdir/up.$n" ] && [ $((SECONDS - t0)) -ge "$boot_secs" ]; then
				why="did not reach its command within ${boot_secs}s"
				boot_hung=$n
			fi
			if [ -n "$why" ]; then
				echo "$prog: VM $n $why: stopping it" >&2
				kill "${qpid[$n]}" 2>/dev/null || true
				stopped[$n]=1
			fi
		done
		# a pair whose VM hangs in its boot is stopped whole, to be booted again
		if [ "$boot_hung" != 0 ]; then
			for n in 1 2; do alive "$n" && kill "${qpid[$n]}" 2>/dev/null; stopped[$n]=1; done
		fi
		sleep 1
	done
	for n in 1 2; do
		set +e
		wait "${qpid[$n]}"
		qrc[$n]=$?
		wait "${tpid[$n]}"
		set -e
	done
}

# A guest's kernel can hang before its init (seen once in 20-odd boots of a pair, with
# five VMs on two cores: "watchdog: BUG: soft lockup - CPU#1 stuck for 130s!
# [swapper/0:1]" and nothing else on its console): then the pair is booted once more.
boot_secs=${SMC_TWOVM_BOOT_SECS:-90}
start=$SECONDS
declare -A done_at=() qrc=() stopped=()
boot_hung=0
for attempt in 1 2; do
	rm -rf "$xdir/sync" "$xdir"/rc.* "$xdir"/up.*
	mkdir -m 0777 "$xdir/sync"
	run_pair
	if [ "$boot_hung" = 0 ] || [ "$attempt" = 2 ]; then break; fi
	for n in 1 2; do mv -f "$outdir/vm$n.console" "$outdir/vm$n.console.boot1"; done
	echo "$prog: VM $boot_hung hung in its boot (consoles of that attempt: $outdir/vm*.console.boot1), booting the pair again" >&2
done
trap - EXIT

# The status: a failure outranks a time limit, which outranks a skip; VM 1 before VM 2.
rank() { case $1 in 0) echo 0 ;; 77) echo 1 ;; 124) echo 2 ;; *) echo 3 ;; esac; }
rc=0 note=
for n in 1 2; do
	if [ -f "$xdir/rc.$n" ]; then
		r=$(cat "$xdir/rc.$n")
	elif [ "${qrc[$n]}" = 124 ] || [ "${qrc[$n]}" = 137 ] || [ "${stopped[$n]}" = 1 ]; then
		r=124
	else
		r=99
	fi
	note+=" vm$n=$r (qemu ${qrc[$n]})"
	[ "$(rank "$r")" -gt "$(rank "$rc")" ] && rc=$r
done
echo "$prog: ran for $((SECONDS - start))s, command status$note: $rc" >&2
if [ "$rc" = 0 ] || [ "$rc" = 77 ]; then
	rm -rf "$xdir" # the consoles went to stdout too (and to -o DIR)
else
	echo "$prog: consoles kept in $outdir, exchange directory $xdir" >&2
fi
exit "$rc"
