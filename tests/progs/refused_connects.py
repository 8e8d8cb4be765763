#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#
# refused_connects.py PORT: 50 nonblocking connects to a local port nobody listens on,
# each refused (ECONNREFUSED from SO_ERROR, as a ZeroMQ client's reconnects see it),
# then one connection to a listener of its own that carries a byte. Under the library
# the stats must count two connections (that one, from both ends), none of the refused.
import errno, select, socket, sys

port = int(sys.argv[1])
for _ in range(50):
    s = socket.socket()
    s.setblocking(False)
    try:
        s.connect(("127.0.0.1", port))
    except BlockingIOError:
        select.select([], [s], [], 5)
    except ConnectionRefusedError:
        pass
    err = s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
    if err not in (0, errno.ECONNREFUSED):
        sys.exit("unexpected error %d" % err)
    if err == 0:
        sys.exit("connected to a port nobody listens on")
    s.close()
l = socket.socket()
l.bind(("127.0.0.1", 0))
l.listen(1)
s = socket.socket()
s.setblocking(False)
try:
    s.connect(l.getsockname())
except BlockingIOError:
    pass
a, _ = l.accept()
a.sendall(b"x")
s.setblocking(True)
if s.recv(1) != b"x":
    sys.exit("the connection to our own listener failed")
print("OK")
