#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#
# Peer death: kill -9 one side of an smc_stream transfer (both under smc_preload.sh) in
# the middle of it. The survivor must report EOF or an error (ECONNRESET, EPIPE) within
# PEERDEATH_MAX_S (default 1 s) of the kill, measured from the time smc_stream stamps on
# its error line, and its next connection must work:
#   1. the client dies: the blocking-mode server (--count 2) serves a second client;
#   2. the server dies: the epoll-mode client fails, and a new server on the same port
#      serves a new client.
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
. "$(dirname -- "$0")/lib.sh"

PEERDEATH_MAX_S=${PEERDEATH_MAX_S:-1}
HUGE=64g  # never finishes before the kill
AFTER=16m

smc_init
smc_require_built "$SMC_STREAM"

# kill_and_time NAME SURVIVOR: SIGKILLs NAME's process, then waits for SURVIVOR's error
# line and checks how long after the kill it came.
kill_and_time() {
	local victim=$1 survivor=$2 t_kill t_err log dt
	log=$(smc_server_log "$survivor")
	grep -q '^ERROR' "$log" && smc_fail "$survivor failed before the kill: $(grep '^ERROR' "$log")"
	t_kill=$(date +%s.%N)
	kill -KILL "${SMC_SERVER_PID[$victim]}"
	smc_wait_server_exit "$victim" 10
	smc_wait_log "$survivor" '^ERROR t=' 10
	grep '^ERROR' "$log"
	t_err=$(sed -n 's/^ERROR t=\([0-9.]*\) .*/\1/p' "$log" | head -n 1)
	dt=$(awk -v a="$t_kill" -v b="$t_err" 'BEGIN { printf "%.3f", b - a }')
	smc_log "$survivor noticed the death of $victim after ${dt}s"
	awk -v d="$dt" -v m="$PEERDEATH_MAX_S" 'BEGIN { exit !(d >= 0 && d <= m) }' ||
		smc_fail "$survivor reported the peer's death ${dt}s after the kill (limit ${PEERDEATH_MAX_S}s)"
	grep -Eq '^ERROR t=[0-9.]+ [a-z]+ conn=0: .*(EOF|reset|Broken pipe|EPOLLERR)' "$log" ||
		smc_fail "$survivor: unexpected kind of error: $(grep '^ERROR' "$log")"
}

# check_ok LOGFILE WHO BYTES: a complete transfer line.
check_ok() {
	local n
	n=$(awk -v s="$3" 'BEGIN { n = s + 0; u = substr(s, length(s)); if (u == "m") n *= 1048576; print n }')
	grep -Eq "^OK $2 conn=[0-9]+ bytes_sent=$n bytes_received=$n " "$1" ||
		smc_fail "$2 did not complete a $3 transfer after the peer's death: $(cat "$1")"
}

# ---- 1. the client dies; the server keeps serving
smc_free_port port
srv=$(smc_stats_dir server-1)
cli=$(smc_stats_dir client-1)
smc_start_server survivor-server "$srv" "$SMC_STREAM" server "$port" --bind 127.0.0.1 \
	--mode block --count 2
smc_wait_port survivor-server "$port"
smc_start_server victim-client "$(smc_stats_dir victim-1)" "$SMC_STREAM" client 127.0.0.1 "$port" --bytes "$HUGE" --mode block
sleep 1
kill_and_time victim-client survivor-server
smc_log "second client to the same server"
smc_run "$cli" "$SMC_STREAM" client 127.0.0.1 "$port" --bytes "$AFTER" --mode block \
	>"$SMC_TMP/client-1b.out" 2>&1 || smc_fail "client after the death: $(cat "$SMC_TMP/client-1b.out")"
smc_wait_server_exit survivor-server 30
log=$(smc_server_log survivor-server)
cat "$log"
check_ok "$log" server "$AFTER"
check_ok "$SMC_TMP/client-1b.out" client "$AFTER"
# The victim writes no stats (killed); the survivor counts both of its connections.
smc_expect_payload "$cli" $((2 << 20)) "second client"
smc_expect_payload "$srv" $((2 << 20)) "surviving server"
smc_expect_connections "$srv" 2 "surviving server"

# ---- 2. the server dies; the client notices; a new server serves a new client
smc_free_port port
srv2=$(smc_stats_dir server-2)
cli2=$(smc_stats_dir client-2)
smc_start_server victim-server "$(smc_stats_dir victim-2)" "$SMC_STREAM" server "$port" --bind 127.0.0.1 --mode block
smc_wait_port victim-server "$port"
smc_start_server survivor-client "$cli2" "$SMC_STREAM" client 127.0.0.1 "$port" \
	--bytes "$HUGE" --mode epoll
sleep 1
kill_and_time victim-server survivor-client
smc_wait_server_exit survivor-client 10
smc_assert_eq "surviving client exit status" "${SMC_SERVER_RC[survivor-client]}" 1
smc_start_server new-server "$srv2" "$SMC_STREAM" server "$port" --bind 127.0.0.1 --mode epoll
smc_wait_port new-server "$port"
smc_run "$cli2" "$SMC_STREAM" client 127.0.0.1 "$port" --bytes "$AFTER" --mode epoll \
	>"$SMC_TMP/client-2b.out" 2>&1 || smc_fail "client after the death: $(cat "$SMC_TMP/client-2b.out")"
smc_wait_server_exit new-server 30
check_ok "$SMC_TMP/client-2b.out" client "$AFTER"
check_ok "$(smc_server_log new-server)" server "$AFTER"
smc_expect_payload "$cli2" $((2 << 20)) "surviving client + new client"
smc_expect_connections "$cli2" 2 "surviving client + new client"
smc_expect_payload "$srv2" $((2 << 20)) "new server"
smc_pass
