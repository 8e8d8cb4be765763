#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#
# A thread with the smallest stack the C library allows (PTHREAD_STACK_MIN, 16 KiB)
# makes the process's first connection and echoes 200,000 bytes through a preloaded
# server (tests/progs/small_stack), 5 processes: the library's code under connect(),
# recv() and send() runs on that stack, and must fit as the C library's does (it
# crashed with SIGSEGV, the first connect() walking the rendezvous directory with three
# PATH_MAX buffers on the stack). The server's stats show the connections in the
# expected mode.
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
. "$(dirname -- "$0")/lib.sh"

RUNS=5
smc_init
smc_require_cmd python3
SMALL=$top_builddir/tests/progs/small_stack
smc_require_built "$SMALL"


srv=$(smc_stats_dir server)
cli=$(smc_stats_dir client)
smc_start_server echo "$srv" python3 "$top_srcdir/tests/progs/echo_server.py" "$RUNS"
smc_wait_log echo '^port '
read -r _ port < <(grep -m1 '^port ' "$(smc_server_log echo)")
for ((i = 0; i < RUNS; i++)); do
	# every run upgraded: a one-shot command's fifth would be TCP (hs_history.h)
	out=$(SMC_SHORT_CONN_US=0 smc_run "$cli" "$SMALL" "$port" 2>&1)
	smc_assert_eq "run $i: exit status ($out)" "$?" 0
done
smc_wait_server_exit echo 10
smc_assert_eq "echo server exit status" "${SMC_SERVER_RC[echo]}" 0
smc_expect_payload "$srv" $((RUNS * 2 * 200000)) "server"
smc_expect_connections "$srv" "$RUNS" "server"
smc_pass
