#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#
# An upgrading listener's accept queue: accept() runs the first steps of each handshake,
# so a listener takes its queue's head more slowly than over TCP, and a burst that a
# small queue absorbs over TCP overflowed it (the JDK's HttpServer, listen(fd, 128), and
# 250 new connections at once: the dropped SYNs came back 1 s later). The kernel's queue
# is at least 1024 for such a listener (core/sock/sock_accept.c). Checks, with a Python
# server calling listen(16) twice (nginx calls it again to apply backlog=): its queue as ss shows it (Send-Q of a listener) is 16
# without the library and 1024 (or net.core.somaxconn, if lower) with it; then 300
# clients connect at once, each sends a line and reads it back, and the kernel counts
# no accept-queue overflow (TcpExtListenOverflows) meanwhile.
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
. "$(dirname -- "$0")/lib.sh"

smc_init
smc_require_cmd python3 nstat

cat >"$SMC_TMP/server.py" <<'PY'
import socket, sys, threading
ls = socket.socket()
ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
ls.bind(("127.0.0.1", int(sys.argv[1])))
ls.listen(16)
ls.listen(16)  # again, as nginx does to apply its backlog=
print("listening", flush=True)
def serve(c):
    f = c.makefile("rwb")
    f.write(f.readline())
    f.flush()
    c.close()
n = int(sys.argv[2])  # -1: until stopped
while n:
    n -= 1
    c, _ = ls.accept()
    threading.Thread(target=serve, args=(c,)).start()
PY
cat >"$SMC_TMP/burst.py" <<'PY'
import socket, sys, threading
port, n = int(sys.argv[1]), int(sys.argv[2])
ok = []
go = threading.Barrier(n)
def one(i):
    go.wait()
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    s.sendall(b"line %d\n" % i)
    ok.append(s.makefile("rb").readline() == b"line %d\n" % i)
    s.close()
ts = [threading.Thread(target=one, args=(i,)) for i in range(n)]
for t in ts: t.start()
for t in ts: t.join()
print("%d of %d answered" % (sum(ok), n))
sys.exit(0 if sum(ok) == n else 1)
PY

want=1024
max=$(cat /proc/sys/net/core/somaxconn 2>/dev/null || echo 4096)
[ "$max" -lt "$want" ] && want=$max

smc_free_port port
smc_start_server plain - python3 "$SMC_TMP/server.py" "$port" -1
smc_wait_log plain '^listening'
smc_assert_eq "listen(16) without the library: the kernel's queue" \
	"$(ss -Hltn "sport = :$port" | awk '{print $3}')" 16
smc_stop_server plain TERM 10

N=300
srv=$(smc_stats_dir server)
cli=$(smc_stats_dir client)
smc_free_port port
smc_start_server lib "$srv" python3 "$SMC_TMP/server.py" "$port" "$N"
smc_wait_log lib '^listening'
smc_assert_eq "listen(16) under the library: the kernel's queue" \
	"$(ss -Hltn "sport = :$port" | awk '{print $3}')" "$want"
before=$(nstat -az TcpExtListenOverflows | awk '/ListenOverflows/ {print $2}')
out=$(smc_run "$cli" python3 "$SMC_TMP/burst.py" "$port" "$N" 2>&1)
rc=$?
after=$(nstat -az TcpExtListenOverflows | awk '/ListenOverflows/ {print $2}')
smc_log "burst: $out; ListenOverflows $before -> $after"
smc_assert_eq "burst of $N: every client answered (exit status)" "$rc" 0
smc_assert_eq "accept-queue overflows during the burst" "$((after - before))" 0
smc_wait_server_exit lib 30
smc_expect_connections "$cli" 1 "client"
smc_pass
