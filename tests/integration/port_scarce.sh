#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#
# A client on a host whose odd ephemeral ports are all held by TIME_WAIT (a busy
# connection-per-request host). The library binds a client's port before connect() for
# the rendezvous, and the kernel's bind() prefers odd ports: with none free, each bind
# scans the whole range in vain (milliseconds), where a plain connect() reuses a
# TIME_WAIT port at once. After one such bind the library leaves connections unbound
# for a second. In a network namespace of its own (the TIME_WAIT sockets go with it):
# plain clients fill the odd ports of the range (bind(0), connect, close first), then a
# preloaded client makes 1,000 connect/request/close cycles against a preloaded server:
# every reply right, every connection TCP for "resources", and the library's debug log
# shows at most one failed bind per second of the run (one per connection before).
# Root only (unshare --net).
# Exit: 0 pass, 1 fail, 77 skip, 99 hard error.

# shellcheck source=tests/integration/lib.sh
. "$(cd -- "$(dirname -- "$0")" && pwd)/lib.sh"

smc_require_cmd python3 unshare ip
smc_init
# the same-host rendezvous, even where the host (its boot unit, a concurrent test) has
# the TCP option set up: its map is pinned under SMC_RDV_DIR too
export SMC_BPF_DIR=/sys/fs/bpf/smc-port-scarce-none-$$ SMC_RDV_DIR=$SMC_TMP/no-rdv-dir
[ "$(id -u)" = 0 ] || smc_skip "needs root (a network namespace of its own)"
unshare --net true 2>/dev/null || smc_skip "unshare --net is not possible here"

cat >"$SMC_TMP/server.py" <<'PY'
import selectors, socket, sys
ls = socket.socket()
ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
ls.bind(("127.0.0.1", int(sys.argv[1])))
ls.listen(512)
ls.setblocking(False)
sel = selectors.DefaultSelector()
sel.register(ls, selectors.EVENT_READ)
while True:
    for k, _ in sel.select():
        s = k.fileobj
        if s is ls:
            try:
                c, _ = ls.accept()
            except BlockingIOError:
                continue
            c.setblocking(False)
            sel.register(c, selectors.EVENT_READ)
            continue
        try:
            d = s.recv(4096)
        except BlockingIOError:
            continue
        except ConnectionError:
            d = b""
        if d:
            s.send(b"pong\n")
        else:
            sel.unregister(s)
            s.close()
PY

# plain: the client closes first, so TIME_WAIT holds its bind(0) (odd) port
cat >"$SMC_TMP/fill.py" <<'PY'
import socket, sys
port, even, made = int(sys.argv[1]), 0, 0
while even < 300:
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", 0))
    except OSError:
        break
    even = even + 1 if s.getsockname()[1] % 2 == 0 else 0
    if even:
        s.close()
        continue
    s.connect(("127.0.0.1", port))
    s.sendall(b"ping\n")
    s.recv(10)
    s.close()
    made += 1
print("filled", made)
PY

cat >"$SMC_TMP/client.py" <<'PY'
import socket, sys, time
port, n, bad = int(sys.argv[1]), int(sys.argv[2]), 0
t = time.monotonic()
for i in range(n):
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(b"ping\n")
    if s.recv(10) != b"pong\n":
        bad += 1
    s.close()
print("cycles %d bad %d seconds %d" % (n, bad, int(time.monotonic() - t) + 1))
PY

cat >"$SMC_TMP/inside.sh" <<'SH'
set -e
ip link set lo up
python3 "$SMC_TMP/server.py" 18000 &
plain=$!
SMC_STATS_FILE="$SRV/%p.json" LD_PRELOAD="$SMC_PRELOAD_LIB" python3 "$SMC_TMP/server.py" 18001 &
smc=$!
trap 'kill $plain $smc 2>/dev/null' EXIT
for i in $(seq 50); do
	[ -n "$(ss -Hltn 'sport = :18001')" ] && [ -n "$(ss -Hltn 'sport = :18000')" ] && break
	sleep 0.1
done
python3 "$SMC_TMP/fill.py" 18000
SMC_STATS_FILE="$CLI/%p.json" SMC_LOG_LEVEL=debug SMC_LOG_FILE="$SMC_TMP/client.log" \
	LD_PRELOAD="$SMC_PRELOAD_LIB" python3 "$SMC_TMP/client.py" 18001 1000
SH

srv=$(smc_stats_dir server)
cli=$(smc_stats_dir client)
out=$(SRV=$srv CLI=$cli SMC_TMP=$SMC_TMP SMC_PRELOAD_LIB=$SMC_PRELOAD_LIB \
	timeout -k 5 300 unshare --net bash "$SMC_TMP/inside.sh" 2>&1)
rc=$?
smc_log "$out"
smc_assert_eq "run in the namespace: exit status" "$rc" 0
read -r _ cycles _ bad _ secs < <(grep '^cycles ' <<<"$out")
smc_assert_eq "cycles" "$cycles" 1000
smc_assert_eq "wrong replies" "$bad" 0
smc_require_stats "$cli"
smc_log "stats client: $(smc_stats_summary "$cli")"
smc_assert_eq "client: connections TCP for resources" \
	"$(smc_stats "$cli" '.fallback.resources // 0')" 1000
tried=$(grep -c 'bound to an even port\|no free odd ephemeral port' "$SMC_TMP/client.log")
smc_log "failed binds logged: $tried in $secs s"
smc_assert "failed binds ($tried) at most one per second of the run ($secs s) and one more" \
	"$tried" -le $((2 * secs + 2))
smc_pass
