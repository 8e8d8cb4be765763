#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#
# qperf tcp_bw and tcp_lat, server and client under smc_preload.sh. qperf forks a server
# process per test and moves the test's data over a second connection. Checks qperf's
# own results (a bandwidth and a latency figure, no error), then that the stats of both
# sides account for the bytes the bandwidth test reports.
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
. "$(dirname -- "$0")/lib.sh"

smc_require_cmd qperf
smc_init
srv=$(smc_stats_dir server)
cli=$(smc_stats_dir client)
out=$SMC_TMP/qperf.out

smc_free_port lport
smc_free_port dport
smc_start_server qperf "$srv" qperf -lp "$lport"
smc_wait_port qperf "$lport"
smc_run "$cli" qperf -lp "$lport" -ip "$dport" -t 2 -v 127.0.0.1 tcp_bw tcp_lat >"$out" 2>&1 ||
	smc_fail "qperf failed (status $?): $(cat "$out")"
smc_log "qperf: $(grep -E '^ *(bw|latency) ' "$out" | tr -s ' ' | tr '\n' ';')"
grep -qi 'error\|failed' "$out" && smc_fail "qperf reported an error: $(cat "$out")"

bw=$(awk '$1 == "bw" { print $3, $4; exit }' "$out")
lat=$(awk '$1 == "latency" { print $3; exit }' "$out")
[ -n "$bw" ] || smc_fail "qperf printed no bandwidth: $(cat "$out")"
[ -n "$lat" ] || smc_fail "qperf printed no latency: $(cat "$out")"
# bytes the bandwidth test moved: its bandwidth times its duration (both printed)
recv=$(awk '$1 == "bw" { v = $3; u = $4 } $1 == "time" && !t { t = $3 }
	END { m = (u ~ /^GB/) ? 1e9 : (u ~ /^MB/) ? 1e6 : (u ~ /^KB/) ? 1e3 : 1
	      printf "%d", v * m * t }' "$out")
smc_assert_ge "qperf tcp_bw bytes (bw x time)" "$recv" 1
smc_log "qperf: bandwidth $bw, latency $lat us, tcp_bw moved about $recv bytes"
smc_stop_server qperf

# bw and time are rounded to 3 digits: ask for 90% of their product
smc_expect_payload "$srv" $((recv / 10 * 9)) "qperf servers"
smc_expect_payload "$cli" $((recv / 10 * 9)) "qperf client"
smc_pass
