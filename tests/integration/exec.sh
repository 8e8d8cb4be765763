#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#
# An upgraded connection handed to a new program image by exec. Before the exec the
# library must take every connection whose fd survives it back to plain TCP without
# losing a byte: the new image (under the library or not) reads and writes the kernel
# socket, the peer first drains its ring, and what it wrote that the exec'ing side had
# not read yet reaches the new image over TCP.
#
# exec_midstream (tests/progs): server and client stream 8 MiB each way, every byte
# checked against its offset. The exec'ing side has read 100 KiB and written 300 KiB,
# its peer has left most of those 300 KiB unread in its ring and filled the exec'ing
# side's ring, then the exec happens: execv with the environment (new image
# preloaded), execve without LD_PRELOAD, execve with an empty environment, fexecve,
# posix_spawn and system() (the parent's copy closed, or kept while it waits), fork
# then exec in the child, fork with the child going on (no exec); the server exec'ing
# and the client exec'ing; with small rings too. A run with no exec
# is the control. Checked: every byte both ways, both exit 0; the new image got no
# descriptor or mapping of the old image's library, only the connection; the peer's
# stats show the connection upgraded, payload over shm before the downgrade and over
# TCP after it, events.peer_downgrades >= 1, the whole stream received; where the
# image that ends the exec'ing process is not under the library (no LD_PRELOAD, empty
# environment) or is another process (posix_spawn, system), that side's stats show
# events.downgrades >= 1; the peer holds no ring after the close; no process is left.
#
# socat under the library with a client under the library sending a 2 MiB random file
# and reading the echo (sha256): EXEC:cat (socat forks, relays through a socketpair,
# and the TCP socket does not reach cat: the connection stays on shm, nothing is
# downgraded), EXEC:cat,nofork (socat execs cat with the socket as its stdin and
# stdout) and EXEC:'env -u LD_PRELOAD cat',nofork (the new image is not preloaded);
# popen: Python's subprocess.Popen(["cat"], stdin=conn, stdout=conn) echoes 2 MiB (its
# child close_range()s every descriptor above 2 before the exec).
# resend-exit: 12 MiB left in the ring at the exec of a slow reader, the writer exits
# right after: its exit finishes the re-send.
#
# With SMC_TEST_EXPECT=tcp nothing is upgraded, nothing is downgraded, and every byte
# must still arrive.
# EXEC_BYTES (default 8m) sets the stream size each way; EXEC_CASES (labels separated by
# blanks: control, server-keep, ..., socat-fork, socat-nofork, socat-nofork-plain,
# ncat-exec, popen, resend-exit) runs only those cases.
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
# tests/rdma/exec.sh runs this over SMC-R in the VM, with lib.sh already sourced
declare -F smc_init >/dev/null || . "$(dirname -- "${BASH_SOURCE[0]}")/lib.sh"
# where upgraded payload goes: shared memory, or RDMA under SMC_TRANSPORT=ib
DATA=shm
[ "${SMC_TRANSPORT:-}" = ib ] && DATA=ib

: "${SMC_EXEC_MIDSTREAM:=$top_builddir/tests/progs/exec_midstream}"
EXEC_BYTES=${EXEC_BYTES:-8m}
# One case: the programs' own timeout, and timeout(1) around each process beyond it.
CASE_TIMEOUT=60

smc_init
smc_require_cmd socat pgrep
# each case runs one command line again and again as one-shot clients, every connection
# of which must be upgraded: no history of short first connections (hs_history.h)
export SMC_SHORT_CONN_US=0
smc_require_built "$SMC_EXEC_MIDSTREAM"
n=$(smc_bytes_of "$EXEC_BYTES")

# expect_payload DIR MIN [LABEL]: the payload went over $DATA.
expect_payload() {
	if [ "$DATA" = ib ]; then
		ib_expect_payload "$@"
	else
		smc_expect_payload "$@"
	fi
}

# want LABEL: whether EXEC_CASES selects the case.
want() {
	[ -z "${EXEC_CASES:-}" ] || [[ " $EXEC_CASES " == *" $1 "* ]]
}

# No exec_midstream or socat of this test may outlive its case.
nothing_left() { # nothing_left WHAT
	local left
	left=$(pgrep -a -f -- "$SMC_EXEC_MIDSTREAM|socat .*:$port" || true)
	[ -z "$left" ] || smc_fail "$1: processes left behind: $left"
}

# peer_after_downgrade WHAT DIR [SHM-BEFORE]: the stats of the peer of a connection that
# the other side took to TCP before an exec. shm mode: upgraded, payload over TCP after
# the downgrade, the downgrade counted, nothing fell back, and unless SHM-BEFORE is 0
# some payload over shm before it (a program that execs right after accept() may have
# had none). tcp mode: plain TCP, nothing downgraded.
peer_after_downgrade() {
	local what=$1 dir=$2 shm_before=${3:-1}
	smc_require_stats "$dir"
	smc_log "stats $what: $(smc_stats_summary "$dir") peer_downgrades=$(smc_stats "$dir" '.events.peer_downgrades // 0')"
	if [ "$SMC_TEST_EXPECT" = tcp ]; then
		smc_assert_ge "$what: tcp connections" "$(smc_stats "$dir" '.connections.tcp')" 1
		smc_assert_eq "$what: $DATA connections" "$(smc_stats "$dir" ".connections.$DATA")" 0
		smc_assert_eq "$what: peer downgrades" "$(smc_stats "$dir" '.events.peer_downgrades // 0')" 0
		return
	fi
	smc_assert_ge "$what: connections upgraded" "$(smc_stats "$dir" ".connections.$DATA")" 1
	smc_assert_eq "$what: connections that fell back" "$(smc_stats "$dir" '.connections.tcp')" 0
	smc_assert_ge "$what: events.peer_downgrades" \
		"$(smc_stats "$dir" '.events.peer_downgrades // 0')" 1
	smc_assert_ge "$what: payload over $DATA before the downgrade" \
		"$(smc_stats "$dir" ".bytes.$DATA.sent + .bytes.$DATA.received")" "$shm_before"
	smc_assert_ge "$what: payload over tcp after the downgrade" \
		"$(smc_stats "$dir" '.bytes.tcp.sent + .bytes.tcp.received')" 1
}

# carried MODE: the exec'ing side's connection goes into a new image under the library
# on its rings (core/sock/exec_carry.c): shared memory only (an RDMA connection's QP
# stays with the old image), and only where its region can be reopened (root here).
carried() {
	[ "$DATA" = shm ] && [ "$SMC_TEST_EXPECT" = shm ] && [ "$(id -u)" = 0 ] &&
		case $1 in keep | fexecve | fork-exec) true ;; *) false ;; esac
}

# midstream LABEL EXEC-SIDE MODE [OPTIONS...]: one exec_midstream connection, the side
# EXEC-SIDE (server or client) exec'ing in MODE.
midstream() {
	local label=$1 side=$2 mode=$3 srv cli sargs cargs out rc peer pdir edir rx
	shift 3
	want "$label" || return 0
	srv=$(smc_stats_dir "server-$label")
	cli=$(smc_stats_dir "client-$label")
	sargs=(--bytes "$n" --timeout "$CASE_TIMEOUT" "$@")
	cargs=(--bytes "$n" --timeout "$CASE_TIMEOUT" "$@")
	if [ "$side" = server ]; then
		sargs+=(--exec "$mode")
		peer=client pdir=$cli edir=$srv
	else
		cargs+=(--exec "$mode")
		peer=server pdir=$srv edir=$cli
	fi
	smc_free_port port
	if [ "$mode" = none ]; then
		smc_log "midstream $label: no exec, $EXEC_BYTES each way"
	else
		smc_log "midstream $label: the $side execs ($mode), $EXEC_BYTES each way"
	fi
	smc_start_server "server-$label" "$srv" timeout -k 5 $((CASE_TIMEOUT + 10)) \
		"$SMC_EXEC_MIDSTREAM" server "$port" "${sargs[@]}"
	smc_wait_port "server-$label" "$port"
	out=$SMC_TMP/client-$label.log
	SMC_CMD_TIMEOUT=$((CASE_TIMEOUT + 10)) smc_run "$cli" "$SMC_EXEC_MIDSTREAM" client "$port" \
		"${cargs[@]}" >"$out" 2>&1
	rc=$?
	smc_wait_server_exit "server-$label" $((CASE_TIMEOUT + 20))
	cat "$out" "$(smc_server_log "server-$label")"
	nothing_left "midstream $label"
	smc_assert_eq "midstream $label: client exit status" "$rc" 0
	smc_assert_eq "midstream $label: server exit status" "${SMC_SERVER_RC[server-$label]}" 0
	for rx in server client; do
		grep -q "^OK $rx pid=[0-9]* sent=$n received=$n\$" "$out" \
			"$(smc_server_log "server-$label")" ||
			smc_fail "midstream $label: the $rx did not report $n bytes each way"
	done
	if [ "$mode" != none ]; then
		grep -q "^EXEC $side " "$out" "$(smc_server_log "server-$label")" ||
			smc_fail "midstream $label: the $side did not exec"
	fi
	if carried "$mode"; then
		# the connection itself: its socket, its four doorbells and its ring mapping
		grep -Eq "^CONTINUE $side pid=[0-9]+ preloaded=yes sockets=1 eventfds=4 memfds=0 memfd_maps=1\$" \
			"$out" "$(smc_server_log "server-$label")" ||
			smc_fail "midstream $label: the new image did not get the connection's rings alone (CONTINUE line above)"
	elif [ "$mode" != none ] && [ "$mode" != fork ]; then
		grep -Eq "^CONTINUE $side pid=[0-9]+ preloaded=(yes|no) sockets=1 eventfds=0 memfds=0 memfd_maps=0\$" \
			"$out" "$(smc_server_log "server-$label")" ||
			smc_fail "midstream $label: the new image got more than the connection across the exec (CONTINUE line above)"
	fi
	if [ "$SMC_TEST_EXPECT" = shm ]; then
		grep -q "^RESOURCES $peer pid=[0-9]* memfds=0 memfd_maps=0\$" "$out" \
			"$(smc_server_log "server-$label")" ||
			smc_fail "midstream $label: the $peer holds rings after its connection closed"
	fi
	# a forked child goes on on the shared ring, a new image under the library on the
	# rings it was handed: nothing to downgrade, every byte over shared memory (the
	# exec'ing process's counts span its images)
	if [ "$mode" = none ] || { [ "$mode" = fork ] && [ "$DATA" = shm ]; } || carried "$mode"; then
		expect_payload "$srv" $((2 * n)) "server ($label)"
		expect_payload "$cli" $((2 * n)) "client ($label)"
		for d in "$srv" "$cli"; do
			smc_assert_eq "$label: downgrades" \
				"$(smc_stats "$d" '(.events.downgrades // 0) + (.events.peer_downgrades // 0)')" 0
		done
		if carried "$mode"; then
			smc_assert_eq "$side ($label): events.exec_carried" \
				"$(smc_stats "$edir" '.events.exec_carried // 0')" 1
			smc_assert_eq "$side ($label): connections upgraded" \
				"$(smc_stats "$edir" ".connections.$DATA")" 1
		fi
		return
	fi
	peer_after_downgrade "$peer ($label)" "$pdir"
	smc_assert_eq "$peer ($label): bytes received ($DATA + tcp)" \
		"$(smc_stats "$pdir" ".bytes.$DATA.received + .bytes.tcp.received")" "$n"
	smc_assert_ge "$peer ($label): bytes sent ($DATA + tcp)" \
		"$(smc_stats "$pdir" ".bytes.$DATA.sent + .bytes.tcp.sent")" "$n"
	# The exec'ing process's stats are written just before the exec; a new image under
	# the library with the same pid writes the same file again at its exit.
	case $mode in
	nopreload | empty | spawn | system)
		if [ "$SMC_TEST_EXPECT" = shm ]; then
			smc_require_stats "$edir"
			smc_log "stats $side ($label): $(smc_stats_summary "$edir") downgrades=$(smc_stats "$edir" '.events.downgrades // 0')"
			smc_assert_ge "$side ($label): events.downgrades" \
				"$(smc_stats "$edir" '.events.downgrades // 0')" 1
			smc_assert_ge "$side ($label): connections upgraded" \
				"$(smc_stats "$edir" ".connections.$DATA")" 1
		elif [ -n "$(find "$edir" -maxdepth 1 -name '*.json')" ]; then
			smc_assert_eq "$side ($label): events.downgrades" \
				"$(smc_stats "$edir" '.events.downgrades // 0')" 0
		fi
		;;
	esac
}

midstream control server none
midstream server-keep server keep
midstream server-nopreload server nopreload
midstream server-empty server empty
midstream server-fexecve server fexecve
midstream server-spawn server spawn
midstream server-system server system
midstream client-keep client keep
midstream client-nopreload client nopreload
midstream client-spawn client spawn
# inetd and sshd: a child per connection execs; a backend per connection goes on in
# the child (over RDMA both go back to TCP at the fork: the QP stays the parent's)
midstream server-fork-exec server fork-exec
midstream server-fork server fork
# rings smaller than what is in flight: the exec'ing side's ring is full, the peer's
# writes wait for room
SMC_RCVBUF=64k SMC_SNDBUF=64k midstream small-rings server keep

# ------------------------------------------------------------------ socat EXEC
head -c 2097152 /dev/urandom >"$SMC_TMP/file" || smc_hard_error "no random file"

# socat_echo LABEL EXEC-ADDRESS: socat under the library echoes through EXEC-ADDRESS; a
# socat client under the library sends the file and reads the echo to its end.
socat_echo() {
	local label=$1 addr=$2 srv cli rc
	srv=$(smc_stats_dir "socat-$label")
	cli=$(smc_stats_dir "socat-client-$label")
	smc_free_port port
	smc_log "socat $label: $addr"
	smc_start_server "socat-$label" "$srv" timeout -k 5 $((CASE_TIMEOUT + 10)) \
		socat "TCP-LISTEN:$port,reuseaddr,bind=127.0.0.1" "$addr"
	smc_wait_port "socat-$label" "$port"
	SMC_CMD_TIMEOUT=$CASE_TIMEOUT smc_run "$cli" socat -t 30 - "TCP:127.0.0.1:$port" \
		<"$SMC_TMP/file" >"$SMC_TMP/echo-$label" 2>"$SMC_TMP/socat-client-$label.log"
	rc=$?
	[ "$rc" = 124 ] && smc_log "socat $label: the client timed out after ${CASE_TIMEOUT}s"
	smc_wait_server_exit "socat-$label" $((CASE_TIMEOUT + 20))
	cat "$SMC_TMP/socat-client-$label.log" "$(smc_server_log "socat-$label")"
	nothing_left "socat $label"
	smc_assert_eq "socat $label: client exit status" "$rc" 0
	smc_assert_eq "socat $label: server exit status" "${SMC_SERVER_RC[socat-$label]}" 0
	smc_log "socat $label: $(wc -c <"$SMC_TMP/echo-$label") bytes echoed"
	smc_assert_same_file "socat $label: the echo" "$SMC_TMP/echo-$label" "$SMC_TMP/file"
}

# socat's child execs cat with a socketpair; the TCP socket is close-on-exec there
if want socat-fork; then
	socat_echo fork EXEC:cat
	expect_payload "$(smc_stats_dir socat-fork)" $((2 * 2097152)) "socat (EXEC:cat)"
	expect_payload "$(smc_stats_dir socat-client-fork)" $((2 * 2097152)) \
		"socat client (EXEC:cat)"
	for d in socat-fork socat-client-fork; do
		smc_assert_eq "$d: downgrades of a connection no exec got" \
			"$(smc_stats "$(smc_stats_dir "$d")" '(.events.downgrades // 0) + (.events.peer_downgrades // 0)')" 0
	done
fi
if want socat-nofork; then
	socat_echo nofork EXEC:cat,nofork
	peer_after_downgrade "socat client (EXEC:cat,nofork)" \
		"$(smc_stats_dir socat-client-nofork)" 0
fi
if want socat-nofork-plain; then
	socat_echo nofork-plain "EXEC:env -u LD_PRELOAD cat,nofork"
	peer_after_downgrade "socat client (EXEC:env -u LD_PRELOAD cat,nofork)" \
		"$(smc_stats_dir socat-client-nofork-plain)" 0
fi
# ncat -lk --exec /bin/cat: ncat forks a relay per connection, which forks and execs
# cat with pipes and relays between them and the socket with select(); the socket
# reaches cat (no FD_CLOEXEC), so cat's exec takes the connection back to TCP while the
# relay, a sibling holding the same side, goes on using it. NCAT_ROUNDS rounds of
# NCAT_CLIENTS concurrent python clients, each sending a few lines and reading them back.
# The relay's select() may run before cat's exec and its read after it: the bytes that
# were in the ring come back over TCP from the client's re-send, and the read must wait
# for them rather than fail with EAGAIN (the relay then ends the connection with a
# reset); a client blocked reading over TCP must have re-sent its request first.
# ncat's relay ends the connection at the client's FIN, before cat answered: the client
# sends its lines one by one and reads the echo of all of them before it closes.
NCAT_CLIENT='
import socket, sys
data = sys.stdin.buffer.read()
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
for line in data.splitlines(True):
    s.sendall(line)
got = b""
while len(got) < len(data):
    b = s.recv(65536)
    if not b:
        break
    got += b
sys.stdout.buffer.write(got)
s.close()
'
ncat_exec() {
	local srv cli round c rc left up fp pids=() bad=0
	srv=$(smc_stats_dir ncat-exec)
	cli=$(smc_stats_dir ncat-exec-clients)
	smc_free_port port
	smc_start_server ncat-exec "$srv" timeout -k 5 $((CASE_TIMEOUT * 4)) \
		ncat -lk --exec /bin/cat 127.0.0.1 "$port"
	smc_wait_port ncat-exec "$port"
	for ((round = 0; round < ${NCAT_ROUNDS:-8}; round++)); do
		pids=()
		for ((c = 0; c < ${NCAT_CLIENTS:-5}; c++)); do
			printf 'round %d client %d line %d\n' "$round" "$c" 1 "$round" "$c" 2 \
				"$round" "$c" 3 >"$SMC_TMP/ncat-in-$round-$c"
			SMC_CMD_TIMEOUT=$CASE_TIMEOUT smc_run "$cli" python3 -c "$NCAT_CLIENT" \
				"$port" <"$SMC_TMP/ncat-in-$round-$c" \
				>"$SMC_TMP/ncat-out-$round-$c" 2>"$SMC_TMP/ncat-err-$round-$c" &
			pids+=($!)
		done
		for ((c = 0; c < ${#pids[@]}; c++)); do
			wait "${pids[$c]}"
			rc=$?
			if [ "$rc" != 0 ] ||
			   ! cmp -s "$SMC_TMP/ncat-in-$round-$c" "$SMC_TMP/ncat-out-$round-$c"; then
				smc_log "ncat --exec: round $round client $c: exit status $rc," \
					"$(wc -c <"$SMC_TMP/ncat-out-$round-$c") bytes echoed:" \
					"$(cat "$SMC_TMP/ncat-err-$round-$c")"
				bad=$((bad + 1))
			fi
		done
	done
	smc_stop_server ncat-exec
	nothing_left "ncat --exec"
	left=$(pgrep -a -f -- "ncat -lk --exec /bin/cat 127.0.0.1 $port" || true)
	[ -z "$left" ] || smc_fail "ncat --exec: processes left behind: $left"
	smc_assert_eq "ncat --exec: clients that failed" "$bad" 0
	smc_require_stats "$cli"
	smc_log "stats ncat --exec clients: $(smc_stats_summary "$cli")"
	smc_log "stats ncat --exec server: $(smc_stats_summary "$srv")"
	smc_assert_eq "ncat --exec: aborts (clients)" "$(smc_stats "$cli" '.events.aborts')" 0
	smc_assert_eq "ncat --exec: aborts (server)" "$(smc_stats "$srv" '.events.aborts')" 0
	if [ "$SMC_TEST_EXPECT" = tcp ]; then
		smc_assert_eq "ncat --exec: $DATA connections" \
			"$(smc_stats "$cli" ".connections.$DATA")" 0
		return
	fi
	# every connection was upgraded, then carried into cat's image (which never uses
	# it: the relay goes on on the rings), or taken back to TCP by cat's exec where it
	# cannot be carried; or, when ncat forked its relay before the client answered the
	# handshake, declined at the fork (fork-pending, plain TCP in client and server)
	up=$(smc_stats "$cli" ".connections.$DATA")
	fp=$(smc_stats "$cli" '.fallback["fork-pending"] // 0')
	smc_assert_eq "ncat --exec: connections upgraded or fork-pending" \
		$((up + fp)) $((${NCAT_ROUNDS:-8} * ${NCAT_CLIENTS:-5}))
	if carried keep; then
		smc_assert_eq "ncat --exec: peer downgrades seen by the clients" \
			"$(smc_stats "$cli" '.events.peer_downgrades // 0')" 0
		smc_assert_eq "ncat --exec: connections carried into cat" \
			"$(smc_stats "$srv" '.events.exec_carried // 0')" "$up"
	else
		smc_assert_eq "ncat --exec: peer downgrades seen by the clients" \
			"$(smc_stats "$cli" '.events.peer_downgrades // 0')" "$up"
	fi
}

if want ncat-exec; then
	if command -v ncat >/dev/null 2>&1; then
		ncat_exec
	else
		smc_log "ncat-exec: skipped (no ncat: Debian package ncat)"
	fi
fi
# Python's subprocess with the connection as the child's stdin and stdout: the child
# closes every descriptor above 2 (close_range) before its exec, the library's
# doorbells among them were it not for the close_range wrapper, and the peer, asleep
# in its read, was never told to re-send (it waited for ever).
if want popen; then
	srv=$(smc_stats_dir popen)
	cli=$(smc_stats_dir popen-client)
	smc_free_port port
	smc_log "popen: subprocess.Popen(['cat'], stdin=conn, stdout=conn) echoes 2 MiB"
	smc_start_server popen "$srv" timeout -k 5 $((CASE_TIMEOUT + 10)) python3 -c '
import socket, subprocess, sys, time
l = socket.socket()
l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
l.bind(("127.0.0.1", int(sys.argv[1])))
l.listen(1)
c, _ = l.accept()
time.sleep(0.5)  # the client has sent its file and sleeps in its read
sys.exit(subprocess.Popen(["cat"], stdin=c, stdout=c).wait())' "$port"
	smc_wait_port popen "$port"
	# a blocking read, asleep when the server's child execs
	SMC_CMD_TIMEOUT=$CASE_TIMEOUT smc_run "$cli" python3 -c '
import socket, sys
data = open(sys.argv[2], "rb").read()
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
s.sendall(data)
got = bytearray()
while len(got) < len(data):
    b = s.recv(65536)
    if not b:
        break
    got += b
s.shutdown(socket.SHUT_WR)
rest = s.recv(1)
open(sys.argv[3], "wb").write(got + rest)' "$port" "$SMC_TMP/file" "$SMC_TMP/echo-popen" \
		2>"$SMC_TMP/popen-client.log"
	rc=$?
	smc_wait_server_exit popen $((CASE_TIMEOUT + 20))
	cat "$SMC_TMP/popen-client.log" "$(smc_server_log popen)"
	smc_assert_eq "popen: client exit status" "$rc" 0
	smc_assert_eq "popen: server exit status" "${SMC_SERVER_RC[popen]}" 0
	smc_assert_same_file "popen: the echo" "$SMC_TMP/echo-popen" "$SMC_TMP/file"
	peer_after_downgrade "popen client" "$cli" 0
fi

# The peer's re-send outlives its program: the client writes 12 MiB (they stay in the
# server's 16 MiB ring), the server execs a slow reader with the socket while the
# client sleeps, then the client closes and exits at once, long before the slow reader
# has taken the re-sent bytes (more than the TCP buffers hold): its exit must finish
# the re-send, as TCP's send queue outlives a process.
if want resend-exit; then
	srv=$(smc_stats_dir resend-exit)
	cli=$(smc_stats_dir resend-exit-client)
	head -c 12582912 /dev/urandom >"$SMC_TMP/file12" || smc_hard_error "no random file"
	smc_free_port port
	smc_log "resend-exit: 12 MiB in the ring, exec of a slow reader, the writer exits"
	SMC_RCVBUF=16m SMC_SNDBUF=16m smc_start_server resend-exit "$srv" \
		timeout -k 5 $((CASE_TIMEOUT + 10)) python3 -c '
import os, socket, sys, time
l = socket.socket()
l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
l.bind(("127.0.0.1", int(sys.argv[1])))
l.listen(1)
c, _ = l.accept()
time.sleep(1)
os.dup2(c.fileno(), 0)
os.execv("/bin/sh", ["sh", "-c", "sleep 3; exec sha256sum >" + sys.argv[2]])' \
		"$port" "$SMC_TMP/resend.sum"
	smc_wait_port resend-exit "$port"
	SMC_RCVBUF=16m SMC_SNDBUF=16m SMC_CMD_TIMEOUT=$CASE_TIMEOUT smc_run "$cli" python3 -c '
import socket, sys, time
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
s.sendall(open(sys.argv[2], "rb").read())
time.sleep(2)
s.close()' "$port" "$SMC_TMP/file12"
	rc=$?
	smc_wait_server_exit resend-exit $((CASE_TIMEOUT + 20))
	cat "$(smc_server_log resend-exit)"
	smc_assert_eq "resend-exit: client exit status" "$rc" 0
	smc_assert_eq "resend-exit: server exit status" "${SMC_SERVER_RC[resend-exit]}" 0
	smc_assert_eq "resend-exit: sha256 of what the new program read" \
		"$(cut -d' ' -f1 "$SMC_TMP/resend.sum")" "$(sha256sum <"$SMC_TMP/file12" | cut -d' ' -f1)"
	if [ "$SMC_TEST_EXPECT" = shm ]; then
		# the re-sent bytes were counted when they went into the ring
		smc_assert_ge "resend-exit client: connections upgraded" \
			"$(smc_stats "$cli" ".connections.$DATA")" 1
		smc_assert_ge "resend-exit client: events.peer_downgrades" \
			"$(smc_stats "$cli" '.events.peer_downgrades // 0')" 1
	fi
fi
smc_pass
