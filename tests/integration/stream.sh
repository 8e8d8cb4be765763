#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#
# Data integrity: smc_stream sends a position-checked pseudo-random stream both ways at
# once with random write and read sizes (1 byte to 4 MiB), server and client under
# smc_preload.sh. Blocking mode (reader and writer threads on one socket) with 1 GiB
# each way, then epoll level-triggered and edge-triggered with 1 GiB each way, then
# epoll again with the ring written by non-temporal stores (SMC_COPY=stream). Every
# byte is verified by the receiver, and the stats must account for the whole payload
# and show rewinds (messages restarted at a ring's beginning) in each run.
# Sizes can be lowered for slow builds (sanitizers): STREAM_BLOCK_BYTES,
# STREAM_EPOLL_BYTES (bytes, or with k/m/g).
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
. "$(dirname -- "$0")/lib.sh"

STREAM_BLOCK_BYTES=${STREAM_BLOCK_BYTES:-1g}
STREAM_EPOLL_BYTES=${STREAM_EPOLL_BYTES:-1g}

smc_init
smc_require_built "$SMC_STREAM"

smc_stream_pair smc_expect_payload block "$STREAM_BLOCK_BYTES" --mode block
smc_stream_pair smc_expect_payload epoll-lt "$STREAM_EPOLL_BYTES" --mode epoll
smc_stream_pair smc_expect_payload epoll-et "$STREAM_EPOLL_BYTES" --mode epoll --et

# Rewinds (core/conn/conn.c): with random sizes a ring runs empty now and then while its
# writer is far into the lap, and the next message starts the ring over; every byte
# across them was checked above, and the stats must show they happened on both sides
# (counted over the three runs: how many each run gets depends on timing).
if [ "$SMC_TEST_EXPECT" = shm ]; then
	for side in server client; do
		n=0
		for run in block epoll-lt epoll-et; do
			n=$((n + $(smc_stats "$(smc_stats_dir "$side-$run")" '.events.shm_rewinds')))
		done
		smc_log "$side: $n rewinds in the three runs"
		smc_assert_ge "$side: messages started at a ring's beginning" "$n" 1
	done
fi

# Non-temporal stores into the ring (SMC_COPY=stream; auto picks them only where it
# measures them faster, which a test cannot arrange): the same checks, and the stats
# must show that payload really went through them on both sides.
if [ "$SMC_TEST_EXPECT" = shm ] && [ "$(uname -m)" = x86_64 ]; then
	SMC_COPY=stream smc_stream_pair smc_expect_payload stream-stores "$STREAM_EPOLL_BYTES" \
		--mode epoll
	for side in server client; do
		smc_assert_ge "$side (stream-stores): bytes stored with streaming stores" \
			"$(smc_stats "$(smc_stats_dir "$side-stream-stores")" '.events.shm_stream_bytes')" 1048576
	done
fi
smc_pass
