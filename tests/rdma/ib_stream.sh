#!/bin/sh
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#
# The SMC-R data path on real verbs (tests/rdma/ib_stream.c) over Soft-RoCE.
#
# This machine has no RDMA device, so the test boots a VM (Debian's kernel with
# rdma_rxe, device "rxelo" on lo, this machine's root filesystem read-only) and runs
# itself inside it. Skipped (77) when qemu or the VM harness is not available.
#   1. checksummed random-size streams in both directions at once through several
#      connections sharing one RC link: every byte compared, checksums swapped, zero
#      RNR and failed completions, bytes written by RDMA = bytes sent;
#   2. the same with forged CDCs (an unknown token, a producer cursor beyond a ring):
#      the forged connection alone is aborted, the others deliver intact;
#   3. link confirmation: the server brings its QP up a second late, the client streams
#      at once: its sends must wait for the confirmation (counted). Without it the
#      first SEND would meet a QP not ready to receive, and its retries (about 1 s)
#      would run out: a failed completion, the link down;
#   4. link-group lifecycle: connections made through the registry share one link; after
#      the last close the link is released no earlier than the idle timeout (1.5 s
#      here), then the device (PD, context) is closed;
#   5. peer death: one side is killed (SIGKILL) mid-stream, then (other roles) while its
#      connections sit idle; the survivor's connections must all end aborted (the
#      application's ECONNRESET) within its 60 s bound, not hang: a failed completion
#      mid-stream, the keepalive probe on the idle link. The failed link is released.
# Every run also checks the link confirmation counters and the library's stats (links
# created, link failures, RNR). The device's own RNR counters (hw_counters) must not
# move. (Its retry counter is printed, not checked: under emulation an ACK is sometimes
# later than the 134 ms timeout, and the lifecycle and death runs retry by design.)
#
# Sizes: under TCG ib_stream moves about 5-30 MB/s (both directions together, checked
# byte by byte); the runs below take about 45 s after a ~15 s boot on a 2-core
# machine. IB_STREAM_BYTES overrides the size of the first run. SMC_VM_HARNESS names
# another harness with run-vm.sh's interface.
set -u

top_builddir=${top_builddir:-$(cd "$(dirname "$0")/../.." && pwd)}
top_srcdir=${top_srcdir:-$top_builddir}
bin=$top_builddir/tests/rdma/ib_stream

rdma_device_present() {
	ls /sys/class/infiniband/ 2>/dev/null | grep -q .
}

if [ -z "${SMC_IN_VM:-}" ] && ! rdma_device_present; then
	command -v qemu-system-x86_64 >/dev/null 2>&1 || { echo "SKIP: no qemu-system-x86_64"; exit 77; }
	harness=
	for h in "${SMC_VM_HARNESS:-}" "$top_srcdir/tests/vm/run-vm.sh"; do
		[ -n "$h" ] && [ -x "$h" ] && { harness=$h; break; }
	done
	[ -n "$harness" ] || { echo "SKIP: no VM harness (tests/vm/run-vm.sh)"; exit 77; }
	[ -x "$bin" ] || { echo "FAIL: $bin not built"; exit 1; }
	script=$(cd "$(dirname "$0")" && pwd)/$(basename "$0")
	start=$(date +%s)
	"$harness" -t 600 -- env SMC_IN_VM=1 top_builddir="$top_builddir" \
		top_srcdir="$top_srcdir" IB_STREAM_BYTES="${IB_STREAM_BYTES:-}" sh "$script"
	rc=$?
	echo "ib_stream.sh: VM run took $(( $(date +%s) - start )) s, rc=$rc"
	exit $rc
fi

rdma_device_present || { echo "SKIP: no RDMA device in the VM"; exit 77; }
work=$(mktemp -d)
port=$(( 20000 + $$ % 20000 ))
fails=0

counter() {
	cat /sys/class/infiniband/*/ports/1/hw_counters/"$1" 2>/dev/null | awk '{s += $1} END {print s + 0}'
}

# run NAME ARGS...: one server and one client with the same arguments
run() {
	name=$1
	shift
	port=$((port + 1))
	t0=$(date +%s)
	"$bin" -s "$port" "$@" >"$work/$name.srv" 2>&1 &
	spid=$!
	"$bin" -c "127.0.0.1:$port" "$@" >"$work/$name.cli" 2>&1
	crc=$?
	wait "$spid"
	src=$?
	echo "--- $name: server rc=$src client rc=$crc ($(( $(date +%s) - t0 )) s;" \
		"device: $(counter completer_retry_err) retries so far)"
	cat "$work/$name.srv" "$work/$name.cli"
	if [ "$src" -ne 0 ] || [ "$crc" -ne 0 ]; then
		echo "FAIL: $name"
		fails=$((fails + 1))
	fi
	# the result lines must be there and say ok (not only the exit codes)
	n=$(cat "$work/$name.srv" "$work/$name.cli" | grep -c '^RESULT .*status=ok')
	if [ "$n" -ne 2 ]; then
		echo "FAIL: $name: $n of 2 RESULT lines with status=ok"
		fails=$((fails + 1))
	fi
}

# run_death NAME VICTIM(server|client) MODE(busy|idle) ARGS...: the victim kills itself
# (-K), the survivor (-E) must see every connection aborted and exit by itself.
run_death() {
	name=$1 victim=$2 mode=$3
	shift 3
	port=$((port + 1))
	if [ "$victim" = server ]; then sx="-K $mode" cx="-E $mode"; else sx="-E $mode" cx="-K $mode"; fi
	t0=$(date +%s)
	"$bin" -s "$port" $sx "$@" >"$work/$name.srv" 2>&1 &
	spid=$!
	"$bin" -c "127.0.0.1:$port" $cx "$@" >"$work/$name.cli" 2>&1 &
	cpid=$!
	if [ "$victim" = server ]; then vpid=$spid opid=$cpid; else vpid=$cpid opid=$spid; fi
	wait "$vpid"
	vrc=$?
	tv=$(date +%s.%N)
	wait "$opid"
	orc=$?
	to=$(date +%s.%N)
	echo "--- $name: victim ($victim) rc=$vrc survivor rc=$orc, survivor ended" \
		"$(awk -v a="$tv" -v b="$to" 'BEGIN { printf "%.2f", b - a }') s after the victim ($(( $(date +%s) - t0 )) s)"
	cat "$work/$name.srv" "$work/$name.cli"
	if [ "$vrc" -ne 137 ] || [ "$orc" -ne 0 ]; then
		echo "FAIL: $name (the victim must die by SIGKILL, the survivor exit 0)"
		fails=$((fails + 1))
	fi
	n=$(cat "$work/$name.srv" "$work/$name.cli" | grep -c '^RESULT .*peer_death=.*all_aborted=1 .*links_left=0 status=ok')
	if [ "$n" -ne 1 ]; then
		echo "FAIL: $name: no survivor RESULT with every connection aborted"
		fails=$((fails + 1))
	fi
}

rnr() { echo $(( $(counter rcvd_rnr_err) + $(counter send_rnr_err) + $(counter retry_rnr_exceeded_err) )); }
rnr0=$(rnr)
bytes=${IB_STREAM_BYTES:-6M}
run stream -n 4 -b "$bytes" -r 64K -q 16 -S "$$"
run stream_small_rmb -n 3 -b 2M -r 16K -q 4 -S 7
run forged -n 3 -b 2M -r 32K -q 8 -S 11 -F
run confirm -n 1 -b 1M -r 32K -q 8 -S 13 -W 1000
run lifecycle -n 2 -b 512K -r 16K -q 8 -S 17 -I 1500
run_death death_busy server busy -n 3 -b 8M -r 64K -q 16 -S 19
run_death death_idle client idle -n 2 -b 256K -r 32K -q 8 -S 23
rnr1=$(rnr)
echo "device RNR counters: before $rnr0, after $rnr1"
if [ "$rnr1" -ne "$rnr0" ]; then
	echo "FAIL: the device counted RNR events"
	fails=$((fails + 1))
fi
rm -rf "$work"
[ "$fails" -eq 0 ] || exit 1
echo "PASS"
exit 0
