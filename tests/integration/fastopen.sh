#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#
# TCP Fast Open's implicit connect: sendto(MSG_FASTOPEN) and sendmsg(MSG_FASTOPEN) with a
# destination on a socket that never called connect(). The library must hand the
# destination to the kernel (the connection stays plain TCP, as connect()-less sockets
# do), whether the server runs the library or not: every request answered, byte for
# byte. Without that the destination was dropped and the send failed with EINVAL.
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
. "$(dirname -- "$0")/lib.sh"

smc_init
smc_require_cmd python3

SERVER='
import socket, sys
l = socket.socket()
l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
l.bind(("127.0.0.1", int(sys.argv[1])))
l.listen(8)
print("listening", flush=True)
for _ in range(int(sys.argv[2])):
    c, _ = l.accept()
    d = b""
    while not d.endswith(b"\n"):
        b = c.recv(4096)
        if not b:
            break
        d += b
    c.sendall(b"echo " + d)
    c.close()
'
CLIENT='
import socket, sys
MSG_FASTOPEN = 0x20000000
port, how = int(sys.argv[1]), sys.argv[2]
s = socket.socket()
line = ("fast open by %s\n" % how).encode()
if how == "sendto":
    n = s.sendto(line, MSG_FASTOPEN, ("127.0.0.1", port))
else:
    n = s.sendmsg([line], [], MSG_FASTOPEN, ("127.0.0.1", port))
assert n == len(line), n
d = b""
while not d.endswith(b"\n"):
    b = s.recv(4096)
    if not b:
        break
    d += b
sys.stdout.write(d.decode())
'

for server in preloaded plain; do
	srv=$(smc_stats_dir "server-$server")
	cli=$(smc_stats_dir "client-$server")
	[ "$server" = plain ] && srv=-
	smc_free_port port
	smc_start_server "fastopen-$server" "$srv" python3 -c "$SERVER" "$port" 2
	smc_wait_port "fastopen-$server" "$port"
	for how in sendto sendmsg; do
		out=$(smc_run "$cli" python3 -c "$CLIENT" "$port" "$how" 2>&1)
		smc_assert_eq "$server server, $how(MSG_FASTOPEN)" "$out" "echo fast open by $how"
	done
	smc_wait_server_exit "fastopen-$server" 20
	smc_require_stats "$cli"
	smc_log "stats client ($server server): $(smc_stats_summary "$cli")"
	smc_assert_eq "$server server: shm connections" "$(smc_stats "$cli" '.connections.shm')" 0
	smc_assert_eq "$server server: aborts" "$(smc_stats "$cli" '.events.aborts')" 0
done
smc_pass
