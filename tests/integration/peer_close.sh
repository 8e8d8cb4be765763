#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#
# What a program sees of its socket around a close or a reset, as over TCP:
#   linger0:  the server writes its reply and closes with SO_LINGER {1, 0}; the client
#             polls, epolls or selects, then reads: the reply, then ECONNRESET, then EOF
#             (tcp_recvmsg empties the receive queue before it reports sk_err; the reply
#             was thrown away: the first read said ECONNRESET);
#   waiting:  the same while the client already waits in poll() (the reply was lost in 5
#             to 29 runs of 40);
#   killed:   the server writes its reply and is killed with the client's last bytes
#             unread: the reply, then ECONNRESET (a client that polled first read the
#             reply, then a clean EOF: a truncated answer looked whole);
#   closed:   the server answers, and once the client has read it, closes (no linger);
#             the client reads EOF, then asks getpeername() and SO_ERROR (an event loop
#             on POLLHUP or at EOF): the address and 0 (the peer's close resets the TCP
#             channel of a connection on the rings: ENOTCONN and ECONNRESET came through);
#   shut_rd:  after its own shutdown(SHUT_RD) the client polls: POLLIN|POLLOUT|POLLRDHUP,
#             as tcp_poll says for RCV_SHUTDOWN (POLLRDHUP was missing);
#   peek_off: SO_PEEK_OFF 0, then two MSG_PEEKs of 4 bytes and a read: the second peek
#             goes on from where the first ended, and the offset follows (the connection
#             goes back to TCP, which keeps the offset; the rings' peek started over).
# Each case runs ROUNDS times over plain TCP, then with both ends preloaded: the same
# output every time, and the connection upgraded first.
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
. "$(dirname -- "$0")/lib.sh"

ROUNDS=${PEER_CLOSE_ROUNDS:-5}
smc_require_cmd python3
smc_init
export SMC_SHORT_CONN_US=0 # a full handshake for each connection, no pool

cat >"$SMC_TMP/close.py" <<'PY'
import os, select, signal, socket, struct, sys, time
case, how = sys.argv[1], sys.argv[2]
SO_PEEK_OFF = getattr(socket, "SO_PEEK_OFF", 42)  # Linux's number, not in Python 3.11
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
    c.sendall(b"01234567")
    if case == "killed":
        time.sleep(0.2)
        os.kill(os.getpid(), signal.SIGKILL)
    if case in ("linger0", "waiting"):
        c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    elif case == "closed":
        time.sleep(0.3)  # the client has read everything: an idle keep-alive close
    else:
        try:
            c.recv(1)  # until the client closes (a reset: it left bytes unread)
        except OSError:
            pass
    c.close()
    os._exit(0)
addr = l.getsockname()
s = socket.create_connection(addr)
l.close()
s.sendall(b"req")
out = []
if case in ("linger0", "waiting", "killed"):
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
    for _ in range(3):
        try:
            out.append(s.recv(1000))
        except OSError as e:
            out.append(os.strerror(e.errno))
elif case == "closed":
    out.append(s.recv(100))
    time.sleep(0.6)
    out.append(s.recv(100))
    try:
        out.append("peer=%s" % (s.getpeername() == addr))
    except OSError as e:
        out.append("peer:" + os.strerror(e.errno))
    out.append("so_error=%d" % s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR))
elif case == "shut_rd":
    time.sleep(0.3)
    s.shutdown(socket.SHUT_RD)
    p = select.poll()
    p.register(s, select.POLLIN | select.POLLOUT | select.POLLRDHUP)
    out.append(hex(p.poll(1000)[0][1]))
elif case == "peek_off":
    time.sleep(0.3)
    s.setsockopt(socket.SOL_SOCKET, SO_PEEK_OFF, 0)
    out.append(s.recv(4, socket.MSG_PEEK))
    out.append(s.recv(4, socket.MSG_PEEK))
    out.append(s.recv(4))
    out.append("off=%d" % s.getsockopt(socket.SOL_SOCKET, SO_PEEK_OFF))
s.close()
os.waitpid(pid, 0)
print(out)
PY

for variant in "linger0 poll" "linger0 epoll" "linger0 select" "waiting poll" "killed poll" \
	"closed -" "shut_rd -" "peek_off -"; do
	read -r case how <<<"$variant"
	name=$case
	[ "$how" = - ] || name+=-$how
	dir=$(smc_stats_dir "$name")
	smc_same_as_tcp "$name" "$ROUNDS" "$dir" python3 "$SMC_TMP/close.py" "$case" "$how"
	smc_require_stats "$dir"
	# the clients' (a server that ends by _exit or SIGKILL writes no stats)
	smc_assert_ge "$name: upgraded connections" \
		"$(smc_stats "$dir" ".connections.$SMC_TEST_EXPECT")" "$ROUNDS"
	# each client's request went through the rings
	smc_assert_ge "$name: payload bytes over $SMC_TEST_EXPECT" \
		"$(smc_stats "$dir" ".bytes.$SMC_TEST_EXPECT.sent + .bytes.$SMC_TEST_EXPECT.received")" \
		$((3 * ROUNDS))
done
smc_pass
