#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#
# Connection pools (core/shm/pool.h): short connections to a destination that the policy
# keeps off the handshake run on a pool slot instead, under the default settings.
#  1. smc_churn, epoll and thread-per-connection servers, 8 client threads, 10,000
#     connect/request/response/close cycles per client: no cycle fails, nothing leaks
#     (fds, memfds, memfd mappings back to the baseline in both processes, so a client's
#     pool goes away when it exits), at least 90% of the cycles ran on a pool slot
#     (stats: shm_pooled) in both processes, as many on each side, their payload over
#     shm, and the only TCP connections are those made while the pool was set up
#     or had every slot taken (stats: pool_pending, pool_full).
#  2. The same client against a server that forked after it started listening (the
#     churn server with --fork): no pool (a forked sibling could accept a connection
#     offered in a pool it does not know), every cycle correct, shm_pooled 0 on both
#     sides.
#     A server that forked before it listened (--fork-first, as the Erlang VM at boot)
#     serves pools as one that never forked.
#  3. A client that runs as another user (nobody) than the server: the server checks
#     per connection that the pool's client owns the connection (sock_diag): pooled, no
#     error.
# CHURN_CYCLES and CHURN_MAPS_SLACK override the defaults.
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
. "$(dirname -- "$0")/lib.sh"

CHURN_CYCLES=${CHURN_CYCLES:-10000}
CHURN_MAPS_SLACK=${CHURN_MAPS_SLACK:-16}
THREADS=8
WARMUP_CYCLES=64
PER_THREAD_WARMUP=4

smc_init
smc_require_built "$SMC_CHURN"
[ "$SMC_TEST_EXPECT" = shm ] || smc_skip "pools carry shm connections: shm mode only"
unset SMC_SHORT_CONN_US SMC_POOL_SLOTS SMC_POOL_RING
# the library's warnings reach the processes' output, where check_server looks for them
export SMC_LOG_LEVEL=warn

# run_client NAME STATSDIR PORT CYCLES [RUNNER...]: one churn client (under RUNNER, e.g.
# setpriv); fails the test on any error or leak. Its warm-up repeats until its counts
# settle (--settle: the pool that its first connections ask for may be set up later on
# a loaded machine); adds every connection it made to `made`.
made=0
run_client() {
	local name=$1 dir=$2 port=$3 cycles=$4 out rc warm
	shift 4
	out=$SMC_TMP/${name// /_}.out
	smc_run "$dir" "$@" "$SMC_CHURN" client 127.0.0.1 "$port" --threads "$THREADS" \
		--warmup "$PER_THREAD_WARMUP" --settle --cycles "$cycles" \
		--maps-slack "$CHURN_MAPS_SLACK" >"$out" 2>&1
	rc=$?
	cat "$out"
	smc_assert_eq "$name exit status" "$rc" 0
	grep -q "^RESULT client threads=$THREADS cycles=$cycles .* errors=0 " "$out" ||
		smc_fail "$name did not report $cycles cycles without error"
	grep -q '^OK client$' "$out" || smc_fail "$name reported a failure"
	warm=$(sed -n 's/^RESULT client .* warmup_cycles=\([0-9]*\) .*/\1/p' "$out")
	[ -n "$warm" ] || smc_fail "$name: no warm-up count in its report"
	made=$((made + cycles + warm))
}

# check_server NAME CONNECTIONS: the churn server's own report.
check_server() {
	local name=$1 total=$2 log
	log=$(smc_server_log "$name")
	cat "$log"
	smc_assert_eq "$name exit status" "${SMC_SERVER_RC[$name]}" 0
	grep -q '^LEAK' "$log" && smc_fail "$name: $(grep '^LEAK' "$log")"
	grep -q '^RESOURCES server final' "$log" || smc_fail "$name: no final report"
	grep -q "^RESULT server connections=$total errors=0$" "$log" ||
		smc_fail "$name: expected $total connections without error"
	grep -q 'smc-preload.*\(WARN\|ERROR\)' "$log" &&
		smc_fail "$name: library warning: $(grep 'smc-preload.*\(WARN\|ERROR\)' "$log" | head -3)"
	return 0
}

# start_server NAME STATSDIR CLIENT_STATSDIR PORT ARGS...: a churn server with its baseline
# taken after a warm-up client (whose pool comes and goes with it; its stats go with the
# client's).
start_server() {
	local name=$1 dir=$2 warm=$3 port=$4
	shift 4
	made=0
	smc_start_server "$name" "$dir" "$SMC_CHURN" server "$port" --bind 127.0.0.1 --report \
		--maps-slack "$CHURN_MAPS_SLACK" "$@"
	smc_wait_port "$name" "$port"
	run_client "$name warm-up client" "$warm" "$port" "$WARMUP_CYCLES"
	# the warm-up client's pool goes when the server sees its link close
	sleep 0.5
	kill -USR1 "${SMC_SERVER_PID[$name]}"
	smc_wait_log "$name" '^RESOURCES server baseline'
}

# 1. pooled, epoll and thread servers
for mode in epoll thread; do
	smc_free_port port
	srv=$(smc_stats_dir "server-$mode")
	cli=$(smc_stats_dir "client-$mode")
	start_server "server-$mode" "$srv" "$cli" "$port" --mode "$mode"
	smc_log "$mode server: $CHURN_CYCLES cycles from $THREADS threads, default policy"
	run_client "client ($mode server)" "$cli" "$port" "$CHURN_CYCLES"
	sleep 0.5 # the client's pool goes when the server sees its link close
	smc_stop_server "server-$mode" TERM 30
	check_server "server-$mode" "$made"
	smc_require_stats "$srv"
	smc_require_stats "$cli"
	smc_log "stats server: $(smc_stats_summary "$srv")"
	smc_log "stats client: $(smc_stats_summary "$cli")"
	pooled=$(smc_stats "$cli" '.events.shm_pooled')
	waited=$(smc_stats "$cli" '.events.pool_pending + .events.pool_full')
	smc_log "client ($mode): $(smc_stats "$cli" '.events.pool_pending') connections made" \
		"while a pool was set up, $(smc_stats "$cli" '.events.pool_full') while its slots were taken"
	smc_assert_ge "client ($mode): pooled connections (90% of the cycles that found a pool with a free slot)" \
		"$pooled" "$(((CHURN_CYCLES - waited) * 9 / 10))"
	smc_assert_eq "server ($mode): pooled connections, as many as the client's" \
		"$(smc_stats "$srv" '.events.shm_pooled')" "$pooled"
	smc_assert_ge "client ($mode): payload over shm (128 bytes per pooled cycle)" \
		"$(smc_stats "$cli" '.bytes.shm.sent + .bytes.shm.received')" "$((128 * pooled))"
	tcp=$(smc_stats "$cli" '.connections.tcp')
	smc_assert_eq "client ($mode): every TCP connection is a short-lived one" \
		"$tcp" "$(smc_stats "$cli" '.fallback["short-lived"] // 0')"
	# how many go TCP while a pool is set up or its slots are all taken depends on how
	# soon the server runs (a busy machine delays it by milliseconds); none may go TCP
	# for another reason
	smc_assert_eq "client ($mode): TCP connections only while a pool was set up or full" \
		"$tcp" "$waited"
	# slots that never came back would leave nearly every cycle on TCP
	smc_assert_ge "client ($mode): pooled connections (half of $CHURN_CYCLES)" \
		"$pooled" "$((CHURN_CYCLES / 2))"
	smc_assert_eq "client ($mode): aborts" "$(smc_stats "$cli" '.events.aborts')" 0
	smc_assert_eq "server ($mode): aborts" "$(smc_stats "$srv" '.events.aborts')" 0
done

# 2. a forked server serves no pool
smc_free_port port
srv=$(smc_stats_dir server-forked)
cli=$(smc_stats_dir client-forked)
start_server server-forked "$srv" "$cli" "$port" --mode epoll --fork
smc_log "forked server: $CHURN_CYCLES cycles"
run_client "client (forked server)" "$cli" "$port" "$CHURN_CYCLES"
smc_stop_server server-forked TERM 30
check_server server-forked "$made"
smc_require_stats "$cli"
smc_log "stats client: $(smc_stats_summary "$cli")"
smc_assert_eq "client (forked server): pooled connections" "$(smc_stats "$cli" '.events.shm_pooled')" 0
smc_assert_eq "server (forked): pooled connections" "$(smc_stats "$srv" '.events.shm_pooled')" 0
smc_assert_ge "client (forked server): short-lived TCP connections" \
	"$(smc_stats "$cli" '.fallback["short-lived"] // 0')" "$((CHURN_CYCLES / 2))"

# 2b. a fork before listening leaves the listener the server's own: pooled
smc_free_port port
srv=$(smc_stats_dir server-fork-first)
cli=$(smc_stats_dir client-fork-first)
start_server server-fork-first "$srv" "$cli" "$port" --mode epoll --fork-first
smc_log "server forked before listening: $CHURN_CYCLES cycles"
run_client "client (fork-first server)" "$cli" "$port" "$CHURN_CYCLES"
sleep 0.5
smc_stop_server server-fork-first TERM 30
check_server server-fork-first "$made"
smc_require_stats "$cli"
smc_log "stats client: $(smc_stats_summary "$cli")"
pooled=$(smc_stats "$cli" '.events.shm_pooled')
smc_assert_ge "client (fork-first server): pooled connections (half of $CHURN_CYCLES)" \
	"$pooled" "$((CHURN_CYCLES / 2))"
smc_assert_eq "server (fork-first): pooled connections, as many as the client's" \
	"$(smc_stats "$srv" '.events.shm_pooled')" "$pooled"

# 3. a client of another user: checked per connection
if [ "$(id -u)" = 0 ] && id nobody >/dev/null 2>&1 && command -v setpriv >/dev/null; then
	smc_free_port port
	srv=$(smc_stats_dir server-other)
	cli=$(smc_stats_dir client-other)
	chmod 0711 "$SMC_TMP" && chmod 0777 "$cli"
	start_server server-other "$srv" "$cli" "$port" --mode epoll
	smc_log "client as nobody: $CHURN_CYCLES cycles"
	run_client "client (nobody)" "$cli" "$port" "$CHURN_CYCLES" \
		setpriv --reuid=nobody --regid=nogroup --clear-groups --
	sleep 0.5
	smc_stop_server server-other TERM 30
	check_server server-other "$made"
	smc_require_stats "$cli"
	smc_log "stats client: $(smc_stats_summary "$cli")"
	pooled=$(smc_stats "$cli" '.events.shm_pooled')
	smc_assert_ge "client (nobody): pooled connections (90% of $CHURN_CYCLES)" \
		"$pooled" "$((CHURN_CYCLES * 9 / 10))"
	smc_assert_eq "server (nobody's client): pooled connections" \
		"$(smc_stats "$srv" '.events.shm_pooled')" "$pooled"
	smc_assert_eq "server (nobody's client): aborts" "$(smc_stats "$srv" '.events.aborts')" 0
else
	smc_log "not root or no user nobody: the other-user case is skipped"
fi
smc_pass
