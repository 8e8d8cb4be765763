#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#
# A pooled connection to a server whose accept queue is full. Linux drops the SYN and
# the client sends it again a second later; meanwhile the program sees no POLLOUT, and
# APR (ab) asks connect() again after its poll: a pooled connection reported writable
# at once made that second connect() say EALREADY, and ab gave up ("Test aborted after
# 10 failures", exit 114) in 9 of 10 runs. A server with listen(1) answers one HTTP/1.0
# request per connection; ab -c 8 runs four times (the first builds the client's pool):
# every run exits 0 with no failed request, the client's connections ran on the pool
# (shm_pooled > 0) and those whose SYN waited stayed TCP (short-lived).
# Exit: 0 pass, 1 fail, 77 skip (ab or python3 missing), 99 hard error.
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
. "$(dirname -- "$0")/lib.sh"

smc_require_cmd ab
smc_require_cmd python3
smc_init
unset SMC_SHORT_CONN_US SMC_POOL_SLOTS SMC_POOL_RING

cat >"$SMC_TMP/server.py" <<'PY'
import socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1])))
s.listen(1)
print("listening", flush=True)
body = b"x" * 10000
resp = b"HTTP/1.0 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body
while True:
    c, _ = s.accept()
    c.recv(4096)
    c.sendall(resp)
    c.close()
PY

smc_free_port port
srv=$(smc_stats_dir server)
cli=$(smc_stats_dir client)
smc_start_server server "$srv" python3 "$SMC_TMP/server.py" "$port"
smc_wait_log server '^listening'
for round in 1 2 3 4; do
	out=$(smc_run "$cli" ab -n 2000 -c 8 "http://127.0.0.1:$port/" 2>&1)
	rc=$?
	smc_log "round $round: exit $rc, $(grep -E 'aborted|apr_|Failed requests|Requests per' <<<"$out" | tr -s ' ' | tr '\n' ' ')"
	smc_assert_eq "round $round: ab exit status (114: EALREADY)" "$rc" 0
	grep -q '^Failed requests: *0$' <<<"$out" || smc_fail "round $round: failed requests"
done
smc_stop_server server
smc_require_stats "$cli"
smc_log "client: $(smc_stats_summary "$cli")"
if [ "$SMC_TEST_EXPECT" = shm ]; then
	smc_assert_ge "client connections on a pool slot" "$(smc_stats "$cli" '.events.shm_pooled')" 1
	smc_assert_ge "client bytes received over shm" "$(smc_stats "$cli" '.bytes.shm.received')" 10000
	smc_assert_eq "client aborts" "$(smc_stats "$cli" '.events.aborts')" 0
fi
smc_pass
