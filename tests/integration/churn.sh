#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#
# Connection churn: 20000 connect/request/response/close cycles from 8 client threads,
# server and client under smc_preload.sh, against an epoll server and then a
# thread-per-connection server. No cycle may fail and neither process may leak an fd, a
# memfd or a memfd mapping (smc_churn counts /proc/self/fd and /proc/self/maps before and
# after; see tests/lib/smc_churn.c for the rules). The server's baseline is taken after
# a short warm-up client, so lazily created library state is not mistaken for a leak.
# SMC_SHORT_CONN_US=0: every connection is upgraded (libsmc_preload(7)).
# CHURN_CYCLES, CHURN_THREADS and CHURN_MAPS_SLACK (mappings a process may gain for
# reasons unrelated to connections; sanitizer builds need more) override the defaults.
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
. "$(dirname -- "$0")/lib.sh"

CHURN_CYCLES=${CHURN_CYCLES:-20000}
CHURN_THREADS=${CHURN_THREADS:-8}
CHURN_MAPS_SLACK=${CHURN_MAPS_SLACK:-16}
WARMUP_CYCLES=64      # the separate warm-up client run, before the server's baseline
PER_THREAD_WARMUP=4   # each client's own warm-up, before its baseline

smc_init
smc_require_built "$SMC_CHURN"
# Every cycle is a short connection: the churn is what this test is about, so the
# client upgrades them all (short_conn.sh tests the default policy).
export SMC_SHORT_CONN_US=0

for mode in epoll thread; do
	smc_free_port port
	srv=$(smc_stats_dir "server-$mode")
	cli=$(smc_stats_dir "client-$mode")
	name=server-$mode
	smc_start_server "$name" "$srv" "$SMC_CHURN" server "$port" --bind 127.0.0.1 \
		--mode "$mode" --report --maps-slack "$CHURN_MAPS_SLACK"
	smc_wait_port "$name" "$port"

	smc_log "$mode server: warm-up ($WARMUP_CYCLES cycles)"
	smc_run "$cli" "$SMC_CHURN" client 127.0.0.1 "$port" --threads "$CHURN_THREADS" \
		--warmup "$PER_THREAD_WARMUP" --cycles "$WARMUP_CYCLES" >"$SMC_TMP/warmup-$mode.out" 2>&1 ||
		smc_fail "warm-up client ($mode) failed: $(cat "$SMC_TMP/warmup-$mode.out")"
	kill -USR1 "${SMC_SERVER_PID[$name]}"
	smc_wait_log "$name" '^RESOURCES server baseline'

	smc_log "$mode server: $CHURN_CYCLES cycles from $CHURN_THREADS threads"
	out=$SMC_TMP/client-$mode.out
	smc_run "$cli" "$SMC_CHURN" client 127.0.0.1 "$port" --threads "$CHURN_THREADS" \
		--warmup "$PER_THREAD_WARMUP" --cycles "$CHURN_CYCLES" \
		--maps-slack "$CHURN_MAPS_SLACK" >"$out" 2>&1
	rc=$?
	cat "$out"
	smc_stop_server "$name" TERM 30
	log=$(smc_server_log "$name")
	cat "$log"
	smc_assert_eq "churn client ($mode server) exit status" "$rc" 0
	grep -q "^RESULT client threads=$CHURN_THREADS cycles=$CHURN_CYCLES .* errors=0 " "$out" ||
		smc_fail "churn client ($mode server) did not report $CHURN_CYCLES cycles without error"
	grep -q '^OK client$' "$out" || smc_fail "churn client ($mode server) reported a failure"
	smc_assert_eq "churn server ($mode) exit status" "${SMC_SERVER_RC[$name]}" 0
	grep -q '^LEAK' "$log" && smc_fail "churn server ($mode): $(grep '^LEAK' "$log")"
	grep -q '^RESOURCES server final' "$log" || smc_fail "churn server ($mode): no final report"
	total=$((CHURN_CYCLES + WARMUP_CYCLES + 2 * PER_THREAD_WARMUP * CHURN_THREADS))
	grep -q "^RESULT server connections=$total errors=0$" "$log" ||
		smc_fail "churn server ($mode): expected $total connections without error"

	# Every cycle moved 64 bytes each way and was its own connection.
	smc_expect_payload "$srv" $((128 * CHURN_CYCLES)) "server ($mode)"
	smc_expect_payload "$cli" $((128 * CHURN_CYCLES)) "clients ($mode server)"
	smc_expect_connections "$srv" "$total" "server ($mode)"
	smc_expect_connections "$cli" "$total" "clients ($mode server)"
done
smc_pass
