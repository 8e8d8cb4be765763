#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#
# A program that grows to its RLIMIT_NOFILE while it keeps connections open
# (tests/progs/fd_headroom.c), both ends under smc_preload.sh, and the same program over
# TCP (SMC_TRANSPORT=tcp) in the same run: neither may see EMFILE before it holds
# LIMIT - MARGIN descriptors of its own, every echo must match, and no descriptor may be
# left behind. Under the library the first connections are upgraded and, as the
# program's room shrinks, later ones stay TCP for fd-limit (core/base/fd_budget.h), so the
# library holds little more than its fixed descriptors when the program reaches its
# target: at the program's EMFILE it may hold at most FIXED_MAX more than over TCP.
# Twice: connections open a few at a time (rotate), and all kept open to the end
# (kept, as httperf's sessions are), where the upgraded ones still hold their doorbells
# when the program reaches its limit: its EMFILE sends them back to TCP
# (core/sock/fd_pressure.c) and the call succeeds, as over TCP.
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
. "$(dirname -- "$0")/lib.sh"

: "${FD_HEADROOM:=$top_builddir/tests/progs/fd_headroom}"
LIMIT=2048
MARGIN=32
# rotate: every 4th descriptor the program opens is a connection, 4 open at once;
# kept: every 32nd, and all of them (63) stay open
ROTATE_ARGS=(--every 4 --window 4)
KEPT_ARGS=(--every 32 --window 64)
# the descriptors the library keeps whatever the connections: the progress thread's
# four (libevent's epoll set, signal pipe and eventfd), the stats server's listener, and
# one or two to spare
FIXED_MAX=8

smc_init
smc_require_built "$FD_HEADROOM"
[ "$(ulimit -Hn)" = unlimited ] || [ "$(ulimit -Hn)" -ge "$LIMIT" ] ||
	smc_skip "the hard RLIMIT_NOFILE $(ulimit -Hn) is below $LIMIT"
# connections here live for the whole run: the default policy upgrades them
export SMC_RCVBUF=64k SMC_SNDBUF=64k

# run LABEL TRANSPORT ARGS...: one server and one client; leaves the client's RESULT
# line in $SMC_TMP/LABEL.out
run() {
	local label=$1 transport=$2 port srv cli rc
	shift 2
	smc_free_port port
	srv=$(smc_stats_dir "server-$label")
	cli=$(smc_stats_dir "client-$label")
	SMC_TRANSPORT=$transport smc_start_server "srv-$label" "$srv" "$FD_HEADROOM" server "$port"
	smc_wait_port "srv-$label" "$port"
	SMC_TRANSPORT=$transport smc_run "$cli" "$FD_HEADROOM" client 127.0.0.1 "$port" \
		--limit "$LIMIT" --margin "$MARGIN" "$@" \
		>"$SMC_TMP/$label.out" 2>"$SMC_TMP/$label.err"
	rc=$?
	cat "$SMC_TMP/$label.out" "$SMC_TMP/$label.err"
	smc_stop_server "srv-$label" TERM
	smc_assert_eq "fd_headroom client ($label) exit status" "$rc" 0
	smc_assert_eq "fd_headroom server ($label) exit status" "${SMC_SERVER_RC[srv-$label]}" 0
	grep -q "^RESULT limit=$LIMIT target=$((LIMIT - MARGIN)) reached=$((LIMIT - MARGIN)) early=0 " \
		"$SMC_TMP/$label.out" ||
		smc_fail "fd_headroom ($label) did not reach $((LIMIT - MARGIN)) descriptors without EMFILE"
	grep -Eiq 'too many open files|EMFILE' "$SMC_TMP/$label.err" "$(smc_server_log "srv-$label")" &&
		smc_fail "fd_headroom ($label): EMFILE in a program's output"
}

field() { # field LABEL NAME: a value of the RESULT line
	sed -n "s/^RESULT.* $2=\([0-9]*\).*/\1/p" "$SMC_TMP/$1.out"
}

run tcp tcp "${ROTATE_ARGS[@]}"
run smc auto "${ROTATE_ARGS[@]}"
run kept-tcp tcp "${KEPT_ARGS[@]}"
run kept-smc auto "${KEPT_ARGS[@]}"

tcp_max=$(field tcp max)
smc_max=$(field smc max)
smc_log "descriptors of its own at EMFILE: $tcp_max over TCP, $smc_max under the library"
smc_assert_ge "descriptors the program could open under the library (TCP: $tcp_max)" \
	"$smc_max" $((tcp_max - FIXED_MAX))
smc_assert_eq "connections made (library run, TCP run)" "$(field smc conns)" "$(field tcp conns)"

cli=$SMC_TMP/stats-client-smc
srv=$SMC_TMP/stats-server-smc
smc_require_stats "$cli"
smc_require_stats "$srv"
smc_log "stats client: $(smc_stats_summary "$cli")"
smc_log "stats server: $(smc_stats_summary "$srv")"
conns=$(field smc conns)
shm=$(smc_stats "$cli" '.connections.shm')
fdl=$(smc_stats "$cli" '.fallback["fd-limit"] // 0')
tcp=$(smc_stats "$cli" '.connections.tcp')
smc_assert_ge "client: connections over shm" "$shm" 1
smc_assert_ge "client: connections kept on TCP for fd-limit" "$fdl" 1
# the warm-up connection is one more than the RESULT line counts
smc_assert_eq "client: connections (shm + tcp)" "$((shm + tcp))" "$((conns + 1))"
smc_assert_eq "client: TCP connections for another reason than fd-limit" "$((tcp - fdl))" 0
smc_assert_ge "client: payload bytes over shm" \
	"$(smc_stats "$cli" '.bytes.shm.sent + .bytes.shm.received')" 128
# the server sees a client that did not offer SMC: peer-not-smc
smc_assert_eq "server: connections over shm" "$(smc_stats "$srv" '.connections.shm')" "$shm"
smc_assert_eq "server: TCP connections for another reason than peer-not-smc" \
	"$(smc_stats "$srv" '.connections.tcp - (.fallback["peer-not-smc"] // 0)')" 0
smc_expect_fallback "$SMC_TMP/stats-client-tcp" disabled 128 "client over TCP"

# kept: the upgraded connections went back to TCP at the program's EMFILE, losslessly
# (every echo matched: exit status 0), and the program got every descriptor TCP gives
tcp_max=$(field kept-tcp max)
smc_max=$(field kept-smc max)
smc_log "kept: descriptors of its own at EMFILE: $tcp_max over TCP, $smc_max under the library"
smc_assert_ge "kept: descriptors the program could open under the library (TCP: $tcp_max)" \
	"$smc_max" $((tcp_max - FIXED_MAX))
cli=$SMC_TMP/stats-client-kept-smc
srv=$SMC_TMP/stats-server-kept-smc
smc_require_stats "$cli"
smc_require_stats "$srv"
smc_log "stats client (kept): $(smc_stats_summary "$cli")"
smc_log "stats server (kept): $(smc_stats_summary "$srv")"
shm=$(smc_stats "$cli" '.connections.shm')
down=$(smc_stats "$cli" '.events.downgrades')
smc_assert_ge "kept: client connections over shm" "$shm" 8
smc_assert_ge "kept: client payload bytes over shm" \
	"$(smc_stats "$cli" '.bytes.shm.sent + .bytes.shm.received')" $((8 * 128))
smc_assert_ge "kept: client connections sent back to TCP at EMFILE" "$down" 8
smc_assert_eq "kept: server saw the client's downgrades" \
	"$(smc_stats "$srv" '.events.peer_downgrades')" "$down"
smc_pass
