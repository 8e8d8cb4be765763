#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#
# redis-server and redis-benchmark, both under smc_preload.sh: SET/GET with 50 clients,
# 1 KiB values, then again pipelined (-P 16). Checks redis-benchmark's own numbers, the
# server's command counter and the stored value, then the transport through the stats.
# Every connection is upgraded by its own handshake (SMC_SHORT_CONN_US=0): on a fast
# machine the pipelined run's SET phase (25 round trips per connection, 400 KB) ends
# within the policy's 10 ms, so its GET phase's 50 connections went to the 16-slot pool
# and the rest to TCP (short-lived), and the payload check failed now and then. The
# policy and pools have tests of their own (short_conn.sh, pool.sh).
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
. "$(dirname -- "$0")/lib.sh"

REQUESTS=20000
VALUE_SIZE=1024

smc_require_cmd redis-server redis-benchmark redis-cli
smc_init
export SMC_SHORT_CONN_US=0
smc_free_port port
srv=$(smc_stats_dir server)
cli=$(smc_stats_dir client)

smc_start_server redis "$srv" redis-server --port "$port" --bind 127.0.0.1 \
	--save '' --appendonly no --daemonize no --loglevel notice
smc_wait_port redis "$port"

# bench LABEL ARGS...: one redis-benchmark run; every test must report a positive rate.
bench() {
	local label=$1 out=$SMC_TMP/bench-$1.csv err=$SMC_TMP/bench-$1.err t rps
	shift
	smc_log "redis-benchmark $label"
	smc_run "$cli" redis-benchmark -h 127.0.0.1 -p "$port" -c 50 -n "$REQUESTS" \
		-t set,get -d "$VALUE_SIZE" --csv "$@" >"$out" 2>"$err" ||
		smc_fail "redis-benchmark $label failed (status $?): $(cat "$err")"
	cat "$out"
	if grep -Eiq 'error|could not|refused|reset' "$err" "$out"; then
		smc_fail "redis-benchmark $label reported errors: $(cat "$err")"
	fi
	for t in SET GET; do
		rps=$(awk -F, -v t="\"$t\"" '$1 == t { gsub(/"/, "", $2); print $2 }' "$out")
		[ -n "$rps" ] || smc_fail "redis-benchmark $label: no result line for $t"
		awk -v r="$rps" 'BEGIN { exit !(r > 0) }' ||
			smc_fail "redis-benchmark $label: $t rate is '$rps'"
	done
}

bench c50
bench c50-P16 -P 16

# The server's own view: every request was executed, and the value is intact in size.
info=$(smc_run "$cli" redis-cli -h 127.0.0.1 -p "$port" info stats) ||
	smc_fail "redis-cli info failed"
processed=$(printf '%s\n' "$info" | tr -d '\r' | awk -F: '$1 == "total_commands_processed" { print $2 }')
smc_assert_ge "commands processed by redis-server" "${processed:-0}" $((4 * REQUESTS))
len=$(smc_run "$cli" redis-cli -h 127.0.0.1 -p "$port" strlen key:__rand_int__ | tr -d '\r')
smc_assert_eq "length of the value stored by redis-benchmark" "$len" "$VALUE_SIZE"

smc_stop_server redis TERM
smc_assert_eq "redis-server exit status" "${SMC_SERVER_RC[redis]}" 0

# 2 x REQUESTS SETs carry a value each way in, 2 x REQUESTS GETs carry one back.
payload=$((4 * REQUESTS * VALUE_SIZE))
smc_expect_payload "$srv" "$payload" "redis-server"
smc_expect_payload "$cli" "$payload" "redis clients"
smc_pass
