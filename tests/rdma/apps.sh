#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#
# Applications over SMC-R on Soft-RoCE, in the VM of tests/vm, both ends under
# smc_preload.sh with SMC_TRANSPORT=ib (tests/rdma/ib-lib.sh):
#   1. redis-server + redis-benchmark (SET/GET, 1 KiB values, 10 clients), then redis-cli
#      reads back a value;
#   2. iperf3, forward and reverse;
#   3. a churn of 200 connect/request/response/close cycles from 4 threads (smc_churn):
#      every cycle its own RDMA connection, sharing the processes' link.
# Each checks the program's own result, then through the stats that the payload moved
# over "ib" with zero RNR and no failed completion. Sizes are small: under TCG every
# program start costs 0.1-0.8 s and Soft-RoCE moves tens of MB/s.
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
. "$(dirname -- "$0")/ib-lib.sh"

REDIS_REQUESTS=${RDMA_REDIS_REQUESTS:-2000}
VALUE_SIZE=1024
CHURN_CYCLES=${RDMA_CHURN_CYCLES:-200}
CHURN_THREADS=4

smc_init

redis() {
	local port srv cli out=$SMC_TMP/bench.csv err=$SMC_TMP/bench.err len
	if ! command -v redis-server >/dev/null || ! command -v redis-benchmark >/dev/null; then
		smc_log "SKIP redis: not installed"
		return
	fi
	smc_free_port port
	srv=$(smc_stats_dir redis-server)
	cli=$(smc_stats_dir redis-client)
	smc_start_server redis "$srv" redis-server --port "$port" --bind 127.0.0.1 \
		--save '' --appendonly no --daemonize no --loglevel notice
	smc_wait_port redis "$port" 60
	smc_log "redis-benchmark: $REDIS_REQUESTS SET + GET over ib"
	smc_run "$cli" redis-benchmark -h 127.0.0.1 -p "$port" -c 10 -n "$REDIS_REQUESTS" \
		-t set,get -d "$VALUE_SIZE" --csv >"$out" 2>"$err" ||
		smc_fail "redis-benchmark failed (status $?): $(cat "$err")"
	cat "$out"
	smc_redis_bench_check "$out" "$err" SET GET
	len=$(smc_run "$cli" redis-cli -h 127.0.0.1 -p "$port" strlen key:__rand_int__ | tr -d '\r')
	smc_assert_eq "length of the value stored by redis-benchmark" "$len" "$VALUE_SIZE"
	smc_stop_server redis TERM 30
	smc_assert_eq "redis-server exit status" "${SMC_SERVER_RC[redis]}" 0
	ib_expect_payload "$srv" $((2 * REDIS_REQUESTS * VALUE_SIZE)) "redis-server"
	ib_expect_payload "$cli" $((2 * REDIS_REQUESTS * VALUE_SIZE)) "redis clients"
}

iperf() {
	local label=$1 port srv cli out sent received
	shift
	if ! command -v iperf3 >/dev/null; then
		smc_log "SKIP iperf3: not installed"
		return
	fi
	out=$SMC_TMP/iperf3-$label.json
	smc_free_port port
	srv=$(smc_stats_dir "iperf3-server-$label")
	cli=$(smc_stats_dir "iperf3-client-$label")
	smc_start_server "iperf3-$label" "$srv" iperf3 -s -1 -J -p "$port"
	smc_wait_port "iperf3-$label" "$port" 60
	smc_log "iperf3 $label over ib"
	smc_run "$cli" iperf3 -c 127.0.0.1 -p "$port" -t 2 -J "$@" >"$out" ||
		smc_fail "iperf3 client $label failed (status $?): $(jq -r '.error // empty' "$out")"
	smc_wait_server_exit "iperf3-$label" 60
	smc_assert_eq "iperf3 server $label exit status" "${SMC_SERVER_RC[iperf3-$label]}" 0
	[ -z "$(jq -r '.error // empty' "$out")" ] || smc_fail "iperf3 $label: $(jq -r .error "$out")"
	sent=$(jq '.end.sum_sent.bytes' "$out")
	received=$(jq '.end.sum_received.bytes' "$out")
	smc_log "iperf3 $label: sent=$sent received=$received"
	smc_assert_ge "iperf3 $label: bytes received" "$received" 1
	smc_assert_ge "iperf3 $label: bytes received x 10 vs sent x 9" $((received * 10)) $((sent * 9))
	ib_expect_payload "$srv" "$received" "iperf3 server ($label)"
	ib_expect_payload "$cli" "$received" "iperf3 client ($label)"
}

churn() {
	local port srv cli out=$SMC_TMP/churn.out log rc
	smc_require_built "$SMC_CHURN"
	smc_free_port port
	srv=$(smc_stats_dir churn-server)
	cli=$(smc_stats_dir churn-client)
	smc_start_server churn "$srv" "$SMC_CHURN" server "$port" --bind 127.0.0.1 --mode epoll
	smc_wait_port churn "$port" 60
	smc_log "churn: $CHURN_CYCLES cycles from $CHURN_THREADS threads over ib"
	# the warm-up cycles open the device and the link (fds, library and queue
	# mappings) before the client's resource baseline; RMBs of the last connections
	# may still wait for the peer's close: some slack. Every cycle is upgraded
	# (SMC_SHORT_CONN_US=0): the churn over ib is the point, not the policy.
	SMC_SHORT_CONN_US=0 smc_run "$cli" "$SMC_CHURN" client 127.0.0.1 "$port" --threads "$CHURN_THREADS" \
		--warmup 4 --cycles "$CHURN_CYCLES" --maps-slack 64 >"$out" 2>&1
	rc=$?
	cat "$out"
	smc_stop_server churn TERM 30
	log=$(smc_server_log churn)
	cat "$log"
	smc_assert_eq "churn client exit status" "$rc" 0
	grep -q "^RESULT client threads=$CHURN_THREADS cycles=$CHURN_CYCLES .* errors=0 " "$out" ||
		smc_fail "churn client did not report $CHURN_CYCLES cycles without error"
	grep -q "^RESULT server connections=$((CHURN_CYCLES + 4 * CHURN_THREADS)) errors=0$" "$log" ||
		smc_fail "churn server: expected $((CHURN_CYCLES + 4 * CHURN_THREADS)) connections without error"
	ib_expect_payload "$srv" $((128 * CHURN_CYCLES)) "churn server"
	ib_expect_payload "$cli" $((128 * CHURN_CYCLES)) "churn clients"
	smc_assert_ge "churn server: ib connections" "$(smc_stats "$srv" '.connections.ib')" \
		"$CHURN_CYCLES"
	smc_assert_ge "churn clients: ib connections" "$(smc_stats "$cli" '.connections.ib')" \
		"$CHURN_CYCLES"
}

case ${SMC_RDMA_APPS:-redis iperf churn} in *redis*) redis ;; esac
case ${SMC_RDMA_APPS:-redis iperf churn} in *iperf*) iperf forward; iperf reverse -R ;; esac
case ${SMC_RDMA_APPS:-redis iperf churn} in *churn*) churn ;; esac
smc_pass
