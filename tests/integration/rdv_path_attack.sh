#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#
# Another local user against the path rendezvous of the in-band negotiation (SMC TCP
# option): root client and root event-loop server (tests/progs/smc_churn, epoll), both
# preloaded, user nobody attacking without the library. Root: sets up the eBPF program
# under a map and rendezvous directory of its own (smc_preload.sh --setup, as
# negotiate_robust.sh), torn down at exit.
#
#  b. "silent connector": nobody finds every new c-<token> socket of SMC_RDV_DIR (the
#     directory is 1733, not listable, but /proc/net/unix lists bound paths) and
#     connects to it first, staying silent, then sending garbage;
#  c. a flood of connections to every rendezvous socket it finds (c-<token> sockets and
#     abstract names, backlogs filled);
#  d. SMC_RDV_DIR squatted: nobody creates the directory (in /tmp) before root's
#     processes start and plants sockets, a file, a symlink and a "bpf" directory under
#     plausible names; then, SMC_RDV_DIR a symlink of nobody's to root's real directory.
#
# For b and c: every legitimate connection works (its exact response, no abort), the
# attacker receives no descriptor, no byte of the legitimate payload and no message (a
# client's Proposal carries its secret token), and, last, the median delay added per
# legitimate connection over a run without the attack is under
# ATTACK_MAX_MEDIAN_ADDED_MS (rdv_attack_lib.sh). For d: root's processes do not use a
# directory another user controls (the client says so in its log and uses an abstract
# name), their connections are upgraded all the same, and nothing planted was
# connected to, removed or followed. The server holds no more descriptors, memfds or
# mappings than before. All failures are collected and reported together at the end.
# SMC_TEST_BPF_DIR=<dir of a pinned smc_peer map>: use that setup instead of making one
# (nothing global is changed then).
# Skips (77) without root, without a user nobody, or when the eBPF program cannot be
# set up here.
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
# shellcheck disable=SC2034 # read by lib.sh
SMC_TEST_KEEP_TRANSPORT=1
SMC_TEST_EXPECT=shm
. "$(dirname -- "$0")/lib.sh"

[ "$(id -u)" = 0 ] || smc_skip "needs root (eBPF setup, an attacker of another user)"
id -u nobody >/dev/null 2>&1 || smc_skip "no user nobody"
smc_require_cmd setpriv jq
smc_init
smc_require_built "$SMC_CHURN"
. "$(dirname -- "$0")/rdv_attack_lib.sh"
export SMC_SHORT_CONN_US=0
LEGIT=${PATH_LEGIT:-20}

export SMC_BPF_DIR=/sys/fs/bpf/smc-xattack-$$
export SMC_RDV_DIR=/run/smc-xattack-$$
BPF_OBJ=${SMC_BPF_OBJ:-$top_builddir/bpf/smc_tcpopt.bpf.o}
SQUAT_DIR=/tmp/smc-squat-$$
SQUAT_LINK=/tmp/smc-squat-link-$$
setup_done=0
path_cleanup() {
	if [ "$setup_done" = 1 ]; then
		SMC_BPF_OBJ=$BPF_OBJ "$SMC_WRAPPER" --teardown >/dev/null 2>&1 ||
			echo "rdv_path_attack: teardown of $SMC_BPF_DIR failed"
	fi
	rm -rf -- "$SMC_RDV_DIR" "$SQUAT_DIR"
	rm -f -- "$SQUAT_LINK"
}
# lib.sh's cleanup reads the exit status first: keep it for it
trap '_rc=$?; attack_cleanup; path_cleanup; (exit $_rc); _smc_cleanup' EXIT

if [ -n "${SMC_TEST_BPF_DIR:-}" ]; then
	# a setup made already (by --setup, or another test's): its map, our own rendezvous
	# directory as --setup makes one, and no setup or teardown here
	[ -e "$SMC_TEST_BPF_DIR/smc_peer" ] || smc_skip "no map in SMC_TEST_BPF_DIR=$SMC_TEST_BPF_DIR"
	export SMC_BPF_DIR=$SMC_TEST_BPF_DIR
	mkdir -p -- "$SMC_RDV_DIR" && chmod 1733 -- "$SMC_RDV_DIR" ||
		smc_hard_error "cannot create $SMC_RDV_DIR"
else
	[ -f "$BPF_OBJ" ] || smc_skip "$BPF_OBJ not built (clang with the bpf target missing?)"
	if ! out=$(SMC_BPF_OBJ=$BPF_OBJ "$SMC_WRAPPER" --setup 2>&1); then
		smc_skip "eBPF setup not possible here: $out"
	fi
	setup_done=1
fi

# Failures are collected (the numbers of every attack are worth having) and reported
# at the end.
FAILED=$SMC_TMP/failed.txt
: >"$FAILED"
expect_eq() { # WHAT ACTUAL EXPECTED
	smc_log "$1: $2 (expected $3)"
	[ "$2" = "$3" ] || echo "$1: got '$2', expected '$3'" >>"$FAILED"
}
expect_ge() { # WHAT ACTUAL MINIMUM
	smc_log "$1: $2 (at least $3)"
	[ "${2:-0}" -ge "$3" ] 2>/dev/null || echo "$1: got '$2', expected at least $3" >>"$FAILED"
}

# server_start NAME: a preloaded smc_churn epoll server on a fresh port (PORT, srv_pid)
server_start() {
	smc_free_port PORT
	SRV_STATS=$(smc_stats_dir "$1")
	smc_start_server "$1" "$SRV_STATS" "$SMC_CHURN" server "$PORT" --bind 127.0.0.1 --mode epoll
	smc_wait_port "$1" "$PORT"
	srv_pid=${SMC_SERVER_PID[$1]}
}

server_start server
attack_legit warmup "$PORT" 3
sleep 0.5
base=$(smc_proc_resources "$srv_pid")
attack_legit baseline "$PORT" "$LEGIT"
# the path rendezvous is what is attacked: the baseline must have used it
smc_assert_eq "baseline: shm connections" \
	"$(smc_stats "$(smc_stats_dir baseline)" '.connections.shm // 0')" "$LEGIT"

# ---------------------------------------------------------------- b: silent connector
for mode in silent garbage; do
	attack_start "watch-$mode" watch "$SMC_RDV_DIR" 600 "$mode"
	attack_legit "watched-$mode" "$PORT" "$LEGIT"
	attack_stop "watch-$mode"
	attack_delay "path/connector-$mode" baseline "watched-$mode" "$(attack_field connected)"
	expect_ge "connector-$mode: sockets it found" "$(attack_field seen)" 1
	expect_eq "connector-$mode: descriptors it received" "$(attack_field fds)" 0
	expect_eq "connector-$mode: legitimate payload it saw" "$(attack_field marker)" 0
	# By key the client answers whoever connects with its Proposal (no descriptor, no
	# secret: the key went over TCP only, and the tokens bind a Confirm the connector
	# cannot send to the server), and nothing else until one proves the key.
	expect_eq "connector-$mode: messages beyond the client's by-key Proposals" \
		"$(attack_field msgs)" "$(attack_field proposals)"
	d=$(smc_stats_dir "watched-$mode")
	echo "path/connector-$mode: downgraded=$(smc_stats "$d" '.connections.tcp // 0') of $LEGIT" \
		"($(smc_stats "$d" '.fallback // {}' | tr -d ' \n'))" >>"$ATTACK_REPORT"
done

# ---------------------------------------------------------------- c: flood
attack_start flood flood "$SMC_RDV_DIR" 600
attack_legit flooded "$PORT" "$LEGIT"
attack_stop flood
attack_delay "path/flood" baseline flooded "$(attack_field connects)"
expect_eq "flood: descriptors it received" "$(attack_field fds)" 0
expect_eq "flood: legitimate payload it saw" "$(attack_field marker)" 0
expect_eq "flood: messages beyond the clients' by-key Proposals" "$(attack_field msgs)" \
	"$(attack_field proposals)"
d=$(smc_stats_dir flooded)
echo "path/flood: downgraded=$(smc_stats "$d" '.connections.tcp // 0') of $LEGIT" \
	"($(smc_stats "$d" '.fallback // {}' | tr -d ' \n'))" >>"$ATTACK_REPORT"

smc_expect_resources server "$srv_pid" "$base" 40
smc_stop_server server
[ -z "$(find "$SMC_RDV_DIR" -maxdepth 1 -type s -name 'c-*')" ] ||
	echo "rendezvous sockets left in $SMC_RDV_DIR: $(find "$SMC_RDV_DIR" -maxdepth 1 -type s)" >>"$FAILED"

# ---------------------------------------------------------------- d: squatted SMC_RDV_DIR
# squat_run NAME DIR: server and client with SMC_RDV_DIR=DIR (the map stays reachable
# through SMC_BPF_DIR), the client logging; the planter's result in ATTACK_RESULT.
squat_run() {
	local name=$1 dir=$2 log=$SMC_TMP/$1-client.log
	SMC_RDV_DIR=$dir server_start "srv-$name"
	SMC_RDV_DIR=$dir SMC_LOG_LEVEL=debug SMC_LOG_FILE=$log attack_legit "$name" "$PORT" 5
	expect_eq "$name: shm connections (abstract token names)" \
		"$(smc_stats "$(smc_stats_dir "$name")" '.connections.shm // 0')" 5
	grep -q 'CLC Proposal sent (path rendezvous' "$log" &&
		echo "$name: the client used the path rendezvous in $dir" >>"$FAILED"
	grep -q "SMC_RDV_DIR $dir.*not used" "$log" ||
		echo "$name: no log line says why $dir is not used: $(grep -v DEBUG "$log" | head -5)" >>"$FAILED"
	smc_stop_server "srv-$name"
}

attack_start plant plant "$SQUAT_DIR" 600
squat_run squat-dir "$SQUAT_DIR"
attack_stop plant
expect_eq "squat-dir: connections to planted sockets" "$(attack_field accepted)" 0
expect_eq "squat-dir: planted objects intact" "$(attack_field intact)" "$(attack_field planted)"

# a symlink of nobody's to root's real (1733, root-owned) directory: nobody could
# retarget it at any time, so it must not be used either
"${as_nobody[@]}" ln -s "$SMC_RDV_DIR" "$SQUAT_LINK" || smc_hard_error "ln -s as nobody"
squat_run squat-link "$SQUAT_LINK"

smc_log "attack report:"
sed 's/^/    /' "$ATTACK_REPORT"
if [ -s "$FAILED" ]; then
	sed 's/^/    /' "$FAILED"
	smc_fail "$(wc -l <"$FAILED") expectation(s) not met (above)"
fi
attack_assert_delay
smc_pass
