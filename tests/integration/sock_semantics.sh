#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#
# Socket semantics of an upgraded connection that the rings alone would not give
# (tests/progs/sem_check: a client and its forked server, a greeting each way first, so
# that the connection is upgraded before each scenario): SO_RCVLOWAT (set on the
# connection, before connect, on the listener), the error after a reset (reported once,
# then EOF and EPIPE/SIGPIPE), SIOCOUTQ/SIOCOUTQNSD/FIONREAD, urgent data
# (MSG_OOB; SIOCATMARK before the mark),
# signal-driven I/O (O_ASYNC by fcntl or FIOASYNC), a reader cancelled in recv(),
# MSG_TRUNC, MSG_ERRQUEUE, MSG_PEEK|MSG_WAITALL (also ended by SO_RCVTIMEO), a send
# after the peer's close (the first succeeds, as TCP's does, then the peer's reset shows:
# POLLERR, SO_ERROR EPIPE), connect(AF_UNSPEC) and a new connect() on the socket, a
# connection reset before the server accepted it (ECONNRESET, no SIGPIPE), sendfile from a socket, splice's SPLICE_F_NONBLOCK,
# SO_ZEROCOPY/MSG_ZEROCOPY, when poll() says POLLOUT (a third of the buffer free, as
# tcp_poll: a program that polls and then writes blocking must not block), a second
# thread's nonblocking call or FIONREAD/SIOCOUTQ beside a thread blocked in recv or
# send (answered at once), a signal with SA_RESTART after part of a MSG_WAITALL recv
# (returns that part).
# Each scenario first runs plain (the reference: what Linux does), then under the
# library. Where the library cannot honour the feature the connection goes back to TCP
# (SO_RCVLOWAT > 1, MSG_OOB, O_ASYNC, SO_ZEROCOPY): the stats count one downgrade and one peer downgrade, and
# the debug log names the reason (sockopt); a socket that set SO_RCVLOWAT before
# connect() falls back with reason sockopt. The other scenarios stay upgraded.
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
. "$(dirname -- "$0")/lib.sh"

CHECK=$top_builddir/tests/progs/sem_check
smc_require_built "$CHECK"
smc_init
export SMC_SHORT_CONN_US=0 # the full handshake for each connection, no pool

# run SCENARIO DOWNGRADES [SHM_BYTES]: the program plain, then preloaded; DOWNGRADES
# connections the library must take back to TCP for sockopt, at least SHM_BYTES (the
# greetings: 4) over shared memory before (shm mode)
run() {
	local sc=$1 down=$2 min=${3:-4} dir n
	timeout -k 5 "$SMC_CMD_TIMEOUT" "$CHECK" "$sc" >"$SMC_TMP/$sc.plain" 2>&1 ||
		smc_fail "$sc without the library: $(grep -v '^ok' "$SMC_TMP/$sc.plain")"
	dir=$(smc_stats_dir "$sc")
	SMC_LOG_LEVEL=debug SMC_LOG_FILE="$SMC_TMP/$sc.%p.smclog" \
		smc_run "$dir" "$CHECK" "$sc" >"$SMC_TMP/$sc.out" 2>&1 ||
		smc_fail "$sc under the library: $(grep -v '^ok' "$SMC_TMP/$sc.out")"
	smc_log "$sc: $(grep -c '^ok' "$SMC_TMP/$sc.out") checks ok; stats $(smc_stats_summary "$dir")"
	smc_require_stats "$dir"
	[ "$SMC_TEST_EXPECT" = shm ] || {
		smc_assert_eq "$sc: shm connections in pass-through mode" \
			"$(smc_stats "$dir" '.connections.shm')" 0
		return
	}
	if [ "$sc" = reset_unaccepted ]; then
		# never accepted, so never upgraded: the reset must reach the program as
		# TCP's (the handshake's own read of the socket took it from the kernel)
		smc_assert_eq "$sc: shm connections" "$(smc_stats "$dir" '.connections.shm')" 0
		return
	fi
	if [ "$sc" = rcvlowat_pre ]; then
		smc_assert_eq "$sc: fallbacks for sockopt" \
			"$(smc_stats "$dir" '.fallback.sockopt // 0')" 1
		smc_assert_eq "$sc: shm connections" "$(smc_stats "$dir" '.connections.shm')" 0
		return
	fi
	smc_assert_eq "$sc: shm connections (both ends upgraded first)" \
		"$(smc_stats "$dir" '.connections.shm')" 2
	smc_assert_ge "$sc: greeting bytes over shm" \
		"$(smc_stats "$dir" '.bytes.shm.sent + .bytes.shm.received')" "$min"
	smc_assert_eq "$sc: downgrades" "$(smc_stats "$dir" '.events.downgrades // 0')" "$down"
	smc_assert_eq "$sc: peer downgrades" "$(smc_stats "$dir" '.events.peer_downgrades // 0')" "$down"
	# shellcheck disable=SC2086 # our own file names
	n=$(cat "$SMC_TMP/$sc".*.smclog 2>/dev/null | grep -c 'plain TCP (sockopt)')
	smc_assert_eq "$sc: downgrades logged with reason sockopt" "$n" "$down"
}

run rcvlowat 1
run rcvlowat_pre 0
# the accepted end goes back to TCP in accept(): only the client's greeting on shm
run rcvlowat_listener 1 2
run soerror 0
run reset_recv 0
run outq 0
run oob 1
run oob_recv 1
# signal-driven I/O: the kernel's socket signals, so the connection goes back to TCP
run async 1
run async_ioctl 1
# a thread cancelled while blocked in recv() leaves the connection usable
run cancel 0
# calls TCP serves from the stream in its own way
run trunc 0
run errqueue 0
run peek_waitall 0
run peek_timeout 0
run write_after_close 0
# connect(AF_UNSPEC): back to TCP first (the kernel dissolves the socket's connection)
run unspec 1
run reset_unaccepted 0
run sendfile_sock 0
run splice_nb 0
# MSG_ZEROCOPY's completions come from the kernel's socket: back to TCP
run zerocopy 1
# POLLOUT only with a third of the ring free (socat relays through stunnel stalled)
run pollout 0
# a blocked reader or writer sleeps without holding up the socket's other threads
run second_reader 0
run second_writer 0
run restart_partial 0
smc_pass
