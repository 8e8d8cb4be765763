#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#
# fork() while other threads are busy on upgraded connections (tests/progs/smc_fork.c,
# storm): blocking send and recv, nonblocking recv with epoll_wait, dup/dup2/close,
# connect/close churn whose handshakes run on the progress thread. The main thread forks
# FORK_COUNT times (default 1000); every child, under an alarm, dup2()s onto an SMC fd,
# closes, sends, receives with MSG_DONTWAIT, adds an SMC fd to an epoll set and exits.
# A child that hangs on a lock inherited from a thread it does not have, or crashes,
# fails the test; so does a lost, duplicated or corrupted byte of the stream, and any
# fd, memfd or mapping left behind. The payload must have moved over shared memory.
# Then a connection forked while its handshake still runs (smc_fork orphan): the fork
# ends the handshake as TCP (fork-pending), the parent's staged bytes arrive once and
# the child's write after them, as over TCP.
# FORK_CHURN=0 leaves out the connect/close churn: the sanitizer pass does (test.sh),
# as GCC 12's ASan allocator is not fork-safe (smc_fork.c) and the churn allocates.
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
. "$(dirname -- "$0")/lib.sh"

FORK_COUNT=${FORK_COUNT:-1000}
FORK_CHURN=${FORK_CHURN:-1}
: "${SMC_FORK:=$top_builddir/tests/progs/smc_fork}"

smc_init
smc_require_built "$SMC_FORK"
# the churn's connections are short: upgrade them all (short_conn.sh tests the policy)
export SMC_SHORT_CONN_US=0

stats=$(smc_stats_dir storm)
out=$SMC_TMP/storm.out
smc_log "storm: $FORK_COUNT forks${churn_opt:+ (no churn)}"
churn_opt=()
[ "$FORK_CHURN" = 1 ] || churn_opt=(--no-churn)
_smc_cmd "$stats" "$SMC_FORK" storm --forks "$FORK_COUNT" "${churn_opt[@]}"
# its own session (a background job is no group leader: setsid does not fork), so that
# whatever it leaves behind can be found
setsid timeout -k 5 "$SMC_CMD_TIMEOUT" "${_smc_argv[@]}" >"$out" 2>&1 &
sid=$!
wait "$sid"
rc=$?
cat "$out"
smc_assert_eq "smc_fork storm exit status" "$rc" 0
grep -q "^FORKS $FORK_COUNT of $FORK_COUNT " "$out" || smc_fail "not every fork completed"
grep -q '^OK storm$' "$out" || smc_fail "smc_fork storm reported a failure"
sent=$(sed -n 's/^STREAM sent=\([0-9]*\) .*/\1/p' "$out")
smc_assert_ge "stream bytes" "${sent:-0}" 1
# no process of the run is left (a child stuck in the library would be)
left=$(pgrep -s "$sid" 2>/dev/null | wc -l)
smc_assert_eq "processes left of the storm" "$left" 0
# children _exit(): one stats file, the parent's
smc_expect_payload "$stats" "$sent" "storm"

# A connection still in its handshake at the fork (its server accepts only after)
smc_log "orphan: a connection forked before its handshake ended"
ostats=$(smc_stats_dir orphan)
out=$SMC_TMP/orphan.out
smc_run "$ostats" "$SMC_FORK" orphan >"$out" 2>&1
rc=$?
cat "$out"
smc_assert_eq "smc_fork orphan exit status" "$rc" 0
grep -q '^OK orphan$' "$out" || smc_fail "smc_fork orphan reported a failure"
smc_require_stats "$ostats"
smc_log "stats orphan: $(smc_stats_summary "$ostats")"
if [ "$SMC_TEST_EXPECT" = shm ]; then
	smc_assert_ge "orphan: fork-pending" "$(smc_stats "$ostats" '.fallback["fork-pending"] // 0')" 1
	smc_assert_eq "orphan: shm connections" "$(smc_stats "$ostats" '.connections.shm')" 0
fi
smc_assert_eq "orphan: aborts" "$(smc_stats "$ostats" '.events.aborts')" 0
smc_pass
