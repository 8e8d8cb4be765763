# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
# shellcheck shell=bash
#
# The plumbing bench/run's workloads share (sourced by bench/run; the workloads, one
# function each, are in bench/run and bench/programs.sh): finding the library, servers
# and clients started TCP or under the library (start_server, stop_server, run_client),
# free ports, the check of an SMC run against its stats files (check_stats), the rows of
# raw.csv (record), the loaded states of --load (under_load), per-round stats
# directories and A/B order, and the description of the machine.
# Uses bench/run's globals when called: LIB, OUT, LOGS, RAW, SRC_DIR, QUICK, ROUNDS,
# SWEEP_ROUNDS, ORIG_ARGS, and LOAD_TAG while under a load.

# ---------------------------------------------------------------- the library

# The library to measure when --lib is not given: $SMC_PRELOAD_LIB, then ./.libs, then
# the source tree's .libs.
find_lib() {
	local c
	for c in ${SMC_PRELOAD_LIB:+"$SMC_PRELOAD_LIB"} "$PWD/.libs/libsmc_preload.so" \
		"$SRC_DIR/.libs/libsmc_preload.so"; do
		[ -f "$c" ] && { echo "$c"; return 0; }
	done
	return 1
}


# ---------------------------------------------------------------- servers and clients

SERVER_PIDS=()
HOG_PIDS=()
cleanup() {
	local p
	for p in "${SERVER_PIDS[@]}" "${HOG_PIDS[@]}"; do
		kill -KILL "$p" 2>/dev/null
	done
}

log() { echo "[$(date +%T)] $*" >&2; }

# A TCP port nobody listens on or uses, below the ephemeral range (every server gets one:
# after the connect-rate workload TIME_WAIT sockets can hold most ephemeral ports, and
# bind(port 0) would then fail).
free_port() {
	local p used
	used=$(ss -Htan | awk '{ n = split($4, a, ":"); print a[n] }' | sort -u)
	while :; do
		p=$((20000 + RANDOM % 12000))
		grep -qx "$p" <<<"$used" || { echo "$p"; return; }
	done
}

# server_port LOGFILE: the port a bench helper server (msgsize, crr) announced with a
# "PORT n" line in its log, waiting up to 5 s for it; empty when it never came.
server_port() {
	local i p
	for ((i = 0; i < 100; i++)); do
		p=$(awk '/^PORT/ { print $2 }' "$1" 2>/dev/null)
		[ -n "$p" ] && { echo "$p"; return; }
		sleep 0.05
	done
}

wait_listen() { # PORT [seconds]
	local i
	for ((i = 0; i < ${2:-10} * 20; i++)); do
		ss -Hltn "sport = :$1" | grep -q . && return 0
		sleep 0.05
	done
	return 1
}

# Environment prefix for one side of a run: nothing for TCP, the preload for SMC.
# Usage: side_env MODE STATSDIR -> prints words for `env`.
side_env() {
	if [ "$1" = smc ]; then
		echo "LD_PRELOAD=$LIB SMC_STATS_FILE=$2/%p.json"
	fi
}

# start_server MODE STATSDIR LOG -- ENV... -- CMD...  (sets SERVER_PID)
start_server() {
	local mode=$1 sdir=$2 logf=$3
	shift 3
	[ "$1" = -- ] && shift
	local extra=()
	while [ $# -gt 0 ] && [ "$1" != -- ]; do extra+=("$1"); shift; done
	shift
	# shellcheck disable=SC2046
	env $(side_env "$mode" "$sdir") "${extra[@]}" "$@" >"$logf" 2>&1 &
	SERVER_PID=$!
	SERVER_PIDS+=("$SERVER_PID")
}

# stop_server PID [SIGNAL]: graceful (so the library writes its stats), then KILL.
stop_server() {
	local pid=$1 sig=${2:-TERM} i
	kill -"$sig" "$pid" 2>/dev/null
	for ((i = 0; i < 100; i++)); do
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.05
	done
	kill -KILL "$pid" 2>/dev/null
	wait "$pid" 2>/dev/null
}

# run_client MODE STATSDIR SECONDS ENV... -- CMD...: bounded, stdout to caller.
run_client() {
	local mode=$1 sdir=$2 secs=$3
	shift 3
	local extra=()
	while [ $# -gt 0 ] && [ "$1" != -- ]; do extra+=("$1"); shift; done
	shift
	# shellcheck disable=SC2046
	timeout -k 5 "$secs" env $(side_env "$mode" "$sdir") "${extra[@]}" "$@"
}

# Verdict on one SMC run from its stats files: "ok", or "invalid:<why>".
# TCP runs are always "ok" (nothing to prove).
# With STRICT=strict (single-connection workloads: sweep, cpu) a TCP fallback makes the
# run invalid, since the stats cannot tell which measured connection fell back. With
# tcp-ok (short connections to a server that serves no pool: TCP by design) the run
# only needs its stats files; its counts go in the note.
check_stats() { # MODE STATSDIR [strict|tcp-ok]
	[ "$1" = smc ] || { echo ok; return; }
	local strict=${3:-}
	local files=("$2"/*.json)
	[ -e "${files[0]}" ] || { echo "invalid:no-stats-file"; return; }
	local sum
	sum=$(jq -s '{shm: (map(.bytes.shm.sent + .bytes.shm.received) | add),
	              tcpbytes: (map(.bytes.tcp.sent + .bytes.tcp.received) | add),
	              tcpconn: (map(.connections.tcp) | add),
	              shmconn: (map(.connections.shm) | add),
	              aborts: (map(.events.aborts) | add),
	              fb: ([.[].fallback | to_entries[]] | group_by(.key)
	                   | map("\(.[0].key)=\(map(.value) | add)") | join(" "))}' \
		"${files[@]}" 2>/dev/null) || { echo "invalid:bad-stats-json"; return; }
	local shm tcpc fb aborts tcpb shmc
	if [ "$strict" = tcp-ok ]; then
		echo "ok:$(jq -r '"shm-conns=\(.shmconn) tcp-conns=\(.tcpconn) \(.fb)"' <<<"$sum")"
		return
	fi
	shm=$(jq -r .shm <<<"$sum")
	tcpb=$(jq -r .tcpbytes <<<"$sum")
	tcpc=$(jq -r .tcpconn <<<"$sum")
	shmc=$(jq -r .shmconn <<<"$sum")
	aborts=$(jq -r .aborts <<<"$sum")
	fb=$(jq -r .fb <<<"$sum")
	if [ "${shm:-0}" = 0 ] || [ "$shm" = null ]; then
		echo "invalid:no-shm-bytes(tcp-conns=$tcpc $fb)"
	elif [ "$((tcpb * 20 > shm + tcpb))" = 1 ]; then
		# more than 5% of the payload went over the TCP fallback: not an SMC figure
		echo "invalid:$((100 * tcpb / (shm + tcpb)))%-bytes-over-tcp-fallback(shm-conns=$shmc tcp-conns=$tcpc $fb)"
	elif [ -n "$strict" ] && [ "$tcpc" != 0 ]; then
		echo "invalid:tcp-fallback-conns=$tcpc aborts=$aborts $fb"
	elif [ "$tcpc" != 0 ] || [ "$aborts" != 0 ]; then
		echo "ok:shm-conns=$shmc tcp-fallback-conns=$tcpc aborts=$aborts $fb"
	else
		echo ok
	fi
}

# record WORKLOAD METRIC MODE ROUND VALUE VERDICT (under a load, the workload's name
# gets its tag: redis_c50_d1024@nice0)
record() {
	local valid=1 note=${6#ok}
	note=${note#:}
	case "$6" in invalid*) valid=0; note=${6#invalid:} ;; esac
	[ -n "$5" ] || { valid=0; note="no-value ${note}"; }
	echo "$1${LOAD_TAG:+@$LOAD_TAG},$2,$3,$4,${5:-nan},$valid,\"${note//\"/}\"" >>"$RAW"
}

# ---------------------------------------------------------------- load (--load)

# under_load LOAD CMD...: runs CMD with the machine in state LOAD (idle, nice0, nice10)
# and tags the rows CMD records with it. A loaded state is a busy loop per online CPU
# at that nice level, each pinned to its CPU: pinned, every CPU carries exactly one hog
# for the whole run, as on a host whose cores all run other work; unpinned hogs are
# moved by the load balancer, so a CPU would at times carry two and the other none and
# rounds would measure different machines. The benchmark's own processes are not
# pinned: the scheduler places them as it would a user's. Each hog ends itself after
# HOG_MAX_S (a bench/run killed with SIGKILL leaves none for long); the EXIT trap kills
# them too.
HOG_MAX_S=3600
under_load() {
	local load=$1 nice cpu
	shift
	case $load in
	idle) "$@"; return ;;
	nice0) nice=0 ;;
	nice10) nice=10 ;;
	*) echo "bench/run: unknown load '$load'" >&2; return 2 ;;
	esac
	local hogs=()
	for cpu in $(taskset -pc $$ | sed 's/.*: //' | tr ',' '\n' |
		awk -F- '{ if (NF == 2) for (i = $1; i <= $2; i++) print i; else print $1 }'); do
		# exec chain: taskset and nice exec, $! is the looping bash itself
		taskset -c "$cpu" nice -n "$nice" bash -c \
			'end=$((SECONDS + $1)); while ((SECONDS < end)); do :; done' hog "$HOG_MAX_S" &
		hogs+=($!)
	done
	HOG_PIDS+=("${hogs[@]}")
	mkdir -p "$OUT/logs/$load"
	LOAD_TAG=$load LOGS=$OUT/logs/$load "$@"
	kill -KILL "${hogs[@]}" 2>/dev/null
	wait "${hogs[@]}" 2>/dev/null
	HOG_PIDS=()
}

new_sdir() { # WORKLOAD MODE ROUND -> fresh stats directory
	local d="$OUT/stats/$1${LOAD_TAG:+@$LOAD_TAG}-$2-r$3"
	rm -rf "$d"
	mkdir -p "$d"
	echo "$d"
}

modes_for_round() { # A/B order alternates so neither mode always runs first
	if (($1 % 2)); then echo "smc tcp"; else echo "tcp smc"; fi
}

# ---------------------------------------------------------------- machine

describe_machine() {
	local cpu
	cpu=$(awk -F': *' '/^model name/ { print $2; exit }' /proc/cpuinfo)
	echo "date:    $(date -u +%Y-%m-%dT%H:%M:%SZ)"
	echo "cpu:     ${cpu:-unknown} ($(nproc) cores online, $(grep -c ^processor /proc/cpuinfo) total)"
	echo "kernel:  $(uname -srm)"
	echo "memory:  $(awk '/MemTotal/ { printf "%.1f GiB", $2 / 1048576 }' /proc/meminfo)"
	echo "load:    $(cut -d' ' -f1-3 /proc/loadavg) (1/5/15 min, before the run)"
	echo "library: $LIB"
	echo "source:  $(git -C "$SRC_DIR" rev-parse --short HEAD 2>/dev/null || echo unknown)$(git -C "$SRC_DIR" diff --quiet 2>/dev/null || echo ' (dirty tree)')"
	echo "mode:    $([ "$QUICK" = 1 ] && echo quick || echo full), $ROUNDS rounds A/B" \
		"($SWEEP_ROUNDS for the sweep)"
	echo "command: $0 ${ORIG_ARGS[*]}"
}
