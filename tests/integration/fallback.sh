#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#
# Fallback to TCP: a preloaded client talking to a plain (not preloaded) server, and a
# plain client talking to a preloaded server. smc_stream checks that the plain side
# receives exactly the bytes sent, byte for byte, and EOF right after them (a stray
# handshake byte would fail it), in both directions; the preloaded side's stats must show
# a tcp connection with reason peer-not-smc, all payload over tcp and none over shm.
# Then two preloaded python processes whose client binds an even port: both stay TCP.
# Holds with SMC_TEST_EXPECT=shm and =tcp alike.
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
# shellcheck disable=SC2034 # read by lib.sh
SMC_TEST_KEEP_TRANSPORT=1 # the library must decide by itself that the peer is plain
. "$(dirname -- "$0")/lib.sh"

BYTES=64m
N=$(smc_bytes_of "$BYTES")

smc_init
smc_require_built "$SMC_STREAM"

cli=$(smc_stats_dir client-preloaded)
smc_stream_run preloaded-client-plain-server - "$cli" "$BYTES" --mode block
smc_expect_fallback "$cli" peer-not-smc $((2 * N)) "preloaded client"

srv=$(smc_stats_dir server-preloaded)
smc_stream_run plain-client-preloaded-server "$srv" - "$BYTES" --mode epoll
smc_expect_fallback "$srv" peer-not-smc $((2 * N)) "preloaded server"

# Both preloaded, but the client application binds an even source port before connect:
# servers look for a client's rendezvous only behind odd ports (rendezvous.h), so the
# client must not offer SMC (fallback "resources") and the server sees a plain client.
# Python on both sides: the server echoes 1 MiB back, the client compares.
cat >"$SMC_TMP/even.py" <<'PY'
import os, random, socket, sys

n = 1 << 20
if sys.argv[1] == "server":
    l = socket.socket()
    l.bind(("127.0.0.1", 0))
    l.listen(1)
    print(l.getsockname()[1], flush=True)
    c, _ = l.accept()
    got = b""
    while len(got) < n:
        b = c.recv(n - len(got))
        if not b:
            sys.exit("server: early EOF")
        got += b
    c.sendall(got)
    c.close()
else:
    s = socket.socket()
    while True:
        try:
            s.bind(("127.0.0.1", random.randrange(20000, 30000, 2)))
            break
        except OSError:
            pass
    s.connect(("127.0.0.1", int(sys.argv[2])))
    data = os.urandom(n)
    s.sendall(data)
    back = b""
    while len(back) < n:
        b = s.recv(n)
        if not b:
            sys.exit("client: early EOF")
        back += b
    if back != data:
        sys.exit("client: echo differs")
    print("OK")
PY
srv=$(smc_stats_dir even-server)
cli=$(smc_stats_dir even-client)
smc_start_server even "$srv" python3 -u "$SMC_TMP/even.py" server
smc_wait_log even '^[0-9]'
port=$(head -1 "$(smc_server_log even)")
out=$(smc_run "$cli" python3 "$SMC_TMP/even.py" client "$port" 2>&1) ||
	smc_fail "even-port client failed: $out"
smc_wait_server_exit even
smc_assert_eq "even-port echo server exit status" "${SMC_SERVER_RC[even]}" 0
smc_expect_fallback "$cli" resources $((2 << 20)) "client bound to an even port"
smc_expect_fallback "$srv" peer-not-smc $((2 << 20)) "its server"

# A client that retries a local port nobody listens on (ZeroMQ's reconnects): 50
# nonblocking connects, each refused, are no connection at all, as 50 blocking ones are
# not: the stats count none (the program still gets ECONNREFUSED from SO_ERROR), and
# one connect that does reach a listener counts two (the same process accepts it).
cli=$(smc_stats_dir refused-client)
smc_free_port refused_port
out=$(SMC_SHORT_CONN_US=0 smc_run "$cli" python3 "$top_srcdir/tests/progs/refused_connects.py" "$refused_port" 2>&1) ||
	smc_fail "refused-connect client failed: $out"
smc_require_stats "$cli"
smc_log "stats refused-client: $(smc_stats_summary "$cli")"
smc_assert_eq "refused connects: connections counted" \
	"$(smc_stats "$cli" '.connections.tcp + .connections.shm + .connections.ib')" 2
smc_pass
