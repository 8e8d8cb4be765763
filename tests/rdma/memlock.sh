#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#
# SMC-R under a locked-memory limit, in the VM of tests/vm (Soft-RoCE): each RDMA
# connection registers (pins) its RMB and a send buffer of the peer's RMB size, 4 MiB at
# the default 2 MiB rings, and registration counts against RLIMIT_MEMLOCK unless the
# process has CAP_IPC_LOCK. A server and a client, both without CAP_IPC_LOCK and with
# Debian's default limit for users (8 MiB), open MEMLOCK_CONNS connections at once and
# then move MEMLOCK_BYTES each way on every one, checking each byte. Expected: the
# connections whose memory could not be registered are declined and stay TCP, with
# nothing lost and no abort: every transfer is complete and right, at least one and at
# most two connections per side are on "ib" (two would need all 8 MiB), the others
# "tcp" with fallback reason mem-cap, the failure is logged (once per process, with the
# limit), and both processes exit 0.
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
. "$(dirname -- "$0")/ib-lib.sh"

CONNS=${MEMLOCK_CONNS:-4}
BYTES=${MEMLOCK_BYTES:-1048576}
LIMIT=8388608

smc_init
smc_require_cmd python3
smc_require_cmd setpriv
smc_require_cmd prlimit

cat >"$SMC_TMP/peers.py" <<'PY'
# peers.py server|client PORT CONNS BYTES: CONNS connections open at once, then BYTES
# each way on each in turn (client first), every byte checked. Prints "OK ...".
import socket, sys
role, port, conns, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
base = bytes(range(256)) * (n // 256 + 2)
def pattern(i, direction):
    k = (i * 37 + direction * 101) % 256
    return base[k:k + n]
def take(s, n):
    parts, got = [], 0
    while got < n:
        chunk = s.recv(min(1 << 20, n - got))
        if not chunk:
            sys.exit("%s: peer closed after %d of %d bytes" % (role, got, n))
        parts.append(chunk)
        got += len(chunk)
    return b"".join(parts)
if role == "server":
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", port))
    srv.listen(conns)
    socks = [srv.accept()[0] for _ in range(conns)]
    # the client says which of its connections each one is
    socks = sorted(socks, key=lambda s: take(s, 1)[0])
else:
    socks = [socket.create_connection(("127.0.0.1", port)) for _ in range(conns)]
    for i, s in enumerate(socks):
        s.sendall(bytes([i]))
for i, s in enumerate(socks):
    if role == "server":
        if take(s, n) != pattern(i, 0):
            sys.exit("server: connection %d: wrong bytes" % i)
        s.sendall(pattern(i, 1))
    else:
        s.sendall(pattern(i, 0))
        if take(s, n) != pattern(i, 1):
            sys.exit("client: connection %d: wrong bytes" % i)
for s in socks:
    s.close()
print("OK %s conns=%d bytes=%d" % (role, conns, n), flush=True)
PY

# without CAP_IPC_LOCK (root keeps it otherwise) and with the limit a user gets
limited=(setpriv --bounding-set=-ipc_lock prlimit --memlock=$LIMIT:$LIMIT)

# the registration failure is logged once per process, at level warn, on stderr
export SMC_LOG_LEVEL=warn
smc_free_port port
srv=$(smc_stats_dir server)
cli=$(smc_stats_dir client)
smc_start_server server "$srv" "${limited[@]}" python3 "$SMC_TMP/peers.py" server "$port" \
	"$CONNS" "$BYTES"
smc_wait_port server "$port" 60
smc_log "$CONNS connections at once under RLIMIT_MEMLOCK $LIMIT, $BYTES bytes each way on each"
smc_run "$cli" "${limited[@]}" python3 "$SMC_TMP/peers.py" client "$port" "$CONNS" "$BYTES" \
	>"$SMC_TMP/client.out" 2>&1
rc=$?
cat "$SMC_TMP/client.out"
smc_wait_server_exit server 120
cat "$(smc_server_log server)"
smc_assert_eq "client exit status" "$rc" 0
smc_assert_eq "server exit status" "${SMC_SERVER_RC[server]}" 0
grep -q "^OK client conns=$CONNS bytes=$BYTES" "$SMC_TMP/client.out" ||
	smc_fail "client did not finish every transfer"
grep -q "^OK server conns=$CONNS bytes=$BYTES" "$(smc_server_log server)" ||
	smc_fail "server did not finish every transfer"

# side DIR LABEL: the connection and byte accounting of one side's stats
side() {
	local dir=$1 label=$2 ib tcp bytes aborts reasons ibbytes
	smc_require_stats "$dir"
	read -r ib tcp bytes aborts ibbytes <<<"$(jq -rs '[ (map(.connections.ib) | add),
		(map(.connections.tcp) | add),
		(map(.bytes.ib.sent + .bytes.ib.received + .bytes.tcp.sent + .bytes.tcp.received)
		 | add), (map(.events.aborts) | add),
		(map(.bytes.ib.sent + .bytes.ib.received) | add) ] | @tsv' "$dir"/*.json)"
	reasons=$(jq -sc 'map(.fallback) | add' "$dir"/*.json)
	smc_log "$label: ib connections $ib ($ibbytes bytes), tcp connections $tcp" \
		"(fallback $reasons), bytes $bytes, aborts $aborts"
	smc_assert_ge "$label: ib connections" "$ib" 1
	# each connection on ib carries its BYTES both ways over RDMA
	smc_assert_ge "$label: payload bytes over ib (sent+received)" "$ibbytes" \
		"$((2 * ib * BYTES))"
	[ "$ib" -le 2 ] || smc_fail "$label: $ib ib connections under an 8 MiB limit (at most 2 fit)"
	smc_assert_eq "$label: ib + tcp connections" "$((ib + tcp))" "$CONNS"
	smc_assert_eq "$label: fallback reasons counted" \
		"$(jq -s 'map(.fallback | to_entries | map(.value) | add // 0) | add' "$dir"/*.json)" "$tcp"
	# plus one byte per connection: the client's index of it
	smc_assert_eq "$label: payload bytes (sent+received, ib and tcp)" "$bytes" \
		"$((2 * CONNS * BYTES + CONNS))"
	smc_assert_eq "$label: fallback reason mem-cap" \
		"$(jq -s 'map(.fallback["mem-cap"] // 0) | add' "$dir"/*.json)" "$tcp"
	smc_assert_eq "$label: aborts" "$aborts" 0
}
side "$srv" server
side "$cli" client
warned=$(cat "$(smc_server_log server)" "$SMC_TMP/client.out" |
	grep -c "cannot register [0-9]* bytes of RDMA memory (.*; RLIMIT_MEMLOCK $LIMIT bytes)")
smc_log "registration warnings: $warned"
smc_assert_ge "registration failures logged" "$warned" 1
[ "$warned" -le 2 ] || smc_fail "registration failure logged $warned times (once per process)"
# a declined connection is not a fault: nothing else at level warn (the handshakes given
# up close their half-made RDMA connections with an abort, logged at debug)
others=$(cat "$(smc_server_log server)" "$SMC_TMP/client.out" | grep "WARN" |
	grep -v "cannot register [0-9]* bytes of RDMA memory")
[ -z "$others" ] || smc_fail "other warnings: $others"
smc_pass
