#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#
# SMC_MEM_CAP counts memory that connections use (core/shm/shm.h): a same-host connection is
# admitted for its control page, and its receive ring's pages count as the peer writes
# into them. Both ends under smc_preload.sh, rings of 2 MiB set explicitly (the default
# follows the CPU's L2).
#  - idle: bench/idle_conns opens 200 connections (one byte each way) under a 1 MiB
#    cap. Counted as reserved rings (4 MiB each) not one would be upgraded; counted as
#    used (a control page and one ring page per side, 8 KiB) about 128 are, and the rest
#    stay TCP with fallback reason mem-cap: the cap is still enforced once really reached.
#  - streaming: tests/progs/mem_cap_stream.py opens 4 connections one after the other,
#    each filling the server's ring (8 MiB through a 2 MiB ring) before the next, and
#    keeps them open, under a 5 MiB cap. The server counts 2 MiB + 8 KiB per streamed
#    connection: the first three are upgraded (the third is admitted at 4 MiB + 16 KiB),
#    the fourth stays TCP for mem-cap (6 MiB + 24 KiB counted), and every byte arrives.
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
. "$(dirname -- "$0")/lib.sh"

IDLE_CONNS=${SMC_IDLE_CONNS:-$top_builddir/bench/idle_conns}
STREAM=$top_srcdir/tests/progs/mem_cap_stream.py

[ "$SMC_TEST_EXPECT" = shm ] || smc_skip "the memory cap concerns upgraded connections"
smc_init
smc_require_built "$IDLE_CONNS"
smc_require_cmd python3
export SMC_RCVBUF=2m SMC_SNDBUF=2m

smc_log "idle: 200 connections under SMC_MEM_CAP=1m"
idle=$(smc_stats_dir idle)
SMC_MEM_CAP=1m smc_run "$idle" "$IDLE_CONNS" -n 200 -i 100 >"$SMC_TMP/idle.out" 2>&1 ||
	smc_fail "idle_conns failed: $(tail -3 "$SMC_TMP/idle.out")"
cat "$SMC_TMP/idle.out"
grep -q '^IDLE n=200 ' "$SMC_TMP/idle.out" || smc_fail "idle_conns did not open 200 connections"
smc_require_stats "$idle"
smc_log "stats idle: $(smc_stats_summary "$idle")"
# Both processes' files are in the one directory: each connection counts on both sides.
# A connection refused for the cap is mem-cap on the side that refused and mem-cap or
# declined on the other (the client checks its cap before it proposes, the server
# before it accepts: whichever reached it first).
shm=$(smc_stats "$idle" '.connections.shm')
tcp=$(smc_stats "$idle" '.connections.tcp')
capped=$(smc_stats "$idle" '.fallback["mem-cap"] // 0')
declined=$(smc_stats "$idle" '.fallback["declined"] // 0')
smc_assert_ge "idle: shm connections (both sides)" "$shm" 200
smc_assert "idle: at most 128 connections per side fit 1 MiB at 8 KiB each, got $shm shm" \
	"$shm" -le 256
smc_assert_eq "idle: every connection is shm or tcp" "$((shm + tcp))" 400
smc_assert_ge "idle: connections kept TCP for mem-cap (one side at least)" "$((2 * capped))" "$tcp"
smc_assert_eq "idle: TCP only for mem-cap (declined: the other side's)" "$((capped + declined))" "$tcp"
smc_assert_eq "idle: aborts" "$(smc_stats "$idle" '.events.aborts')" 0

smc_log "streaming: 4 connections of 8 MiB each under SMC_MEM_CAP=5m"
smc_free_port port
srv=$(smc_stats_dir server)
cli=$(smc_stats_dir client)
SMC_MEM_CAP=5m smc_start_server stream "$srv" python3 "$STREAM" server "$port" 4 8388608
smc_wait_port stream "$port"
SMC_MEM_CAP=5m smc_run "$cli" python3 "$STREAM" client "$port" 4 8388608 \
	>"$SMC_TMP/client.out" 2>&1 || smc_fail "client failed: $(tail -3 "$SMC_TMP/client.out")"
smc_wait_server_exit stream
[ "${SMC_SERVER_RC[stream]}" = 0 ] ||
	smc_fail "server failed: $(tail -3 "$(smc_server_log stream)")"
grep -qx OK "$SMC_TMP/client.out" || smc_fail "client: $(cat "$SMC_TMP/client.out")"
smc_require_stats "$srv"
smc_log "stats server: $(smc_stats_summary "$srv")"
smc_log "stats client: $(smc_stats_summary "$cli")"
smc_assert_eq "streaming: server's shm connections" "$(smc_stats "$srv" '.connections.shm')" 3
smc_assert_eq "streaming: server's mem-cap fallbacks" \
	"$(smc_stats "$srv" '.fallback["mem-cap"] // 0')" 1
smc_assert_eq "streaming: client's shm connections" "$(smc_stats "$cli" '.connections.shm')" 3
smc_assert_eq "streaming: client's mem-cap fallbacks" \
	"$(smc_stats "$cli" '.fallback["mem-cap"] // 0')" 1
smc_assert_ge "streaming: server's shm bytes received" \
	"$(smc_stats "$srv" '.bytes.shm.received')" $((3 * 8388608))
smc_assert_ge "streaming: server's tcp bytes received" \
	"$(smc_stats "$srv" '.bytes.tcp.received')" 8388608
smc_assert_eq "streaming: aborts" "$(smc_stats "$srv" '.events.aborts')" 0
smc_pass
