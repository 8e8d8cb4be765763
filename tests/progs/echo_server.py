# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
"""echo_server.py N [threads]: listens on 127.0.0.1 (a free port, printed as "port P"),
then accepts N connections and sends back everything each one sends until it closes;
exits 0 after the Nth. One connection after the other, or with "threads" each in a
thread of its own (a client that holds one connection while it makes the next)."""
import socket
import sys
import threading


def echo(c):
    while True:
        d = c.recv(65536)
        if not d:
            break
        c.sendall(d)
    c.close()


ls = socket.socket()
ls.bind(("127.0.0.1", 0))
ls.listen(8)
print("port %d" % ls.getsockname()[1], flush=True)
threads = []
for _ in range(int(sys.argv[1])):
    c, _ = ls.accept()
    if sys.argv[2:] == ["threads"]:
        threads.append(threading.Thread(target=echo, args=(c,)))
        threads[-1].start()
    else:
        echo(c)
for t in threads:
    t.join()
