#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#
# A server that serves each client in a child made by clone() instead of fork() (as
# vsftpd does), closing its own copy of the connection at once: glibc's clone(SIGCHLD)
# on a stack of its own, clone(CLONE_VFORK | SIGCHLD) (a copy of the memory too),
# syscall(SYS_clone, SIGCHLD, NULL) and syscall(SYS_clone3) without a stack, and fork()
# for comparison. The library must give every such child what a forked child gets (the
# connection stays the child's when the parent closes its copy). For each: N clients
# one after the other, each exchanging lines and then 1 MiB each way, checked, with the
# child; every exchange right, the payload over shared memory in the client's and the
# children's counts, no fallback, the server holding nothing more than when idle, and
# no child left.
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
. "$(dirname -- "$0")/lib.sh"

: "${SMC_CLONE_SERVE:=$top_builddir/tests/progs/clone_serve}"
N=${SMC_CLONE_CLIENTS:-20}
PAYLOAD=$((2 * 1048576)) # per connection, both directions

smc_init
smc_require_built "$SMC_CLONE_SERVE"
export SMC_SHORT_CONN_US=0

for how in ${SMC_CLONE_HOW:-clone vfork raw clone3 fork}; do
	smc_free_port port
	srv=$(smc_stats_dir "srv-$how")
	cli=$(smc_stats_dir "cli-$how")
	smc_start_server "$how" "$srv" "$SMC_CLONE_SERVE" serve "$port" "$how"
	smc_wait_port "$how" "$port"
	spid=${SMC_SERVER_PID[$how]}
	# one client first: the server's library starts its threads (and their
	# descriptors) at its first connection; then the baseline
	smc_run "$cli" "$SMC_CLONE_SERVE" client 127.0.0.1 "$port" 1 ||
		smc_fail "$how: the first client failed"
	base=$(smc_proc_resources "$spid")

	out=$SMC_TMP/client-$how.out
	smc_run "$cli" "$SMC_CLONE_SERVE" client 127.0.0.1 "$port" "$N" >"$out" 2>&1
	rc=$?
	cat "$out"
	smc_assert_eq "$how: clients' exit status" "$rc" 0
	smc_assert_eq "$how: clients right" "$(tail -n1 "$out")" "clients ok=$N of $N"

	# the children exit once their client is served; none may be left
	for ((i = 0; i < 100; i++)); do
		[ -z "$(pgrep -P "$spid")" ] && break
		sleep 0.1
	done
	smc_assert_eq "$how: children left" "$(pgrep -P "$spid" | wc -l)" 0
	smc_expect_resources "$how server" "$spid" "$base"
	grep -q "connection failed\|smc-preload.*\(ERROR\|abort\)" "$SMC_TMP/$how.log" &&
		smc_fail "$how: the server's log: $(cat "$SMC_TMP/$how.log")"
	smc_stop_server "$how" TERM 20
	smc_assert_eq "$how: server exit status" "${SMC_SERVER_RC[$how]}" 0

	# N + 1 connections with the first
	smc_expect_payload "$cli" $(((N + 1) * PAYLOAD)) "$how client"
	smc_expect_connections "$cli" $((N + 1)) "$how client"
	# the children's own files (the parent's holds the accepts, no bytes)
	smc_expect_payload "$srv" $(((N + 1) * PAYLOAD)) "$how server and children"
	if [ "$SMC_TEST_EXPECT" = shm ]; then
		smc_assert_ge "$how client: bytes received over shm (payloads and lines)" \
			"$(smc_stats "$cli" '.bytes.shm.received')" $(((N + 1) * PAYLOAD / 2))
	fi
	smc_assert_eq "$how client: aborts" "$(smc_stats "$cli" '.events.aborts // 0')" 0
	smc_assert_eq "$how server: aborts" "$(smc_stats "$srv" '.events.aborts // 0')" 0
done
smc_pass
