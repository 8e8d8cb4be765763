#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#
# Connections under a small RLIMIT_AS (tests/progs/as_limit.c: 200 connections kept open,
# one round trip each, 30 MB of address space set after the start), both ends under the
# library, rings of 2 MiB: after the first few the rings can no longer be mapped, and
# later even the progress thread's allocations for a handshake fail. Whichever side
# fails declines at once (core/negotiate/progress_client.c pending_refuse,
# progress_server.c flow_register), so every connection goes TCP without waiting out the handshake timeout: no connection may fall
# back for handshake-failed (a timeout), some must for resources (the limit was hit),
# and every round trip completes. The rings take at most a quarter of the limit
# (core/shm/shm.c), so the program can still allocate 6 MB of its own with its 200
# connections open (before, the rings took it all: even 2 MB failed).
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
. "$(dirname -- "$0")/lib.sh"

: "${AS_LIMIT:=$top_builddir/tests/progs/as_limit}"
CONNS=200
LIMIT_KIB=30000
ALLOC_KIB=6000

[ "$SMC_TEST_EXPECT" = shm ] || smc_skip "the rings' mappings concern upgraded connections"
smc_init
smc_require_built "$AS_LIMIT"
export SMC_RCVBUF=2m SMC_SNDBUF=2m
# every connection of this run is short-lived by the default policy's measure
export SMC_SHORT_CONN_US=0

dir=$(smc_stats_dir as-limit)
smc_run "$dir" "$AS_LIMIT" "$CONNS" "$LIMIT_KIB" "$ALLOC_KIB" >"$SMC_TMP/as_limit.out" 2>&1 ||
	smc_fail "as_limit failed: $(tail -3 "$SMC_TMP/as_limit.out")"
grep -qx "RESULT n=$CONNS wanted=$CONNS" "$SMC_TMP/as_limit.out" ||
	smc_fail "as_limit: $(cat "$SMC_TMP/as_limit.out")"
grep -qx "ALLOC ok" "$SMC_TMP/as_limit.out" ||
	smc_fail "as_limit: the program could not allocate $ALLOC_KIB KiB of its own beside its connections"
smc_require_stats "$dir"
smc_log "stats as_limit: $(smc_stats_summary "$dir")"
shm=$(smc_stats "$dir" '.connections.shm')
tcp=$(smc_stats "$dir" '.connections.tcp')
smc_assert_eq "as_limit: every connection is shm or tcp (both sides)" "$((shm + tcp))" \
	$((2 * CONNS))
smc_assert_ge "as_limit: connections that stayed TCP for resources" \
	"$(smc_stats "$dir" '.fallback["resources"] // 0')" 1
smc_assert_eq "as_limit: connections that waited out the handshake (handshake-failed)" \
	"$(smc_stats "$dir" '.fallback["handshake-failed"] // 0')" 0
smc_assert_eq "as_limit: aborts" "$(smc_stats "$dir" '.events.aborts')" 0
smc_pass
