#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#
# PostgreSQL (a prefork server: the postmaster accepts each connection and forks a
# backend for it) with pgbench, both under smc_preload.sh: a cluster of its own in the
# temp dir (initdb, then postgres in the foreground on 127.0.0.1), `pgbench -i`, then a
# TPC-B run and a select-only (-S) run with 4 clients on 2 threads and a fixed number of
# transactions each: pgbench reports every transaction processed and none failed, and
# the server counted them too (pg_stat_database); the postmaster is back to its idle
# sockets, eventfds, epoll sets, memfds and memfd mappings; then the transport through the stats.
#
# The transport check is on bytes: a forked backend starts with a copy of its parent's
# counters, so summed over the processes connections may be counted more than once, but
# the postmaster itself moves no payload (the backends do), so the bytes summed over
# every process are each connection's own, with or without that copy: the server's
# sum must equal the clients'.
# As root, the cluster runs as user postgres (PostgreSQL refuses root), or nobody.
#
# Every connection is upgraded by its own handshake (SMC_SHORT_CONN_US=0): libpq opens
# each connection twice where the server offers GSS encryption (Debian's does) and the
# client has no Kerberos ticket: a GSSENCRequest answered 'G', a close, then the real
# connection. pgbench's four such probes in a row are four short connections to one
# destination, and whether each counts depends on its handshake ending before its
# close: the short-connection policy then kept the last client on TCP now and then.
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
. "$(dirname -- "$0")/lib.sh"
export SMC_SHORT_CONN_US=0

CLIENTS=4
THREADS=2
TPCB_TX=${PGBENCH_TX:-500}
SELECT_TX=${PGBENCH_SELECT_TX:-2000}

pgbin=${PG_BINDIR:-$(find /usr/lib/postgresql -mindepth 2 -maxdepth 2 -name bin 2>/dev/null | sort -V | tail -n 1)}
for p in initdb postgres pgbench psql; do
	[ -x "$pgbin/$p" ] || smc_skip "PostgreSQL's $p is not installed (PG_BINDIR=${pgbin:-none})"
done
smc_init
smc_free_port port
srv=$(smc_stats_dir server)
cli=$(smc_stats_dir client)

as_db=()
if [ "$(id -u)" = 0 ]; then
	smc_require_cmd setpriv
	dbuser=postgres
	id "$dbuser" >/dev/null 2>&1 || dbuser=nobody
	id "$dbuser" >/dev/null 2>&1 || smc_skip "running as root and there is no user postgres or nobody"
	as_db=(setpriv "--reuid=$dbuser" "--regid=$(id -g "$dbuser")" --clear-groups --)
	chmod 0755 "$SMC_TMP" || smc_hard_error "chmod $SMC_TMP"
	chmod 0777 "$srv" || smc_hard_error "chmod $srv"
fi
data=$SMC_TMP/pgdata
sockdir=$SMC_TMP/pgsock
mkdir -p "$data" "$sockdir" || smc_hard_error "mkdir"
[ ${#as_db[@]} = 0 ] || chown "$dbuser" "$data" "$sockdir" || smc_hard_error "chown"

smc_log "initdb"
"${as_db[@]}" "$pgbin/initdb" -D "$data" -U bench --auth=trust --no-sync -E UTF8 \
	>"$SMC_TMP/initdb.out" 2>&1 || smc_hard_error "initdb failed: $(tail -5 "$SMC_TMP/initdb.out")"

# fsync off: the run is about the sockets, not the disk.
smc_start_server postgres "$srv" "${as_db[@]}" "$pgbin/postgres" -D "$data" -p "$port" \
	-c listen_addresses=127.0.0.1 -c unix_socket_directories="$sockdir" \
	-c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=20 \
	-c log_min_messages=warning
smc_wait_port postgres "$port"
smc_wait_log postgres 'database system is ready to accept connections'
master=${SMC_SERVER_PID[postgres]}
# the postmaster: setpriv execs it, so it is the server's pid
[ "$(ps -o comm= -p "$master")" = postgres ] ||
	smc_hard_error "process $master is $(ps -o comm= -p "$master"), not postgres"

pg=(-h 127.0.0.1 -p "$port" -U bench)
smc_run "$cli" "$pgbin/psql" "${pg[@]}" -d postgres -Atqc 'CREATE DATABASE bench' ||
	smc_fail "CREATE DATABASE failed"
smc_log "pgbench -i"
smc_run "$cli" "$pgbin/pgbench" "${pg[@]}" -i -q -s 2 bench >"$SMC_TMP/init.out" 2>&1 ||
	smc_fail "pgbench -i failed: $(tail -5 "$SMC_TMP/init.out")"

# xacts: the database's committed transactions so far, as the server counts them.
xacts() {
	smc_run "$cli" "$pgbin/psql" "${pg[@]}" -d postgres -Atqc \
		"SELECT pg_stat_force_next_flush(); SELECT xact_commit FROM pg_stat_database WHERE datname = 'bench'" |
		tail -n 1
}
base=$(smc_proc_resources "$master")
smc_log "postmaster idle: $base"

# bench LABEL TX ARGS...: one pgbench run of CLIENTS x TX transactions.
bench() {
	local label=$1 tx=$2 out=$SMC_TMP/pgbench-$1.out n before after i
	shift 2
	n=$((CLIENTS * tx))
	before=$(xacts)
	smc_log "pgbench $label: $CLIENTS clients, $tx transactions each"
	smc_run "$cli" "$pgbin/pgbench" "${pg[@]}" -c "$CLIENTS" -j "$THREADS" -t "$tx" -n "$@" \
		bench >"$out" 2>&1 || smc_fail "pgbench $label failed (status $?): $(tail -5 "$out")"
	grep -E 'processed|failed|tps' "$out"
	grep -q "^number of transactions actually processed: $n/$n\$" "$out" ||
		smc_fail "pgbench $label: not $n/$n transactions processed"
	grep -q '^number of failed transactions: 0 ' "$out" ||
		smc_fail "pgbench $label: $(grep 'failed' "$out")"
	# the backends report their counts as they exit, just after pgbench did
	for ((i = 0; i < 50; i++)); do
		after=$(xacts)
		[ "$((after - before))" -ge "$n" ] && break
		sleep 0.2
	done
	smc_assert_ge "pgbench $label: transactions committed by the server" "$((after - before))" "$n"
}

bench tpcb "$TPCB_TX"
bench select "$SELECT_TX" -S

smc_expect_resources postmaster "$master" "$base" 15
smc_stop_server postgres INT 30
smc_assert_eq "postgres exit status" "${SMC_SERVER_RC[postgres]}" 0

# Each transaction sends at least its statements (TPC-B: 7 of at least 30 bytes each;
# -S: one SELECT of at least 30 bytes) and receives an answer to each (at least 15
# bytes): a floor, over sent+received, in each side's stats.
payload=$((CLIENTS * (TPCB_TX * 7 * 45 + SELECT_TX * 45)))
smc_expect_payload "$srv" "$payload" "postmaster+backends"
smc_expect_payload "$cli" "$payload" "pgbench+psql"
# both ends of the same connections: as many bytes on each side
bytes=".bytes.$SMC_TEST_EXPECT.sent + .bytes.$SMC_TEST_EXPECT.received"
smc_assert_eq "bytes over $SMC_TEST_EXPECT, server side (summed over the processes) and client side" \
	"$(smc_stats "$srv" "$bytes")" "$(smc_stats "$cli" "$bytes")"
smc_pass
