# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
"""echo_server.py N: listens on 127.0.0.1 (a free port, printed as "port P"), then
accepts N connections one after the other and sends back everything each one sends
until it closes; exits 0 after the Nth."""
import socket
import sys

ls = socket.socket()
ls.bind(("127.0.0.1", 0))
ls.listen(8)
print("port %d" % ls.getsockname()[1], flush=True)
for _ in range(int(sys.argv[1])):
    c, _ = ls.accept()
    while True:
        d = c.recv(65536)
        if not d:
            break
        c.sendall(d)
    c.close()
