# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#
# handoff.py: connections that leave the library's sight, for
# tests/integration/handoff.sh.
#
#   mp-server PORT N       accepts N connections and hands each, with
#                          multiprocessing.reduction.send_handle (SCM_RIGHTS), to one of
#                          two worker processes that echo it to its end; prints "HANDED N"
#   client PORT MSGS SIZE  sends MSGS lines of SIZE bytes, reading each echo back, then
#                          half-closes and reads to the end: prints "OK" when every byte
#                          came back in order, exits 1 otherwise
#   stdio-client PORT      writes a line with fdopen() + fputs() + fflush() (C stdio)
#                          and prints the echo it reads back
#   stdio-loop PORT N      N connections one after the other, each with a line and its
#                          echo, then a line written through a FILE on a dup of it
#                          (fdopen, fputs, fflush) and its echo read,
#                          then fclose() (libc's own close, which no wrapper sees) and
#                          close(): prints "EVENTFDS first=A last=B", the process's
#                          eventfds after the first connection and after the last
#   listener-server PORT K serves K connections (a line, its echo), then passes its
#                          listener to a child process over a unix socket pair
#                          (socket.send_fds) and stops accepting: the child serves the
#                          rest until a connection says QUIT; prints "SERVED P K" and
#                          "SERVED C n" (the child's count)
#   short-clients PORT N   N connections one after the other, each a line and its echo
#                          (10 s at most each), then QUIT: prints "OK N", exits 1 on a
#                          wrong or missing answer
import multiprocessing as mp
import os, socket, sys
from multiprocessing import reduction


def worker(pipe, count):
    for _ in range(count):
        h = reduction.recv_handle(pipe)
        c = socket.socket(fileno=h)
        while True:
            d = c.recv(65536)
            if not d:
                break
            c.sendall(d)
        c.close()


def mp_server(port, n):
    mp.set_start_method("fork")
    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("127.0.0.1", port))
    ls.listen(64)
    pipes, procs = [], []
    for k in range(2):
        a, b = mp.Pipe()
        p = mp.Process(target=worker, args=(b, (n + 1 - k) // 2))
        p.start()
        pipes.append(a)
        procs.append(p)
    print("LISTENING", flush=True)
    for i in range(n):
        c, _ = ls.accept()
        reduction.send_handle(pipes[i % 2], c.fileno(), procs[i % 2].pid)
        c.close()
    for p in procs:
        p.join()
    print("HANDED", n, flush=True)


def client(port, msgs, size):
    s = socket.create_connection(("127.0.0.1", port))
    s.settimeout(60)
    sent = got = b""
    for i in range(msgs):
        m = (b"%d-%d:" % (os.getpid(), i) + bytes(97 + (j + i) % 26 for j in range(size)))[:size]
        m += b"\n"
        s.sendall(m)
        sent += m
        while len(got) < len(sent):
            d = s.recv(65536)
            if not d:
                break
            got += d
    s.shutdown(socket.SHUT_WR)
    while True:
        d = s.recv(65536)
        if not d:
            break
        got += d
    if got != sent:
        print("MISMATCH sent=%d got=%d" % (len(sent), len(got)), flush=True)
        sys.exit(1)
    print("OK", flush=True)


def libc_stdio():
    """The C library's fdopen, fputs, fflush and fclose, through ctypes."""
    import ctypes

    libc = ctypes.CDLL(None)
    libc.fdopen.restype = ctypes.c_void_p
    libc.fdopen.argtypes = [ctypes.c_int, ctypes.c_char_p]
    libc.fputs.argtypes = [ctypes.c_char_p, ctypes.c_void_p]
    libc.fflush.argtypes = [ctypes.c_void_p]
    libc.fclose.argtypes = [ctypes.c_void_p]
    return libc


def recv_line(s):
    """What s sends up to and including its first newline (less at EOF)."""
    got = b""
    while not got.endswith(b"\n"):
        d = s.recv(100)
        if not d:
            break
        got += d
    return got


def stdio_echo(libc, port, line, warm=False):
    """Connects, writes line through a FILE on a dup of the socket, reads the echo:
    returns the socket, the FILE and what came back. warm: a first line and its echo
    go through the socket itself, so the FILE takes an established connection."""
    s = socket.create_connection(("127.0.0.1", port))
    s.settimeout(30)
    if warm:
        s.sendall(b"warm\n")
        recv_line(s)
    f = libc.fdopen(os.dup(s.fileno()), b"w")
    libc.fputs(line, f)
    libc.fflush(f)
    return s, f, recv_line(s)


def stdio_client(port):
    _, _, got = stdio_echo(libc_stdio(), port, b"hello-through-stdio\n")
    print(got.decode().strip(), flush=True)


def count_eventfds():
    n = 0
    for f in os.listdir("/proc/self/fd"):
        try:
            if os.readlink("/proc/self/fd/" + f) == "anon_inode:[eventfd]":
                n += 1
        except OSError:
            pass
    return n


def stdio_loop(port, n):
    libc = libc_stdio()
    first = None
    for i in range(n):
        s, f, got = stdio_echo(libc, port, b"line-%d\n" % i, warm=True)
        if got != b"line-%d\n" % i:
            print("WRONG echo on connection %d: %r" % (i, got), flush=True)
            sys.exit(1)
        libc.fclose(f)
        s.close()
        if first is None:
            first = count_eventfds()
    print("EVENTFDS first=%d last=%d" % (first, count_eventfds()), flush=True)


def serve_one(c):
    c.settimeout(30)
    d = recv_line(c)
    c.sendall(d)
    c.close()
    return d


def listener_server(port, k):
    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("127.0.0.1", port))
    ls.listen(64)
    for _ in range(k - 1):
        c, _ = ls.accept()
        serve_one(c)
    # the k-th is answered once the listener is passed: the client's next connection
    # comes after the pass (one offered into a pool before it is a known problem)
    last, _ = ls.accept()
    a, b = socket.socketpair()
    pid = os.fork()
    if pid == 0:
        a.close()
        ls.close()
        _, fds, _, _ = socket.recv_fds(b, 16, 1)
        child_ls = socket.socket(fileno=fds[0])
        n = 0
        while True:
            c, _ = child_ls.accept()
            d = serve_one(c)
            if d == b"QUIT\n":
                break
            n += 1
        print("SERVED C %d" % n, flush=True)
        sys.exit(0)  # exit(): the library writes the child's stats
    b.close()
    socket.send_fds(a, [b"L"], [ls.fileno()])
    serve_one(last)
    print("SERVED P %d" % k, flush=True)
    os.waitpid(pid, 0)


def short_clients(port, n):
    for i in range(n + 1):
        s = socket.create_connection(("127.0.0.1", port))
        s.settimeout(10)
        m = b"QUIT\n" if i == n else b"line-%d\n" % i
        s.sendall(m)
        try:
            got = recv_line(s)
        except socket.timeout:
            print("TIMEOUT on connection %d" % i, flush=True)
            sys.exit(1)
        if got != m:
            print("WRONG answer on connection %d: %r" % (i, got), flush=True)
            sys.exit(1)
        s.close()
    print("OK %d" % n, flush=True)


role = sys.argv[1]
if role == "mp-server":
    mp_server(int(sys.argv[2]), int(sys.argv[3]))
elif role == "client":
    client(int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]))
elif role == "stdio-client":
    stdio_client(int(sys.argv[2]))
elif role == "stdio-loop":
    stdio_loop(int(sys.argv[2]), int(sys.argv[3]))
elif role == "listener-server":
    listener_server(int(sys.argv[2]), int(sys.argv[3]))
elif role == "short-clients":
    short_clients(int(sys.argv[2]), int(sys.argv[3]))
else:
    sys.exit("usage: handoff.py mp-server|client|stdio-client|listener-server|short-clients ...")
