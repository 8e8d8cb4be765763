#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#
# Connections driven only through raw syscall() (tests/lib/syscall_check: SYS_socket,
# SYS_connect, SYS_accept4, SYS_read/SYS_write, SYS_recvfrom/SYS_sendto, SYS_dup,
# SYS_dup2, SYS_fcntl, SYS_shutdown, SYS_close), both sides under smc_preload.sh: every
# byte arrives both ways, EOF is seen, a nonblocking read finds nothing, and after each
# SYS_close the connection is released (no memfd mapping left, the fd count back to
# what it was after the first connection: checked by the program itself). While both
# programs idle afterwards smcpstat lists none of their connections. Every connection
# is upgraded (or, expect=tcp, plain TCP) with its payload counted in the stats.
# SMC_SHORT_CONN_US=0: each connection makes the full handshake (no connection pool,
# whose region would stay mapped by design).
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
. "$(dirname -- "$0")/lib.sh"

ROUNDS=${SYSCALL_ROUNDS:-8}
REQ=$((65536 + 1000))
REPLY=$((100000 + 3333))

CHECK=$top_builddir/tests/lib/syscall_check
SMCPSTAT=$top_builddir/tools/smcpstat
smc_require_built "$CHECK" "$SMCPSTAT"
smc_init
export SMC_SHORT_CONN_US=0
smc_free_port port
srv=$(smc_stats_dir server)
cli=$(smc_stats_dir client)

smc_start_server server "$srv" "$CHECK" server "$port" "$ROUNDS"
smc_wait_port server "$port"
smc_start_server client "$cli" "$CHECK" client "$port" "$ROUNDS"
smc_wait_log client '^(idle pid|FAIL)' 120
smc_wait_log server '^(idle pid|FAIL)' 60
for side in server client; do
	log=$(smc_server_log "$side")
	cat "$log"
	grep -q '^FAIL' "$log" && smc_fail "$side: $(grep '^FAIL' "$log")"
	grep -q "^OK $side rounds=$ROUNDS " "$log" || smc_fail "$side did not finish $ROUNDS rounds"
done

for side in server client; do
	pid=$(sed -n 's/^idle pid \([0-9]*\)$/\1/p' "$(smc_server_log "$side")")
	"$SMCPSTAT" -j -p "$pid" >"$SMC_TMP/smcpstat-$side.json" || smc_fail "smcpstat -p $pid exited $?"
	smc_assert_eq "$side (pid $pid): connections smcpstat lists after the last SYS_close" \
		"$(jq length "$SMC_TMP/smcpstat-$side.json")" 0
done

smc_stop_server client
smc_stop_server server
smc_assert_eq "client exit status" "${SMC_SERVER_RC[client]}" 0
smc_assert_eq "server exit status" "${SMC_SERVER_RC[server]}" 0

per_conn=$((REQ + 1 + REPLY))
smc_expect_payload "$srv" $((ROUNDS * per_conn)) server
smc_expect_payload "$cli" $((ROUNDS * per_conn)) client
smc_expect_connections "$srv" "$ROUNDS" server
smc_expect_connections "$cli" "$ROUNDS" client
smc_pass
