#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#
# Clients killed in the middle of connection churn. Seed 001: a TCP_CRR run over the
# kernel's SMC ended in "connection refused" and "connection reset" because the load
# generator was stopped while handshakes were running. Here an epoll smc_churn server
# runs under smc_preload.sh with every connection upgraded (SMC_SHORT_CONN_US=0), and
# KILL_ROUNDS smc_churn clients of 8 threads each are killed 0.1-0.6 s into their run
# (SIGKILL, and SIGTERM every other round), which cuts handshakes at every stage on the
# client side. Afterwards:
#  - the server still serves: a new client runs CHECK_CYCLES cycles without an error,
#    over shared memory (its stats and the server's);
#  - the server is back to its baseline of fds, memfds and memfd mappings (smc_churn's
#    leak report): nothing a dead client left half done stays behind;
#  - the server's log holds no library warning or error.
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
# shellcheck source=tests/integration/lib.sh
. "$(dirname -- "$0")/lib.sh"

KILL_ROUNDS=${KILL_ROUNDS:-10}
CHECK_CYCLES=${CHECK_CYCLES:-2000}
CHURN_MAPS_SLACK=${CHURN_MAPS_SLACK:-16}
THREADS=8

smc_init
smc_require_built "$SMC_CHURN"
export SMC_SHORT_CONN_US=0

smc_free_port port
srv=$(smc_stats_dir server)
smc_start_server server "$srv" "$SMC_CHURN" server "$port" --bind 127.0.0.1 --mode epoll \
	--report --maps-slack "$CHURN_MAPS_SLACK"
smc_wait_port server "$port"

# the server's baseline comes after a warm-up, so lazily created library state (the
# progress thread and its fds) is not taken for a leak
warm=$(smc_stats_dir warmup)
smc_run "$warm" "$SMC_CHURN" client 127.0.0.1 "$port" --threads "$THREADS" --warmup 4 \
	--cycles 64 >"$SMC_TMP/warmup.out" 2>&1 ||
	smc_fail "warm-up client failed: $(cat "$SMC_TMP/warmup.out")"
kill -USR1 "${SMC_SERVER_PID[server]}"
smc_wait_log server '^RESOURCES server baseline'

victims=$(smc_stats_dir victims)
for ((i = 1; i <= KILL_ROUNDS; i++)); do
	sig=KILL
	((i % 2)) && sig=TERM
	smc_start_server "victim-$i" "$victims" "$SMC_CHURN" client 127.0.0.1 "$port" \
		--threads "$THREADS" --cycles 100000000
	sleep "0.$((RANDOM % 6 + 1))"
	kill -"$sig" -- "-${SMC_SERVER_PID[victim-$i]}" 2>/dev/null
	smc_wait_server_exit "victim-$i" 10
	# a victim that ran into an error before the kill would show a failure of its own
	grep -q '^FAIL\|^LEAK' "$(smc_server_log "victim-$i")" &&
		smc_fail "victim $i failed before it was killed: $(cat "$(smc_server_log "victim-$i")")"
done
smc_log "$KILL_ROUNDS clients killed in the middle of their churn"

cli=$(smc_stats_dir client)
out=$SMC_TMP/client.out
smc_run "$cli" "$SMC_CHURN" client 127.0.0.1 "$port" --threads "$THREADS" --warmup 1 \
	--cycles "$CHECK_CYCLES" >"$out" 2>&1
rc=$?
cat "$out"
smc_stop_server server TERM 30
log=$(smc_server_log server)
tail -20 "$log"
smc_assert_eq "client after the kills: exit status" "$rc" 0
grep -q "^RESULT client threads=$THREADS cycles=$CHECK_CYCLES .* errors=0 " "$out" ||
	smc_fail "the client after the kills did not run $CHECK_CYCLES cycles without error"
# the server's own exit status counts the victims' broken connections as errors
grep -q 'connections still open' "$log" && smc_fail "server: $(grep 'still open' "$log")"
grep -q '^LEAK' "$log" && smc_fail "server: $(grep '^LEAK' "$log")"
grep -q '^RESOURCES server final' "$log" || smc_fail "server: no final resource report"
grep -q 'smc-preload.*\(WARN\|ERROR\)' "$log" &&
	smc_fail "library warnings in the server's log: $(grep 'smc-preload.*\(WARN\|ERROR\)' "$log" | head -5)"
smc_expect_payload "$cli" $((128 * CHECK_CYCLES)) "client after the kills"
smc_expect_connections "$cli" "$CHECK_CYCLES" "client after the kills"
# the server's own count over the whole run: the victims' connections too
smc_expect_connections "$srv" "$CHECK_CYCLES" server
smc_pass
