#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#
# Rewinds (core/conn/conn.c, tx_rewind): a message written into an empty shared-memory ring,
# far enough into the lap, by a writer that read from its peer since its last send,
# starts the next lap, and the rest of the lap is the writer's room at once, whether the
# reader has read since or not. Over one connection with 1 MiB rings:
# - one-way: the client sends 32 KiB, the server reads them all (and says so through a
#   file, not the socket), the client sends 4 KiB into the empty ring: no rewind, as the
#   client has read nothing in between;
# - five 24 KiB request/response exchanges (the ring is empty before each): rewinds at
#   the 2nd and 4th (60 and 48 KiB into the lap, at least twice the message), then one
#   4 KiB message (48 KiB into the lap): a rewind. Exactly 3 for the client; a writer
#   that also rewound in the one-way part would count 4 (its cursors shift with it).
# - then the client writes without the server reading until its nonblocking socket
#   would block: it must have got at least 3/4 of the ring in (a writer that counted the
#   skipped rest of the lap as used would stop after 44 KiB, and a program that relies
#   on that much buffer would hang).
# Then the server reads to EOF and checks every byte's position in the stream, and the
# stats must show the payload over shared memory.
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
. "$(dirname -- "$0")/lib.sh"

smc_require_cmd python3
smc_init
[ "$SMC_TEST_EXPECT" = shm ] || smc_skip "rewinds are a rule of the shared-memory rings: shm mode only"
smc_free_port port
srv=$(smc_stats_dir server)
cli=$(smc_stats_dir client)
flag=$SMC_TMP/filled
drained=$SMC_TMP/drained
export SMC_SNDBUF=1m SMC_RCVBUF=1m

# The stream's byte at offset o is PAT[o % 251]: a misplaced or skipped byte shows.
cat >"$SMC_TMP/common.py" <<'PY'
PAT = bytes(range(251)) * ((1 << 17) // 251 + 2)

def piece(off, n):
    out = bytearray()
    while n:
        k = min(n, 1 << 16)
        out += PAT[off % 251:off % 251 + k]
        off += k
        n -= k
    return bytes(out)
PY

cat >"$SMC_TMP/server.py" <<'PY'
import os, socket, sys, time
sys.path.insert(0, os.path.dirname(sys.argv[0]))
from common import piece

port, flag, drained = int(sys.argv[1]), sys.argv[2], sys.argv[3]
ls = socket.socket()
ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
ls.bind(("127.0.0.1", port))
ls.listen(1)
s, _ = ls.accept()
off = 0

def take(n):
    global off
    got = b""
    while len(got) < n:
        b = s.recv(n - len(got))
        if not b:
            sys.exit("server: EOF at offset %d" % (off + len(got)))
        got += b
    if got != piece(off, n):
        sys.exit("server: wrong bytes in [%d, %d)" % (off, off + n))
    off += n

take(32768)
open(drained, "w").close()
take(4096)
s.sendall(b"k")
for _ in range(5):
    take(24576)
    s.sendall(b"k")
# not a byte read until the client has filled its room
deadline = time.time() + 60
while not os.path.exists(flag):
    if time.time() > deadline:
        sys.exit("server: the client never finished filling")
    time.sleep(0.01)
while True:
    b = s.recv(1 << 16)
    if not b:
        break
    if b != piece(off, len(b)):
        sys.exit("server: wrong bytes in [%d, %d)" % (off, off + len(b)))
    off += len(b)
print("OK total=%d" % off)
PY

cat >"$SMC_TMP/client.py" <<'PY'
import os, socket, sys, time
sys.path.insert(0, os.path.dirname(sys.argv[0]))
from common import piece

port, flag, drained = int(sys.argv[1]), sys.argv[2], sys.argv[3]
s = socket.create_connection(("127.0.0.1", port))
s.sendall(piece(0, 32768))
off = 32768
deadline = time.time() + 60
while not os.path.exists(drained):
    if time.time() > deadline:
        sys.exit("client: the server never read the first 32 KiB")
    time.sleep(0.01)
s.sendall(piece(off, 4096))  # one-way: no rewind
off += 4096
if s.recv(1) != b"k":
    sys.exit("client: no answer")
for _ in range(5):
    s.sendall(piece(off, 24576))
    off += 24576
    if s.recv(1) != b"k":
        sys.exit("client: no answer")
s.sendall(piece(off, 4096))  # into an empty ring 48 KiB into its lap: a rewind
off += 4096
s.setblocking(False)
filled = 0
while True:
    try:
        n = s.send(piece(off, 1 << 16))
    except BlockingIOError:
        break
    off += n
    filled += n
open(flag, "w").close()
s.setblocking(True)
s.close()
print("OK filled=%d total=%d" % (filled, off))
PY

smc_start_server server "$srv" python3 "$SMC_TMP/server.py" "$port" "$flag" "$drained"
smc_wait_port server "$port"
out=$(smc_run "$cli" python3 "$SMC_TMP/client.py" "$port" "$flag" "$drained" 2>&1) ||
	smc_fail "client failed: $out"
smc_log "client: $out"
smc_wait_server_exit server 60
smc_assert_eq "server exit status" "${SMC_SERVER_RC[server]}" 0
sout=$(cat "$(smc_server_log server)")
smc_log "server: $sout"
filled=$(sed -n 's/^OK filled=\([0-9]*\) .*/\1/p' <<<"$out")
total=$(sed -n 's/^OK .*total=\([0-9]*\)$/\1/p' <<<"$out")
smc_assert_eq "bytes the server read and checked" "$(sed -n 's/^OK total=//p' <<<"$sout")" "$total"
smc_assert_ge "bytes the client got into its 1 MiB ring after the rewind, unread" \
	"$filled" $((3 << 18))
smc_expect_payload "$srv" "$total" server
smc_expect_payload "$cli" "$total" client
smc_assert_eq "client: rewinds" "$(smc_stats "$cli" '.events.shm_rewinds')" 3
smc_pass
