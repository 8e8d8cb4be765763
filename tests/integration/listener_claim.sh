#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#
# A listener handed from one server process to another, and the first one gone (gunicorn's
# USR2 then QUIT of the old master, pgbouncer -R, haproxy -x): the new process takes over
# the listener's rendezvous name once it is free, so its clients are upgraded again. Until
# then they find no name and stay TCP (before, they did for good: every client
# peer-not-smc). Here process A listens and serves, passes the listener to process B over a
# unix socket (SCM_RIGHTS) and exits; B serves 30 clients, one every 0.1 s: every reply
# right, the later clients upgraded.
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
. "$(dirname -- "$0")/lib.sh"

smc_init
smc_require_cmd python3
export SMC_SHORT_CONN_US=0 # every connection upgraded with a full handshake, no pool

SERVER='
import array, os, socket, sys
role, unix = sys.argv[1], sys.argv[2]
if role == "A":
    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("127.0.0.1", int(sys.argv[3])))
    ls.listen(16)
    us = socket.socket(socket.AF_UNIX)
    us.bind(unix)
    us.listen(1)
    u, _ = us.accept()
    u.sendmsg([b"L"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [ls.fileno()]))])
    u.recv(1)
    sys.exit(0)
u = socket.socket(socket.AF_UNIX)
u.connect(unix)
msg, anc, _, _ = u.recvmsg(1, socket.CMSG_LEN(4))
fds = array.array("i")
fds.frombytes(anc[0][2][:4])
ls = socket.socket(fileno=fds[0])
u.close()  # A exits
print("B has the listener", flush=True)
for i in range(int(sys.argv[3])):
    c, _ = ls.accept()
    c.sendall(b"B:" + c.recv(100))
    c.close()
'
CLIENT='
import socket, sys, time
for i in range(int(sys.argv[2])):
    s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
    s.sendall(b"%d" % i)
    r = s.recv(100)
    s.close()
    if r != b"B:%d" % i:
        print("client", i, "got", r, flush=True)
        sys.exit(1)
    time.sleep(0.1)
'
N=30
smc_free_port port
a=$(smc_stats_dir A)
b=$(smc_stats_dir B)
cli=$(smc_stats_dir client)
smc_start_server A "$a" python3 -c "$SERVER" A "$SMC_TMP/hand" "$port"
smc_wait_port A "$port"
for ((i = 0; i < 50; i++)); do [ -S "$SMC_TMP/hand" ] && break; sleep 0.1; done
smc_start_server B "$b" python3 -c "$SERVER" B "$SMC_TMP/hand" "$N"
smc_wait_log B "B has the listener"
smc_wait_server_exit A 20
smc_run "$cli" python3 -c "$CLIENT" "$port" "$N" >"$SMC_TMP/client.out" 2>&1 ||
	smc_fail "a client failed: $(cat "$SMC_TMP/client.out")"
smc_wait_server_exit B 20
smc_require_stats "$cli"
smc_log "stats client: $(smc_stats_summary "$cli")"
smc_log "stats B: $(smc_stats_summary "$b")"
if [ "$SMC_TEST_EXPECT" = shm ]; then
	smc_assert_ge "clients upgraded after the takeover" \
		"$(smc_stats "$cli" '.connections.shm')" $((N / 2))
	smc_assert_eq "client fallbacks other than peer-not-smc" \
		"$(smc_stats "$cli" '.connections.tcp - (.fallback["peer-not-smc"] // 0)')" 0
else
	smc_assert_eq "tcp connections" "$(smc_stats "$cli" '.connections.tcp')" "$N"
fi
smc_assert_eq "client aborts" "$(smc_stats "$cli" '.events.aborts')" 0
smc_pass
