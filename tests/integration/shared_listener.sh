#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#
# A listening socket that several processes accept from, each having called listen()
# itself on a socket it did not make alone: Node's cluster with
# NODE_CLUSTER_SCHED_POLICY=none, where the primary hands the bound socket to each worker
# over SCM_RIGHTS (scm), and a server that binds, then forks workers that each listen
# (fork). The kernel hands each connection to whichever worker accepts first, so no
# worker may serve a pool: a pooled connection belongs to the process that made the
# pool, and the one that accepted it read its client's bytes as TCP or never answered
# (a client's requests timed out, or Node's reset: 4 runs in 6). One client process, 20
# threads x 50 connect/request/response/close with a 5 s timeout: every answer right,
# no pooled connection on either side, the first connections (full handshakes,
# answered by whichever worker accepts) upgraded, the others TCP by the short-connection
# policy (short-lived) and for no other reason.
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
. "$(dirname -- "$0")/lib.sh"

smc_require_cmd python3
smc_init
unset SMC_SHORT_CONN_US SMC_POOL_SLOTS

cat >"$SMC_TMP/server.py" <<'PY'
import array, os, signal, socket, sys, threading
how, port, workers = sys.argv[1], int(sys.argv[2]), 2

def serve(ls):
    signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))
    ls.listen(128)
    def echo(c):
        try:
            while True:
                d = c.recv(65536)
                if not d:
                    break
                c.sendall(d)
        finally:
            c.close()
    while True:
        c, _ = ls.accept()
        threading.Thread(target=echo, args=(c,), daemon=True).start()

pids, chans = [], []
if how == "scm":
    # the workers exist before the socket: each gets it over its unix socket
    for _ in range(workers):
        a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        pid = os.fork()
        if pid == 0:
            a.close()
            _, anc, _, _ = b.recvmsg(1, socket.CMSG_SPACE(4))
            serve(socket.socket(fileno=array.array("i", anc[0][2][:4])[0]))
        b.close()
        pids.append(pid)
        chans.append(a)
ls = socket.socket()
ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
ls.bind(("127.0.0.1", port))
if how == "scm":
    for a in chans:
        a.sendmsg([b"L"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [ls.fileno()]))])
else:
    for _ in range(workers):
        pid = os.fork()
        if pid == 0:
            serve(ls)
        pids.append(pid)
ls.close()
print("ready", flush=True)
def stop(*a):
    for p in pids:
        os.kill(p, signal.SIGTERM)
    for p in pids:
        os.waitpid(p, 0)
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
while True:
    signal.pause()
PY

cat >"$SMC_TMP/client.py" <<'PY'
import socket, sys, threading
port, threads, n = int(sys.argv[1]), 20, 50
errors = []
def run(t):
    for i in range(n):
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=5)
            m = b"req-%d-%d" % (t, i)
            s.sendall(m)
            got = b""
            while len(got) < len(m):
                d = s.recv(100)
                if not d:
                    raise EOFError("closed")
                got += d
            if got != m:
                raise ValueError("wrong answer %r" % got)
            s.close()
        except Exception as e:
            errors.append(repr(e))
ts = [threading.Thread(target=run, args=(t,)) for t in range(threads)]
for t in ts:
    t.start()
for t in ts:
    t.join()
print("RESULT errors=%d of %d %s" % (len(errors), threads * n, errors[:3]))
sys.exit(1 if errors else 0)
PY

for how in scm fork; do
	smc_free_port port
	srv=$(smc_stats_dir "server-$how")
	cli=$(smc_stats_dir "client-$how")
	smc_start_server "server-$how" "$srv" python3 "$SMC_TMP/server.py" "$how" "$port"
	smc_wait_log "server-$how" '^ready'
	sleep 0.3 # both workers listening
	out=$(smc_run "$cli" python3 "$SMC_TMP/client.py" "$port" 2>&1)
	rc=$?
	smc_log "$how: $out"
	smc_stop_server "server-$how" TERM
	smc_assert_eq "$how: client exit status (1: requests failed)" "$rc" 0
	smc_require_stats "$srv"
	smc_log "stats server $how: $(smc_stats_summary "$srv")"
	smc_assert_eq "$how: pooled connections, client" \
		"$(smc_stats "$cli" '.events.shm_pooled')" 0
	smc_assert_eq "$how: pooled connections, workers" \
		"$(smc_stats "$srv" '.events.shm_pooled')" 0
	# the first connections upgraded; the rest stay TCP by the short-connection policy
	smc_log "stats client $how: $(smc_stats_summary "$cli")"
	smc_assert_ge "$how: client shm connections" "$(smc_stats "$cli" '.connections.shm')" 1
	smc_assert_ge "$how: client payload over shm" \
		"$(smc_stats "$cli" '.bytes.shm.sent + .bytes.shm.received')" 1
	smc_assert_eq "$how: client fallback reasons other than short-lived" \
		"$(smc_stats "$cli" '[.fallback | to_entries[] | select(.key != "short-lived") | .value] | add // 0')" 0
done
smc_pass
