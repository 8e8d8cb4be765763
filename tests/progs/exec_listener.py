# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#
# exec_listener.py: listeners and connections handed to a new program by exec, for
# tests/integration/exec_listener.sh.
#
#   listen-exec PORT N [nopreload]  listens on 127.0.0.1:PORT, then execs itself in the
#                                   "serve" role with the listener as fd 3 (a server
#                                   that re-execs itself, inetd's wait services); with
#                                   nopreload LD_PRELOAD is taken out of the new
#                                   program's environment first
#   listen-exec-fail PORT N         listens, then tries to exec a program that does not
#                                   exist (ENOENT) with the listener inheritable, and
#                                   serves in the same image; prints "EXEC FAILED"
#   fork-exec PORT                  listens, forks; the child execs the "serve" role
#                                   without LD_PRELOAD with the listener as fd 3 and
#                                   serves for ever, the parent too (a listener shared
#                                   with a process that keeps accepting)
#   listen-serve PORT N             listens and serves in the same image (a control)
#   serve N                         accepts N connections on fd 3 (LISTEN_FDS style:
#                                   systemd socket activation), answers each request
#                                   line with the line upper-cased, closes; prints
#                                   "SERVING" before the first accept, "SERVED N" at
#                                   the end
#   client PORT N                   N connections in a row, each sends "hello-I-PID\n"
#                                   and must read back exactly that line upper-cased
#                                   and then the end of the stream; prints "CLIENT OK"
#   echo PORT N                     listens on 127.0.0.1:PORT and echoes each of N
#                                   connections (a thread each) until its end; prints
#                                   "ECHOED N"
#   connect-exec PORT               nonblocking connect(), then at once execs /bin/sh
#                                   with the connecting socket as fd 3, which writes
#                                   "hello-from-sh", reads the echo and prints it
# Exit status 0 on success, 1 on a wrong answer or an I/O error.
import os, socket, sys


def serve(n):
    ls = socket.socket(fileno=3)
    served = 0
    print("SERVING", flush=True)
    while n < 0 or served < n:
        # a connection reset while it negotiated reads ECONNRESET, as a TCP client's
        # reset in the accept queue does
        try:
            c, _ = ls.accept()
            line = b""
            while not line.endswith(b"\n"):
                d = c.recv(4096)
                if not d:
                    break
                line += d
        except (ConnectionAbortedError, ConnectionResetError):
            continue
        c.sendall(line.upper())
        c.close()
        served += 1
    print("SERVED", served, flush=True)


def client(port, n):
    for i in range(n):
        s = socket.create_connection(("127.0.0.1", port))
        req = b"hello-%d-%d\n" % (i, os.getpid())
        s.sendall(req)
        got = b""
        while True:
            d = s.recv(4096)
            if not d:
                break
            got += d
        s.close()
        if got != req.upper():
            print("CLIENT BAD connection %d: sent %r, got %r" % (i, req, got), flush=True)
            sys.exit(1)
    print("CLIENT OK", flush=True)


def listen_on_3(port):
    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("127.0.0.1", port))
    ls.listen(16)
    os.dup2(ls.fileno(), 3)
    return ls


def listen_exec(port, n, nopreload):
    ls = listen_on_3(port)
    os.set_inheritable(3, True)  # dup2 onto itself (fileno 3) keeps FD_CLOEXEC
    env = dict(os.environ)
    if nopreload:
        env.pop("LD_PRELOAD", None)
    print("LISTENING", flush=True)
    os.execve(sys.executable, [sys.executable, __file__, "serve", str(n)], env)


def fork_exec(port):
    ls = listen_on_3(port)
    os.set_inheritable(3, True)
    print("LISTENING", flush=True)
    if os.fork() == 0:
        env = dict(os.environ)
        env.pop("LD_PRELOAD", None)
        os.execve(sys.executable, [sys.executable, __file__, "serve", "-1"], env)
    serve(-1)


def listen_exec_fail(port, n):
    ls = listen_on_3(port)
    os.set_inheritable(3, True)
    print("LISTENING", flush=True)
    try:
        os.execve("/nonexistent/smc-preload-exec-listener", ["x"], dict(os.environ))
    except FileNotFoundError:
        print("EXEC FAILED", flush=True)
    serve(n)


def echo(port, n):
    import threading

    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("127.0.0.1", port))
    ls.listen(64)
    print("LISTENING", flush=True)

    def relay(c):
        try:
            while True:
                d = c.recv(65536)
                if not d:
                    break
                c.sendall(d)
        except OSError as e:
            print("ECHO ERROR", e, flush=True)
        c.close()

    threads = []
    for _ in range(n):
        c, _ = ls.accept()
        t = threading.Thread(target=relay, args=(c,))
        t.start()
        threads.append(t)
    for t in threads:
        t.join()
    print("ECHOED", n, flush=True)


def connect_exec(port):
    s = socket.socket()
    s.setblocking(False)
    s.connect_ex(("127.0.0.1", port))
    os.dup2(s.fileno(), 3)
    os.set_inheritable(3, True)
    # sh's head reads once the connect is done: blocking, so that it waits for the echo
    # (a nonblocking read can come before it, with or without the library)
    os.set_blocking(3, True)
    os.execv("/bin/sh", ["sh", "-c", "echo hello-from-sh >&3; head -c 14 <&3"])


role = sys.argv[1]
if role == "serve":
    serve(int(sys.argv[2]))
elif role == "client":
    client(int(sys.argv[2]), int(sys.argv[3]))
elif role == "listen-serve":
    listener = listen_on_3(int(sys.argv[2]))  # kept: its fd may be 3 itself
    print("LISTENING", flush=True)
    serve(int(sys.argv[3]))
elif role == "listen-exec":
    listen_exec(int(sys.argv[2]), int(sys.argv[3]), len(sys.argv) > 4 and sys.argv[4] == "nopreload")
elif role == "fork-exec":
    fork_exec(int(sys.argv[2]))
elif role == "listen-exec-fail":
    listen_exec_fail(int(sys.argv[2]), int(sys.argv[3]))
elif role == "echo":
    echo(int(sys.argv[2]), int(sys.argv[3]))
elif role == "connect-exec":
    connect_exec(int(sys.argv[2]))
else:
    sys.exit("usage: exec_listener.py listen-exec|listen-exec-fail|fork-exec|listen-serve|serve|client|echo|connect-exec ...")
