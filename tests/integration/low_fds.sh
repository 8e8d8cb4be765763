#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#
# The kernel gives a new descriptor the lowest free number, and programs count on it.
# A preloaded client whose connection is upgraded makes the library start its
# background threads and descriptors (libevent's epoll set, pipe and eventfd, the
# stats server's socket, the handshake's sockets and memfd), none of which may take or
# hold a low number:
#   daemon: closes 0, 1 and 2, connects, exchanges a line, then opens /dev/null three
#           times and must get 0, 1 and 2 (as a daemon that reopens its standard
#           streams does), after write(2) failed with EBADF;
#   dupfd:  ucspi-tcp's tcpclient: after connect(), close(6) and F_DUPFD(socket, 6)
#           must give 6, then the same for 7;
#   lowlimit: a program that lowers RLIMIT_NOFILE to 64, then listens, connects to
#           itself, accepts and opens a file: four numbers in a row, as over TCP (the
#           listener's rendezvous name took the next one: the library's descriptors had
#           no high place below a limit of 256). Its connection stays TCP (fd-limit).
#   highlimit: a listener under a high RLIMIT_NOFILE: its rendezvous name sits just above
#           1024, not near the limit, since fork() copies the fd table up to the highest
#           open number (a server that forks per connection paid ~40 us per fork).
#   epoll:  a server that watches its connections in an epoll set gets four numbers
#           in a row from three accepts and an open, as over TCP (the library's shadow
#           epoll set and eventfd for that set took two of them);
#   quiet:  tests/progs/fd_thread_race quiet: with a connection to itself open, it
#           closes its lowest free number and looks at it for 2.5 s: it stays closed
#           (the background thread, which looks once a second whether the program's
#           threads have ended, opened a proc file each time and so held that number
#           for a moment: a thread polling a number it had just closed saw a readable
#           file);
#   threads: tests/progs/fd_thread_race, 20 processes: a thread opens and closes a file
#           in a loop while the main thread's first connection starts the library; the
#           loop never gets a number from 1024 up (it did while the library filled the
#           numbers below 1024 around libevent's start: a select() program aborted), and
#           no epoll set, eventfd or pipe of the library's sits below 1024 (libevent's
#           did in a program with threads, where nothing was filled).
# Before, the first connection left libevent's descriptors at the lowest free numbers
# (and the program's close() of them was ignored, as they are the library's), and the
# stats server's thread held one reserved while blocked in accept().
# daemon and dupfd check the line came back over shared memory. With SMC_TEST_EXPECT=tcp
# the same over plain TCP.
# Exit: 0 pass, 1 fail, 77 skip (python3 missing), 99 hard error.

# shellcheck source=tests/integration/lib.sh
. "$(cd -- "$(dirname -- "$0")" && pwd)/lib.sh"

smc_require_cmd python3
smc_init

cat >"$SMC_TMP/server.py" <<'PY'
import socket, sys
ls = socket.socket()
ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
ls.bind(("127.0.0.1", 0))
ls.listen(8)
print("port %d" % ls.getsockname()[1], flush=True)
for _ in range(int(sys.argv[1])):
    c, _ = ls.accept()
    d = c.recv(100)
    c.sendall(d)
    c.recv(100)
    c.close()
PY

cat >"$SMC_TMP/client.py" <<'PY'
import errno, fcntl, os, socket, sys
case, port = sys.argv[1], int(sys.argv[2])
report = os.dup(1)
def say(msg):
    os.write(report, (msg + "\n").encode())
s = socket.socket()
if case == "daemon":
    for fd in (0, 1, 2):
        os.close(fd)
s.connect(("127.0.0.1", port))
s.sendall(b"line\n")
if s.recv(100) != b"line\n":
    say("no echo")
    sys.exit(1)
bad = 0
if case == "daemon":
    try:
        os.write(2, b"x")
        say("write(2) succeeded: fd 2 is open")
        bad = 1
    except OSError as e:
        if e.errno != errno.EBADF:
            say("write(2): %s" % e)
            bad = 1
    got = [os.open("/dev/null", os.O_RDWR) for _ in range(3)]
    say("open /dev/null x3: %s" % got)
    bad |= got != [0, 1, 2]
else:
    fd = s.fileno()
    for want in (6, 7):
        try:
            os.close(want)
        except OSError:
            pass
        got = fcntl.fcntl(fd, fcntl.F_DUPFD, want)
        say("close(%d); F_DUPFD(%d) -> %d" % (want, want, got))
        bad |= got != want
s.close()
sys.exit(bad)
PY

cat >"$SMC_TMP/epoll_server.py" <<'PY'
import select, socket, sys
ls = socket.socket()
ls.bind(("127.0.0.1", 0))
ls.listen(8)
print("port %d" % ls.getsockname()[1], flush=True)
ep = select.epoll()
ep.register(ls.fileno(), select.EPOLLIN)
nums, conns, kept = [], {}, []
while len(nums) < 3 or conns:
    for fd, _ in ep.poll(10):
        if fd == ls.fileno():
            c, _ = ls.accept()
            nums.append(c.fileno())
            conns[c.fileno()] = c
            ep.register(c.fileno(), select.EPOLLIN)
            continue
        c = conns[fd]
        d = c.recv(100)
        if d:
            c.sendall(d)
        else:
            ep.unregister(fd)
            kept.append(conns.pop(fd))  # open: the next accept gets the next number
f = open("/dev/null")
nums.append(f.fileno())
print("accepted, accepted, accepted, open: %s" % nums, flush=True)
sys.exit(nums != list(range(nums[0], nums[0] + 4)))
PY

cat >"$SMC_TMP/lowlimit.py" <<'PY'
import os, resource, socket, sys
resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
ls = socket.socket()
ls.bind(("127.0.0.1", 0))
ls.listen(4)
c = socket.create_connection(ls.getsockname())
s, _ = ls.accept()
f = os.open("/dev/null", os.O_RDONLY)
got = [ls.fileno(), c.fileno(), s.fileno(), f]
print("listen, connect, accept, open: %s" % got)
sys.exit(got != list(range(got[0], got[0] + 4)))
PY

cat >"$SMC_TMP/highlimit.py" <<'PY'
import os, resource, socket, sys
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
want = hard if hard != resource.RLIM_INFINITY else 65536
want = min(want, 65536)
if want < 4096:
    print("skip: hard limit %d" % hard)
    sys.exit(0)
resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
ls = socket.socket()
ls.bind(("127.0.0.1", 0))
ls.listen(4)
top = max(int(f) for f in os.listdir("/proc/self/fd"))
print("limit %d, highest fd %d" % (want, top))
sys.exit(top >= 1024 + 256)
PY

srv=$(smc_stats_dir server)
smc_start_server server "$srv" python3 "$SMC_TMP/server.py" 2
smc_wait_log server '^port '
read -r _ port < <(grep -m1 '^port ' "$SMC_TMP/server.log")
for case in daemon dupfd; do
	cli=$(smc_stats_dir "client-$case")
	out=$(smc_run "$cli" python3 "$SMC_TMP/client.py" "$case" "$port" 2>&1)
	rc=$?
	smc_log "$case: $out"
	smc_assert_eq "$case: client exit status (1: a low number was taken)" "$rc" 0
	smc_expect_connections "$cli" 1 "client $case"
done
smc_wait_server_exit server 10

# epoll: a server whose epoll set holds its upgraded connections (the library then
# keeps a shadow set and an eventfd for it) gets the numbers TCP gives: three accepted
# connections, each kept open, then the next open(), four numbers in a row
cat >"$SMC_TMP/echo_client.py" <<'PY'
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
s.sendall(b"line\n")
sys.exit(s.recv(100) != b"line\n")
PY
srv=$(smc_stats_dir server-epoll)
smc_start_server server-epoll "$srv" python3 "$SMC_TMP/epoll_server.py"
smc_wait_log server-epoll '^port '
read -r _ port < <(grep -m1 '^port ' "$SMC_TMP/server-epoll.log")
cli=$(smc_stats_dir client-epoll)
for i in 1 2 3; do
	out=$(smc_run "$cli" python3 "$SMC_TMP/echo_client.py" "$port" 2>&1)
	smc_assert_eq "epoll client $i: echo (exit status; $out)" "$?" 0
done
smc_wait_server_exit server-epoll 10
smc_log "epoll server: $(grep accepted "$SMC_TMP/server-epoll.log")"
smc_assert_eq "epoll: server exit status (1: numbers not as over TCP)" \
	"${SMC_SERVER_RC[server-epoll]}" 0
smc_expect_connections "$srv" 3 "epoll server"

RACE_RUNS=20
smc_require_built "$top_builddir/tests/progs/fd_thread_race"
srv=$(smc_stats_dir server-threads)
smc_start_server server-threads "$srv" python3 "$SMC_TMP/server.py" "$RACE_RUNS"
smc_wait_log server-threads '^port '
read -r _ port < <(grep -m1 '^port ' "$SMC_TMP/server-threads.log")
cli=$(smc_stats_dir client-threads)
high=0
for ((i = 0; i < RACE_RUNS; i++)); do
	# each run's one connection upgraded (a one-shot command is otherwise TCP from its
	# fifth run: hs_history.h)
	out=$(SMC_SHORT_CONN_US=0 smc_run "$cli" "$top_builddir/tests/progs/fd_thread_race" \
		127.0.0.1 "$port" 2>&1)
	rc=$?
	[ "$rc" = 0 ] || { smc_log "threads, run $i: $out"; high=$((high + 1)); }
done
smc_assert_eq "threads: runs with a number from 1024 up, a library descriptor below it, or no echo" \
	"$high" 0
smc_expect_connections "$cli" "$RACE_RUNS" "client threads"
smc_assert_ge "threads: payload bytes over $SMC_TEST_EXPECT" \
	"$(smc_stats "$cli" ".bytes.$SMC_TEST_EXPECT.sent + .bytes.$SMC_TEST_EXPECT.received")" \
	$((RACE_RUNS * 10))
smc_wait_server_exit server-threads 10

qdir=$(smc_stats_dir client-quiet)
out=$(smc_run "$qdir" "$top_builddir/tests/progs/fd_thread_race" quiet 2>&1)
rc=$?
smc_log "quiet: $out; stats $(smc_stats_summary "$qdir")"
smc_assert_eq "quiet: exit status (1: a library thread took the lowest free number, or no echo)" \
	"$rc" 0
smc_expect_connections "$qdir" 2 "quiet (both ends)"
# "line\n" each way, sent and received by each end
smc_assert_ge "quiet: payload bytes over $SMC_TEST_EXPECT" \
	"$(smc_stats "$qdir" ".bytes.$SMC_TEST_EXPECT.sent + .bytes.$SMC_TEST_EXPECT.received")" 20

cli=$(smc_stats_dir client-lowlimit)
out=$(smc_run "$cli" python3 "$SMC_TMP/lowlimit.py" 2>&1)
rc=$?
smc_log "lowlimit: $out"
smc_assert_eq "lowlimit: exit status (1: numbers not in a row)" "$rc" 0
if [ "$SMC_TEST_EXPECT" = shm ]; then
	smc_require_stats "$cli"
	smc_assert_ge "lowlimit: fallback fd-limit" "$(smc_stats "$cli" '.fallback["fd-limit"] // 0')" 1
fi
cli=$(smc_stats_dir client-highlimit)
out=$(smc_run "$cli" python3 "$SMC_TMP/highlimit.py" 2>&1)
rc=$?
smc_log "highlimit: $out"
smc_assert_eq "highlimit: exit status (1: a descriptor near the limit)" "$rc" 0
smc_pass
