#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#
# Connections driven only through raw syscall() (tests/progs/syscall_check: SYS_socket,
# SYS_connect, SYS_accept4, SYS_read/SYS_write, SYS_recvfrom/SYS_sendto, SYS_dup,
# SYS_dup2, SYS_fcntl, SYS_shutdown, SYS_close), both sides under smc_preload.sh: every
# byte arrives both ways, EOF is seen, a nonblocking read finds nothing, and after each
# SYS_close the connection is released (no memfd mapping left, the fd count back to
# what it was after the first connection: checked by the program itself). While both
# programs idle afterwards smcpstat lists none of their connections. Every connection
# is upgraded (or, expect=tcp, plain TCP) with its payload counted in the stats.
# Twice: every call raw, and socket/connect/accept through libc (as libuv
# does, whose close alone is raw). SMC_SHORT_CONN_US=0: each connection makes the full handshake (no connection pool,
# whose region would stay mapped by design).
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
. "$(dirname -- "$0")/lib.sh"

ROUNDS=${SYSCALL_ROUNDS:-8}
REQ=$((65536 + 1000))
REPLY=$((100000 + 3333))

CHECK=$top_builddir/tests/progs/syscall_check
SMCPSTAT=$top_builddir/tools/smcpstat
smc_require_built "$CHECK" "$SMCPSTAT"
smc_init
export SMC_SHORT_CONN_US=0

# run_pair LABEL [libc-setup]: one server and one client program, ROUNDS connections.
run_pair() {
	local label=$1 port srv cli side log pid per_conn=$((REQ + 1 + REPLY))
	shift
	smc_free_port port
	srv=$(smc_stats_dir "server-$label")
	cli=$(smc_stats_dir "client-$label")
	smc_log "$label: $ROUNDS connections"
	smc_start_server "server-$label" "$srv" "$CHECK" server "$port" "$ROUNDS" "$@"
	smc_wait_port "server-$label" "$port"
	smc_start_server "client-$label" "$cli" "$CHECK" client "$port" "$ROUNDS" "$@"
	smc_wait_log "client-$label" '^(idle pid|FAIL)' 120
	smc_wait_log "server-$label" '^(idle pid|FAIL)' 60
	for side in server client; do
		log=$(smc_server_log "$side-$label")
		cat "$log"
		grep -q '^FAIL' "$log" && smc_fail "$side ($label): $(grep '^FAIL' "$log")"
		grep -q "^OK $side rounds=$ROUNDS " "$log" ||
			smc_fail "$side ($label) did not finish $ROUNDS rounds"
		pid=$(sed -n 's/^idle pid \([0-9]*\)$/\1/p' "$log")
		"$SMCPSTAT" -j -p "$pid" >"$SMC_TMP/smcpstat-$side-$label.json" ||
			smc_fail "smcpstat -p $pid exited $?"
		smc_assert_eq "$side ($label, pid $pid): connections smcpstat lists after the last SYS_close" \
			"$(jq length "$SMC_TMP/smcpstat-$side-$label.json")" 0
	done
	smc_stop_server "client-$label"
	smc_stop_server "server-$label"
	smc_assert_eq "client ($label) exit status" "${SMC_SERVER_RC[client-$label]}" 0
	smc_assert_eq "server ($label) exit status" "${SMC_SERVER_RC[server-$label]}" 0
	smc_expect_payload "$srv" $((ROUNDS * per_conn)) "server ($label)"
	smc_expect_payload "$cli" $((ROUNDS * per_conn)) "client ($label)"
	smc_expect_connections "$srv" "$ROUNDS" "server ($label)"
	smc_expect_connections "$cli" "$ROUNDS" "client ($label)"
}

# every call raw
run_pair raw
# set up through libc, then raw data calls and a raw close (libuv's way)
run_pair libc-setup libc-setup
smc_pass
