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

bytes_of() {
	local n=${1%[kKmMgG]}
	case $1 in
	*[kK]) echo $((n << 10)) ;;
	*[mM]) echo $((n << 20)) ;;
	*[gG]) echo $((n << 30)) ;;
	*) echo "$n" ;;
	esac
}

run() {
	local label=$1 bytes=$2 port srv cli out=$SMC_TMP/client-$1.out n rc
	shift 2
	n=$(bytes_of "$bytes")
	smc_free_port port
	srv=$(smc_stats_dir "server-$label")
	cli=$(smc_stats_dir "client-$label")
	smc_start_server "server-$label" "$srv" "$SMC_STREAM" server "$port" --bind 127.0.0.1 "$@"
	smc_wait_port "server-$label" "$port"
	smc_log "stream $label: $bytes each way over ib"
	smc_run "$cli" "$SMC_STREAM" client 127.0.0.1 "$port" --bytes "$bytes" \
		--seed "$RANDOM$RANDOM" "$@" >"$out" 2>&1
	rc=$?
	cat "$out"
	smc_wait_server_exit "server-$label" 60
	cat "$(smc_server_log "server-$label")"
	smc_assert_eq "smc_stream client ($label) exit status" "$rc" 0
	smc_assert_eq "smc_stream server ($label) exit status" "${SMC_SERVER_RC[server-$label]}" 0
	grep -q "^OK client conn=0 bytes_sent=$n bytes_received=$n " "$out" ||
		smc_fail "client ($label) did not report $n bytes each way"
	grep -q "^OK server conn=0 bytes_sent=$n bytes_received=$n " \
		"$(smc_server_log "server-$label")" ||
		smc_fail "server ($label) did not report $n bytes each way"
	ib_expect_payload "$srv" $((2 * n)) "server ($label)"
	ib_expect_payload "$cli" $((2 * n)) "client ($label)"
}

run block "$RDMA_STREAM_BLOCK_BYTES" --mode block
run epoll-lt "$RDMA_STREAM_EPOLL_BYTES" --mode epoll
run epoll-et "$RDMA_STREAM_EPOLL_BYTES" --mode epoll --et
smc_pass
