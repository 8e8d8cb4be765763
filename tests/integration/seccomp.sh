#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#
# A peer that puts itself under a strict seccomp filter (tests/progs/seccomp_peer: kill
# on any call but the few it needs itself) and then makes its connections, as a
# sandboxed daemon does. Under the library it must not be killed for a call of the
# library's own: its new connections stay plain TCP, and its peer, under the library
# too, learns so at once (core/sock/sandbox_entry.c).
#  - a client that loads its filter through prctl() and through syscall(SYS_seccomp),
#    against a preloaded echo server: every echo intact, the server's connections
#    peer-not-smc with the bytes over TCP;
#  - a server that listens, then loads its filter: the same, seen from the client;
#  - both without a filter (the control): shared memory;
#  - peers that inherit their filter across exec (seccomp_peer exec, as under systemd's
#    SystemCallFilter=), which the library cannot have seen go on: one that kills on
#    bpf() (the TCP option's map) still gets shared memory through the rendezvous on
#    both sides; one that kills on memfd_create keeps its connections on TCP, as client
#    and as server, its peer's stats peer-not-smc.
# With root, the server case again after smc_preload.sh --setup (its listener announced
# SMC in its SYN-ACKs before the filter, and must stop before it).
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
. "$(dirname -- "$0")/lib.sh"

smc_init
smc_require_cmd python3
smc_require_built tests/progs/seccomp_peer
PEER=$top_builddir/tests/progs/seccomp_peer
N=4
BYTES=$((256 * 1024))

# client_against_echo HOW LABEL: seccomp_peer client under filter HOW, a preloaded echo
# server
client_against_echo() {
	local how=$1 label=$2 srv cli name=echo-$2 port out rc
	srv=$(smc_stats_dir "server-$name")
	cli=$(smc_stats_dir "client-$label")
	smc_start_server "$name" "$srv" python3 "$top_srcdir/tests/progs/echo_server.py" "$N"
	smc_wait_log "$name" '^port '
	read -r _ port < <(grep -m1 '^port ' "$(smc_server_log "$name")")
	out=$(smc_run "$cli" "$PEER" client "$port" "$N" "$how" 2>&1)
	rc=$?
	smc_log "client ($how): $out"
	smc_assert_eq "client under a $how filter: exit status (159: killed by SIGSYS)" "$rc" 0
	smc_wait_server_exit "$name" 20
	smc_assert_eq "echo server ($how client) exit status" "${SMC_SERVER_RC[$name]}" 0
	if [ "$how" = none ]; then
		smc_expect_payload "$srv" $((2 * N * BYTES)) "echo server, client without a filter"
	else
		smc_expect_fallback "$srv" peer-not-smc $((2 * N * BYTES)) "echo server ($how client)"
	fi
}

# server_under_filter HOW LABEL: seccomp_peer server under filter HOW, a preloaded client
server_under_filter() {
	local how=$1 label=$2 srv cli name=peer-$2 port out rc
	srv=$(smc_stats_dir "server-$label")
	cli=$(smc_stats_dir "client-of-$label")
	smc_free_port port
	smc_start_server "$name" "$srv" "$PEER" server "$port" "$N" "$how"
	smc_wait_log "$name" '^LISTENING'
	out=$(smc_run "$cli" "$PEER" client "$port" "$N" none 2>&1)
	rc=$?
	smc_log "client of the $label server: $out"
	smc_assert_eq "client of the $label server: exit status" "$rc" 0
	smc_wait_server_exit "$name" 20
	smc_log "server ($label): $(cat "$(smc_server_log "$name")")"
	smc_assert_eq "server $label: exit status (159: killed by SIGSYS)" \
		"${SMC_SERVER_RC[$name]}" 0
	if [ "$how" = none ]; then
		smc_expect_payload "$cli" $((2 * N * BYTES)) "client of the server without a filter"
	else
		smc_expect_fallback "$cli" peer-not-smc $((2 * N * BYTES)) "client of the $label server"
	fi
}

# inherited DENY LABEL: server and client under a filter inherited across exec that
# kills on DENY (bpf: both upgrade over the rendezvous), or one of them (memfd: the
# other, without a filter, sees TCP)
inherited() {
	local deny=$1 label=$2 srv cli name=inherit-$2 port out rc
	local -a srv_filter=() cli_filter=()
	srv=$(smc_stats_dir "server-inherit-$label")
	cli=$(smc_stats_dir "client-inherit-$label")
	case $label in
	*client) cli_filter=("$PEER" exec "$deny") ;;
	*server) srv_filter=("$PEER" exec "$deny") ;;
	*) cli_filter=("$PEER" exec "$deny") srv_filter=("$PEER" exec "$deny") ;;
	esac
	smc_free_port port
	smc_start_server "$name" "$srv" "${srv_filter[@]}" "$PEER" server "$port" "$N" none
	smc_wait_log "$name" '^LISTENING'
	out=$(smc_run "$cli" "${cli_filter[@]}" "$PEER" client "$port" "$N" none 2>&1)
	rc=$?
	smc_log "client ($label): $out"
	smc_assert_eq "client ($label): exit status (159: killed by SIGSYS)" "$rc" 0
	smc_wait_server_exit "$name" 20
	smc_assert_eq "server ($label): exit status (159: killed by SIGSYS)" \
		"${SMC_SERVER_RC[$name]}" 0
	case $label in
	*client) smc_expect_fallback "$srv" peer-not-smc $((2 * N * BYTES)) "server ($label)" ;;
	*server) smc_expect_fallback "$cli" peer-not-smc $((2 * N * BYTES)) "client ($label)" ;;
	*)
		smc_expect_payload "$cli" $((2 * N * BYTES)) "client ($label)"
		smc_expect_payload "$srv" $((2 * N * BYTES)) "server ($label)"
		;;
	esac
}

inherited bpf bpf
inherited memfd memfd-client
inherited memfd memfd-server
for how in none prctl syscall; do
	client_against_echo "$how" "$how"
	server_under_filter "$how" "$how"
done

if [ "$(id -u)" = 0 ]; then
	smc_tcpopt_setup seccomp
	server_under_filter none tcpopt-none
	server_under_filter prctl tcpopt-prctl
	server_under_filter syscall tcpopt-syscall
	client_against_echo prctl tcpopt-prctl
	inherited bpf tcpopt-bpf
	inherited memfd tcpopt-memfd-client
else
	smc_log "not root: the TCP option case is left out"
fi
smc_pass
