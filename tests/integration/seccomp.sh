#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#
# A peer that puts itself under a strict seccomp filter (tests/progs/seccomp_peer: kill
# on any call but the few it needs itself) and then makes its connections, as a
# sandboxed daemon does. Under the library it must not be killed for a call of the
# library's own: its new connections stay plain TCP, and its peer, under the library
# too, learns so at once (core/sock/sandbox_entry.c).
#  - a client that loads its filter through prctl() and through syscall(SYS_seccomp),
#    against a preloaded server: every echo intact, the server's connections
#    peer-not-smc with the bytes over TCP;
#  - a server that listens, then loads its filter: the same, seen from the client;
#  - both without a filter (the control): shared memory;
#  - peers that inherit their filter across exec (seccomp_peer exec, as under systemd's
#    SystemCallFilter=), which the library cannot have seen go on: with one that kills
#    on bpf() (the TCP option's map) both still get shared memory through the
#    rendezvous; one that kills on memfd_create keeps its connections on TCP, as client
#    and as server, its peer's stats peer-not-smc.
# With root, every case again after smc_preload.sh --setup (a listener announces SMC in
# its SYN-ACKs until its filter goes on).
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
. "$(dirname -- "$0")/lib.sh"

smc_init
smc_require_built tests/progs/seccomp_peer
PEER=$top_builddir/tests/progs/seccomp_peer
N=4
BYTES=$((256 * 1024))

# pair LABEL OUTCOME SERVER-HOW CLIENT-HOW [SERVER-DENY [CLIENT-DENY]]: a seccomp_peer
# server and client, each loading its own filter HOW (prctl, syscall, none) and, with a
# DENY (bpf, memfd, or - for none), started under an inherited filter that kills on it.
# OUTCOME: shm (both upgrade), server-tcp or client-tcp (that side is sandboxed: the
# other's stats say peer-not-smc; a sandboxed process writes no stats of its own), or
# client-early (CLIENT-HOW HOW-early: the client's first connection, upgraded before its
# filter and half sent, goes back to TCP at the filter and ends intact; the filter
# allows no poll, which an upgraded connection's waits would need).
pair() {
	local label=$1 outcome=$2 srv_how=$3 cli_how=$4 srv_deny=${5:--} cli_deny=${6:--}
	local srv cli name=peer-$1 port out rc
	local -a srv_pre=() cli_pre=() cli_args=("$cli_how")
	[ "${cli_how%-early}" = "$cli_how" ] || cli_args=("${cli_how%-early}" early)
	[ "$srv_deny" = - ] || srv_pre=("$PEER" exec "$srv_deny")
	[ "$cli_deny" = - ] || cli_pre=("$PEER" exec "$cli_deny")
	srv=$(smc_stats_dir "server-$label")
	cli=$(smc_stats_dir "client-$label")
	smc_free_port port
	smc_start_server "$name" "$srv" "${srv_pre[@]}" "$PEER" server "$port" "$N" "$srv_how"
	smc_wait_log "$name" '^LISTENING'
	out=$(smc_run "$cli" "${cli_pre[@]}" "$PEER" client "$port" "$N" "${cli_args[@]}" 2>&1)
	rc=$?
	smc_log "client ($label): $out"
	smc_assert_eq "client ($label): exit status (159: killed by SIGSYS)" "$rc" 0
	smc_wait_server_exit "$name" 20
	smc_assert_eq "server ($label): exit status (159: killed by SIGSYS)" \
		"${SMC_SERVER_RC[$name]}" 0
	case $outcome in
	shm)
		smc_expect_payload "$cli" $((2 * N * BYTES)) "client ($label)"
		smc_expect_payload "$srv" $((2 * N * BYTES)) "server ($label)"
		;;
	client-tcp) smc_expect_fallback "$srv" peer-not-smc $((2 * N * BYTES)) "server ($label)" ;;
	client-early)
		smc_log "stats server ($label): $(smc_stats_summary "$srv")"
		smc_assert_eq "server ($label): the early connection upgraded" \
			"$(smc_stats "$srv" '.connections.shm')" 1
		smc_assert_ge "server ($label): the client took it back to TCP" \
			"$(smc_stats "$srv" '.events.peer_downgrades')" 1
		smc_assert_eq "server ($label): the later ones peer-not-smc" \
			"$(smc_stats "$srv" '.fallback["peer-not-smc"] // 0')" $((N - 1))
		;;
	server-tcp) smc_expect_fallback "$cli" peer-not-smc $((2 * N * BYTES)) "client ($label)" ;;
	esac
}

cases() {
	local p=$1
	pair "${p}control" shm none none
	pair "${p}client-prctl" client-tcp none prctl
	pair "${p}client-syscall" client-tcp none syscall
	pair "${p}client-early" client-early none prctl-early
	pair "${p}server-prctl" server-tcp prctl none
	pair "${p}server-syscall" server-tcp syscall none
	pair "${p}inherited-bpf" shm none none bpf bpf
	pair "${p}inherited-memfd-client" client-tcp none none - memfd
	pair "${p}inherited-memfd-server" server-tcp none none memfd -
}

cases ""
if [ "$(id -u)" = 0 ]; then
	smc_tcpopt_setup seccomp
	cases tcpopt-
else
	smc_log "not root: the TCP option case is left out"
fi
smc_pass
