#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#
# A peer that closes (or exits) before its bytes were read, and a reader that then goes
# back to TCP (here: the accepted socket made stdin of an exec'd `wc -c` without the
# library). TCP delivers what a closed or exited sender wrote; the library must too: the
# closing side keeps its socket until the bytes are read (conn_orphan.h) and re-sends
# them when the reader leaves the rings. Without that the reader's new program got
# ECONNRESET and 0 bytes. Cases (client, then server 0.5 s after accept()):
#   exit       - writes, closes, exits at once (the exit waits for the reader, bounded);
#                the server goes TCP;
#   alive      - writes, closes and lives on; the server goes TCP;
#   read       - the same, but the server reads from the rings as usual: the client's
#                kept socket goes once everything is read (no descriptor left behind);
#   open-exec  - writes and exits with the socket still open (the kernel's close);
#                the server goes TCP.
# And a process talking to itself (both ends in one process, one left open with the
# other's bytes unread at exit): its exit does not wait for itself (the library's
# debug log would say it gave up waiting, after 2 s).
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
. "$(dirname -- "$0")/lib.sh"

smc_init
smc_require_cmd python3 wc

SERVER='
import os, socket, sys, time
l = socket.socket()
l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
l.bind(("127.0.0.1", int(sys.argv[1])))
l.listen(8)
print("listening", flush=True)
c, _ = l.accept()
time.sleep(float(sys.argv[2]))
if sys.argv[3] == "exec":
    os.dup2(c.fileno(), 0)
    os.execvp("env", ["env", "-u", "LD_PRELOAD", "wc", "-c"])
n = 0
while True:
    b = c.recv(65536)
    if not b:
        break
    n += len(b)
print(n, flush=True)
'
CLIENT='
import os, socket, sys, time
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
s.sendall(b"x" * int(sys.argv[2]))
if sys.argv[3] == "open":
    os.dup(s.fileno())  # a descriptor nobody closes: the exit leaves it to the kernel
    sys.exit(0)
s.close()
if sys.argv[3] == "exit":
    sys.exit(0)
# lives on until the test has seen the server finish, then counts its TCP sockets
while not os.path.exists(sys.argv[4]):
    time.sleep(0.05)
time.sleep(0.5)
tcp = set()
for t in ("/proc/self/net/tcp", "/proc/self/net/tcp6"):
    for line in open(t).readlines()[1:]:
        tcp.add("socket:[%s]" % line.split()[9])
socks = 0
for f in os.listdir("/proc/self/fd"):
    try:
        socks += os.readlink("/proc/self/fd/" + f) in tcp
    except OSError:
        pass  # the descriptor of the listing itself
print("tcp sockets", socks, flush=True)
'

for case in exit alive read open-exec; do
	srv=$(smc_stats_dir "server-$case")
	cli=$(smc_stats_dir "client-$case")
	done_file=$SMC_TMP/done-$case
	how=exec mode=${case%%-*} N=300000
	[ "$case" = read ] && how=read
	smc_free_port port
	smc_start_server "closed-$case" "$srv" python3 -c "$SERVER" "$port" 0.5 "$how"
	smc_wait_port "closed-$case" "$port"
	smc_run "$cli" python3 -c "$CLIENT" "$port" "$N" "$mode" "$done_file" \
		>"$SMC_TMP/client-$case.out" 2>&1 &
	cpid=$!
	smc_wait_server_exit "closed-$case" 20
	got=$(grep -v listening "$SMC_TMP/closed-$case.log" | tr -d ' \n')
	smc_assert_eq "$case: bytes the server's reader got" "$got" "$N"
	touch "$done_file"
	wait "$cpid" || smc_fail "$case: client failed: $(cat "$SMC_TMP/client-$case.out")"
	[ "$mode" != alive ] && [ "$mode" != read ] ||
		smc_assert_eq "$case: client TCP sockets left" "$(cat "$SMC_TMP/client-$case.out")" "tcp sockets 0"
	smc_require_stats "$cli"
	smc_log "stats client ($case): $(smc_stats_summary "$cli")"
	smc_assert_eq "$case: client shm bytes sent" "$(smc_stats "$cli" '.bytes.shm.sent')" "$N"
	smc_assert_eq "$case: client aborts" "$(smc_stats "$cli" '.events.aborts')" 0
	if [ "$how" = exec ]; then
		smc_assert_eq "$case: peer went TCP" "$(smc_stats "$cli" '.events.peer_downgrades')" 1
	else
		smc_assert_eq "$case: peer stayed" "$(smc_stats "$cli" '.events.peer_downgrades')" 0
	fi
done
SELF='
import os, socket, time
l = socket.socket()
l.bind(("127.0.0.1", 0))
l.listen(1)
c = socket.create_connection(l.getsockname())
s, _ = l.accept()
time.sleep(0.1)
c.sendall(b"x" * 100000)
os.dup(s.fileno())  # the reading end stays open, unread, until the exit
c.close()
'
dir=$(smc_stats_dir self)
SMC_LOG_LEVEL=debug SMC_LOG_FILE="$SMC_TMP/self.%p.smclog" smc_run "$dir" python3 -c "$SELF" ||
	smc_fail "self: the program failed"
smc_require_stats "$dir"
smc_assert_eq "self: shm bytes sent" "$(smc_stats "$dir" '.bytes.shm.sent')" 100000
n=$(cat "$SMC_TMP"/self.*.smclog 2>/dev/null | grep -c 'still unread by their peers')
smc_assert_eq "self: exits that waited for their own process" "$n" 0
smc_pass
