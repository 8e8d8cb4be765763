#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#
# Data integrity: smc_stream sends a position-checked pseudo-random stream both ways at
# once with random write and read sizes (1 byte to 4 MiB), server and client under
# smc_preload.sh. Blocking mode (reader and writer threads on one socket) with 1 GiB
# each way, then epoll level-triggered and edge-triggered with 1 GiB each way. Every
# byte is verified by the receiver, and the stats must account for the whole payload.
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
smc_pass
