#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#
# One-shot clients (core/negotiate/hs_history.h): one command run again and again, each
# process making one short connection to one server (smc_stream, 64 bytes each way),
# upgrades its first four runs and then stays plain TCP ("short-lived" at the client,
# "peer-not-smc" at the server) without a handshake, except one probe a second, which
# upgrades. Another destination, and the same command with SMC_SHORT_CONN_US=0, upgrade
# as before. Every run gets its stream whole, checked by smc_stream.
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
. "$(dirname -- "$0")/lib.sh"

smc_require_built "$SMC_STREAM"
smc_init
[ "$SMC_TEST_EXPECT" = shm ] || smc_skip "the history decides between SMC and TCP: nothing to test over TCP"

RUNS=10
start_server() { # start_server NAME COUNT: its port in $port
	smc_free_port port
	smc_start_server "$1" "$(smc_stats_dir "server-$1")" "$SMC_STREAM" server "$port" \
		--bind 127.0.0.1 --count "$2"
	smc_wait_port "$1" "$port"
}

# run LABEL PORT: one client process with its own stats directory; prints the mode of
# its connection ("shm", or its TCP fallback reasons)
run() {
	local dir
	dir=$(smc_stats_dir "run-$1")
	smc_run "$dir" "$SMC_STREAM" client 127.0.0.1 "$2" --bytes 64 >"$SMC_TMP/run-$1.out" 2>&1 ||
		smc_fail "run $1: $(cat "$SMC_TMP/run-$1.out")"
	smc_require_stats "$dir"
	mode_of "$dir"/*.json
}

mode_of() { # mode_of STATSFILE
	if [ "$(jq '.connections.shm' "$1")" = 1 ]; then
		echo shm
	else
		jq -r '.fallback | keys | join(",")' "$1"
	fi
}

start_server one $((RUNS + 1))
one=$port
# back to back, the stats read afterwards (in the order the processes ended): the
# probes depend on the clock, so the runs must not wait for anything else
dir=$(smc_stats_dir runs)
for ((i = 1; i <= RUNS; i++)); do
	smc_run "$dir" "$SMC_STREAM" client 127.0.0.1 "$one" --bytes 64 >"$SMC_TMP/run-a$i.out" 2>&1 ||
		smc_fail "run $i: $(cat "$SMC_TMP/run-a$i.out")"
done
mapfile -t files < <(ls -tr "$dir"/*.json)
smc_assert_eq "stats files of the runs" "${#files[@]}" "$RUNS"
modes=()
for f in "${files[@]}"; do
	modes+=("$(mode_of "$f")")
done
smc_log "$RUNS short runs: ${modes[*]}"
for i in 0 1 2 3; do
	smc_assert_eq "run $((i + 1)): a command's first runs upgrade" "${modes[$i]}" shm
done
tcp=0
for m in "${modes[@]:4}"; do
	case $m in
	short-lived) tcp=$((tcp + 1)) ;;
	shm) ;; # a probe (one a second)
	*) smc_fail "runs 5-$RUNS: '$m' is neither short-lived nor a probe over shm" ;;
	esac
done
smc_assert "runs 5-$RUNS: $tcp short-lived, expected at least 3 (one probe a second)" "$tcp" -ge 3

# a second later, the next run probes
sleep 1.2
smc_assert_eq "the probe a second later" "$(run probe "$one")" shm
smc_wait_server_exit one 30
smc_assert_eq "server exit status" "${SMC_SERVER_RC[one]}" 0
srv=$SMC_TMP/stats-server-one
smc_log "server: $(smc_stats_summary "$srv")"
smc_assert_eq "server: clients that did not offer SMC" \
	"$(smc_stats "$srv" '.fallback["peer-not-smc"] // 0')" "$tcp"
smc_assert_eq "server: TCP connections" "$(smc_stats "$srv" '.connections.tcp')" "$tcp"

# SMC_SHORT_CONN_US=0 keeps no history and reads none; another destination is another
# history
start_server two 7
for i in 1 2 3 4 5 6; do
	smc_assert_eq "SMC_SHORT_CONN_US=0, run $i" "$(SMC_SHORT_CONN_US=0 run "c$i" "$port")" shm
done
smc_assert_eq "another destination's first run, with the defaults" "$(run d1 "$port")" shm
smc_wait_server_exit two 30
smc_pass
