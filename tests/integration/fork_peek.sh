#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#
# A connection shared by two processes after fork(), seen from the one that did not do
# the reading or writing: each process keeps its own copy of its side's cursors, and
# readiness must count from the shared ones, as TCP's one socket does.
#   pollin  - the child reads everything there was; the parent's poll() then finds
#             nothing to read (the parent's stale cursor said 5 bytes: a spurious POLLIN);
#   exit    - the client's child writes, its parent reads; the server answers and leaves
#             by _exit() (an rsync daemon's child): the parent reads the answer, then EOF,
#             as over TCP (its stale producer cursor made the peer's exit look like a
#             death with bytes unread: ECONNRESET, and rsync's "error in socket IO");
#   readers - the parent and its child read one connection at once while the peer
#             sends 8 MiB: together they read all of it, nobody gets an error (a stale
#             consumer cursor made the peer's producer cursor look invalid: the
#             connection was aborted, and one side saw a silent early EOF);
#   writers - the parent and its child write 8 MiB each into one connection at once:
#             the peer reads all 16 MiB, and EOF;
#   flags   - a child sets O_NONBLOCK on the shared socket, then another child sets
#             SO_RCVTIMEO: the parent's recv() follows each (EAGAIN at once, then after
#             the timeout), as the flags belong to the one open file and socket.
# Each case runs plain first (the reference), then with every process under the library.
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
. "$(dirname -- "$0")/lib.sh"

smc_init
smc_require_cmd python3

POLLIN='
import os, select, socket, sys, time
l = socket.socket()
l.bind(("127.0.0.1", 0))
l.listen(1)
r, w = os.pipe()
if os.fork() == 0:
    c, _ = l.accept()
    c.sendall(b"hello")
    c.recv(1)
    os.read(r, 1)
    c.close()
    os._exit(0)
s = socket.create_connection(l.getsockname())
s.sendall(b"x")
time.sleep(0.2)
pid = os.fork()
if pid == 0:
    d = b""
    while len(d) < 5:
        d += s.recv(5)
    os._exit(0 if d == b"hello" else 3)
_, st = os.waitpid(pid, 0)
p = select.poll()
p.register(s, select.POLLIN)
ev = p.poll(300)
os.write(w, b"k")
print("reader status", st, "parent poll", ev, flush=True)
sys.exit(0 if st == 0 and not ev else 1)
'
EXIT='
import os, socket, sys
N = 4000000
l = socket.socket()
l.bind(("127.0.0.1", 0))
l.listen(1)
if os.fork() == 0:
    c, _ = l.accept()
    c.sendall(b"d" * N)
    got = b""
    while not got.endswith(b"DONE"):
        got += c.recv(65536)
    c.sendall(b"BYE!")
    os._exit(0)
s = socket.create_connection(l.getsockname())
pid = os.fork()
if pid == 0:
    s.sendall(b"DONE")
    os._exit(0)
n = 0
while n < N + 4:
    b = s.recv(1 << 20)
    if not b:
        print("early EOF after", n, flush=True)
        sys.exit(1)
    n += len(b)
try:
    last = s.recv(16)
except OSError as e:
    print("after the answer:", e, flush=True)
    sys.exit(1)
os.waitpid(pid, 0)
print("after the answer:", repr(last), flush=True)
sys.exit(0 if last == b"" else 1)
'

READERS='
import os, socket, sys
N = 8 << 20
l = socket.socket()
l.bind(("127.0.0.1", 0))
l.listen(1)
if os.fork() == 0:
    c, _ = l.accept()
    c.recv(1)
    c.sendall(b"r" * N)
    c.close()
    os._exit(0)
s = socket.create_connection(l.getsockname())
r, w = os.pipe()
s.sendall(b"g")
pid = os.fork()
n = 0
while True:
    try:
        b = s.recv(4096)
    except OSError as e:
        print("read error after", n, e, flush=True)
        os._exit(1)
    if not b:
        break
    if b.strip(b"r"):
        print("wrong bytes", flush=True)
        os._exit(1)
    n += len(b)
if pid == 0:
    os.write(w, b"%d" % n)
    os._exit(0)
m = int(os.read(r, 64) or b"-1")
_, st = os.waitpid(pid, 0)
print("parent read", n, "child read", m, "of", N, flush=True)
sys.exit(0 if st == 0 and n + m == N else 1)
'
WRITERS='
import os, socket, sys
K, N = 4096, 2048
l = socket.socket()
l.bind(("127.0.0.1", 0))
l.listen(1)
r, w = os.pipe()
srv = os.fork()
if srv == 0:
    c, _ = l.accept()
    counts = {}
    while True:
        b = c.recv(1 << 16)
        if not b:
            break
        for ch in set(b):
            counts[ch] = counts.get(ch, 0) + b.count(ch)
    os.write(w, b"%d %d %d" % (counts.pop(65, 0), counts.pop(66, 0), len(counts)))
    os._exit(0)
s = socket.create_connection(l.getsockname())
pid = os.fork()
chunk = (b"B" if pid == 0 else b"A") * K
try:
    for _ in range(N):
        s.sendall(chunk)
except OSError as e:
    print("write error", e, flush=True)
    os._exit(1)
s.close()
if pid == 0:
    os._exit(0)
_, st = os.waitpid(pid, 0)
a, b, other = map(int, os.read(r, 64).split())
os.waitpid(srv, 0)
print("peer read A", a, "B", b, "other", other, "of", K * N, "each", flush=True)
sys.exit(0 if st == 0 and a == b == K * N and other == 0 else 1)
'

FLAGS='
import os, socket, struct, sys, time
l = socket.socket()
l.bind(("127.0.0.1", 0))
l.listen(1)
if os.fork() == 0:
    c, _ = l.accept()
    c.sendall(b"hi")
    c.recv(1)
    c.close()
    os._exit(0)
s = socket.create_connection(l.getsockname())
s.recv(2)
def child(fn):
    pid = os.fork()
    if pid == 0:
        fn()
        os._exit(0)
    os.waitpid(pid, 0)
def recv_took():
    t = time.monotonic()
    try:
        r = s.recv(1)
    except BlockingIOError:
        r = "EAGAIN"
    return r, time.monotonic() - t
child(lambda: s.setblocking(False))
r1, t1 = recv_took()
s.setblocking(True)
child(lambda: s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, struct.pack("ll", 0, 300000)))
r2, t2 = recv_took()
s.sendall(b"x")
print("after O_NONBLOCK:", r1, round(t1, 2), "after SO_RCVTIMEO:", r2, round(t2, 2), flush=True)
sys.exit(0 if r1 == r2 == "EAGAIN" and t1 < 0.2 and 0.2 < t2 < 2 else 1)
'

for case in pollin exit readers writers flags; do
	prog=${case^^}
	timeout -k 5 "$SMC_CMD_TIMEOUT" python3 -c "${!prog}" >"$SMC_TMP/$case.plain" 2>&1 ||
		smc_fail "$case without the library: $(cat "$SMC_TMP/$case.plain")"
	dir=$(smc_stats_dir "$case")
	smc_run "$dir" python3 -c "${!prog}" >"$SMC_TMP/$case.out" 2>&1 ||
		smc_fail "$case under the library: $(cat "$SMC_TMP/$case.out")"
	smc_log "$case: $(cat "$SMC_TMP/$case.out")"
	smc_expect_payload "$dir" 1 "$case"
	smc_assert_eq "$case: aborts" "$(smc_stats "$dir" '.events.aborts')" 0
done
smc_pass
