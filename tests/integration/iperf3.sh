#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#
# iperf3 client -> server and reverse (-R), both under smc_preload.sh, JSON output: the
# receiver got bytes, nearly all of what was sent (and never more), no error; then the
# stats of each side account for at least the bytes received.
#
# The server listens on iperf3's default wildcard socket (dual-stack [::]) as it would
# in real use; IPERF3_BIND=127.0.0.1 pins it to IPv4 loopback.
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
. "$(dirname -- "$0")/lib.sh"

SECONDS_PER_RUN=2
IPERF3_BIND=${IPERF3_BIND:-}

smc_require_cmd iperf3
smc_init
srv=$(smc_stats_dir server)
cli=$(smc_stats_dir client)
total_received=0

# run LABEL [IPERF3 CLIENT ARGS...]: one test against a one-off server (-1).
run() {
	local label=$1 port out=$SMC_TMP/iperf3-$1.json sent received err
	shift
	smc_free_port port
	smc_start_server "srv-$label" "$srv" iperf3 -s -1 -J -p "$port" \
		${IPERF3_BIND:+-B "$IPERF3_BIND"}
	smc_wait_port "srv-$label" "$port"
	smc_log "iperf3 $label"
	smc_run "$cli" iperf3 -c 127.0.0.1 -p "$port" -t "$SECONDS_PER_RUN" -J "$@" >"$out" ||
		smc_fail "iperf3 client $label failed (status $?): $(jq -r '.error // empty' "$out")"
	smc_wait_server_exit "srv-$label" 30
	smc_assert_eq "iperf3 server $label exit status" "${SMC_SERVER_RC[srv-$label]}" 0
	err=$(jq -r '.error // empty' "$out") || smc_fail "iperf3 $label: output is not JSON"
	[ -z "$err" ] || smc_fail "iperf3 $label: $err"
	sent=$(jq '.end.sum_sent.bytes' "$out")
	received=$(jq '.end.sum_received.bytes' "$out")
	smc_log "iperf3 $label: sent=$sent received=$received" \
		"($(jq '.end.sum_received.bits_per_second / 1e9 | floor' "$out") Gbit/s)"
	smc_assert_ge "iperf3 $label: bytes received" "$received" 1
	smc_assert_ge "iperf3 $label: bytes sent - bytes received" $((sent - received)) 0
	# The sender stops on a timer; what was in flight then may be missing at the end.
	smc_assert_ge "iperf3 $label: bytes received x 10 vs sent x 9" $((received * 10)) $((sent * 9))
	total_received=$((total_received + received))
}

run forward
run reverse -R

smc_expect_payload "$srv" "$total_received" "iperf3 servers"
smc_expect_payload "$cli" "$total_received" "iperf3 clients"
smc_pass
