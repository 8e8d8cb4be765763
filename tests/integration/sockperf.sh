#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#
# sockperf ping-pong (with --data-integrity) and throughput over TCP, server and client
# both under smc_preload.sh, once per I/O multiplexer: select, poll and epoll (-F, which
# sockperf only accepts with a feed file). Checks sockperf's own report (messages
# received, nothing dropped, a latency/bandwidth summary), then the stats.
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
. "$(dirname -- "$0")/lib.sh"

PP_MSG=64
TP_MSG=1400
# sockperf sizes its table of send times for a rate it assumes (about 600k messages/s
# when ping-pong runs at "max") and stops with "_seqN > m_maxSequenceNo" past it: the
# epoll ping-pong sent 1M messages/s (latency 0.4 us, half a round trip) once neither
# side rang the other's doorbell. A stated rate sizes the table and paces only above it.
PP_MPS=4000000

smc_require_cmd sockperf
smc_init
srv=$(smc_stats_dir server)
cli=$(smc_stats_dir client)
client_min=0
server_min=0

# field FILE REGEX: the number that follows REGEX in sockperf's output.
field() {
	sed -n "s/.*$2\([0-9][0-9]*\).*/\1/p" "$1" | head -n 1
}

for mux in select poll epoll; do
	smc_free_port port
	feed=$SMC_TMP/feed-$mux
	echo "T:127.0.0.1:$port" >"$feed"
	smc_start_server "sr-$mux" "$srv" sockperf sr -f "$feed" -F "$mux"
	smc_wait_port "sr-$mux" "$port"

	out=$SMC_TMP/pp-$mux.out
	smc_log "sockperf ping-pong, $mux"
	smc_run "$cli" sockperf pp -f "$feed" -F "$mux" -t 1 -m "$PP_MSG" --mps "$PP_MPS" --data-integrity \
		>"$out" 2>&1 || smc_fail "sockperf pp ($mux) failed (status $?): $(tail -n 5 "$out")"
	grep -E 'Total Run|dropped|Summary' "$out"
	grep -qi 'error' "$out" && smc_fail "sockperf pp ($mux): $(grep -i error "$out" | head -n 3)"
	received=$(field "$out" 'Total Run.*ReceivedMessages=')
	smc_assert_ge "sockperf pp ($mux): messages received" "${received:-0}" 1
	grep -q '# dropped messages = 0; # duplicated messages = 0; # out-of-order messages = 0' \
		"$out" || smc_fail "sockperf pp ($mux): dropped, duplicated or out-of-order messages"
	grep -q 'Summary: Latency is' "$out" || smc_fail "sockperf pp ($mux): no latency summary"
	client_min=$((client_min + 2 * received * PP_MSG))
	server_min=$((server_min + 2 * received * PP_MSG))

	out=$SMC_TMP/tp-$mux.out
	smc_log "sockperf throughput, $mux"
	smc_run "$cli" sockperf tp -f "$feed" -F "$mux" -t 1 -m "$TP_MSG" \
		>"$out" 2>&1 || smc_fail "sockperf tp ($mux) failed (status $?): $(tail -n 5 "$out")"
	grep -E 'Total of|Summary' "$out"
	grep -qi 'error' "$out" && smc_fail "sockperf tp ($mux): $(grep -i error "$out" | head -n 3)"
	sent=$(field "$out" 'Total of ')
	smc_assert_ge "sockperf tp ($mux): messages sent" "${sent:-0}" 1
	grep -q 'Summary: BandWidth is' "$out" || smc_fail "sockperf tp ($mux): no bandwidth summary"
	client_min=$((client_min + sent * TP_MSG))

	smc_stop_server "sr-$mux" INT
	smc_assert_eq "sockperf server ($mux) exit status" "${SMC_SERVER_RC[sr-$mux]}" 0
	log=$(smc_server_log "sr-$mux")
	handled=$(field "$log" 'Total ')
	smc_assert_ge "sockperf server ($mux): messages handled" "${handled:-0}" $((received + 1))
	grep -q "using $mux() to block" "$log" || smc_fail "sockperf server did not use $mux()"
done

smc_expect_payload "$srv" "$server_min" "sockperf servers"
smc_expect_payload "$cli" "$client_min" "sockperf clients"
smc_pass
