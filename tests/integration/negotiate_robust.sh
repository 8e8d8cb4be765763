#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#
# The in-band negotiation (SMC TCP option) against misbehaving peers and unusual
# servers. Root: sets up the eBPF program under a map and rendezvous directory of its
# own (smc_preload.sh --setup), then, against a preloaded event-loop server (nonblocking
# listener, select):
#
#  1. a local user (uid nobody when the map allows it) binds an abstract rendezvous
#     name, fills its backlog and sends a Proposal naming it: the server must answer
#     with a Decline on TCP instead of blocking in connect() inside accept(), and a
#     preloaded client is then served over shared memory;
#  2. ten clients that send the option and then nothing (no Proposal) while the
#     server's handshake timeout is longer than the test: a nonblocking accept() hands
#     their connections over at once, and the next client is served over shared
#     memory while they are still connected; when they close, the server counts them
#     as peer-closed; one that stays silent past a short handshake timeout is reset
#     and counted as an abort (handshake-failed), and a blocking accept() hands it to
#     the application reset (it reads ECONNRESET) rather than failing with
#     ECONNABORTED; one held up for three handshake
#     timeouts that then talks plain TCP is served, with no abort;
#  3. a listener opted in by one program image and accepted from by the next (exec):
#     the application receives exactly the client's bytes, no CLC byte, and the
#     connection is upgraded (both sides count shm);
#  4. --setup again removes a rendezvous socket left behind long ago by a client that
#     exited mid-negotiation, and keeps a recent one.
# Skips (77) without root or when the eBPF program cannot be set up here.
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
# shellcheck disable=SC2034 # read by lib.sh
SMC_TEST_KEEP_TRANSPORT=1
SMC_TEST_EXPECT=shm
. "$(dirname -- "$0")/lib.sh"

[ "$(id -u)" = 0 ] || smc_skip "needs root (eBPF setup)"
smc_init
smc_require_cmd python3 bpftool jq
ATTACK=$top_builddir/tests/progs/neg_attack
smc_require_built "$ATTACK"

export SMC_BPF_DIR=/sys/fs/bpf/smc-robust-$$
export SMC_RDV_DIR=/run/smc-robust-$$
BPF_OBJ=${SMC_BPF_OBJ:-$top_builddir/bpf/smc_tcpopt.bpf.o}
setup_done=0

robust_cleanup() {
	if [ "$setup_done" = 1 ]; then
		SMC_BPF_OBJ=$BPF_OBJ "$SMC_WRAPPER" --teardown >/dev/null 2>&1 ||
			echo "negotiate_robust: teardown of $SMC_BPF_DIR failed"
	fi
	rm -rf -- "$SMC_RDV_DIR"
}
# lib.sh's cleanup reads the exit status first: keep it for it
trap '_rc=$?; robust_cleanup; (exit $_rc); _smc_cleanup' EXIT

[ -f "$BPF_OBJ" ] || smc_skip "$BPF_OBJ not built (clang with the bpf target missing?)"
if ! out=$(SMC_BPF_OBJ=$BPF_OBJ "$SMC_WRAPPER" --setup 2>&1); then
	smc_skip "eBPF setup not possible here: $out"
fi
setup_done=1

# An event-loop server: nonblocking listener, select(); answers "pong" to each line.
cat >"$SMC_TMP/evserver.py" <<'EOF'
import select, signal, socket, sys
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # exit() writes the stats
l = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
l.bind(("127.0.0.1", int(sys.argv[1]))); l.listen(64); l.setblocking(False)
conns = []
print("listening", flush=True)
while True:
    r, _, _ = select.select([l] + conns, [], [])
    for s in r:
        if s is l:
            try:
                c, _ = l.accept()
            except (BlockingIOError, ConnectionAbortedError):
                continue
            c.setblocking(False); conns.append(c)
        else:
            try:
                d = s.recv(4096)
            except BlockingIOError:
                continue
            except OSError:
                d = b""
            if not d:
                conns.remove(s); s.close(); continue
            s.sendall(b"pong\n" * d.count(b"\n"))
EOF

# A listener set up in one program image and served by the next (exec).
cat >"$SMC_TMP/execlisten.py" <<'EOF'
import os, socket, sys
if sys.argv[1] == "setup":
    l = socket.socket(); l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    l.bind(("127.0.0.1", int(sys.argv[2]))); l.listen(8); os.set_inheritable(l.fileno(), True)
    os.execv(sys.executable, [sys.executable, sys.argv[0], "serve", str(l.fileno())])
l = socket.socket(fileno=int(sys.argv[2]))
print("serving after exec", flush=True)
c, _ = l.accept(); c.settimeout(30)
d = b""
while not d.endswith(b"\n"):
    b = c.recv(4096)
    if not b:
        break
    d += b
print("received %r" % d, flush=True)
c.sendall(b"pong\n")
c.close()
EOF

cat >"$SMC_TMP/client.py" <<'EOF'
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=30)
s.sendall(b"ping\n")
d = b""
while not d.endswith(b"\n"):
    b = s.recv(100)
    if not b:
        break
    d += b
print("got %r" % d)
sys.exit(0 if d == b"pong\n" else 1)
EOF

# ---- 1. a full rendezvous backlog must not block the server's accept()
smc_free_port PORT
SRV_STATS=$(smc_stats_dir server1)
CLI_STATS=$(smc_stats_dir client1)
smc_start_server server1 "$SRV_STATS" python3 "$SMC_TMP/evserver.py" "$PORT"
smc_wait_port server1 "$PORT"
as_nobody=(setpriv --reuid=65534 --regid=65534 --clear-groups)
if ! command -v setpriv >/dev/null 2>&1 ||
	! "${as_nobody[@]}" "$ATTACK" hold 127.0.0.1 "$PORT" 1 0 >/dev/null 2>&1; then
	smc_log "the map is not usable by uid nobody here: the jammer runs as root"
	as_nobody=()
fi
out=$(timeout -k 5 60 "${as_nobody[@]}" "$ATTACK" jam 127.0.0.1 "$PORT" 15 2>&1)
smc_log "jammer: $out"
# 7f060000: the client's rendezvous socket is unreachable
[ "$out" = "OK declined 7f060000" ] ||
	smc_fail "the server did not decline a Proposal naming a jammed rendezvous: $out"
smc_run "$CLI_STATS" python3 "$SMC_TMP/client.py" "$PORT" ||
	smc_fail "the server did not serve a client after the jam"
smc_stop_server server1
smc_expect_payload "$CLI_STATS" 10 client1
smc_require_stats "$SRV_STATS"
smc_log "stats server1: $(smc_stats_summary "$SRV_STATS")"
smc_assert_ge "server1: shm connections" "$(smc_stats "$SRV_STATS" '.connections.shm')" 1
# handshake-failed, or peer-closed when the jammer, having read the Decline, closed its
# TCP connection before the server looked (a race the test does not control)
smc_assert_ge "server1: the jammer's connection counted as a fallback" \
	"$(smc_stats "$SRV_STATS" '(.fallback["handshake-failed"] // 0) + (.fallback["peer-closed"] // 0)')" 1

# ---- 2. clients that send the option and then nothing must not stall a nonblocking
# accept(): with a handshake timeout far longer than the test, the server has to hand
# their connections over at once and serve the next client while they still hold
smc_free_port PORT
SRV_STATS=$(smc_stats_dir server3)
CLI_STATS=$(smc_stats_dir client3)
SMC_HANDSHAKE_TIMEOUT_MS=60000 smc_start_server server3 "$SRV_STATS" \
	python3 "$SMC_TMP/evserver.py" "$PORT"
smc_wait_port server3 "$PORT"
"${as_nobody[@]}" "$ATTACK" hold 127.0.0.1 "$PORT" 10 60 >"$SMC_TMP/hold.log" 2>&1 &
hold_pid=$!
for ((i = 0; i < 200; i++)); do
	grep -q '^OK held 10' "$SMC_TMP/hold.log" && break
	kill -0 "$hold_pid" 2>/dev/null || smc_fail "silent clients: $(cat "$SMC_TMP/hold.log")"
	sleep 0.1
done
grep -q '^OK held 10' "$SMC_TMP/hold.log" || smc_fail "silent clients did not connect"
smc_run "$CLI_STATS" python3 "$SMC_TMP/client.py" "$PORT" ||
	smc_fail "the server did not serve a client while 10 silent clients were connected"
kill -0 "$hold_pid" 2>/dev/null ||
	smc_fail "the silent clients were gone before the client was served"
kill "$hold_pid"
wait "$hold_pid"
smc_expect_payload "$CLI_STATS" 10 client3
# their connections end without a Proposal: plain TCP for "peer-closed"
for ((i = 0; i < 100; i++)); do
	[ "$(ss -Htn state established "( sport = :$PORT )" | wc -l)" = 0 ] && break
	sleep 0.1
done
smc_stop_server server3
smc_require_stats "$SRV_STATS"
smc_log "stats server3: $(smc_stats_summary "$SRV_STATS")"
smc_assert_ge "server3: shm connections" "$(smc_stats "$SRV_STATS" '.connections.shm')" 1
smc_assert_eq "server3: silent connections closed by their peer" \
	"$(smc_stats "$SRV_STATS" '.fallback["peer-closed"] // 0')" 10

# ... and one that stays silent past the handshake timeout is reset (its CLC bytes
# could still come: it cannot become plain TCP), counted as an abort
smc_free_port PORT
SRV_STATS=$(smc_stats_dir server4)
SMC_HANDSHAKE_TIMEOUT_MS=300 smc_start_server server4 "$SRV_STATS" \
	python3 "$SMC_TMP/evserver.py" "$PORT"
smc_wait_port server4 "$PORT"
out=$("${as_nobody[@]}" "$ATTACK" hold 127.0.0.1 "$PORT" 1 4 2>&1)
[ "$out" = "OK held 1" ] || smc_fail "silent client: $out"
smc_stop_server server4
smc_require_stats "$SRV_STATS"
smc_log "stats server4: $(smc_stats_summary "$SRV_STATS")"
smc_assert_eq "server4: silent connection timed out" \
	"$(smc_stats "$SRV_STATS" '.fallback["handshake-failed"] // 0')" 1
smc_assert_eq "server4: aborts" "$(smc_stats "$SRV_STATS" '.events.aborts')" 1

# ... and with a blocking accept() the same reset connection is handed to the
# application, which reads ECONNRESET as from a client that reset its connection in the
# accept queue: accept() itself must not fail (ECONNABORTED ends a plain accept loop,
# Python's raises ConnectionAbortedError), and the next client is served
cat >"$SMC_TMP/blkserver.py" <<'EOF'
import signal, socket, sys
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # exit() writes the stats
l = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
l.bind(("127.0.0.1", int(sys.argv[1]))); l.listen(64)
print("listening", flush=True)
while True:
    c, _ = l.accept()
    try:
        d = c.recv(4096)
        if d:
            c.sendall(b"pong\n" * d.count(b"\n"))
    except OSError as e:
        print("recv: %s" % e.strerror, flush=True)
    c.close()
EOF
smc_free_port PORT
SRV_STATS=$(smc_stats_dir server4b)
CLI_STATS=$(smc_stats_dir client4b)
SMC_HANDSHAKE_TIMEOUT_MS=300 smc_start_server server4b "$SRV_STATS" \
	python3 "$SMC_TMP/blkserver.py" "$PORT"
smc_wait_port server4b "$PORT"
out=$("${as_nobody[@]}" "$ATTACK" hold 127.0.0.1 "$PORT" 1 2 2>&1)
[ "$out" = "OK held 1" ] || smc_fail "silent client (blocking accept): $out"
smc_wait_log server4b "^recv: Connection reset by peer"
smc_run "$CLI_STATS" python3 "$SMC_TMP/client.py" "$PORT" ||
	smc_fail "a blocking accept() did not serve a client after a reset connection:" \
		"$(cat "$(smc_server_log server4b)")"
smc_stop_server server4b
smc_expect_payload "$CLI_STATS" 10 client4b
smc_require_stats "$SRV_STATS"
smc_log "stats server4b: $(smc_stats_summary "$SRV_STATS")"
smc_assert_eq "server4b: silent connection timed out" \
	"$(smc_stats "$SRV_STATS" '.fallback["handshake-failed"] // 0')" 1
smc_assert_eq "server4b: aborts" "$(smc_stats "$SRV_STATS" '.events.aborts')" 1

# ... but one that is merely held up (its process stalled for three handshake timeouts)
# and then talks is served: the server waits while it lives (progress_server.c)
smc_free_port PORT
SRV_STATS=$(smc_stats_dir server5)
SMC_HANDSHAKE_TIMEOUT_MS=300 smc_start_server server5 "$SRV_STATS" \
	python3 "$SMC_TMP/evserver.py" "$PORT"
smc_wait_port server5 "$PORT"
out=$("${as_nobody[@]}" "$ATTACK" late 127.0.0.1 "$PORT" 900 2>&1)
[ "$out" = "OK answered" ] || smc_fail "held-up client: $out"
smc_stop_server server5
smc_require_stats "$SRV_STATS"
smc_log "stats server5: $(smc_stats_summary "$SRV_STATS")"
smc_assert_eq "server5: aborts" "$(smc_stats "$SRV_STATS" '.events.aborts')" 0
smc_assert_eq "server5: held-up client served as plain TCP" \
	"$(smc_stats "$SRV_STATS" '.fallback["peer-not-smc"] // 0')" 1

# ---- 3. a listener opted in before exec
smc_free_port PORT
SRV_STATS=$(smc_stats_dir server2)
CLI_STATS=$(smc_stats_dir client2)
smc_start_server server2 "$SRV_STATS" python3 "$SMC_TMP/execlisten.py" setup "$PORT"
smc_wait_log server2 "serving after exec"
smc_run "$CLI_STATS" python3 "$SMC_TMP/client.py" "$PORT" ||
	smc_fail "the exec'd server did not answer"
smc_wait_server_exit server2 30
grep -Fxq "received b'ping\\n'" "$(smc_server_log server2)" ||
	smc_fail "the exec'd application did not receive exactly the client's bytes: $(cat "$(smc_server_log server2)")"
smc_expect_payload "$CLI_STATS" 10 client2
smc_require_stats "$SRV_STATS"
smc_assert_ge "server2: shm connections" "$(smc_stats "$SRV_STATS" '.connections.shm')" 1

# ---- 4. --setup sweeps stale rendezvous sockets, keeps recent ones
mk_sock() {
	python3 -c 'import socket, sys; socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET).bind(sys.argv[1])' "$1"
}
mk_sock "$SMC_RDV_DIR/c-00000000000000aa" || smc_hard_error "cannot create a socket file"
mk_sock "$SMC_RDV_DIR/c-00000000000000bb" || smc_hard_error "cannot create a socket file"
touch -h -d '-30 minutes' "$SMC_RDV_DIR/c-00000000000000aa"
SMC_BPF_OBJ=$BPF_OBJ "$SMC_WRAPPER" --setup >/dev/null 2>&1 || smc_fail "second --setup failed"
[ ! -e "$SMC_RDV_DIR/c-00000000000000aa" ] || smc_fail "--setup left a stale rendezvous socket"
[ -S "$SMC_RDV_DIR/c-00000000000000bb" ] || smc_fail "--setup removed a recent rendezvous socket"

smc_pass
