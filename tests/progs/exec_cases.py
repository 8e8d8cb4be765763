# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
"""Connections across exec in two corners where the new image must see what TCP shows.

  exec_cases.py epoll-server PORT    accept, register the connection in an epoll set,
                                     make both inheritable, exec this file as
                                     epoll-image: it waits on the inherited set (5 s),
                                     reads the client's line, answers "ECHO <line>".
  exec_cases.py epoll-client PORT    connect, wait 0.5 s (the server has exec'd), send a
                                     line, print what comes back.
  exec_cases.py done-server PORT OUT recv|send
                                     accept; a forked child sleeps 0.5 s in bash and
                                     execs python on the socket (fd 5); meanwhile the
                                     parent reads the request to EOF, answers, shuts
                                     down and closes: the child's image then reads
                                     (EOF) or writes (EPIPE) a finished connection and
                                     writes what it saw into OUT.
  exec_cases.py done-client PORT     send 64 KiB, half-close, read the answer.
"""
import os
import select
import socket
import sys
import time

mode, port = sys.argv[1], int(sys.argv[2])


def read_all(s, size=65536):
    got = b""
    while True:
        d = s.recv(size)
        if not d:
            return got
        got += d


def listen():
    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("127.0.0.1", port))
    ls.listen(1)
    print("listening", flush=True)
    c, _ = ls.accept()
    ls.close()
    return c


if mode == "epoll-server":
    c = listen()
    ep = select.epoll()
    ep.register(c.fileno(), select.EPOLLIN)
    fd, efd = c.detach(), ep.fileno()
    os.set_inheritable(fd, True)
    os.set_inheritable(efd, True)
    os.execv(sys.executable, [sys.executable, __file__, "epoll-image", str(port), str(fd), str(efd)])
elif mode == "epoll-image":
    fd, efd = int(sys.argv[3]), int(sys.argv[4])
    ep = select.epoll.fromfd(efd)
    s = socket.socket(fileno=fd)
    s.setblocking(False)
    got = b""
    while not got.endswith(b"\n"):
        if not ep.poll(5):
            print("IMAGE: the inherited epoll set reported nothing in 5 s", flush=True)
            break
        try:
            got += s.recv(100)
        except BlockingIOError:
            pass
    s.setblocking(True)
    s.sendall(b"ECHO " + got)
    s.close()
elif mode == "epoll-client":
    s = socket.create_connection(("127.0.0.1", port))
    time.sleep(0.5)
    s.sendall(b"hello\n")
    s.settimeout(10)
    print("CLIENT got", read_all(s), flush=True)
elif mode == "done-server":
    out, what = sys.argv[3], sys.argv[4]
    c = listen()
    pid = os.fork()
    if pid == 0:
        os.dup2(c.fileno(), 5)
        image = """
import socket, sys
s = socket.socket(fileno=5)
try:
    r = 'recv %r' % s.recv(100) if sys.argv[2] == 'recv' else 'send %r' % s.send(b'late')
except OSError as e:
    r = 'error %s' % type(e).__name__
open(sys.argv[1], 'w').write(r + '\\n')
"""
        os.execv("/bin/bash", ["bash", "-c", 'sleep 0.5; exec "$0" -c "$1" "$2" "$3"',
                               sys.executable, image, out, what])
    c.sendall(b"GOT %d" % len(read_all(c)))
    c.shutdown(socket.SHUT_WR)
    c.close()
    os.waitpid(pid, 0)
elif mode == "done-client":
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(b"x" * 65536)
    s.shutdown(socket.SHUT_WR)
    got = read_all(s)
    s.close()
    print("CLIENT got", got, flush=True)
