#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#
# redis over IPv6 loopback: redis-server bound to ::1, redis-benchmark and redis-cli
# connecting to ::1, all under smc_preload.sh. SET/GET with 50 clients and 1 KiB values;
# checks redis-benchmark's own results, the server's counters and a stored value, then
# that the payload moved over shared memory in both processes. Skips when lo has no ::1.
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
. "$(dirname -- "$0")/lib.sh"

REQUESTS=20000
VALUE_SIZE=1024

smc_require_cmd redis-server redis-benchmark redis-cli ip
ip -6 addr show dev lo 2>/dev/null | grep -q 'inet6 ::1/128' ||
	smc_skip "no IPv6 address ::1 on lo"
smc_init
smc_free_port port
srv=$(smc_stats_dir server)
cli=$(smc_stats_dir client)

smc_start_server redis "$srv" redis-server --port "$port" --bind ::1 \
	--save '' --appendonly no --daemonize no --loglevel notice
for ((i = 0; i < 200; i++)); do
	[ -n "$(ss -6 -Hltn "sport = :$port" 2>/dev/null)" ] && break
	sleep 0.1
done
[ -n "$(ss -6 -Hltn "sport = :$port" 2>/dev/null)" ] || smc_fail "redis-server not listening on [::1]:$port"
ss -4 -Hltn "sport = :$port" 2>/dev/null | grep -q . && smc_fail "redis-server listens on IPv4 too"

out=$SMC_TMP/bench.csv
err=$SMC_TMP/bench.err
smc_run "$cli" redis-benchmark -h ::1 -p "$port" -c 50 -n "$REQUESTS" -t set,get \
	-d "$VALUE_SIZE" --csv >"$out" 2>"$err" ||
	smc_fail "redis-benchmark failed (status $?): $(cat "$err")"
cat "$out"
smc_redis_bench_check "$out" "$err" SET GET

info=$(smc_run "$cli" redis-cli -h ::1 -p "$port" info stats) || smc_fail "redis-cli info failed"
processed=$(printf '%s\n' "$info" | tr -d '\r' | awk -F: '$1 == "total_commands_processed" { print $2 }')
smc_assert_ge "commands processed by redis-server" "${processed:-0}" $((2 * REQUESTS))
len=$(smc_run "$cli" redis-cli -h ::1 -p "$port" strlen key:__rand_int__ | tr -d '\r')
smc_assert_eq "length of the value stored by redis-benchmark" "$len" "$VALUE_SIZE"
peer=$(smc_run "$cli" redis-cli -h ::1 -p "$port" client info | tr -d '\r' |
	sed -n 's/.* addr=\([^ ]*\) .*/\1/p')
case $peer in
\[::1\]:* | ::1:*) ;;
*) smc_fail "redis-server sees the client at '$peer', not at ::1" ;;
esac

smc_stop_server redis TERM
smc_assert_eq "redis-server exit status" "${SMC_SERVER_RC[redis]}" 0

# REQUESTS SETs carry a value in, REQUESTS GETs carry one back
payload=$((2 * REQUESTS * VALUE_SIZE))
smc_expect_payload "$srv" "$payload" "redis-server"
smc_expect_payload "$cli" "$payload" "redis clients"
smc_pass
