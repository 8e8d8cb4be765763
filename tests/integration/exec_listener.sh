#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#
# Listeners handed to a new program by exec, and a client that execs right after a
# nonblocking connect() (tests/progs/exec_listener.py), first over the same-host
# rendezvous, then (root, eBPF) with the SMC TCP option set up under a map directory of
# the test's own:
#  - reexec: a preloaded server listens, then execs itself with the listener as fd 3
#    (LISTEN_FDS style); the new image serves 3 clients under the library: all three
#    are upgraded (the new image tracks the inherited listener; before, the first client
#    waited its handshake timeout and ran TCP, counted as handshake-failed);
#  - activate: systemd-socket-activate under the library (its log in SMC_LOG_FILE,
#    whose descriptor must not take the fd 3 it gives the listener) execs the
#    preloaded server at the first connection: all upgraded; activate-plain: the same
#    with systemd-socket-activate not preloaded: the first client, which connects
#    before any process of the library holds the listener, is plain TCP
#    (peer-not-smc), the others are upgraded over the rendezvous (with the option set
#    up, all plain TCP: that listener was not opted in when it started listening);
#  - short-own / short-exec: 12 short connections in a row; a listener of the serving
#    image serves the client a pool (pooled connections, the control), one inherited
#    across exec serves none (no pooled connection, every answer right): a process
#    without the library may accept on it too, and would read a pooled client's bytes;
#  - nopreload: the server execs itself without LD_PRELOAD: every connection is plain
#    TCP and every byte arrives; with the option set up the clients' fallback reason is
#    peer-not-smc and none is aborted (the listener is withdrawn from the option before
#    the exec: before, its SYN-ACKs still answered it and the program without the library
#    read the clients' Proposals as data);
#  - fork-exec: the server forks, the child execs a program without the library on the
#    listener and both accept on it: every answer right, no abort, all plain TCP,
#    peer-not-smc: the child withdrew the listener from the option, and on the
#    rendezvous shut its name down, which the parent shares (before, a client that the
#    child accepted waited out its handshake timeout: handshake-failed);
#  - exec-fail (option set up): the server's exec of a program that does not exist
#    fails (ENOENT) and it serves the clients itself: all upgraded (the withdrawal is
#    undone);
#  - connect-exec: 20 clients each exec /bin/sh on a socket whose nonblocking connect()
#    was just made; sh writes a line and reads its echo back from a preloaded echo
#    server: every line comes back, no abort, no handshake waits out its timeout. With
#    the option the server counts 20 upgraded connections and 20 peer downgrades (the
#    Proposal is on the stream: the handshake runs its course; before, 1 in 8 was reset:
#    the client's Confirm left after the connection turned active, and the exec closed
#    its rendezvous socket first); on the rendezvous the exec ends the handshake, so a
#    connection is TCP, or upgraded and downgraded where the handshake won the race.
# With SMC_TEST_EXPECT=tcp nothing is upgraded and every byte arrives all the same.
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
. "$(dirname -- "$0")/lib.sh"

PROG=$top_srcdir/tests/progs/exec_listener.py
N=3
CONNECT_EXECS=20

smc_init
smc_require_cmd python3
export SMC_SHORT_CONN_US=0 # every connection is upgraded with a full handshake
PRELOAD=${SMC_TEST_PRELOAD_FIRST:+$SMC_TEST_PRELOAD_FIRST:}$SMC_PRELOAD_LIB

# expect_all DIR COUNT LABEL: COUNT connections in DIR in the expected mode, none other,
# and no abort.
expect_all() {
	local dir=$1 count=$2 label=$3 other=tcp
	[ "$SMC_TEST_EXPECT" = tcp ] && other=shm
	smc_require_stats "$dir"
	smc_log "stats $label: $(smc_stats_summary "$dir")"
	smc_assert_eq "$label: $SMC_TEST_EXPECT connections" \
		"$(smc_stats "$dir" ".connections.$SMC_TEST_EXPECT")" "$count"
	smc_assert_eq "$label: $other connections" "$(smc_stats "$dir" ".connections.$other")" 0
	smc_assert_eq "$label: aborts" "$(smc_stats "$dir" '.events.aborts')" 0
}

# expect_first_tcp DIR LABEL: the first of the N connections plain TCP (peer-not-smc),
# the others upgraded, no abort.
expect_first_tcp() {
	local dir=$1 label=$2
	smc_require_stats "$dir"
	smc_log "stats $label: $(smc_stats_summary "$dir")"
	smc_assert_eq "$label: shm connections" "$(smc_stats "$dir" '.connections.shm')" "$((N - 1))"
	smc_assert_eq "$label: the first one, peer-not-smc" \
		"$(smc_stats "$dir" '.fallback["peer-not-smc"] // 0')" 1
	smc_assert_eq "$label: aborts" "$(smc_stats "$dir" '.events.aborts')" 0
}

# serve_and_check LABEL SERVER-STATSDIR-OR-DASH EXPECT_SERVER SERVER-CMD...: starts the
# server, runs the client (N connections), waits for the server to serve them and exit.
# With WAIT_SERVING set the client starts once the serving image says so: a server that
# execs (or tries to) withdraws its listener from the TCP option for that time, and a
# client that connected then would stay TCP (or, before a program without the library,
# be answered with the option before the exec: docs/design.md).
serve_and_check() {
	local label=$1 sdir=$2 cdir out
	shift 2
	smc_free_port port
	cdir=$(smc_stats_dir "client-$label")
	# the port goes where the command says @PORT@
	smc_start_server "$label" "$sdir" "${@//@PORT@/$port}"
	smc_wait_port "$label" "$port"
	[ -z "${WAIT_SERVING:-}" ] || smc_wait_log "$label" '^SERVING$'
	out=$(smc_run "$cdir" python3 "$PROG" client "$port" "$N") ||
		smc_fail "$label: client failed: $out"
	smc_assert_eq "$label: client" "$out" "CLIENT OK"
	smc_wait_server_exit "$label" 30
	grep -qx "SERVED $N" "$(smc_server_log "$label")" ||
		smc_fail "$label: the server did not serve $N connections"
	client_dir=$cdir
}

# short_case LABEL ROLE WHAT: N connections in a row to exec_listener.py ROLE; the
# client's stats in client_dir, checked to be there.
short_case() {
	smc_log "---- $path: short connections, $3"
	serve_and_check "short-$1-$path" "$(smc_stats_dir "server-short-$1-$path")" \
		python3 "$PROG" "$2" @PORT@ "$N"
	smc_require_stats "$client_dir"
	smc_log "stats short-$1-$path client: $(smc_stats_summary "$client_dir")"
}

run_cases() { # run_cases PATH-LABEL
	local path=$1 sdir
	smc_log "---- $path: reexec"
	sdir=$(smc_stats_dir "server-reexec-$path")
	WAIT_SERVING=1 serve_and_check "reexec-$path" "$sdir" python3 "$PROG" listen-exec @PORT@ "$N"
	expect_all "$client_dir" "$N" "reexec-$path client"
	expect_all "$sdir" "$N" "reexec-$path server"

	if [ "$path" = tcpopt ]; then
		smc_log "---- $path: exec-fail (the exec fails, the server serves itself)"
		sdir=$(smc_stats_dir "server-exec-fail-$path")
		WAIT_SERVING=1 serve_and_check "exec-fail-$path" "$sdir" \
			python3 "$PROG" listen-exec-fail @PORT@ "$N"
		grep -qx "EXEC FAILED" "$(smc_server_log "exec-fail-$path")" ||
			smc_fail "exec-fail-$path: the exec did not fail"
		expect_all "$client_dir" "$N" "exec-fail-$path client"
		expect_all "$sdir" "$N" "exec-fail-$path server"
	fi

	if [ "$SMC_TEST_EXPECT" = shm ]; then
		# Short connections: after 4 a client asks the listener's process for a pool.
		# One that listens itself serves it; one that got its listener by exec does
		# not (who else accepts on it is not known), and they stay TCP (short-lived).
		local n_saved=$N
		N=$((4 * N))
		export SMC_SHORT_CONN_US=1000000 # each of them counts as short
		short_case own listen-serve "listener of this image (control)"
		smc_assert_ge "short-own-$path client: pooled connections" \
			"$(smc_stats "$client_dir" '.events.shm_pooled')" 1
		short_case exec listen-exec "listener inherited across exec"
		smc_assert_eq "short-exec-$path client: pooled connections" \
			"$(smc_stats "$client_dir" '.events.shm_pooled')" 0
		smc_assert_eq "short-exec-$path client: aborts" \
			"$(smc_stats "$client_dir" '.events.aborts')" 0
		export SMC_SHORT_CONN_US=0
		N=$n_saved
	fi

	if command -v systemd-socket-activate >/dev/null; then
		smc_log "---- $path: activate (systemd-socket-activate under the library)"
		sdir=$(smc_stats_dir "server-activate-$path")
		serve_and_check "activate-$path" "$sdir" env SMC_LOG_LEVEL=debug \
			"SMC_LOG_FILE=$SMC_TMP/activate-$path.%p.smclog" \
			systemd-socket-activate -l 127.0.0.1:@PORT@ -E LD_PRELOAD -E SMC_STATS_FILE \
			-E SMC_SHORT_CONN_US -E SMC_BPF_DIR -E SMC_TRANSPORT \
			python3 "$PROG" serve "$N"
		expect_all "$client_dir" "$N" "activate-$path client"
		expect_all "$sdir" "$N" "activate-$path server"

		smc_log "---- $path: activate-plain (systemd-socket-activate without the library)"
		sdir=$(smc_stats_dir "server-activate-plain-$path")
		serve_and_check "activate-plain-$path" - systemd-socket-activate \
			-l 127.0.0.1:@PORT@ -E "LD_PRELOAD=$PRELOAD" -E "SMC_STATS_FILE=$sdir/%p.json" \
			-E SMC_SHORT_CONN_US -E SMC_BPF_DIR -E SMC_TRANSPORT -E ASAN_OPTIONS \
			python3 "$PROG" serve "$N"
		# the first client connects before any process of the library holds the
		# listener: plain TCP (peer-not-smc), the others are upgraded over the
		# rendezvous; with the option set up, a listener that was not opted in when
		# it started listening answers without it: all plain TCP (peer-not-smc)
		if [ "$SMC_TEST_EXPECT" = shm ] && [ "$path" = tcpopt ]; then
			smc_expect_fallback "$client_dir" peer-not-smc "$((N * 2))" "activate-plain-$path client"
			smc_assert_eq "activate-plain-$path client: tcp connections" \
				"$(smc_stats "$client_dir" '.connections.tcp')" "$N"
		elif [ "$SMC_TEST_EXPECT" = shm ]; then
			expect_first_tcp "$client_dir" "activate-plain-$path client"
			expect_first_tcp "$sdir" "activate-plain-$path server"
		else
			expect_all "$client_dir" "$N" "activate-plain-$path client"
		fi
	else
		smc_log "systemd-socket-activate not installed: its cases skipped"
	fi

	# The listener a program without the library gets: with the option set up it was
	# withdrawn before the exec, and its clients take the missing option for a server
	# without SMC. The client checks every byte of each answer.
	smc_log "---- $path: nopreload (the server execs a program without the library)"
	WAIT_SERVING=1 serve_and_check "nopreload-$path" \
		"$(smc_stats_dir "server-nopreload-$path")" \
		python3 "$PROG" listen-exec @PORT@ "$N" nopreload
	smc_require_stats "$client_dir"
	smc_log "stats nopreload-$path client: $(smc_stats_summary "$client_dir")"
	smc_assert_eq "nopreload-$path client: tcp connections" \
		"$(smc_stats "$client_dir" '.connections.tcp')" "$N"
	smc_assert_eq "nopreload-$path client: aborts" \
		"$(smc_stats "$client_dir" '.events.aborts')" 0
	if [ "$path" = tcpopt ] && [ "$SMC_TEST_EXPECT" = shm ]; then
		smc_expect_fallback "$client_dir" peer-not-smc "$N" "nopreload-$path client"
		smc_assert_eq "nopreload-$path client: peer-not-smc" \
			"$(smc_stats "$client_dir" '.fallback["peer-not-smc"] // 0')" "$N"
	fi

	smc_log "---- $path: fork-exec (a child execs a program without the library, both accept)"
	local fdir i out
	smc_free_port port
	fdir=$(smc_stats_dir "client-fork-exec-$path")
	smc_start_server "fork-exec-$path" "$(smc_stats_dir "server-fork-exec-$path")" \
		python3 "$PROG" fork-exec "$port"
	smc_wait_port "fork-exec-$path" "$port"
	# parent and child say SERVING: the child's new image once it runs (its old one
	# withdrew the listener before the exec)
	for ((i = 0; i < 200; i++)); do
		[ "$(grep -c '^SERVING$' "$(smc_server_log "fork-exec-$path")")" -ge 2 ] && break
		sleep 0.1
	done
	[ "$i" -lt 200 ] || smc_fail "fork-exec-$path: the child's new image did not start"
	out=$(smc_run "$fdir" python3 "$PROG" client "$port" "$((2 * N))") ||
		smc_fail "fork-exec-$path: client failed: $out"
	smc_assert_eq "fork-exec-$path: client" "$out" "CLIENT OK"
	# both serve for ever: the whole group is told to stop
	kill -TERM -- "-${SMC_SERVER_PID[fork-exec-$path]}" 2>/dev/null
	smc_stop_server "fork-exec-$path"
	smc_require_stats "$fdir"
	smc_log "stats fork-exec-$path client: $(smc_stats_summary "$fdir")"
	smc_assert_eq "fork-exec-$path client: aborts" "$(smc_stats "$fdir" '.events.aborts')" 0
	if [ "$SMC_TEST_EXPECT" = shm ]; then
		smc_expect_fallback "$fdir" peer-not-smc "$((2 * N))" "fork-exec-$path client"
		smc_assert_eq "fork-exec-$path client: peer-not-smc" \
			"$(smc_stats "$fdir" '.fallback["peer-not-smc"] // 0')" "$((2 * N))"
	fi

	smc_log "---- $path: connect-exec ($CONNECT_EXECS clients exec right after connect)"
	local edir cdir i out
	smc_free_port port
	edir=$(smc_stats_dir "echo-$path")
	cdir=$(smc_stats_dir "connect-exec-$path")
	smc_start_server "echo-$path" "$edir" python3 "$PROG" echo "$port" "$CONNECT_EXECS"
	smc_wait_port "echo-$path" "$port"
	for ((i = 0; i < CONNECT_EXECS; i++)); do
		out=$(smc_run "$cdir" python3 "$PROG" connect-exec "$port" 2>&1)
		smc_assert_eq "connect-exec-$path $i: what sh read back" "$out" "hello-from-sh"
	done
	smc_wait_server_exit "echo-$path" 30
	grep -qx "ECHOED $CONNECT_EXECS" "$(smc_server_log "echo-$path")" ||
		smc_fail "connect-exec-$path: the echo server did not finish"
	if [ "$path" = tcpopt ] || [ "$SMC_TEST_EXPECT" = tcp ]; then
		expect_all "$edir" "$CONNECT_EXECS" "connect-exec-$path echo server"
	fi
	if [ "$path" = tcpopt ] && [ "$SMC_TEST_EXPECT" = shm ]; then
		smc_assert_eq "connect-exec-$path echo server: peer downgrades" \
			"$(smc_stats "$edir" '.events.peer_downgrades')" "$CONNECT_EXECS"
	elif [ "$SMC_TEST_EXPECT" = shm ]; then
		# On the rendezvous the client's library ends the handshake at the exec
		# (the connection would go back to TCP right after): a connection is TCP,
		# told by a Decline or the closed name, or, where the handshake won the
		# race, upgraded and then downgraded. None waits out its handshake.
		local shm tcp
		smc_require_stats "$edir"
		smc_log "stats connect-exec-$path echo server: $(smc_stats_summary "$edir")"
		shm=$(smc_stats "$edir" '.connections.shm')
		tcp=$(smc_stats "$edir" '.connections.tcp')
		smc_assert_eq "connect-exec-$path echo server: connections" \
			"$((shm + tcp))" "$CONNECT_EXECS"
		smc_assert_eq "connect-exec-$path echo server: peer downgrades" \
			"$(smc_stats "$edir" '.events.peer_downgrades')" "$shm"
		smc_assert_eq "connect-exec-$path echo server: handshakes timed out" \
			"$(smc_stats "$edir" '.fallback["handshake-failed"] // 0')" 0
		smc_assert_eq "connect-exec-$path echo server: aborts" \
			"$(smc_stats "$edir" '.events.aborts')" 0
	fi
}

# no eBPF map, even where the host (its boot unit, a concurrent test) has the TCP option
# set up: the map is pinned under SMC_RDV_DIR too
export SMC_BPF_DIR=/sys/fs/bpf/smc-exec-listener-none-$$ SMC_RDV_DIR=$SMC_TMP/no-rdv-dir
run_cases rendezvous
unset SMC_RDV_DIR

if [ "$(id -u)" != 0 ]; then
	smc_log "not root: the TCP option cases skipped"
	smc_pass
fi
BPF_OBJ=${SMC_BPF_OBJ:-$top_builddir/bpf/smc_tcpopt.bpf.o}
export SMC_BPF_DIR=/sys/fs/bpf/smc-exec-listener-$$
if [ ! -f "$BPF_OBJ" ] || ! out=$(SMC_BPF_OBJ=$BPF_OBJ "$SMC_WRAPPER" --setup 2>&1); then
	smc_log "eBPF setup not possible here (${out:-$BPF_OBJ not built}): the TCP option cases skipped"
	smc_pass
fi
teardown() { SMC_BPF_OBJ=$BPF_OBJ "$SMC_WRAPPER" --teardown >/dev/null 2>&1; }
# lib.sh's cleanup reads the exit status first: keep it for it
trap '_rc=$?; teardown; (exit $_rc); _smc_cleanup' EXIT
run_cases tcpopt
smc_pass
