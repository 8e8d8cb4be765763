#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#
# With the SMC TCP option set up (under a map directory of its own, torn down at exit),
# a preloaded client of a server without the library: the server's SYN-ACK carries no
# option, so the connection is plain TCP, and the client learns it in connect() itself
# when the TCP handshake is over by then (a blocking connect; a nonblocking one to a
# local server), starting no thread for it (before, its first connection started the
# progress thread and filled its descriptor numbers, ~1 ms of a one-shot client's
# time). Each client, blocking and nonblocking, echoes 64 KiB through the plain server
# and reports the threads of its process after the exchange (/proc/self/status): 1.
# Its stats: peer-not-smc, every byte over TCP. Root only (eBPF setup).
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
# shellcheck disable=SC2034 # read by lib.sh
SMC_TEST_KEEP_TRANSPORT=1 # the library must decide by itself that the peer is plain
. "$(dirname -- "$0")/lib.sh"

smc_init
smc_require_cmd python3
smc_tcpopt_setup plain

cat >"$SMC_TMP/client.py" <<'PY'
import os, select, socket, sys
mode, port = sys.argv[1], int(sys.argv[2])
data = os.urandom(65536)
s = socket.socket()
if mode == "nonblock":
    s.setblocking(False)
    s.connect_ex(("127.0.0.1", port))
    select.select([], [s], [], 10)
    s.setblocking(True)
else:
    s.connect(("127.0.0.1", port))
s.sendall(data)
back = b""
while len(back) < len(data):
    d = s.recv(65536)
    if not d:
        break
    back += d
threads = int(open("/proc/self/status").read().split("Threads:")[1].split()[0])
s.close()
print("%s: echo %s, threads %d" % (mode, "intact" if back == data else "WRONG", threads))
sys.exit(0 if back == data and threads == 1 else 1)
PY

smc_start_server plain - python3 "$top_srcdir/tests/progs/echo_server.py" 2
smc_wait_log plain '^port '
read -r _ port < <(grep -m1 '^port ' "$(smc_server_log plain)")
for mode in block nonblock; do
	cli=$(smc_stats_dir "client-$mode")
	out=$(smc_run "$cli" python3 "$SMC_TMP/client.py" "$mode" "$port" 2>&1)
	rc=$?
	smc_log "$out"
	smc_assert_eq "$mode client: echo intact and one thread (exit status)" "$rc" 0
	smc_expect_fallback "$cli" peer-not-smc $((2 * 65536)) "$mode client"
done
smc_wait_server_exit plain 10
smc_assert_eq "plain server exit status" "${SMC_SERVER_RC[plain]}" 0
smc_pass
