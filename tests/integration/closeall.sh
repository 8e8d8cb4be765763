#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#
# A program that closes all its descriptors after its first connection, as daemons and
# closefrom() do (tests/progs/closeall: close_range(3, ~0U, 0), the same through
# syscall(SYS_close_range), close() over /proc/self/fd, close() over 3..1023, glibc's
# closefrom(), which makes the close_range system call itself), both ends
# under smc_preload.sh; in the first run the server too closes everything above its
# listener with close_range after its first connection. The library's own descriptors (the progress thread's libevent base, the
# stats server, rendezvous sockets, doorbells: core/base/fdpark.h) are not the program's and
# stay open: every later connection is upgraded again and carries its bytes both ways
# without stalling (each round within 5 s: they waited 30 s for a dead progress thread,
# or went TCP when the server's were gone),
# while the program's own descriptors are closed as it asked (checked by the program).
# SMC_SHORT_CONN_US=0: each connection makes the full handshake.
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
. "$(dirname -- "$0")/lib.sh"

ROUNDS=${CLOSEALL_ROUNDS:-4}
PER_CONN=$((100000 + 17 + 150000 + 333))

CHECK=$top_builddir/tests/progs/closeall
smc_require_built "$CHECK"
smc_init
export SMC_SHORT_CONN_US=0

# run_mode MODE [close]: the client closes all by MODE, the server too with "close"
run_mode() {
	local mode=$1 port srv cli rc
	shift
	smc_free_port port
	srv=$(smc_stats_dir "server-$mode")
	cli=$(smc_stats_dir "client-$mode")
	smc_log "$mode: $ROUNDS connections"
	smc_start_server "server-$mode" "$srv" "$CHECK" server "$port" "$ROUNDS" "$@"
	smc_wait_port "server-$mode" "$port"
	smc_run "$cli" "$CHECK" client "$port" "$ROUNDS" "$mode" >"$SMC_TMP/client-$mode.out" 2>&1
	rc=$?
	cat "$SMC_TMP/client-$mode.out"
	smc_wait_server_exit "server-$mode" 30
	cat "$(smc_server_log "server-$mode")"
	smc_assert_eq "client ($mode) exit status" "$rc" 0
	smc_assert_eq "server ($mode) exit status" "${SMC_SERVER_RC[server-$mode]}" 0
	grep -q "^OK client rounds=$ROUNDS$" "$SMC_TMP/client-$mode.out" ||
		smc_fail "client ($mode) did not finish $ROUNDS rounds"
	smc_expect_payload "$srv" $((ROUNDS * PER_CONN)) "server ($mode)"
	smc_expect_payload "$cli" $((ROUNDS * PER_CONN)) "client ($mode)"
	smc_expect_connections "$srv" "$ROUNDS" "server ($mode)"
	smc_expect_connections "$cli" "$ROUNDS" "client ($mode)"
}

run_mode range close
for mode in sysrange proc loop from; do
	run_mode "$mode"
done
smc_pass
