#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
"""mem_cap_stream: connections that stream count their rings against SMC_MEM_CAP.

    mem_cap_stream.py server PORT N BYTES
    mem_cap_stream.py client PORT N BYTES

The server accepts N connections one after the other and reads BYTES from each (then
keeps it open); the client opens them one after the other, sends BYTES on each and
waits for the server's one-byte receipt before it opens the next, so each connection
has filled the server's ring before the next one's handshake is judged. Once all N are
done the client sends "x" on each and the server echoes it, so every connection is
still open and working at the end. Prints "OK" and exits 0, or exits 1 with a reason.
"""
import socket
import sys


def recv_exact(s, n):
    got = 0
    while got < n:
        b = s.recv(min(1 << 20, n - got))
        if not b:
            sys.exit("EOF after %d of %d bytes" % (got, n))
        got += len(b)


def main():
    role, port, n, nbytes = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    conns = []
    if role == "server":
        ls = socket.socket()
        ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        ls.bind(("127.0.0.1", port))
        ls.listen(16)
        print("LISTENING", flush=True)
        for _ in range(n):
            s, _ = ls.accept()
            recv_exact(s, nbytes)
            s.sendall(b"r")
            conns.append(s)
        for s in conns:
            recv_exact(s, 1)
            s.sendall(b"y")
        for s in conns:
            if s.recv(1) != b"":
                sys.exit("data after the last exchange")
            s.close()
    else:
        block = bytes(range(256)) * 4096
        for _ in range(n):
            s = socket.create_connection(("127.0.0.1", port))
            left = nbytes
            while left:
                k = min(left, len(block))
                s.sendall(block[:k])
                left -= k
            if s.recv(1) != b"r":
                sys.exit("no receipt")
            conns.append(s)
        for s in conns:
            s.sendall(b"x")
            if s.recv(1) != b"y":
                sys.exit("no echo")
        for s in conns:
            s.close()
    print("OK", flush=True)


main()
