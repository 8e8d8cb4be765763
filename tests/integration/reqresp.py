# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#
# reqresp.py server|client HOST PORT REQUEST RESPONSE: one fixed request and response over
# one TCP connection (each with a newline), for tests that compare the bytes on the wire
# (netns.sh, netns_exec.sh). The server takes the first connection that is not reset
# while it negotiates, reads the request, answers, half-closes and drains; the client
# sends and reads to the end. Each prints OK and exits 0 when it got exactly the other's
# bytes, else BAD and exits 1.
import socket, sys
mode, host, port, req, resp = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
req, resp = (req + "\n").encode(), (resp + "\n").encode()

def read_all(s, until_nl):
    data = b""
    while not (until_nl and data.endswith(b"\n")):
        d = s.recv(4096)
        if not d:
            break
        data += d
    return data

if mode == "server":
    l = socket.socket()
    l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    l.bind((host, port))
    l.listen(4)
    while True:
        # a connection reset while it negotiated reads ECONNRESET, as a TCP client's
        # reset in the accept queue does (ECONNABORTED from accept() on other systems)
        try:
            c, _ = l.accept()
            got = read_all(c, True)
            break
        except (ConnectionAbortedError, ConnectionResetError):
            print("accept: connection reset during negotiation")
    c.sendall(resp)
    c.shutdown(socket.SHUT_WR)
    read_all(c, False)
    c.close()
else:
    c = socket.create_connection((host, port))
    c.sendall(req)
    got = read_all(c, False)
    c.close()
want = req if mode == "server" else resp
print("OK" if got == want else "BAD %r" % got)
sys.exit(0 if got == want else 1)
