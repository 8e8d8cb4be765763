#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#
# Data integrity over SMC-R (RDMA WRITE into the peer's RMB) on Soft-RoCE, in the VM of
# tests/vm: smc_stream sends a position-checked pseudo-random stream both ways at once
# with random write and read sizes, server and client under smc_preload.sh with
# SMC_TRANSPORT=ib. Blocking mode (reader and writer threads on one socket), then epoll
# level-triggered and edge-triggered. Every byte is verified by the receiver; the stats
# of both sides must account for the whole payload over "ib", with no RNR and no failed
# completion. Under TCG the VM moves about 10-25 MiB/s each way: sizes are
# RDMA_STREAM_BLOCK_BYTES / RDMA_STREAM_EPOLL_BYTES (32m / 16m by default).
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
. "$(dirname -- "$0")/ib-lib.sh"

: "${RDMA_STREAM_BLOCK_BYTES:=32m}"
: "${RDMA_STREAM_EPOLL_BYTES:=16m}"

smc_init
smc_require_built "$SMC_STREAM"

smc_stream_pair ib_expect_payload block "$RDMA_STREAM_BLOCK_BYTES" --mode block
smc_stream_pair ib_expect_payload epoll-lt "$RDMA_STREAM_EPOLL_BYTES" --mode epoll
smc_stream_pair ib_expect_payload epoll-et "$RDMA_STREAM_EPOLL_BYTES" --mode epoll --et
smc_pass
