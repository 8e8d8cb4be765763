#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#
# Failures between two hosts over SMC-R (the two VMs of run-twovm.sh, twovm-smc.sh): a
# smc_stream connection that would run for minutes (1 GiB each way) from VM 2 to VM 1,
# both ends under the library, and then
#   1. kill-client: VM 2 kills the client with SIGKILL;
#   2. kill-server: VM 1 kills the server with SIGKILL;
#   3. link-down: VM 1 takes its eth0 down (`ip link set eth0 down`): nothing reaches
#      VM 2 any more, not even TCP's reset, so only SMC-R's own liveness checks can tell;
# in each case the survivor in the other VM must see its connection fail (smc_stream's
# ERROR line, a non-zero exit) within TWOVM_FAULT_SECS (default 15) of learning of the
# fault, not hang; its stats must show the connection on ib with no RNR. In case 3 VM 1's
# own side must end too (within 30 s), and after VM 1's eth0 is back up,
#   4. after: a new smc_stream connection (1 MiB each way) runs over ib as before.
# shellcheck disable=SC2034 # flowing: a value of twovm_get's where only the wait matters
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
# shellcheck source=tests/vm/twovm-smc.sh
. "$(dirname -- "$0")/twovm-smc.sh"

: "${TWOVM_FAULT_SECS:=15}"
smc_require_built "$SMC_STREAM"
base_packets=0

secs_since() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }'; }

# start_side LABEL DIR: this VM's end of the long connection, in the background: the
# server in VM 1 (it publishes the port), the client in VM 2 (it waits for it).
start_side() {
	local label=$1 dir=$2
	if twovm_server; then
		twovm_serve "$label" "$dir" "$SMC_STREAM" server @PORT@ --bind "$SMC_VM_ADDR" --mode block
	else
		twovm_get port "$label.port"
		rxe_packets base_packets
		smc_start_server "$label" "$dir" "$SMC_STREAM" client "$TWOVM_SERVER" "$port" \
			--bytes 1g --seed "$RANDOM" --mode block
	fi
}

# rxe_packets VAR: packets rxe0 sent and received so far (the connection under test is the
# only RDMA traffic of the VM).
rxe_packets() {
	local c=/sys/class/infiniband/rxe0/ports/1/hw_counters sent rcvd
	read -r sent <"$c/sent_pkts"
	read -r rcvd <"$c/rcvd_pkts"
	printf -v "$1" '%s' $((sent + rcvd))
}

# running LABEL: in VM 2, once the stream moves over rxe0 (4000 packets, some MB: the
# handshake alone took more than 7 s once, under load), the client still running: publish
# it.
running() {
	local i now
	for ((i = 0; i < 300; i++)); do
		_smc_group_alive "${SMC_SERVER_PID[$1]}" ||
			smc_fail "$1: ended before the fault: $(cat "$(smc_server_log "$1")")"
		rxe_packets now
		[ $((now - base_packets)) -ge 4000 ] && break
		twovm_nap 0.2
	done
	[ $((now - base_packets)) -ge 4000 ] ||
		smc_fail "$1: only $((now - base_packets)) packets over rxe0 in 60 s"
	smc_log "$1: $((now - base_packets)) packets over rxe0, data flows"
	twovm_put "$1.running"
}

# survive LABEL DIR T0 [LIMIT]: this side's program must end with an error (smc_stream's
# ERROR line) within LIMIT s (default TWOVM_FAULT_SECS) of T0 ($EPOCHREALTIME), its stats
# showing the connection on ib with no RNR.
survive() {
	local label=$1 dir=$2 t0=$3 limit=${4:-$TWOVM_FAULT_SECS} log err
	log=$(smc_server_log "$label")
	if ! twovm_exit_within "$label" "$limit"; then
		cat "$log"
		kill -KILL -- "-${SMC_SERVER_PID[$label]}" 2>/dev/null
		smc_fail "$label: still running ${limit}s after the fault (a hang)"
	fi
	cat "$log"
	err=$(sed -n 's/^ERROR t=\([0-9.]*\) .*/\1/p' "$log" | head -n 1)
	[ -n "$err" ] || smc_fail "$label: no ERROR line from smc_stream (exit status ${SMC_SERVER_RC[$label]})"
	smc_log "$label: the error surfaced $(awk -v a="$t0" -v b="$err" 'BEGIN { printf "%.2f", b - a }')s" \
		"after this VM learned of the fault; exit status ${SMC_SERVER_RC[$label]}"
	[ "${SMC_SERVER_RC[$label]}" != 0 ] || smc_fail "$label: exit status 0 despite the fault"
	ib_expect_payload "$dir" 1 "$label (survivor)"
}

# kill_case LABEL KILLER-VM: once data flows, the VM KILLER-VM kills its end with SIGKILL;
# the other VM's end survives it.
kill_case() {
	local label=$1 killer=$2 dir t0 flowing
	dir=$(smc_stats_dir "$label")
	start_side "$label" "$dir"
	twovm_server || running "$label"
	if [ "$SMC_VM_ID" = "$killer" ]; then
		twovm_server && twovm_get flowing "$label.running" 60
		kill -KILL -- "-${SMC_SERVER_PID[$label]}"
		twovm_put "$label.killed"
		smc_log "$label: killed"
		twovm_exit_within "$label" 10 || smc_fail "$label: not gone 10 s after SIGKILL"
	else
		twovm_get flowing "$label.killed" 60
		t0=$EPOCHREALTIME
		survive "$label" "$dir" "$t0"
	fi
	twovm_barrier "$label.done" 120
}

kill_case kill-client 2
kill_case kill-server 1

# ------------------------------------------------ 3. link down in VM 1
link_case() {
	local label=link-down dir t0 i gid flowing
	dir=$(smc_stats_dir "$label")
	start_side "$label" "$dir"
	if twovm_server; then
		twovm_get flowing "$label.running" 60
		ip link set eth0 down || smc_hard_error "ip link set eth0 down failed"
		t0=$EPOCHREALTIME
		twovm_put "$label.down"
		smc_log "$label: eth0 down"
		# this side (its device's port is down too) must not hang either
		survive "$label" "$dir" "$t0" 30
		twovm_get flowing "$label.survived" 60
		ip link set eth0 up || smc_hard_error "ip link set eth0 up failed"
		# back when the port is active and its IPv4 GID is there again
		for ((i = 0; i < 150; i++)); do
			gid=$(grep -l '^0000:0000:0000:0000:0000:ffff:' /sys/class/infiniband/rxe0/ports/1/gids/* 2>/dev/null)
			[ -n "$gid" ] && grep -q ACTIVE /sys/class/infiniband/rxe0/ports/1/state && break
			twovm_nap 0.2
		done
		smc_log "$label: eth0 up again after $(secs_since "$t0")s, rxe0 $(cat /sys/class/infiniband/rxe0/ports/1/state), GID ${gid##*/}"
		[ -n "$gid" ] || smc_fail "$label: no IPv4 GID on rxe0 after the link came back"
		twovm_put "$label.up"
	else
		running "$label"
		twovm_get flowing "$label.down" 60
		t0=$EPOCHREALTIME
		survive "$label" "$dir" "$t0"
		twovm_put "$label.survived"
		twovm_get flowing "$label.up" 120
	fi
	twovm_barrier "$label.done" 120
}
link_case

# ------------------------------------------------ 4. new connections work
twovm_stream_case after 1m --mode block
smc_pass
