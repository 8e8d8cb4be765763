#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#
# A peer killed by SIGKILL leaves no close flag in the rings: only its kernel's FIN on
# the TCP socket tells. What the survivor sees must be what TCP shows, run here over
# plain TCP first (the expected answers) and then with both ends upgraded:
#   wait-select, wait-poll, wait-epoll: the survivor waits on its connection and on a
#     pipe that is always readable, so the call never sleeps; the dead peer's
#     connection must still turn readable (a call that never slept never looked at the
#     TCP socket: iperf3's server never saw its client die);
#   unread: the peer is killed before reading the request we sent: TCP resets (a
#     close with received bytes unread), so recv fails with ECONNRESET (redis-benchmark
#     against a killed redis-server: "Connection reset by peer");
#   all-read: the peer read everything and is killed: TCP's FIN, recv returns 0.
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
. "$(dirname -- "$0")/lib.sh"

smc_init
smc_require_cmd python3

cat >"$SMC_TMP/killed.py" <<'PY'
import os, select, signal, socket, sys, time

port, case = int(sys.argv[1]), sys.argv[2]
ls = socket.socket()
ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
ls.bind(("127.0.0.1", port))
ls.listen(8)
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    ls.close()
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(b"hello")
    if case == "all-read":
        s.recv(7)
    os.write(w, b"!")
    time.sleep(60)
    os._exit(0)
a, _ = ls.accept()
assert a.recv(5) == b"hello"
a.sendall(b"request")
os.read(r, 1)           # the peer has read (all-read) or not (the others)
time.sleep(0.2)
os.kill(pid, signal.SIGKILL)
os.waitpid(pid, 0)
if case.startswith("wait-"):
    os.write(w, b"!")   # r stays readable from here on
    mode = case[5:]
    deadline = time.time() + 10
    ready = False
    if mode == "epoll":
        ep = select.epoll()
        ep.register(a.fileno(), select.EPOLLIN)
        ep.register(r, select.EPOLLIN)
    while time.time() < deadline and not ready:
        if mode == "select":
            ready = a in select.select([a, r], [], [], 1)[0]
        elif mode == "poll":
            p = select.poll()
            p.register(a, select.POLLIN)
            p.register(r, select.POLLIN)
            ready = a.fileno() in [fd for fd, ev in p.poll(1000)]
        else:
            ready = a.fileno() in [fd for fd, ev in ep.poll(1)]
    print("readable" if ready else "never readable")
    sys.exit(0)
a.settimeout(5)
try:
    print("recv %r" % a.recv(100))
except OSError as e:
    print(type(e).__name__)
PY

for case in wait-select wait-poll wait-epoll unread all-read; do
	smc_free_port port
	want=$(SMC_TEST_EXPECT=tcp timeout 30 python3 "$SMC_TMP/killed.py" "$port" "$case" 2>&1)
	smc_free_port port
	dir=$(smc_stats_dir "$case")
	got=$(smc_run "$dir" python3 "$SMC_TMP/killed.py" "$port" "$case" 2>&1) ||
		smc_fail "$case: exit status $?: $got"
	smc_log "$case: over TCP '$want', under the library '$got'"
	smc_assert_eq "$case: what the survivor saw" "$got" "$want"
	if [ "$SMC_TEST_EXPECT" = shm ]; then
		smc_require_stats "$dir"
		smc_assert_ge "$case: bytes over shm" "$(smc_stats "$dir" '.bytes.shm.received')" 5
	fi
done
smc_pass
