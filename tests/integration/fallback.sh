#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#
# Fallback to TCP: a preloaded client talking to a plain (not preloaded) server, and a
# plain client talking to a preloaded server. smc_stream checks that the plain side
# receives exactly the bytes sent, byte for byte, and EOF right after them (a stray
# handshake byte would fail it), in both directions; the preloaded side's stats must show
# a tcp connection with reason peer-not-smc, all payload over tcp and none over shm.
# Holds with SMC_TEST_EXPECT=shm and =tcp alike.
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
# shellcheck disable=SC2034 # read by lib.sh
SMC_TEST_KEEP_TRANSPORT=1 # the library must decide by itself that the peer is plain
. "$(dirname -- "$0")/lib.sh"

BYTES=64m
N=$(smc_bytes_of "$BYTES")

smc_init
smc_require_built "$SMC_STREAM"

cli=$(smc_stats_dir client-preloaded)
smc_stream_run preloaded-client-plain-server - "$cli" "$BYTES" --mode block
smc_expect_fallback "$cli" peer-not-smc $((2 * N)) "preloaded client"

srv=$(smc_stats_dir server-preloaded)
smc_stream_run plain-client-preloaded-server "$srv" - "$BYTES" --mode epoll
smc_expect_fallback "$srv" peer-not-smc $((2 * N)) "preloaded server"
smc_pass
