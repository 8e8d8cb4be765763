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
N=$((64 << 20))

smc_init
smc_require_built "$SMC_STREAM"

# run LABEL SERVER-STATS CLIENT-STATS MODE-ARGS...: "-" as stats dir = run plain.
run() {
	local label=$1 srv=$2 cli=$3 port out=$SMC_TMP/client-$1.out rc
	shift 3
	smc_free_port port
	smc_start_server "server-$label" "$srv" "$SMC_STREAM" server "$port" --bind 127.0.0.1 "$@"
	smc_wait_port "server-$label" "$port"
	smc_log "$label: $BYTES each way"
	smc_run "$cli" "$SMC_STREAM" client 127.0.0.1 "$port" --bytes "$BYTES" \
		--seed "$RANDOM$RANDOM" "$@" >"$out" 2>&1
	rc=$?
	cat "$out"
	smc_wait_server_exit "server-$label" 60
	cat "$(smc_server_log "server-$label")"
	smc_assert_eq "client ($label) exit status" "$rc" 0
	smc_assert_eq "server ($label) exit status" "${SMC_SERVER_RC[server-$label]}" 0
	grep -q "^OK client conn=0 bytes_sent=$N bytes_received=$N " "$out" ||
		smc_fail "client ($label) did not receive exactly $N bytes"
	grep -q "^OK server conn=0 bytes_sent=$N bytes_received=$N " \
		"$(smc_server_log "server-$label")" ||
		smc_fail "server ($label) did not receive exactly $N bytes"
}

cli=$(smc_stats_dir client-preloaded)
run preloaded-client-plain-server - "$cli" --mode block
smc_expect_fallback "$cli" peer-not-smc $((2 * N)) "preloaded client"

srv=$(smc_stats_dir server-preloaded)
run plain-client-preloaded-server "$srv" - --mode epoll
smc_expect_fallback "$srv" peer-not-smc $((2 * N)) "preloaded server"
smc_pass
