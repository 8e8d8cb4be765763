#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#
# A client that connects as APR does (ab, Apache's mod_proxy): a nonblocking connect(),
# poll until writable, then connect() again for the result. The second call is not a
# new connection: every cycle must succeed, the stats must count each connection once
# (as many as the server accepted), and a connection that the first call left on TCP
# must not be offered anything by the second. Against a server that serves pools
# (most short connections pooled) and one that forked after it listened (no pool: the
# policy keeps the short connections on TCP).
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
. "$(dirname -- "$0")/lib.sh"

CYCLES=${CHURN_CYCLES:-4000}
THREADS=4
# per client thread before the baseline: the pool (16 slots, 2 doorbells each) is set
# up after the first short connections, later under the sanitizers
WARMUP=32

smc_init
smc_require_built "$SMC_CHURN"
unset SMC_SHORT_CONN_US SMC_POOL_SLOTS SMC_POOL_RING

total=$((CYCLES + THREADS * WARMUP))
for server in pooled forked; do
	smc_free_port port
	srv=$(smc_stats_dir "server-$server")
	cli=$(smc_stats_dir "client-$server")
	args=(--mode epoll --count "$total")
	[ "$server" = forked ] && args+=(--fork)
	smc_start_server "server-$server" "$srv" "$SMC_CHURN" server "$port" --bind 127.0.0.1 \
		"${args[@]}"
	smc_wait_port "server-$server" "$port"
	out=$SMC_TMP/client-$server.out
	smc_log "$server server: $CYCLES cycles from $THREADS threads, connect() twice each"
	smc_run "$cli" "$SMC_CHURN" client 127.0.0.1 "$port" --threads "$THREADS" \
		--warmup "$WARMUP" --cycles "$CYCLES" --connect-twice >"$out" 2>&1
	rc=$?
	cat "$out"
	smc_assert_eq "client ($server server) exit status" "$rc" 0
	grep -q "^RESULT client threads=$THREADS cycles=$CYCLES .* errors=0 " "$out" ||
		smc_fail "client ($server server) did not report $CYCLES cycles without error"
	smc_wait_server_exit "server-$server" 60
	log=$(smc_server_log "server-$server")
	cat "$log"
	smc_assert_eq "server ($server) exit status" "${SMC_SERVER_RC[server-$server]}" 0
	grep -q "^RESULT server connections=$total errors=0$" "$log" ||
		smc_fail "server ($server): expected $total connections without error"
	smc_require_stats "$cli"
	smc_require_stats "$srv"
	smc_log "stats client: $(smc_stats_summary "$cli")"
	smc_log "stats server: $(smc_stats_summary "$srv")"
	smc_assert_eq "client ($server server): connections counted (shm + tcp)" \
		"$(smc_stats "$cli" '.connections.shm + .connections.tcp')" "$total"
	smc_assert_eq "client ($server server): aborts" "$(smc_stats "$cli" '.events.aborts')" 0
	smc_assert_eq "server ($server): aborts" "$(smc_stats "$srv" '.events.aborts')" 0
	if [ "$SMC_TEST_EXPECT" = tcp ]; then
		smc_expect_payload "$cli" $((128 * total)) "client ($server server)"
	elif [ "$server" = pooled ]; then
		smc_assert_ge "client: pooled connections (90% of $CYCLES)" \
			"$(smc_stats "$cli" '.events.shm_pooled')" $((CYCLES * 9 / 10))
	else
		smc_assert_eq "client (forked server): pooled connections" \
			"$(smc_stats "$cli" '.events.shm_pooled')" 0
		smc_assert_eq "client (forked server): connections not upgraded are short-lived" \
			"$(smc_stats "$cli" '.connections.tcp')" \
			"$(smc_stats "$cli" '.fallback["short-lived"] // 0')"
	fi
done
smc_pass
