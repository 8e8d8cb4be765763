#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#
# SMC_TRANSPORT=ib on a host without an RDMA device (runs on the host, no VM; skipped
# when the host has one): the client finds no device, declines with CLC_DECL_NOSMCRDEV
# and both ends stay plain TCP; the checksummed stream arrives intact both ways. The
# client counts the fallback as "not-local" (no transport for this peer), the server as
# "declined".
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
. "$(dirname -- "$0")/../integration/lib.sh"

ls /sys/class/infiniband/ 2>/dev/null | grep -q . && smc_skip "this host has an RDMA device"
export SMC_TRANSPORT=ib
BYTES=4m
N=$((4 << 20))

smc_init
smc_require_built "$SMC_STREAM"
smc_free_port port
srv=$(smc_stats_dir server)
cli=$(smc_stats_dir client)
smc_start_server server "$srv" "$SMC_STREAM" server "$port" --bind 127.0.0.1
smc_wait_port server "$port"
out=$SMC_TMP/client.out
smc_run "$cli" "$SMC_STREAM" client 127.0.0.1 "$port" --bytes "$BYTES" --seed "$RANDOM" >"$out" 2>&1
rc=$?
cat "$out"
smc_wait_server_exit server 60
smc_assert_eq "smc_stream client exit status" "$rc" 0
smc_assert_eq "smc_stream server exit status" "${SMC_SERVER_RC[server]}" 0
grep -q "^OK client conn=0 bytes_sent=$N bytes_received=$N " "$out" ||
	smc_fail "client did not report $N bytes each way"
smc_expect_fallback "$cli" not-local $((2 * N)) "client"
smc_expect_fallback "$srv" declined $((2 * N)) "server"
smc_assert_eq "client: ib connections" "$(smc_stats "$cli" '.connections.ib')" 0
smc_assert_eq "server: ib connections" "$(smc_stats "$srv" '.connections.ib')" 0
smc_pass
