#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#
# A program whose main thread ends before its process (tests/progs/main_exit): the
# library's own threads must not keep the process alive (core/base/lib_threads.h).
#  - main() calls pthread_exit() and its thread echoes 64 KiB over an upgraded
#    connection: the process exits 0 once that thread returns, through glibc's exit(0)
#    (its atexit handler runs; the process lived on for ever);
#  - the same with main() ending by the raw exit system call: exit status 0 (the last
#    thread's) and no atexit handler, as glibc does without the library's thread;
#  - the only thread dies of a seccomp filter's SECCOMP_RET_KILL_THREAD after its
#    connection: the process ends by SIGSYS, as without the library (it lived on,
#    deaf to every signal but SIGKILL).
# Each run is bounded (timeout: exit status 124); the first one's stats, written by
# its exit, show the echo over shared memory.
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
. "$(dirname -- "$0")/lib.sh"

smc_init
smc_require_built tests/progs/main_exit
PROG=$top_builddir/tests/progs/main_exit

for mode in pthread-exit raw-exit kill-thread; do
	srv=$(smc_stats_dir "server-$mode")
	cli=$(smc_stats_dir "client-$mode")
	smc_start_server "echo-$mode" "$srv" python3 "$top_srcdir/tests/progs/echo_server.py" 1
	smc_wait_log "echo-$mode" '^port '
	read -r _ port < <(grep -m1 '^port ' "$(smc_server_log "echo-$mode")")
	SMC_CMD_TIMEOUT=20 smc_run "$cli" "$PROG" "$mode" "$port" >"$SMC_TMP/$mode.out" 2>&1
	rc=$?
	smc_log "$mode: $(cat "$SMC_TMP/$mode.out"), exit status $rc"
	grep -q '^echo intact$' "$SMC_TMP/$mode.out" || smc_fail "$mode: the echo was not intact"
	smc_wait_server_exit "echo-$mode" 20
	case $mode in
	pthread-exit)
		smc_assert_eq "$mode: exit status (124: still running after 20 s)" "$rc" 0
		grep -q '^atexit ran$' "$SMC_TMP/$mode.out" || smc_fail "$mode: glibc's exit() did not run"
		smc_expect_payload "$cli" $((2 * 65536)) "$mode client"
		;;
	raw-exit)
		smc_assert_eq "$mode: exit status (124: still running after 20 s)" "$rc" 0
		grep -q '^atexit ran$' "$SMC_TMP/$mode.out" && smc_fail "$mode: an atexit handler ran"
		smc_expect_payload "$srv" $((2 * 65536)) "$mode server"
		;;
	kill-thread)
		# 159: SIGSYS as the shell reports it (128 + 31)
		smc_assert_eq "$mode: exit status (124: still running after 20 s)" "$rc" 159
		smc_expect_payload "$srv" $((2 * 65536)) "$mode server"
		;;
	esac
done
smc_pass
