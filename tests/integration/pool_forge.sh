#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#
# A forged pool slot (core/shm/pool.h) must not hand another user's connection to the
# forger. A preloaded churn server runs as root; tests/progs/pool_forge, as user nobody,
# sets up a pool with it and offers a slot naming the port that a plain TCP client of
# user daemon has bound and then connects from. The server must find that nobody does
# not own that connection (sock_diag) and abort it, and only it: the victim sees its
# connection reset (not answered through the forger's slot, not hanging), the server
# counts one abort and logs why, and a preloaded client afterwards runs its cycles
# without error. Needs root (to run the two other users).
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
. "$(dirname -- "$0")/lib.sh"

smc_require_cmd python3 setpriv
smc_init
[ "$SMC_TEST_EXPECT" = shm ] || smc_skip "pools carry shm connections: shm mode only"
[ "$(id -u)" = 0 ] || smc_skip "needs root to run the forger and the victim as other users"
id nobody >/dev/null 2>&1 && id daemon >/dev/null 2>&1 || smc_skip "needs users nobody and daemon"
FORGE=$top_builddir/tests/progs/pool_forge
smc_require_built "$FORGE"
smc_require_built "$SMC_CHURN"
unset SMC_SHORT_CONN_US SMC_POOL_SLOTS SMC_POOL_RING
export SMC_LOG_LEVEL=warn

chmod 0711 "$SMC_TMP"
smc_free_port port
srv=$(smc_stats_dir server)
cli=$(smc_stats_dir client)
smc_start_server server "$srv" "$SMC_CHURN" server "$port" --bind 127.0.0.1 --mode epoll
smc_wait_port server "$port"

cat >"$SMC_TMP/victim.py" <<'PY'
import socket, sys
port = int(sys.argv[1])
s = socket.socket()
s.bind(("127.0.0.1", 0))
print(s.getsockname()[1], flush=True)
sys.stdin.readline()
s.settimeout(5)
try:
    s.connect(("127.0.0.1", port))
    s.sendall(b"v" * 64)
    data = b""
    while len(data) < 64:
        b = s.recv(64 - len(data))
        if not b:
            print("EOF", flush=True)
            sys.exit(0)
        data += b
    print("ANSWERED", flush=True)
except ConnectionResetError:
    print("RESET", flush=True)
except socket.timeout:
    print("TIMEOUT", flush=True)
PY
chmod 0644 "$SMC_TMP/victim.py"
mkfifo -m 0666 "$SMC_TMP/go"
# Debian's python: another user may not reach a per-user one (pyenv under /root)
py=/usr/bin/python3
[ -x "$py" ] || py=$(command -v python3)
setpriv --reuid=daemon --regid=daemon --clear-groups -- \
	"$py" "$SMC_TMP/victim.py" "$port" <"$SMC_TMP/go" >"$SMC_TMP/victim.out" 2>&1 &
victim_pid=$!
exec 7>"$SMC_TMP/go"
for _ in $(seq 50); do [ -s "$SMC_TMP/victim.out" ] && break; sleep 0.1; done
vport=$(head -1 "$SMC_TMP/victim.out")
[[ "$vport" =~ ^[0-9]+$ ]] || smc_fail "the victim did not bind: $(cat "$SMC_TMP/victim.out")"
smc_log "victim (daemon) bound port $vport"

setpriv --reuid=nobody --regid=nogroup --clear-groups -- \
	"$FORGE" "$port" "$vport" >"$SMC_TMP/forge.out" 2>&1 &
forge_pid=$!
for _ in $(seq 50); do grep -q '^OFFERED\|^ERROR' "$SMC_TMP/forge.out" && break; sleep 0.1; done
grep -q '^OFFERED' "$SMC_TMP/forge.out" || smc_fail "forger: $(cat "$SMC_TMP/forge.out")"
smc_log "forger (nobody): $(head -1 "$SMC_TMP/forge.out")"
echo go >&7
exec 7>&-
wait "$victim_pid"
wait "$forge_pid"
smc_log "victim: $(tail -1 "$SMC_TMP/victim.out"); forger: $(tail -1 "$SMC_TMP/forge.out")"
smc_assert_eq "the victim's connection" "$(tail -1 "$SMC_TMP/victim.out")" RESET
grep -q '^DONE server aborted the slot' "$SMC_TMP/forge.out" ||
	smc_fail "the server did not abort the forged slot: $(cat "$SMC_TMP/forge.out")"

smc_log "a preloaded client afterwards"
out=$SMC_TMP/client.out
smc_run "$cli" "$SMC_CHURN" client 127.0.0.1 "$port" --threads 2 --warmup 4 --cycles 2000 \
	>"$out" 2>&1 || smc_fail "client failed: $(cat "$out")"
grep -q '^RESULT client threads=2 cycles=2000 .* errors=0 ' "$out" ||
	smc_fail "client: $(cat "$out")"
smc_stop_server server TERM 30
log=$(smc_server_log server)
cat "$log"
smc_require_stats "$srv"
smc_require_stats "$cli"
smc_log "stats server: $(smc_stats_summary "$srv")"
smc_assert_eq "server: aborts (the forged slot only)" "$(smc_stats "$srv" '.events.aborts')" 1
grep -q 'named a connection it does not own' "$log" ||
	smc_fail "server: no log line for the forged slot"
smc_assert_ge "client afterwards: pooled connections" "$(smc_stats "$cli" '.events.shm_pooled')" 1000
smc_pass
