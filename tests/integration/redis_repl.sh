#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#
# Redis replication, master and replicas under smc_preload.sh: a master holding ~50 MB
# (DEBUG POPULATE, RDB compression off so the transfer is that size) and two replicas
# (--replicaof) doing a full resync each, the first diskless (the master forks a child
# that writes the RDB into a pipe, the parent sends it), the second from disk (the
# forked child writes the file, the parent sends it). The master forks while the
# replication connection is already upgraded; the child never uses that socket, so the
# link stays on shared memory. Checks: each replica's DBSIZE and DEBUG DIGEST equal
# the master's, later writes reach both, and the replication links carried the data
# over shm (both replicas' stats, the master's bytes). redis-cli runs without the
# library: the master counts those connections as peer-not-smc.
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
. "$(dirname -- "$0")/lib.sh"

KEYS=50000
VALUE_SIZE=1024

smc_require_cmd redis-server redis-cli
smc_init
smc_free_port mport
smc_free_port r1port
smc_free_port r2port
msrv=$(smc_stats_dir master)
r1=$(smc_stats_dir replica1)
r2=$(smc_stats_dir replica2)

common=(--bind 127.0.0.1 --save '' --appendonly no --daemonize no --loglevel notice
	--enable-debug-command local --rdbcompression no --repl-diskless-sync-delay 0)
mkdir -p "$SMC_TMP/master" "$SMC_TMP/replica1" "$SMC_TMP/replica2"
smc_start_server master "$msrv" redis-server --port "$mport" --dir "$SMC_TMP/master" \
	"${common[@]}" --repl-diskless-sync yes
smc_wait_port master "$mport"

cli() { # cli PORT ARGS...: redis-cli, plain
	local p=$1
	shift
	timeout 60 redis-cli -h 127.0.0.1 -p "$p" "$@" | tr -d '\r'
}

cli "$mport" debug populate "$KEYS" key "$VALUE_SIZE" >/dev/null || smc_fail "DEBUG POPULATE failed"
smc_assert_eq "master DBSIZE" "$(cli "$mport" dbsize)" "$KEYS"

# wait_synced PORT: the replica on PORT finished its full resync
wait_synced() {
	local i s
	for ((i = 0; i < 600; i++)); do
		s=$(cli "$1" info replication)
		if grep -q '^master_link_status:up' <<<"$s" &&
			grep -q '^master_sync_in_progress:0' <<<"$s"; then
			return 0
		fi
		sleep 0.1
	done
	smc_fail "replica on port $1 not in sync after 60 s: $(tr '\n' ' ' <<<"$s")"
}

# same_data PORT LABEL: the replica's dataset equals the master's
same_data() {
	smc_assert_eq "$2: DBSIZE" "$(cli "$1" dbsize)" "$(cli "$mport" dbsize)"
	smc_assert_eq "$2: DEBUG DIGEST" "$(cli "$1" debug digest)" "$(cli "$mport" debug digest)"
}

smc_log "replica 1: diskless full resync"
smc_start_server replica1 "$r1" redis-server --port "$r1port" --dir "$SMC_TMP/replica1" \
	"${common[@]}" --replicaof 127.0.0.1 "$mport"
smc_wait_port replica1 "$r1port"
wait_synced "$r1port"
same_data "$r1port" "replica 1"

smc_log "replica 2: full resync from disk"
cli "$mport" config set repl-diskless-sync no >/dev/null
smc_start_server replica2 "$r2" redis-server --port "$r2port" --dir "$SMC_TMP/replica2" \
	"${common[@]}" --replicaof 127.0.0.1 "$mport"
smc_wait_port replica2 "$r2port"
wait_synced "$r2port"
same_data "$r2port" "replica 2"
grep -q 'Starting BGSAVE for SYNC with target: replicas sockets' "$(smc_server_log master)" ||
	smc_fail "the master did not make a diskless sync"
grep -q 'Starting BGSAVE for SYNC with target: disk' "$(smc_server_log master)" ||
	smc_fail "the master did not make a sync from disk"

# later writes propagate (the replication stream after the RDB)
for i in 1 2 3; do
	cli "$mport" set "later:$i" "value-$i" >/dev/null
done
cli "$mport" del key:7 >/dev/null
offset=$(cli "$mport" info replication | awk -F: '$1 == "master_repl_offset" { print $2 }')
for port in "$r1port" "$r2port"; do
	for ((i = 0; i < 100; i++)); do
		o=$(cli "$port" info replication | awk -F: '$1 == "slave_repl_offset" { print $2 }')
		[ "${o:-0}" -ge "$offset" ] && break
		sleep 0.1
	done
	smc_assert_eq "replica on $port: later:3" "$(cli "$port" get later:3)" value-3
	smc_assert_eq "replica on $port: key:7 deleted" "$(cli "$port" exists key:7)" 0
	same_data "$port" "replica on $port after later writes"
done

smc_stop_server replica1 TERM
smc_stop_server replica2 TERM
smc_stop_server master TERM
for n in master replica1 replica2; do
	smc_assert_eq "$n exit status" "${SMC_SERVER_RC[$n]}" 0
done

# each replica's only outgoing connection is its link, which carried the RDB (KEYS *
# VALUE_SIZE bytes and more); the ones it accepted are redis-cli's, without the library
rdb=$((KEYS * VALUE_SIZE))
for r in "$r1" "$r2"; do
	label=$(basename -- "$r")
	label=${label#stats-}
	smc_require_stats "$r"
	smc_log "stats $label: $(smc_stats_summary "$r")"
	smc_assert_eq "$label: connections over shm (its link)" "$(smc_stats "$r" '.connections.shm')" 1
	smc_assert_ge "$label: bytes received over shm" "$(smc_stats "$r" '.bytes.shm.received')" "$rdb"
	smc_assert_eq "$label: TCP connections for another reason than peer-not-smc (redis-cli)" \
		"$(smc_stats "$r" '.connections.tcp - (.fallback["peer-not-smc"] // 0)')" 0
done
smc_require_stats "$msrv"
smc_log "stats master: $(smc_stats_summary "$msrv")"
smc_assert_ge "master: connections over shm (the two links)" \
	"$(smc_stats "$msrv" '.connections.shm')" 2
smc_assert_ge "master: bytes sent over shm" "$(smc_stats "$msrv" '.bytes.shm.sent')" $((2 * rdb))
smc_assert_eq "master: TCP connections for another reason than peer-not-smc (redis-cli)" \
	"$(smc_stats "$msrv" '.connections.tcp - (.fallback["peer-not-smc"] // 0)')" 0
smc_assert_eq "master: aborted connections" "$(smc_stats "$msrv" '.events.aborts')" 0
smc_pass
