#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#
# A connection whose SMC handshake has not been decided yet keeps TCP's socket timeouts:
# a preloaded server listens (so the client's library starts a handshake) and then
# stops itself before accept(), so the handshake cannot end before the client's
# SMC_HANDSHAKE_TIMEOUT_MS, set to 30 s here. The client sets SO_RCVTIMEO and SO_SNDTIMEO
# to 1 s, sends 20,000 bytes (more than the 8 KiB the library stages while the
# handshake runs) and reads: the send must return what it took and the read must fail
# with EAGAIN, as over TCP to a server that does not answer, both within their timeouts
# and not after the handshake's 30 s (the client is killed after 15 s: that is the
# failure this test catches). With SMC_TEST_EXPECT=tcp the same over plain TCP.
# Exit: 0 pass, 1 fail, 77 skip (python3 missing), 99 hard error.

# shellcheck source=tests/integration/lib.sh
. "$(cd -- "$(dirname -- "$0")" && pwd)/lib.sh"

smc_require_cmd python3
smc_init

cat >"$SMC_TMP/server.py" <<'PY'
import os, signal, socket, sys
srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(("127.0.0.1", int(sys.argv[1])))
srv.listen(4)
print("listening, stopping", flush=True)
os.kill(os.getpid(), signal.SIGSTOP)
PY

cat >"$SMC_TMP/client.py" <<'PY'
import errno, socket, struct, sys, time
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
one_second = struct.pack("ll", 1, 0)
s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, one_second)
s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, one_second)
t = time.monotonic()
try:
    n = s.send(b"x" * 20000)
    print("send returned %d after %.1f s" % (n, time.monotonic() - t), flush=True)
except OSError as e:
    print("send failed: %s" % errno.errorcode.get(e.errno, e.errno), flush=True)
t = time.monotonic()
try:
    got = s.recv(100)
    print("recv returned %d bytes" % len(got), flush=True)
except OSError as e:
    print("recv failed: %s after %.1f s" % (errno.errorcode.get(e.errno, e.errno),
                                           time.monotonic() - t), flush=True)
PY

smc_free_port PORT
srv=$(smc_stats_dir server)
cli=$(smc_stats_dir client)
smc_start_server server "$srv" python3 "$SMC_TMP/server.py" "$PORT"
smc_wait_port server "$PORT"
smc_wait_log server '^listening, stopping'
out=$(SMC_HANDSHAKE_TIMEOUT_MS=30000 SMC_CMD_TIMEOUT=15 \
	smc_run "$cli" python3 "$SMC_TMP/client.py" "$PORT" 2>&1)
rc=$?
smc_log "client (exit status $rc): $out"
kill -CONT -- "-${SMC_SERVER_PID[server]}" 2>/dev/null
smc_assert_eq "client exit status (124: still blocked after 15 s)" "$rc" 0
grep -Eq '^send returned [1-9][0-9]* after' <<<"$out" ||
	smc_fail "send did not return a byte count: $out"
grep -q '^recv failed: EAGAIN after' <<<"$out" ||
	smc_fail "recv did not fail with EAGAIN: $out"
smc_stop_server server
smc_pass
