#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#
# Connection churn: CHURN_CYCLES (20000) connect/request/response/close cycles from 8
# client threads, server and client under smc_preload.sh, against an epoll server and
# then a thread-per-connection server. No cycle may fail (in particular none may lose its
# response, nor see its connection reset: the client's RESULT line counts both) and
# neither process may leak an fd, a memfd or a memfd mapping (smc_churn counts
# /proc/self/fd and /proc/self/maps before and after; see tests/progs/smc_churn.c for the
# rules). The server's baseline is taken after a short warm-up client, so lazily created
# library state is not mistaken for a leak.
# SMC_SHORT_CONN_US=0: every connection is upgraded (libsmc_preload(7)).
#
# CHURN_PATH picks the handshake: "rendezvous" (default: the same-host rendezvous, no
# setup) or "tcpopt" (the SMC TCP option: root; sets up the eBPF program under a map
# directory of its own and tears it down at exit; churn_tcpopt.sh runs that). The
# warm-up client logs at debug level, which proves the path taken.
# CHURN_CYCLES, CHURN_THREADS, CHURN_MODES ("epoll thread") and CHURN_MAPS_SLACK
# (mappings a process may gain for reasons unrelated to connections; sanitizer builds
# need more) override the defaults; the command timeouts grow with CHURN_CYCLES.
#
# The soak (a million cycles per server mode, each path, plain and sanitizer builds):
#   make check TESTS='tests/integration/churn.sh tests/integration/churn_tcpopt.sh' \
#        CHURN_CYCLES=1000000
# and in a --enable-sanitizers build the same with test.sh's sanitizer environment
# (SMC_TEST_PRELOAD_FIRST=libasan, ASAN_OPTIONS=detect_leaks=0:verify_asan_link_order=0)
# and CHURN_MAPS_SLACK=1024: over a million threads the thread server's ASan runtime
# gains a few hundred mappings (435 in one run; none without the sanitizers).
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"

CHURN_CYCLES=${CHURN_CYCLES:-20000}
CHURN_THREADS=${CHURN_THREADS:-8}
CHURN_MAPS_SLACK=${CHURN_MAPS_SLACK:-16}
CHURN_MODES=${CHURN_MODES:-epoll thread}
CHURN_PATH=${CHURN_PATH:-rendezvous}
WARMUP_CYCLES=64      # the separate warm-up client run, before the server's baseline
PER_THREAD_WARMUP=4   # each client's own warm-up, before its baseline
# A sanitizer build under load runs a few hundred cycles a second.
: "${SMC_CMD_TIMEOUT:=$((120 + CHURN_CYCLES / 100))}"
: "${SMC_TEST_TIMEOUT:=$((300 + 3 * SMC_CMD_TIMEOUT))}"
. "$(dirname -- "$0")/lib.sh"

smc_init
smc_require_built "$SMC_CHURN"
# Every cycle is a short connection: the churn is what this test is about, so the
# client upgrades them all (short_conn.sh tests the default policy).
export SMC_SHORT_CONN_US=0
# What the library says of a connection that went wrong lands in the logs shown.
export SMC_LOG_LEVEL=${SMC_LOG_LEVEL:-info}

case $CHURN_PATH in
rendezvous)
	# no eBPF map, even where the host (its boot unit, a concurrent test) has the TCP
	# option set up: the map is pinned under SMC_RDV_DIR too
	export SMC_BPF_DIR=/sys/fs/bpf/smc-churn-none-$$ SMC_RDV_DIR=$SMC_TMP/no-rdv-dir
	;;
tcpopt)
	smc_tcpopt_setup churn
	;;
*)
	smc_hard_error "CHURN_PATH must be rendezvous or tcpopt, not $CHURN_PATH"
	;;
esac

for mode in $CHURN_MODES; do
	smc_free_port port
	srv=$(smc_stats_dir "server-$mode")
	cli=$(smc_stats_dir "client-$mode")
	name=server-$mode
	smc_start_server "$name" "$srv" "$SMC_CHURN" server "$port" --bind 127.0.0.1 \
		--mode "$mode" --report --maps-slack "$CHURN_MAPS_SLACK"
	smc_wait_port "$name" "$port"

	smc_log "$mode server: warm-up ($WARMUP_CYCLES cycles, $CHURN_PATH path)"
	warm=$SMC_TMP/warmup-$mode.out
	SMC_LOG_LEVEL=debug smc_run "$cli" "$SMC_CHURN" client 127.0.0.1 "$port" \
		--threads "$CHURN_THREADS" --warmup "$PER_THREAD_WARMUP" --cycles "$WARMUP_CYCLES" \
		>"$warm" 2>&1 || smc_fail "warm-up client ($mode) failed: $(cat "$warm")"
	if [ "$CHURN_PATH" = tcpopt ]; then
		grep -q 'both sent the SMC option: CLC Proposal sent' "$warm" ||
			smc_fail "warm-up client ($mode): no connection negotiated through the TCP option"
	else
		grep -q 'both sent the SMC option' "$warm" &&
			smc_fail "warm-up client ($mode): the TCP option was used on the rendezvous path"
	fi
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
	result=$(grep '^RESULT client ' "$out")
	smc_log "$mode server, $CHURN_PATH path: ${result:-no result}"
	lost=$(sed -n 's/^RESULT client .* lost=\([0-9]*\) .*/\1/p' "$out")
	resets=$(sed -n 's/^RESULT client .* reset=\([0-9]*\) .*/\1/p' "$out")
	smc_assert_eq "responses lost ($mode server)" "${lost:-none reported}" 0
	smc_assert_eq "connections reset ($mode server)" "${resets:-none reported}" 0
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

# Connects refused by a port nobody listens on are no connections, on this path too
# (fallback.sh checks the rendezvous path): with the option map, each is pending on the
# progress thread when the reset comes.
cli=$(smc_stats_dir refused-client)
smc_free_port refused_port
out=$(SMC_SHORT_CONN_US=0 smc_run "$cli" python3 "$top_srcdir/tests/progs/refused_connects.py" \
	"$refused_port" 2>&1) || smc_fail "refused-connect client failed: $out"
smc_require_stats "$cli"
smc_log "stats refused-client: $(smc_stats_summary "$cli")"
smc_assert_eq "refused connects: connections counted" \
	"$(smc_stats "$cli" '.connections.tcp + .connections.shm + .connections.ib')" 2
smc_pass
