#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#
# What a program asks of its socket around a close, as over TCP:
#   closed:   the server answers, and once the client has read it, closes (no linger);
#             the client reads EOF, then asks getpeername() and SO_ERROR (an event loop on POLLHUP or at
#             EOF): the address and 0 (the peer's close resets the TCP channel of a
#             connection on the rings: ENOTCONN and ECONNRESET came through);
#   shut_rd:  after its own shutdown(SHUT_RD) the client polls: POLLIN|POLLOUT|POLLRDHUP,
#             as tcp_poll says for RCV_SHUTDOWN (POLLRDHUP was missing);
#   peek_off: SO_PEEK_OFF 0, then two MSG_PEEKs of 4 bytes and a read: successive peeks go
#             on from where the last ended, and the offset reads 8 (the connection goes
#             back to TCP, which keeps the offset; the rings' peek started over).
# Each case runs ROUNDS times over plain TCP, then with both ends preloaded: the same
# output every time, and the connection upgraded first.
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
. "$(dirname -- "$0")/lib.sh"

ROUNDS=${PEER_CLOSE_ROUNDS:-5}
smc_require_cmd python3
smc_init
export SMC_SHORT_CONN_US=0

cat >"$SMC_TMP/close.py" <<'PY'
import os, select, socket, sys, time
case = sys.argv[1]
SO_PEEK_OFF = getattr(socket, "SO_PEEK_OFF", 42)  # Linux's number, not in Python 3.11
l = socket.socket()
l.bind(("127.0.0.1", 0))
l.listen(1)
pid = os.fork()
if pid == 0:
    c, _ = l.accept()
    l.close()
    c.recv(3)
    c.sendall(b"01234567")
    if case == "closed":
        time.sleep(0.3)  # the client has read everything: an idle keep-alive close
        c.close()
    else:
        try:
            c.recv(1)  # until the client closes (a reset: it left bytes unread)
        except OSError:
            pass
    os._exit(0)
addr = l.getsockname()
s = socket.create_connection(addr)
l.close()
s.sendall(b"req")
out = []
if case == "closed":
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

for case in closed shut_rd peek_off; do
	dir=$(smc_stats_dir "$case")
	smc_same_as_tcp "$case" "$ROUNDS" "$dir" python3 "$SMC_TMP/close.py" "$case"
	smc_require_stats "$dir"
	smc_assert_ge "$case: upgraded connections (clients)" \
		"$(smc_stats "$dir" ".connections.$SMC_TEST_EXPECT")" "$ROUNDS"
done
smc_pass
