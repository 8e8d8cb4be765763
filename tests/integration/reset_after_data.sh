#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#
# What arrived before a reset is read before the reset is reported, as tcp_recvmsg()
# empties the receive queue before it returns sk_err:
#   linger0:  the server writes a reply and closes with SO_LINGER {1, 0}; the client
#             polls, epolls or selects, then reads: the reply, then ECONNRESET, then EOF
#             (the reply was thrown away: the first read said ECONNRESET);
#   waiting:  the client already waits in poll() when the reply and the reset come (the
#             reply was lost in 5 to 29 runs of 40);
#   killed:   the server writes its reply and is killed with the client's last bytes
#             unread: the reply, then ECONNRESET (a client that polled first read the
#             reply, then a clean EOF: a truncated answer looked whole).
# Each case runs ROUNDS times over plain TCP and then with both ends preloaded; every
# preloaded run must read what the plain ones read, and its connection must have been
# upgraded.
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
. "$(dirname -- "$0")/lib.sh"

ROUNDS=${RESET_ROUNDS:-5}
smc_require_cmd python3
smc_init
export SMC_SHORT_CONN_US=0 # a full handshake for each connection, no pool

cat >"$SMC_TMP/reset.py" <<'PY'
import os, select, signal, socket, struct, sys, time
case, how = sys.argv[1], sys.argv[2]
l = socket.socket()
l.bind(("127.0.0.1", 0))
l.listen(1)
pid = os.fork()
if pid == 0:
    c, _ = l.accept()
    l.close()
    c.recv(3)
    if case == "waiting":
        time.sleep(0.2)
    c.sendall(b"the reply")
    if case == "killed":
        time.sleep(0.2)
        os.kill(os.getpid(), signal.SIGKILL)
    c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    c.close()
    os._exit(0)
s = socket.create_connection(l.getsockname())
l.close()
s.sendall(b"req")
if case == "killed":
    time.sleep(0.05)
    s.sendall(b"u" * 1000)  # never read by the server: its kernel resets
if case != "waiting":
    time.sleep(0.5)
if how == "poll":
    p = select.poll()
    p.register(s, select.POLLIN)
    p.poll(2000)
elif how == "epoll":
    ep = select.epoll()
    ep.register(s, select.EPOLLIN)
    ep.poll(2)
elif how == "select":
    select.select([s], [], [], 2)
out = []
for _ in range(3):
    try:
        out.append(s.recv(1000))
    except OSError as e:
        out.append(os.strerror(e.errno))
os.waitpid(pid, 0)
print(out)
PY

for variant in "linger0 poll" "linger0 epoll" "linger0 select" "waiting poll" "killed poll"; do
	read -r case how <<<"$variant"
	name=$case-$how
	dir=$(smc_stats_dir "$name")
	smc_same_as_tcp "$name" "$ROUNDS" "$dir" python3 "$SMC_TMP/reset.py" "$case" "$how"
	smc_require_stats "$dir"
	# the clients' (the servers end by _exit or SIGKILL, which write no stats)
	smc_assert_ge "$name: upgraded connections" \
		"$(smc_stats "$dir" ".connections.$SMC_TEST_EXPECT")" "$ROUNDS"
done
smc_pass
