#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#
# A thread that takes a descriptor table of its own while the library's thread keeps the
# old one: unshare(CLONE_FILES), and close_range(1000, ~0U, CLOSE_RANGE_UNSHARE), called
# through ctypes by a Python client that holds an upgraded connection. Before, the
# connection made after it lost its first bytes (the progress thread could not see its
# socket) and the client waited for their echo forever, 8 runs in 10. Now the library's
# work for the process ends there (core/sock/table_split.c): the upgraded connection
# goes back to TCP losslessly (a downgrade), the next one is plain TCP, and every echo
# comes back whole. Three rounds of each.
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
. "$(dirname -- "$0")/lib.sh"

smc_require_cmd python3
smc_init

cat >"$SMC_TMP/client.py" <<'PY'
import ctypes, os, socket, sys
port, how = int(sys.argv[1]), sys.argv[2]
libc = ctypes.CDLL(None, use_errno=True)
CLONE_FILES, CLOSE_RANGE_UNSHARE = 0x400, 2

def echo(s, n):
    msg = os.urandom(n)
    s.sendall(msg)
    got = bytearray()
    while len(got) < n:
        d = s.recv(1 << 16)
        if not d:
            sys.exit("EOF after %d of %d bytes" % (len(got), n))
        got += d
    if bytes(got) != msg:
        sys.exit("echo differs")

s1 = socket.create_connection(("127.0.0.1", port))
s1.settimeout(20)
echo(s1, 1000000)
if how == "unshare":
    r = libc.unshare(CLONE_FILES)
else:
    r = libc.close_range(1000, ctypes.c_uint(0xFFFFFFFF), CLOSE_RANGE_UNSHARE)
if r != 0:
    sys.exit("%s failed: %s" % (how, os.strerror(ctypes.get_errno())))
echo(s1, 1000000)
s2 = socket.create_connection(("127.0.0.1", port))
s2.settimeout(20)
echo(s2, 1000000)
s2.close()
echo(s1, 1000)
s1.close()
print("OK")
PY

ROUNDS=3
for how in unshare close_range; do
	srv=$(smc_stats_dir "server-$how")
	cli=$(smc_stats_dir "client-$how")
	smc_start_server "server-$how" "$srv" python3 "$top_srcdir/tests/progs/echo_server.py" \
		$((2 * ROUNDS)) threads
	smc_wait_log "server-$how" '^port '
	read -r _ port < <(grep -m1 '^port ' "$SMC_TMP/server-$how.log")
	for ((r = 1; r <= ROUNDS; r++)); do
		out=$(SMC_CMD_TIMEOUT=60 smc_run "$cli" python3 "$SMC_TMP/client.py" "$port" "$how" 2>&1)
		rc=$?
		smc_assert_eq "$how, round $r: client exit status ($out)" "$rc" 0
	done
	smc_wait_server_exit "server-$how" 20
	smc_assert_eq "$how: server exit status" "${SMC_SERVER_RC[server-$how]}" 0
	smc_log "$how: client $(smc_stats_summary "$cli")"
	if [ "$SMC_TEST_EXPECT" = shm ]; then
		smc_assert_eq "$how: client's connections upgraded before the split" \
			"$(smc_stats "$cli" '.connections.shm')" "$ROUNDS"
		smc_assert_eq "$how: client's connections taken back to TCP at the split" \
			"$(smc_stats "$cli" '.events.downgrades')" "$ROUNDS"
		smc_assert_ge "$how: client's bytes over shm before the split" \
			"$(smc_stats "$cli" '.bytes.shm.sent')" $((ROUNDS * 1000000))
	fi
done
smc_pass
