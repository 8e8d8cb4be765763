#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#
# Upgraded connections that go where the library cannot follow them must go back to
# plain TCP first, losing nothing (tests/progs/handoff.py, handoff_node.js):
#  - mp: a Python server hands each of 4 concurrent clients' connections to a worker
#    process with multiprocessing.reduction.send_handle (SCM_RIGHTS); each client
#    echoes 20 lines of 1000 bytes and must get every byte back, then the end;
#  - node: Node.js hands each connection to a forked child with
#    child.send('socket', sock), which pipes it back (node installed);
#  - stdio: a client writes through fdopen() + fputs() + fflush() (C stdio, whose
#    writes no wrapper sees), and bash's /dev/tcp: `echo ... >&3; read <&3`;
#  - stdio-loop: 12 connections in a row, each upgraded by a first line, then written
#    through a FILE on a dup and fclose()d (libc's own close, unseen) as exim's daemon
#    does: each counted as a downgrade, and the process holds no more eventfds after the
#    last than after the first (4 more per connection before).
# Checked: every client's bytes; where an upgrade is expected, the server's (or the
# stdio client's) stats count the downgrades and the peer's the peer downgrades, with
# no abort (a stdio connection whose handshake still ran at its fdopen() is TCP at once
# instead, reason stdio, and its server waits out no handshake). Before, the first two failed every time (the receiving process read the
# bare TCP socket, and the sender's close ended the rings under it), and the stdio
# writes went past the rings.
# With SMC_TEST_EXPECT=tcp nothing is upgraded and every byte arrives all the same.
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
. "$(dirname -- "$0")/lib.sh"

PROG=$top_srcdir/tests/progs/handoff.py
ECHO=$top_srcdir/tests/progs/exec_listener.py
CLIENTS=4
LINES=20

smc_init
smc_require_cmd python3 bash
export SMC_SHORT_CONN_US=0

# clients LABEL PORT COUNT DIR: COUNT concurrent clients; fails unless each prints OK.
clients() {
	local label=$1 port=$2 count=$3 dir=$4 i pids=() rc=0
	for ((i = 0; i < count; i++)); do
		smc_run "$dir" python3 "$PROG" client "$port" "$LINES" 1000 >"$SMC_TMP/$label-client-$i.out" 2>&1 &
		pids+=($!)
	done
	for i in "${!pids[@]}"; do
		wait "${pids[$i]}" || rc=1
		grep -qx OK "$SMC_TMP/$label-client-$i.out" ||
			smc_fail "$label: client $i: $(cat "$SMC_TMP/$label-client-$i.out")"
	done
	[ "$rc" = 0 ] || smc_fail "$label: a client failed"
}

# expect_handed LABEL SERVER-DIR CLIENT-DIR COUNT: upgraded connections went back to TCP
# on the server's side, and the clients saw it.
expect_handed() {
	local label=$1 sdir=$2 cdir=$3 count=$4
	smc_require_stats "$sdir"
	smc_require_stats "$cdir"
	smc_log "stats $label server: $(smc_stats_summary "$sdir")"
	smc_log "stats $label clients: $(smc_stats_summary "$cdir")"
	smc_assert_eq "$label: client aborts" "$(smc_stats "$cdir" '.events.aborts')" 0
	smc_assert_eq "$label: server aborts" "$(smc_stats "$sdir" '.events.aborts')" 0
	if [ "$SMC_TEST_EXPECT" = shm ]; then
		smc_assert_eq "$label: upgraded client connections" \
			"$(smc_stats "$cdir" '.connections.shm')" "$count"
		smc_assert_ge "$label: server downgrades" "$(smc_stats "$sdir" '.events.downgrades')" "$count"
		smc_assert_eq "$label: client peer downgrades" \
			"$(smc_stats "$cdir" '.events.peer_downgrades')" "$count"
	else
		smc_assert_eq "$label: shm connections" "$(smc_stats "$cdir" '.connections.shm')" 0
	fi
}

smc_log "---- mp: multiprocessing.reduction.send_handle"
smc_free_port port
sdir=$(smc_stats_dir mp-server)
cdir=$(smc_stats_dir mp-clients)
smc_start_server mp "$sdir" python3 "$PROG" mp-server "$port" "$CLIENTS"
smc_wait_port mp "$port"
clients mp "$port" "$CLIENTS" "$cdir"
smc_wait_server_exit mp 30
grep -qx "HANDED $CLIENTS" "$(smc_server_log mp)" || smc_fail "mp: the server did not finish"
expect_handed mp "$sdir" "$cdir" "$CLIENTS"

if command -v node >/dev/null; then
	smc_log "---- node: child.send('socket', sock)"
	smc_free_port port
	sdir=$(smc_stats_dir node-server)
	cdir=$(smc_stats_dir node-clients)
	smc_start_server node "$sdir" node "$top_srcdir/tests/progs/handoff_node.js" "$port" "$CLIENTS"
	smc_wait_port node "$port"
	clients node "$port" "$CLIENTS" "$cdir"
	smc_wait_server_exit node 30
	grep -qx "HANDED $CLIENTS" "$(smc_server_log node)" || smc_fail "node: the server did not finish"
	expect_handed node "$sdir" "$cdir" "$CLIENTS"
else
	smc_log "node not installed: its case skipped"
fi

# listener LABEL: a server serves 10 connections, then passes its listener to a child
# over a unix socket (SCM_RIGHTS) and stops accepting; the child serves 30 more. The
# child's library must take the received listener as its own (its clients found the
# parent's rendezvous name: untracked, each waited out its handshake timeout), and the
# parent's pools must take no more offers (a pooled connection the child accepts was
# never answered).
listener() {
	local label=$1 upgraded=${2:-} sdir cdir out
	smc_free_port port
	sdir=$(smc_stats_dir "$label-server")
	cdir=$(smc_stats_dir "$label-client")
	smc_start_server "$label" "$sdir" python3 "$PROG" listener-server "$port" 10
	smc_wait_port "$label" "$port"
	out=$(smc_run "$cdir" python3 "$PROG" short-clients "$port" 40 2>&1)
	smc_assert_eq "$label: client" "$out" "OK 40"
	smc_wait_server_exit "$label" 30
	grep -qx "SERVED C 30" "$(smc_server_log "$label")" ||
		smc_fail "$label: the child did not serve 30: $(cat "$(smc_server_log "$label")")"
	smc_require_stats "$cdir"
	smc_require_stats "$sdir"
	smc_log "stats $label client: $(smc_stats_summary "$cdir")"
	smc_log "stats $label servers: $(smc_stats_summary "$sdir")"
	smc_assert_eq "$label: client handshakes timed out" \
		"$(smc_stats "$cdir" '.fallback["handshake-failed"] // 0')" 0
	smc_assert_eq "$label: client aborts" "$(smc_stats "$cdir" '.events.aborts')" 0
	smc_assert_eq "$label: server aborts" "$(smc_stats "$sdir" '.events.aborts')" 0
	if [ -n "$upgraded" ] && [ "$SMC_TEST_EXPECT" = shm ]; then
		smc_assert_eq "$label: upgraded client connections" \
			"$(smc_stats "$cdir" '.connections.shm')" "$upgraded"
		smc_assert_eq "$label: upgraded server connections (parent and child)" \
			"$(smc_stats "$sdir" '.connections.shm')" "$upgraded"
	fi
}

smc_log "---- listener passed: every connection with a handshake"
listener listener 41 # the parent's 10 and the child's 31 (with the QUIT)
smc_log "---- listener passed after the client got a pool (default short-connection policy)"
unset SMC_SHORT_CONN_US
listener listener-pool
if [ "$SMC_TEST_EXPECT" = shm ]; then
	# the case is only one if the parent's pool carried connections before the pass
	smc_assert_ge "listener-pool: pooled client connections" \
		"$(smc_stats "$SMC_TMP/stats-listener-pool-client" '.events.shm_pooled')" 1
fi
export SMC_SHORT_CONN_US=0

smc_log "---- stdio: fdopen + fputs, bash /dev/tcp"
smc_free_port port
sdir=$(smc_stats_dir stdio-server)
cdir=$(smc_stats_dir stdio-clients)
smc_start_server stdio "$sdir" python3 "$ECHO" echo "$port" 2
smc_wait_port stdio "$port"
out=$(smc_run "$cdir" python3 "$PROG" stdio-client "$port" 2>&1)
smc_assert_eq "stdio: the echo of a line written with fputs" "$out" "hello-through-stdio"
# shellcheck disable=SC2016 # expanded by the inner bash
out=$(smc_run "$cdir" bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$1"; echo "hello-from-bash" >&3;
	IFS= read -r l <&3; echo "$l"; exec 3>&-' bash "$port" 2>&1)
smc_assert_eq "stdio: bash's echo >&3, read <&3" "$out" "hello-from-bash"
smc_wait_server_exit stdio 30
smc_free_port port
ldir=$(smc_stats_dir stdio-loop-client)
smc_start_server stdio-loop "$(smc_stats_dir stdio-loop-server)" python3 "$ECHO" echo "$port" 12
smc_wait_port stdio-loop "$port"
out=$(smc_run "$ldir" python3 "$PROG" stdio-loop "$port" 12 2>&1)
smc_log "stdio-loop: $out"
read -r first last < <(sed -n 's/^EVENTFDS first=\([0-9]*\) last=\([0-9]*\)$/\1 \2/p' <<<"$out")
[ -n "${last:-}" ] || smc_fail "stdio-loop: no eventfd count: $out"
smc_assert_eq "stdio-loop: eventfds after 12 fclose()d connections (after the first: $first)" \
	"$last" "$first"
smc_wait_server_exit stdio-loop 30
if [ "$SMC_TEST_EXPECT" = shm ]; then
	smc_require_stats "$ldir"
	smc_log "stats stdio-loop client: $(smc_stats_summary "$ldir")"
	# each connection upgraded and went back to TCP at its fdopen(), or ended its
	# handshake there (reason stdio)
	smc_assert_eq "stdio-loop: downgrades and handshakes ended for stdio" \
		"$(smc_stats "$ldir" '.events.downgrades + (.fallback.stdio // 0)')" 12
	smc_assert_ge "stdio-loop: connections upgraded" "$(smc_stats "$ldir" '.connections.shm')" 1
	smc_assert_eq "stdio-loop: client aborts" "$(smc_stats "$ldir" '.events.aborts')" 0
fi
if [ "$SMC_TEST_EXPECT" = shm ]; then
	smc_require_stats "$cdir"
	smc_log "stats stdio clients: $(smc_stats_summary "$cdir")"
	# a connection still negotiating when it becomes a FILE goes TCP at once (its
	# handshake ended, reason stdio); an upgraded one goes back to TCP (a downgrade)
	down=$(smc_stats "$cdir" '.events.downgrades')
	early=$(smc_stats "$cdir" '.fallback.stdio // 0')
	smc_assert_eq "stdio: client downgrades ($down) and handshakes ended for stdio ($early)" \
		"$((down + early))" 2
	smc_assert_eq "stdio: client aborts" "$(smc_stats "$cdir" '.events.aborts')" 0
	smc_require_stats "$sdir"
	smc_assert_eq "stdio: server peer downgrades" \
		"$(smc_stats "$sdir" '.events.peer_downgrades')" "$down"
	smc_assert_eq "stdio: server handshakes timed out" \
		"$(smc_stats "$sdir" '.fallback["handshake-failed"] // 0')" 0
fi
smc_pass
