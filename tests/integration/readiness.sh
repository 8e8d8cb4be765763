#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#
# poll/ppoll/select/pselect/epoll semantics over SMC: tests/lib/readiness_check runs its
# checks (level and edge triggered, one-shot, RDHUP/HUP, EPOLLOUT only with room, one fd
# in two sets, nested epoll, mixing with pipes/eventfd/timerfd) first on plain TCP (the
# reference), then preloaded with both ends in one process, then with the peer in a
# forked child, then against a plain peer (every connection falls back). The stats must
# show that the preloaded runs really moved their bytes over shared memory.
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
. "$(dirname -- "$0")/lib.sh"

READINESS=${READINESS:-$top_builddir/tests/lib/readiness_check}

smc_init
smc_require_built "$READINESS"

smc_log "reference run on plain TCP"
timeout -k 5 "$SMC_CMD_TIMEOUT" "$READINESS" >"$SMC_TMP/plain.out" 2>&1 ||
	smc_fail "readiness_check fails without the library: $(grep -v '^ok' "$SMC_TMP/plain.out" | head -20)"

for variant in inproc fork; do
	dir=$(smc_stats_dir "$variant")
	args=()
	[ "$variant" = fork ] && args=(--fork)
	smc_run "$dir" "$READINESS" "${args[@]}" >"$SMC_TMP/$variant.out" 2>&1 ||
		smc_fail "readiness_check ($variant) under the library: $(grep -v '^ok' "$SMC_TMP/$variant.out" | head -20)"
	smc_log "$variant: $(tail -1 "$SMC_TMP/$variant.out")"
	smc_expect_payload "$dir" 1 "readiness $variant"
done

dir=$(smc_stats_dir plain-peer)
# the library must find out by itself that the peer is plain, in both expect modes
(unset SMC_TRANSPORT; smc_run "$dir" "$READINESS" --plain-peer) >"$SMC_TMP/plain-peer.out" 2>&1 ||
	smc_fail "readiness_check --plain-peer: $(grep -v '^ok' "$SMC_TMP/plain-peer.out" | head -20)"
smc_expect_fallback "$dir" peer-not-smc 1 "readiness plain peer"

smc_pass
