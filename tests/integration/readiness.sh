#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#
# poll/ppoll/select/pselect/epoll semantics over SMC: tests/progs/readiness_check runs its
# checks (level and edge triggered, one-shot, RDHUP/HUP, EPOLLOUT only with room, one fd
# in two sets, nested epoll, mixing with pipes/eventfd/timerfd, a registration whose fd is
# closed while a dup stays open, before and after a fallback) first on plain TCP (the
# reference), then preloaded with both ends in one process, then with the peer in a
# forked child, then against a plain peer (every connection falls back). The stats must
# show that the preloaded runs really moved their bytes over shared memory. Sockets
# added to epoll before connect() (every mode) get their own runs, so the stats show
# that they were upgraded, and the registrations the library cannot take over (through
# a dup, in a set shared across fork) that they stayed TCP for `readiness`; the race of
# a thread asleep in epoll_wait while another adds the set's first connection runs
# alone too, so that its first round meets a process where no set was emulated yet.
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
. "$(dirname -- "$0")/lib.sh"

READINESS=${READINESS:-$top_builddir/tests/progs/readiness_check}

smc_init
smc_require_built "$READINESS"
# its connections are fixtures that must all be upgraded, however few their exchanges
export SMC_SHORT_CONN_US=0

smc_log "reference run on plain TCP"
timeout -k 5 "$SMC_CMD_TIMEOUT" "$READINESS" >"$SMC_TMP/plain.out" 2>&1 ||
	smc_fail "readiness_check fails without the library: $(grep -v '^ok' "$SMC_TMP/plain.out" | head -20)"

for variant in inproc fork; do
	dir=$(smc_stats_dir "$variant")
	args=()
	[ "$variant" = fork ] && args=(--fork)
	smc_run "$dir" "$READINESS" "${args[@]}" >"$SMC_TMP/$variant.out" 2>&1 ||
		smc_fail "readiness_check ($variant) under the library: $(grep -v '^ok' "$SMC_TMP/$variant.out" | grep -v '^# [a-z_0-9]*$' | head -20)"
	smc_log "$variant: $(tail -1 "$SMC_TMP/$variant.out")"
	smc_expect_payload "$dir" 1 "readiness $variant"
done

for group in epoll_preconnect epoll_first_conn_race; do
	dir=$(smc_stats_dir "$group")
	smc_run "$dir" "$READINESS" --only "$group" >"$SMC_TMP/$group.out" 2>&1 ||
		smc_fail "readiness_check --only $group: $(grep -v '^ok' "$SMC_TMP/$group.out" | head -20)"
	smc_log "$group: $(tail -1 "$SMC_TMP/$group.out")"
	smc_expect_payload "$dir" 1 "readiness $group"
done

dir=$(smc_stats_dir preconnect-fallback)
smc_run "$dir" "$READINESS" --only preconnect_fallback >"$SMC_TMP/preconnect-fallback.out" 2>&1 ||
	smc_fail "readiness_check --only preconnect_fallback: $(grep -v '^ok' "$SMC_TMP/preconnect-fallback.out" | head -20)"
if [ "$SMC_TEST_EXPECT" = shm ]; then
	# the two client sockets; their server ends see a client that offered nothing
	smc_expect_fallback "$dir" readiness 1 "readiness preconnect fallback"
	smc_assert_eq "readiness preconnect fallback: readiness fallbacks" \
		"$(smc_stats "$dir" '.fallback.readiness // 0')" 2
fi

dir=$(smc_stats_dir plain-peer)
# the library must find out by itself that the peer is plain, in both expect modes
(unset SMC_TRANSPORT; smc_run "$dir" "$READINESS" --plain-peer) >"$SMC_TMP/plain-peer.out" 2>&1 ||
	smc_fail "readiness_check --plain-peer: $(grep -v '^ok' "$SMC_TMP/plain-peer.out" | head -20)"
smc_expect_fallback "$dir" peer-not-smc 1 "readiness plain peer"

smc_pass
