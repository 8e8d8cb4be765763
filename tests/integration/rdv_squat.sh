#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#
# Another local user squats the same-host rendezvous: user nobody binds the abstract
# per-connection names (core/base/rendezvous.h) of the connections a root client is about to
# make to a root server (tests/progs/rdv_squat squat), accepts whoever connects and never
# answers. Then the preloaded client makes short connections from exactly those ports
# to the preloaded event-loop server (tests/progs/smc_churn, epoll). Each must work as
# plain TCP, on both sides for "rendezvous-taken": the server checks who holds the name
# before it reads anything from it (otherwise its nonblocking accept() would wait out a
# handshake timeout per connection, freezing its event loop), and the client gives up
# a name another user holds at once. The squatter must have been reached by the server
# (its connections) and have received nothing (no Proposal, no byte). Connections from
# ports nobody squats are then upgraded as usual, and the server holds no more
# descriptors, memfds or mappings than before.
# Skips (77) without root or without a user nobody.
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
# shellcheck disable=SC2034 # read by lib.sh
SMC_TEST_KEEP_TRANSPORT=1
SMC_TEST_EXPECT=shm
. "$(dirname -- "$0")/lib.sh"

[ "$(id -u)" = 0 ] || smc_skip "needs root (a squatter of another user)"
id -u nobody >/dev/null 2>&1 || smc_skip "no user nobody"
smc_require_cmd setpriv
smc_init
SQUAT=$top_builddir/tests/progs/rdv_squat
smc_require_built "$SQUAT"
smc_require_built "$SMC_CHURN"
as_nobody=(setpriv --reuid=nobody --regid="$(id -g nobody)" --clear-groups)
COUNT=10
# every connection makes the full handshake, however short (libsmc_preload(7))
export SMC_SHORT_CONN_US=0
# the same-host rendezvous, never the TCP option, even where the host (or a concurrent
# test) has it set up: no map where the library looks for one
export SMC_BPF_DIR=/sys/fs/bpf/smc-rdv-squat-none-$$ SMC_RDV_DIR=$SMC_TMP/no-rdv-dir

# odd_ports VAR: sets VAR to an odd port P such that P, P+2, ... (COUNT ports) are unused
odd_ports() {
	local _b _i _busy
	for ((_i = 0; _i < 50; _i++)); do
		smc_free_port _b
		_b=$((_b | 1))
		_busy=$(ss -Htan "( sport >= :$_b and sport <= :$((_b + 2 * COUNT)) )" 2>/dev/null)
		if [ -z "$_busy" ]; then
			printf -v "$1" '%s' "$_b"
			return 0
		fi
	done
	smc_hard_error "no free range of client ports"
}

smc_free_port PORT
odd_ports SQUATTED
SRV_STATS=$(smc_stats_dir server)
smc_start_server server "$SRV_STATS" "$SMC_CHURN" server "$PORT" --bind 127.0.0.1 --mode epoll
smc_wait_port server "$PORT"
srv_pid=${SMC_SERVER_PID[server]}

# a warm-up connection makes the library's lazily created state (the progress thread)
odd_ports WARM
smc_run "$(smc_stats_dir warmup)" "$SQUAT" connect "$PORT" "$WARM" 1 >/dev/null ||
	smc_fail "warm-up connection failed"
sleep 0.5
base=$(smc_proc_resources "$srv_pid")

"${as_nobody[@]}" "$SQUAT" squat "$PORT" "$SQUATTED" "$COUNT" >"$SMC_TMP/squat.log" 2>&1 &
squat_pid=$!
for ((i = 0; i < 100; i++)); do
	grep -q '^OK squatting' "$SMC_TMP/squat.log" && break
	kill -0 "$squat_pid" 2>/dev/null || smc_fail "squatter: $(cat "$SMC_TMP/squat.log")"
	sleep 0.1
done
grep -q "^OK squatting $COUNT\$" "$SMC_TMP/squat.log" ||
	smc_fail "the squatter did not bind its names: $(cat "$SMC_TMP/squat.log")"

CLI_STATS=$(smc_stats_dir client)
out=$(smc_run "$CLI_STATS" "$SQUAT" connect "$PORT" "$SQUATTED" "$COUNT" 2>&1) ||
	smc_fail "connections from squatted ports failed: $out"
smc_log "client from squatted ports: $out"
kill -TERM "$squat_pid"
wait "$squat_pid"
squat_out=$(grep '^RESULT' "$SMC_TMP/squat.log")
smc_log "squatter: $squat_out"
[[ $squat_out =~ accepted=([0-9]+)\ bytes=([0-9]+) ]] ||
	smc_fail "no result from the squatter: $(cat "$SMC_TMP/squat.log")"
# the server joined every squatted name (it was reached) and sent nothing to it
smc_assert_ge "squatter: connections it accepted" "${BASH_REMATCH[1]}" "$COUNT"
smc_assert_eq "squatter: bytes it received" "${BASH_REMATCH[2]}" 0

smc_require_stats "$CLI_STATS"
smc_log "stats client (squatted): $(smc_stats_summary "$CLI_STATS")"
smc_assert_eq "client (squatted): tcp connections" \
	"$(smc_stats "$CLI_STATS" '.connections.tcp // 0')" "$COUNT"
smc_assert_eq "client (squatted): rendezvous-taken" \
	"$(smc_stats "$CLI_STATS" '.fallback["rendezvous-taken"] // 0')" "$COUNT"
smc_assert_eq "client (squatted): shm connections" \
	"$(smc_stats "$CLI_STATS" '.connections.shm // 0')" 0

# ports nobody holds: upgraded as usual
odd_ports FREE
CLI2_STATS=$(smc_stats_dir client-free)
out=$(smc_run "$CLI2_STATS" "$SQUAT" connect "$PORT" "$FREE" "$COUNT" 2>&1) ||
	smc_fail "connections from free ports failed: $out"
smc_log "client from free ports: $out"
smc_expect_payload "$CLI2_STATS" $((2 * 64 * COUNT)) "client (free ports)"

smc_expect_resources server "$srv_pid" "$base"
smc_stop_server server
smc_require_stats "$SRV_STATS"
smc_log "stats server: $(smc_stats_summary "$SRV_STATS")"
smc_assert_eq "server: rendezvous-taken (the squatted connections)" \
	"$(smc_stats "$SRV_STATS" '.fallback["rendezvous-taken"] // 0')" "$COUNT"
smc_assert_eq "server: tcp connections" "$(smc_stats "$SRV_STATS" '.connections.tcp // 0')" "$COUNT"
smc_assert_eq "server: shm connections (warm-up + free ports)" \
	"$(smc_stats "$SRV_STATS" '.connections.shm // 0')" $((COUNT + 1))
smc_assert_eq "server: aborts" "$(smc_stats "$SRV_STATS" '.events.aborts')" 0
smc_assert_eq "server exit status" "${SMC_SERVER_RC[server]}" 0
smc_pass
