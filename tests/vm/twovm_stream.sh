#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#
# SMC-R between two hosts: two qemu VMs (run-twovm.sh) on one virtual network, each with
# Soft-RoCE on its NIC and `smc_preload.sh --setup`, both ends under the library with its
# default transport. VM 1 serves, VM 2 connects:
#   1. smc_stream, TWOVM_STREAM_BYTES (default 4m) each way at once, checked byte by
#      byte; a capture on VM 1's eth0 shows the SMC option in SYN and SYN-ACK;
#   2. a one-way copy from VM 2 to VM 1 whose writer (socat -u FILE TCP:...) closes and
#      exits as soon as its last write() returned, TWOVM_ONEWAY_BYTES (default 8m), sha256
#      compared: the close must lose nothing write() accepted; once into socat, once into
#      a reader slower than the network, which still has most of an RMB to read when the
#      writer's process is gone;
#   3. a churn of TWOVM_CHURN_CYCLES (default 100) connect/request/response/close cycles
#      from 4 threads (smc_churn), every cycle a full SMC-R handshake.
# Every case checks the programs' results, and on both sides the stats: payload over ib,
# no RNR, no connection that fell back to TCP. SMC-R moves about 1 MB/s between two VMs
# under TCG: sizes are small.
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
# shellcheck source=tests/vm/twovm-smc.sh
. "$(dirname -- "$0")/twovm-smc.sh"

: "${TWOVM_STREAM_BYTES:=4m}"
: "${TWOVM_ONEWAY_BYTES:=8m}"
: "${TWOVM_CHURN_CYCLES:=100}"
smc_require_built "$SMC_STREAM" "$SMC_CHURN"
smc_require_cmd socat python3

# ------------------------------------------------ 1. both ways at once
TWOVM_CAPTURE=1 twovm_stream_case stream "$TWOVM_STREAM_BYTES" --mode block

# ------------------------------------------------ 2. one way, the writer exits at once
N=$(smc_bytes_of "$TWOVM_ONEWAY_BYTES")
SLOW_READER=$top_srcdir/tests/progs/slow_reader.py
# one_way LABEL fast|slow
one_way() {
	local label=$1 speed=$2 dir got want t0
	dir=$(smc_stats_dir "$label")
	if twovm_server; then
		rm -f "$SMC_TMP/out"
		if [ "$speed" = slow ]; then
			twovm_serve "$label" "$dir" python3 "$SLOW_READER" "$SMC_TMP/out" @PORT@ "$SMC_VM_ADDR"
		else
			twovm_serve "$label" "$dir" socat -u \
				"TCP-LISTEN:@PORT@,bind=$SMC_VM_ADDR,reuseaddr" "CREATE:$SMC_TMP/out"
		fi
		twovm_get want "$label.sha256"
		smc_wait_server_exit "$label" 120
		cat "$(smc_server_log "$label")"
		got=$(sha256sum <"$SMC_TMP/out" | cut -d' ' -f1)
		smc_assert_eq "$label: reader exit status" "${SMC_SERVER_RC[$label]}" 0
		smc_assert_eq "$label: bytes received" "$(stat -c %s "$SMC_TMP/out")" "$N"
		smc_assert_eq "$label: sha256 of what arrived" "$got" "$want"
		ib_expect_payload "$dir" "$N" "reader ($label)"
	else
		head -c "$N" /dev/urandom >"$SMC_TMP/in"
		twovm_put "$label.sha256" "$(sha256sum <"$SMC_TMP/in" | cut -d' ' -f1)"
		twovm_get port "$label.port"
		smc_log "$label: $N bytes to $TWOVM_SERVER:$port, then the writer exits"
		t0=$EPOCHREALTIME
		smc_run "$dir" socat -u "OPEN:$SMC_TMP/in" "TCP:$TWOVM_SERVER:$port" ||
			smc_fail "$label: writer failed (status $?)"
		smc_log "$label: the writer ran for $(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }')s"
		ib_expect_payload "$dir" "$N" "writer ($label)"
	fi
	twovm_barrier "$label.done" 120
}
one_way oneway-socat fast
one_way oneway-slow slow

# ------------------------------------------------ 3. churn
churn() {
	local dir log out=$SMC_TMP/churn.out rc threads=4
	dir=$(smc_stats_dir churn)
	if twovm_server; then
		twovm_serve churn "$dir" "$SMC_CHURN" server @PORT@ --bind "$SMC_VM_ADDR" --mode epoll
		twovm_get rc churn.client 240
		smc_stop_server churn TERM 30
		log=$(smc_server_log churn)
		cat "$log"
		grep -q "^RESULT server connections=$((TWOVM_CHURN_CYCLES + 4 * threads)) errors=0$" "$log" ||
			smc_fail "churn server: expected $((TWOVM_CHURN_CYCLES + 4 * threads)) connections without error"
		ib_expect_payload "$dir" $((128 * TWOVM_CHURN_CYCLES)) "churn server"
		smc_assert_ge "churn server: ib connections" "$(smc_stats "$dir" '.connections.ib')" \
			"$TWOVM_CHURN_CYCLES"
	else
		twovm_get port churn.port
		smc_log "churn: $TWOVM_CHURN_CYCLES cycles from $threads threads to $TWOVM_SERVER:$port"
		# every cycle upgraded with a full handshake (SMC_SHORT_CONN_US=0): no pool
		SMC_SHORT_CONN_US=0 smc_run "$dir" "$SMC_CHURN" client "$TWOVM_SERVER" "$port" \
			--threads "$threads" --warmup 4 --cycles "$TWOVM_CHURN_CYCLES" --maps-slack 64 \
			>"$out" 2>&1
		rc=$?
		twovm_put churn.client "$rc"
		cat "$out"
		smc_assert_eq "churn client exit status" "$rc" 0
		grep -q "^RESULT client threads=$threads cycles=$TWOVM_CHURN_CYCLES .* errors=0 " "$out" ||
			smc_fail "churn client did not report $TWOVM_CHURN_CYCLES cycles without error"
		ib_expect_payload "$dir" $((128 * TWOVM_CHURN_CYCLES)) "churn clients"
		smc_assert_ge "churn clients: ib connections" "$(smc_stats "$dir" '.connections.ib')" \
			"$TWOVM_CHURN_CYCLES"
	fi
	twovm_barrier churn.done 120
}
churn
smc_pass
