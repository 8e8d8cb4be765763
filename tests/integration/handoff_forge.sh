#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#
# Forged or stale exec hand-off state (core/handoff.c): what a new image inherits is
# checked as a handshake's input, and a connection whose state fails a check is
# downgraded (or reset when nothing else is safe), never used.
#
# exec_midstream (tests/progs) streams 8 MiB each way with data in flight both ways; the
# server execs a "#!" script (the library hands the connection off) whose interpreter,
# tests/progs/handoff_static (static: the library is not in it), tampers with the hand-off
# and then execs the server's new image under the library:
#  - cursor: the description's consumer cursor past the end of the ring: the new image
#    downgrades the connection through the shared block: every byte arrives, its stats
#    count fallback "handoff-invalid" and a downgrade, the peer a peer downgrade;
#  - memfd: the ring memfd replaced by one of the same name and size full of garbage:
#    rejected, never read (its header is garbage); the peer forces the hand-off back to
#    TCP (handoffs_forced) and every byte arrives;
#  - garbage: the description itself garbage: ignored ("handoff-invalid"), the peer
#    forces, every byte arrives;
#  - slow: nothing tampered with, the new image starts after the peer's bound (500 ms):
#    the peer forces, the new image loses the race for the word and goes on over TCP,
#    every byte intact;
#  - state: the shared block's hand-off word set back to "not handing off" (a stale or
#    stolen description): the connection belongs to rings nobody hands over, the new
#    image resets it: both ends see an error (no hang, no crash), "handoff-invalid".
# Then SMC_HANDOFF_FD set by hand in a program under the library (a file that is not
# a memfd, a descriptor that is not open, not a number): ignored with a log line,
# counted, the descriptor left open, and the variable gone from the environment the
# program and its children see.
# Run under ASan by test.sh (a read of the forged ring would be a report).
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
. "$(dirname -- "$0")/lib.sh"

MID=$top_builddir/tests/progs/exec_midstream
STATIC=$top_builddir/tests/progs/handoff_static
CASE_TIMEOUT=60

smc_init
smc_require_cmd pgrep
smc_require_built "$MID" "$STATIC"
[ "$SMC_TEST_EXPECT" = shm ] || smc_skip "the hand-off needs same-host upgrades"
n=$(smc_bytes_of 8m)
printf '#!%s\n' "$STATIC" >"$SMC_TMP/tamper.sh"
chmod +x "$SMC_TMP/tamper.sh"

# forged MODE [INVALID]: one connection, the server's hand-off tampered with in MODE;
# INVALID (default 1): the hand-offs the new image must count as invalid. Sets
# rc_client, rc_server, srv, cli.
forged() {
	local mode=$1 invalid=${2:-1} out
	srv=$(smc_stats_dir "server-$mode")
	cli=$(smc_stats_dir "client-$mode")
	smc_free_port port
	smc_log "forged $mode: the server execs through a hand-off tampered with ($mode)"
	EXEC_MIDSTREAM_SCRIPT=$SMC_TMP/tamper.sh HANDOFF_STATIC_MODE=$mode \
		smc_start_server "server-$mode" "$srv" timeout -k 5 $((CASE_TIMEOUT + 10)) \
		"$MID" server "$port" --bytes "$n" --timeout "$CASE_TIMEOUT" --exec script
	smc_wait_port "server-$mode" "$port"
	out=$SMC_TMP/client-$mode.log
	SMC_CMD_TIMEOUT=$((CASE_TIMEOUT + 10)) smc_run "$cli" "$MID" client "$port" \
		--bytes "$n" --timeout "$CASE_TIMEOUT" >"$out" 2>&1
	rc_client=$?
	smc_wait_server_exit "server-$mode" $((CASE_TIMEOUT + 20))
	rc_server=${SMC_SERVER_RC[server-$mode]}
	cat "$out" "$(smc_server_log "server-$mode")"
	left=$(pgrep -a -f -- "$MID .*$port" || true)
	[ -z "$left" ] || smc_fail "forged $mode: processes left behind: $left"
	grep -q "^CONTINUE server pid=[0-9]* preloaded=yes " "$(smc_server_log "server-$mode")" ||
		smc_fail "forged $mode: the new image did not run under the library"
	smc_require_stats "$srv"
	smc_log "stats server ($mode): $(smc_stats_summary "$srv") downgrades=$(smc_stats "$srv" '.events.downgrades')"
	smc_assert_eq "forged $mode: hand-offs rejected (fallback handoff-invalid)" \
		"$(smc_stats "$srv" '.fallback["handoff-invalid"] // 0')" "$invalid"
	smc_assert_eq "forged $mode: hand-offs taken over" \
		"$(smc_stats "$srv" '.events.handoffs_in // 0')" 0
	# a client that failed exits with _exit: no stats
	[ "$rc_client" = 0 ] || return 0
	smc_require_stats "$cli"
	smc_log "stats client ($mode): $(smc_stats_summary "$cli") peer_downgrades=$(smc_stats "$cli" '.events.peer_downgrades') forced=$(smc_stats "$cli" '.events.handoffs_forced')"
	smc_assert_eq "forged $mode: aborts (client)" "$(smc_stats "$cli" '.events.aborts')" 0
}

# intact MODE: the connection went on over TCP with every byte both ways.
intact() {
	local mode=$1
	smc_assert_eq "forged $mode: client exit status" "$rc_client" 0
	smc_assert_eq "forged $mode: server exit status" "$rc_server" 0
	for rx in server client; do
		grep -q "^OK $rx pid=[0-9]* sent=$n received=$n\$" "$SMC_TMP/client-$mode.log" \
			"$(smc_server_log "server-$mode")" ||
			smc_fail "forged $mode: the $rx did not report $n bytes each way"
	done
	smc_assert_eq "forged $mode: bytes the client received (shm + tcp)" \
		"$(smc_stats "$cli" '.bytes.shm.received + .bytes.tcp.received')" "$n"
	smc_assert_ge "forged $mode: payload over tcp after the exec (client)" \
		"$(smc_stats "$cli" '.bytes.tcp.received')" 1
	smc_assert_eq "forged $mode: peer downgrades (client)" \
		"$(smc_stats "$cli" '.events.peer_downgrades')" 1
}

forged cursor
intact cursor
smc_assert_eq "forged cursor: downgraded by the new image" "$(smc_stats "$srv" '.events.downgrades')" 1
smc_assert_eq "forged cursor: forced by the peer" "$(smc_stats "$cli" '.events.handoffs_forced')" 0

forged memfd
intact memfd
smc_assert_eq "forged memfd: forced by the peer" "$(smc_stats "$cli" '.events.handoffs_forced')" 1

forged garbage
intact garbage
smc_assert_eq "forged garbage: forced by the peer" "$(smc_stats "$cli" '.events.handoffs_forced')" 1

# a new image slower than the peer's bound (SMC_HANDSHAKE_TIMEOUT_MS, 500 ms here):
# the peer forces the hand-off; the new image loses the race for the word and takes
# the socket as plain TCP, where the peer's re-send arrives
SMC_HANDSHAKE_TIMEOUT_MS=500 HANDOFF_STATIC_SLEEP_MS=1500 forged slow 0
intact slow
smc_assert_eq "forged slow: forced by the peer" "$(smc_stats "$cli" '.events.handoffs_forced')" 1
smc_assert_eq "forged slow: the new image's downgrade" "$(smc_stats "$srv" '.events.downgrades')" 1
smc_assert_eq "forged slow: hand-offs given" "$(smc_stats "$srv" '.events.handoffs')" 1

forged state
# the connection is reset: each side fails with an I/O error (2), neither times out (3)
smc_assert_eq "forged state: client exit status (reset)" "$rc_client" 2
smc_assert_eq "forged state: server exit status (reset)" "$rc_server" 2
grep -q "Connection reset by peer" "$SMC_TMP/client-state.log" ||
	smc_fail "forged state: the client did not see the reset"

# ------------------------------------------------------------------ set by hand
by_hand() { # by_hand LABEL VALUE: a shell under the library with SMC_HANDOFF_FD=VALUE
	# bash: dash ends with _exit(), which writes no stats
	local label=$1 value=$2 dir out
	dir=$(smc_stats_dir "hand-$label")
	out=$SMC_TMP/hand-$label.out
	smc_log "SMC_HANDOFF_FD=$value set by hand ($label)"
	SMC_HANDOFF_FD=$value smc_run "$dir" bash -c \
		'echo "var=${SMC_HANDOFF_FD-unset}"; bash -c "echo child=\${SMC_HANDOFF_FD-unset}"; [ -e /proc/self/fd/7 ] && echo fd7=open' \
		7</etc/passwd >"$out" 2>&1
	smc_assert_eq "by hand $label: exit status" "$?" 0
	cat "$out"
	grep -qx "var=unset" "$out" || smc_fail "by hand $label: the program still sees the variable"
	grep -qx "child=unset" "$out" || smc_fail "by hand $label: a child still sees the variable"
	grep -qx "fd7=open" "$out" || smc_fail "by hand $label: the descriptor it named was closed"
	smc_require_stats "$dir"
	smc_assert_ge "by hand $label: fallback handoff-invalid" \
		"$(smc_stats "$dir" '.fallback["handoff-invalid"] // 0')" 1
	smc_assert_eq "by hand $label: hand-offs taken over" \
		"$(smc_stats "$dir" '.events.handoffs_in // 0')" 0
}
by_hand file 7
by_hand closed 99
by_hand text abc

smc_pass
