#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#
# A forking server (accept, then fork a child that serves the connection, as ncat's
# relay, xinetd, PostgreSQL's postmaster) whose client has not answered the handshake
# when the server forks: the client is stopped (SIGSTOP) right after its nonblocking
# connect(), before the server's accept() reached its rendezvous. The child can never
# learn how a handshake its parent's thread runs ends, so the fork declines it: both
# ends count `fork-pending`, and the child echoes the client's line over plain TCP.
# The parent keeps its copy until the child is done (as a relay's parent may): without
# the Decline the child's copy was an orphan, whose reads failed with ECONNRESET, while
# the parent's thread went on to upgrade the connection for the client.
# Then the other side: a client that forks while its server has not answered (below,
# client-fork).
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
. "$(dirname -- "$0")/lib.sh"

smc_init
smc_require_cmd python3

SERVER='
import os, socket, sys
l = socket.socket()
l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
l.bind(("127.0.0.1", int(sys.argv[1])))
l.listen(8)
for _ in range(int(sys.argv[2])):
    c, _ = l.accept()
    pid = os.fork()
    if pid == 0:
        l.close()
        f = c.makefile("rb")
        line = f.readline()
        c.sendall(b"echo " + line)
        c.close()
        os._exit(0)
    print("forked", flush=True)
    os.waitpid(pid, 0)
    c.close()
'
CLIENT='
import os, signal, socket, sys
s = socket.socket()
s.setblocking(False)
s.connect_ex(("127.0.0.1", int(sys.argv[1])))
os.kill(os.getpid(), signal.SIGSTOP)
s.setblocking(True)
s.settimeout(30)
s.sendall(sys.argv[2].encode() + b"\n")
got = b""
while not got.endswith(b"\n"):
    b = s.recv(4096)
    if not b:
        break
    got += b
sys.stdout.write(got.decode())
s.close()
'

ROUNDS=${FORK_PENDING_ROUNDS:-3}
srv=$(smc_stats_dir server)
cli=$(smc_stats_dir clients)
smc_free_port port
smc_start_server fork-srv "$srv" python3 -c "$SERVER" "$port" "$ROUNDS"
smc_wait_port fork-srv "$port"
for ((i = 1; i <= ROUNDS; i++)); do
	out=$SMC_TMP/client-$i.out
	_smc_cmd "$cli" python3 -c "$CLIENT" "$port" "line $i"
	timeout -k 5 60 "${_smc_argv[@]}" >"$out" 2>"$SMC_TMP/client-$i.err" &
	pid=$!
	# the client stops itself (its whole process: the progress thread too); timeout(1)
	# is its parent
	stopped=
	for ((t = 0; t < 400; t++)); do
		for c in $(pgrep -P "$pid"); do
			[ "$(awk '{ print $3 }' "/proc/$c/stat" 2>/dev/null)" = T ] && stopped=$c
		done
		[ -n "$stopped" ] && break
		sleep 0.05
	done
	[ -n "$stopped" ] || smc_fail "round $i: the client never stopped"
	# the server accepted, and its fork returned
	for ((t = 0; t < 400; t++)); do
		[ "$(grep -c '^forked' "$SMC_TMP/fork-srv.log")" -ge "$i" ] && break
		sleep 0.05
	done
	[ "$(grep -c '^forked' "$SMC_TMP/fork-srv.log")" -ge "$i" ] ||
		smc_fail "round $i: the server never forked"
	kill -CONT "$stopped"
	wait "$pid"
	rc=$?
	smc_assert_eq "round $i: client exit status ($(cat "$SMC_TMP/client-$i.err"))" "$rc" 0
	smc_assert_eq "round $i: echo" "$(cat "$out")" "echo line $i"
done
smc_wait_server_exit fork-srv 20
smc_require_stats "$cli"
smc_log "stats clients: $(smc_stats_summary "$cli")"
smc_log "stats server: $(smc_stats_summary "$srv")"
# every connection whose handshake accept() left to the progress thread (the client
# was stopped: nearly all of them; the server may find no rendezvous of the client and
# take it for TCP at once, or the client's thread may answer before it stops) was
# pending at the fork, and declined there
bg=$(smc_stats "$srv" '.events.hs_background // 0')
smc_assert_ge "server: handshakes left to the background" "$bg" 1
smc_assert_eq "server: fork-pending" "$(smc_stats "$srv" '.fallback["fork-pending"] // 0')" "$bg"
smc_assert_eq "clients: fork-pending" "$(smc_stats "$cli" '.fallback["fork-pending"] // 0')" "$bg"
# a client whose thread answered before it stopped (the server's accept() decided the
# handshake itself) is upgraded, in the forked child as in its parent: both sides agree
smc_assert_eq "clients: shm connections (those decided before the fork)" \
	"$(smc_stats "$cli" '.connections.shm')" "$(smc_stats "$srv" '.connections.shm')"
smc_assert_eq "clients: connections" \
	"$(smc_stats "$cli" '.connections.shm + .connections.tcp')" "$ROUNDS"
smc_assert_eq "aborts" "$(smc_stats "$cli" '.events.aborts') $(smc_stats "$srv" '.events.aborts')" "0 0"

# The client forks right after connect() while the server has not answered its
# handshake (the server is stopped: a loaded host delays it the same way): parent and
# child each write 256 KiB. The fork ends the client's handshake as TCP, the server
# told (fork-pending); before, the child's copy was an orphan whose writes failed with
# ECONNRESET (fork_peek.sh's writers on a loaded CI host).
CLIENT_FORK='
import os, socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
pid = os.fork()
try:
    s.sendall((b"B" if pid == 0 else b"A") * 262144)
except OSError as e:
    print("write error", e, flush=True)
    os._exit(1)
if pid == 0:
    os._exit(0)
_, st = os.waitpid(pid, 0)
s.close()
sys.exit(0 if st == 0 else 1)
'
SINK='
import socket, sys
l = socket.socket()
l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
l.bind(("127.0.0.1", int(sys.argv[1])))
l.listen(8)
print("listening", flush=True)
c, _ = l.accept()
got = b""
while True:
    b = c.recv(65536)
    if not b:
        break
    got += b
print("got A %d B %d other %d" % (got.count(b"A"), got.count(b"B"), len(got) - got.count(b"A") - got.count(b"B")), flush=True)
'
srv=$(smc_stats_dir sink)
cli=$(smc_stats_dir client-fork)
smc_free_port port
smc_start_server sink "$srv" python3 -c "$SINK" "$port"
smc_wait_log sink '^listening'
# the server's whole process group (its progress thread stops with it)
kill -STOP -- "-${SMC_SERVER_PID[sink]}"
_smc_cmd "$cli" python3 -c "$CLIENT_FORK" "$port"
timeout -k 5 60 "${_smc_argv[@]}" >"$SMC_TMP/client-fork.out" 2>&1 &
pid=$!
sleep 1
kill -CONT -- "-${SMC_SERVER_PID[sink]}"
wait "$pid"
rc=$?
cat "$SMC_TMP/client-fork.out"
smc_assert_eq "client-fork: client exit status" "$rc" 0
smc_wait_server_exit sink 30
grep -q "^got A 262144 B 262144 other 0\$" "$(smc_server_log sink)" ||
	smc_fail "client-fork: the server did not get both writers' bytes: $(cat "$(smc_server_log sink)")"
smc_require_stats "$cli"
smc_log "stats client-fork: $(smc_stats_summary "$cli")"
smc_assert_eq "client-fork: aborts" "$(smc_stats "$cli" '.events.aborts')" 0
if [ "$SMC_TEST_EXPECT" = shm ]; then
	smc_assert_eq "client-fork: fork-pending" "$(smc_stats "$cli" '.fallback["fork-pending"] // 0')" 1
fi
smc_pass
