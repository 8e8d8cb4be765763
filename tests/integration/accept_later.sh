#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#
# A server program that accepts a connection only once its client went on. Over TCP
# the client's connect() and its first megabytes never wait for the server's accept()
# (the kernel takes them); an SMC handshake needs the server's library, which runs at
# accept(). The pattern is FTP's active mode: the client accepts its data connection
# after the server announced it on the control connection, and vsftpd announces it
# after its privileged process connected and passed the socket to the session process.
# The server here (preloaded) listens on two ports: it accepts the control connection,
# reads "go" from it, and only then accepts the data connection, reads it to its end
# and answers the byte count on the control connection. The client (preloaded):
#   staged: connects the data connection, sends 200,000 bytes on it (far more than the
#           library stages while a handshake runs), then connects the control
#           connection and sends "go";
#   passed: connects the data connection, passes its descriptor to itself over a unix
#           socket pair (SCM_RIGHTS: the library takes a passed connection back to TCP
#           first), then sends "go", then 5,000 bytes on the data connection.
# SMC_HANDSHAKE_TIMEOUT_MS is 20 s and the client is killed after 15 s: a client that
# waits for the data connection's handshake deadlocks with the server until that
# timeout, and fails here. Each case checks every byte, the data connection on TCP for
# its reason (handshake-failed: the staged bytes waited a tenth of the timeout; fd-passed)
# and the control connection over shared memory. With SMC_TEST_EXPECT=tcp the same over
# plain TCP.
# Exit: 0 pass, 1 fail, 77 skip (python3 missing), 99 hard error.

# shellcheck source=tests/integration/lib.sh
. "$(cd -- "$(dirname -- "$0")" && pwd)/lib.sh"

smc_require_cmd python3
smc_init
# the same-host rendezvous, even where the host (its boot unit, a concurrent test) has
# the TCP option set up: its map is pinned under SMC_RDV_DIR too
export SMC_BPF_DIR=/sys/fs/bpf/smc-accept-later-none-$$ SMC_RDV_DIR=$SMC_TMP/no-rdv-dir
export SMC_HANDSHAKE_TIMEOUT_MS=20000 SMC_SHORT_CONN_US=0

cat >"$SMC_TMP/server.py" <<'PY'
import socket, sys
def listener():
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", 0))
    s.listen(8)
    return s
data, ctl = listener(), listener()
print("ports %d %d" % (data.getsockname()[1], ctl.getsockname()[1]), flush=True)
for _ in range(int(sys.argv[1])):
    c, _ = ctl.accept()
    assert c.recv(2) == b"go"
    d, _ = data.accept()
    n = 0
    while True:
        b = d.recv(65536)
        if not b:
            break
        n += len(b)
    d.close()
    c.sendall(b"%d" % n)
    c.close()
PY

cat >"$SMC_TMP/client.py" <<'PY'
import array, socket, sys
case, dport, cport = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
d = socket.create_connection(("127.0.0.1", dport))
if case == "staged":
    want = 200000
    d.sendall(b"s" * want)
    c = socket.create_connection(("127.0.0.1", cport))
    c.sendall(b"go")
else:
    want = 5000
    a, b = socket.socketpair()
    socket.send_fds(a, [b"fd"], [d.fileno()])
    msg, fds, _, _ = socket.recv_fds(b, 16, 1)
    d.close()
    d = socket.socket(fileno=fds[0])
    c = socket.create_connection(("127.0.0.1", cport))
    c.sendall(b"go")
    d.sendall(b"p" * want)
d.close()
got = c.recv(64)
print("%s: server read %s of %d bytes" % (case, got.decode(), want), flush=True)
sys.exit(0 if got == b"%d" % want else 1)
PY

srv=$(smc_stats_dir server)
smc_start_server server "$srv" python3 "$SMC_TMP/server.py" 2
smc_wait_log server '^ports '
read -r _ dport cport < <(grep -m1 '^ports ' "$SMC_TMP/server.log")

for case in staged passed; do
	cli=$(smc_stats_dir "client-$case")
	out=$(SMC_CMD_TIMEOUT=15 smc_run "$cli" python3 "$SMC_TMP/client.py" "$case" \
		"$dport" "$cport" 2>&1)
	rc=$?
	smc_log "$out"
	smc_assert_eq "$case: client exit status (124: waited for the handshake)" "$rc" 0
	smc_require_stats "$cli"
	smc_log "stats client $case: $(smc_stats_summary "$cli")"
	if [ "$SMC_TEST_EXPECT" = shm ]; then
		reason=handshake-failed
		[ "$case" = passed ] && reason=fd-passed
		smc_assert_eq "$case: data connection on TCP for $reason" \
			"$(smc_stats "$cli" ".fallback[\"$reason\"] // 0")" 1
		smc_assert_eq "$case: control connection over shm" \
			"$(smc_stats "$cli" '.connections.shm')" 1
		smc_assert_eq "$case: no abort" "$(smc_stats "$cli" '.events.aborts')" 0
	fi
done
smc_wait_server_exit server 10
smc_require_stats "$srv"
smc_log "stats server: $(smc_stats_summary "$srv")"
smc_expect_connections "$srv" 2 server
smc_assert_eq "server: no abort" "$(smc_stats "$srv" '.events.aborts')" 0
smc_pass
