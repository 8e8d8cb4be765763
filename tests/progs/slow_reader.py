#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#
# slow_reader.py OUT PORT [ADDR]: accepts one connection on ADDR:PORT (default
# 127.0.0.1) and stores what it reads into OUT, 16 KiB at a time with a 10 ms pause
# after each: a reader slower than the network (as a loaded host is), which still has
# most of an RMB to read when the writer's process is gone (tests/rdma/close.sh,
# tests/vm/twovm_stream.sh).
import socket
import sys
import time

l = socket.socket()
l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
l.bind((sys.argv[3] if len(sys.argv) > 3 else "127.0.0.1", int(sys.argv[2])))
l.listen(1)
c, _ = l.accept()
with open(sys.argv[1], "wb") as out:
    while True:
        b = c.recv(16384)
        if not b:
            break
        out.write(b)
        time.sleep(0.01)
