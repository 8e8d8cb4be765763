#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#
# redis-server at the soft RLIMIT_NOFILE most shells and services start with (1024:
# redis lowers its maxclients to 992) and redis-benchmark with 900 clients, which fit
# over TCP. Under the library the server upgrades its first connections, whose
# doorbells then stand between it and its limit: its accept() fails with EMFILE, the
# library sends upgraded connections back to TCP (core/sock/fd_pressure.c) and the call
# is made again. Before, redis logged "Too many open files" in a loop (97 million lines
# in a minute) and the benchmark never finished. Both ends under smc_preload.sh: the
# benchmark completes with no error, redis logs no EMFILE, connections were upgraded and
# the server's downgrades are its client's peer downgrades.
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
. "$(dirname -- "$0")/lib.sh"

CLIENTS=900
REQUESTS=100000

smc_require_cmd redis-server redis-benchmark prlimit
smc_init
[ "$(ulimit -Hn)" = unlimited ] || [ "$(ulimit -Hn)" -ge 4096 ] ||
	smc_skip "the hard RLIMIT_NOFILE $(ulimit -Hn) is below 4096"
smc_free_port port
srv=$(smc_stats_dir server)
cli=$(smc_stats_dir client)

# --fsize: a redis looping on EMFILE writes gigabytes of log a minute; this one dies of
# SIGXFSZ past 100 MiB and the test fails at once
smc_start_server redis "$srv" prlimit --nofile=1024 --fsize=104857600 redis-server --port "$port" \
	--bind 127.0.0.1 --save '' --appendonly no --daemonize no --loglevel notice
smc_wait_port redis "$port"

out=$SMC_TMP/bench.csv err=$SMC_TMP/bench.err
SMC_CMD_TIMEOUT=60 smc_run "$cli" prlimit --nofile=4096 redis-benchmark -h 127.0.0.1 -p "$port" -c "$CLIENTS" \
	-n "$REQUESTS" -t set,get --csv >"$out" 2>"$err" ||
	smc_fail "redis-benchmark failed (status $?): $(tail -3 "$err")"
cat "$out"
smc_redis_bench_check "$out" "$err" SET GET
smc_stop_server redis TERM
smc_assert_eq "redis-server exit status" "${SMC_SERVER_RC[redis]}" 0
log=$(smc_server_log redis)
grep -i 'too many open files' "$log" | head -3
smc_assert_eq "redis-server: 'Too many open files' in its log" \
	"$(grep -ci 'too many open files' "$log")" 0

smc_require_stats "$srv"
smc_require_stats "$cli"
smc_log "stats server: $(smc_stats_summary "$srv")"
smc_log "stats client: $(smc_stats_summary "$cli")"
down=$(smc_stats "$srv" '.events.downgrades')
smc_assert_ge "redis-server: connections over shm" "$(smc_stats "$srv" '.connections.shm')" 1
smc_assert_ge "redis-server: payload bytes over shm" \
	"$(smc_stats "$srv" '.bytes.shm.sent + .bytes.shm.received')" 1
smc_assert_ge "redis-server: connections sent back to TCP at EMFILE" "$down" 1
smc_assert_eq "redis-benchmark: its peer's downgrades" \
	"$(smc_stats "$cli" '.events.peer_downgrades')" "$down"
smc_pass
