#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#
# The short-connection policy (SMC_SHORT_CONN_US, core/negotiate/hs_policy.h) with nginx:
#  1. One python process, SMC_SHORT_CONN_US=200000 (headroom for slow machines): six
#     short requests (4 upgraded; the fifth asks for a connection pool, core/shm/pool.h, and
#     so is upgraded too, but nginx's worker refuses it: it was forked after the listener
#     was opened; the sixth stays TCP), a pause past the probe interval, one request held
#     open 0.5 s (the probe: upgraded, and short however long, for it made one exchange),
#     so one more short request at once stays TCP, another pause, one connection with three requests in turn held 0.5 s (the next
#     probe: upgraded, and long), then two short ones, upgraded again because the long one gave
#     the destination back to SMC. Exactly 9 shm and 2 short-lived connections, none
#     pooled, every response complete.
#  2. wrk with "Connection: close" under the default settings: every request answered
#     (2xx, no socket error); wrk upgraded its first connections (payload over shm) and
#     then left its connections TCP, fallback reason "short-lived", which nginx counts
#     as peer-not-smc.
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
. "$(dirname -- "$0")/lib.sh"

smc_require_cmd nginx wrk python3
smc_init
[ "$SMC_TEST_EXPECT" = shm ] || smc_skip "the policy decides between SMC and TCP: shm mode only"
smc_free_port port
srv=$(smc_stats_dir server)
wrkdir=$(smc_stats_dir wrk)
pydir=$(smc_stats_dir python)
smc_make_www short-conn

smc_start_nginx "$srv" "$port" 1 "access_log off;"

# 1. the policy learns both ways, in one process
cat >"$SMC_TMP/client.py" <<'PY'
import socket, sys, time

port = int(sys.argv[1])
want = open(sys.argv[2], "rb").read()

def get(hold=0.0):
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(b"GET /small.txt HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
    data = b""
    while True:
        b = s.recv(65536)
        if not b:
            break
        data += b
    time.sleep(hold)
    s.close()
    head, _, body = data.partition(b"\r\n\r\n")
    if not head.startswith(b"HTTP/1.1 200") or body != want:
        sys.exit("bad response: %r" % data[:200])

def talk(turns, hold):
    # keep-alive requests, each answer read whole before the next request: `turns`
    # request/answer exchanges on one connection
    s = socket.create_connection(("127.0.0.1", port))
    f = s.makefile("rb")
    for i in range(turns):
        last = i == turns - 1
        s.sendall(b"GET /small.txt HTTP/1.1\r\nHost: t\r\n" +
                  (b"Connection: close\r\n" if last else b"") + b"\r\n")
        status = f.readline()
        length = None
        while True:
            line = f.readline()
            if line in (b"\r\n", b""):
                break
            k, _, v = line.partition(b":")
            if k.strip().lower() == b"content-length":
                length = int(v)
        body = f.read(length)
        if not status.startswith(b"HTTP/1.1 200") or body != want:
            sys.exit("bad response %d: %r" % (i, status))
        time.sleep(hold / turns)
    f.close()
    s.close()

for _ in range(6):
    get()
time.sleep(1.3)
# one slow answer alone is short (hs_policy.h): the probe that gives the destination
# back talks, three turns, and lives long
get(hold=0.5)
get()
time.sleep(1.1)
talk(3, 0.5)
for _ in range(2):
    get()
print("OK")
PY
smc_log "python: 6 short, pause, 1 slow, 1 short, pause, 1 with 3 turns, 2 short"
out=$(SMC_SHORT_CONN_US=200000 smc_run "$pydir" python3 "$SMC_TMP/client.py" "$port" "$www/small.txt" 2>&1) ||
	smc_fail "python client failed (exit $?): $out"
smc_log "stats python: $(smc_stats_summary "$pydir")"
smc_assert_eq "python: shm connections (4 + pool request + 2 probes + 2)" \
	"$(smc_stats "$pydir" '.connections.shm')" 9
smc_assert_eq "python: short-lived connections" "$(smc_stats "$pydir" '.fallback["short-lived"] // 0')" 2
smc_assert_eq "python: tcp connections" "$(smc_stats "$pydir" '.connections.tcp')" 2
smc_assert_eq "python: pooled connections (nginx forks: no pool)" \
	"$(smc_stats "$pydir" '.events.shm_pooled')" 0

# 2. a connection per request, default policy. After the python client: at this rate
# (~20,000 connections a second) wrk's TIME_WAITs spill from the even ports onto the odd
# ones that a client offering SMC binds. 10 connections: wrk refuses an fd above
# 10 + 3 x connections, and while the first handshakes run, the descriptors they
# receive sit briefly at the lowest free numbers (with -c 2 under strace wrk reported a
# connect error in every run).
out=$SMC_TMP/wrk.out
smc_log "wrk: Connection: close, 1 s"
smc_run "$wrkdir" env -u SMC_SHORT_CONN_US wrk -t1 -c10 -d1s -H 'Connection: close' \
	"http://127.0.0.1:$port/small.txt" >"$out" 2>&1 || smc_fail "wrk failed: $(cat "$out")"
n=$(awk '/requests in/ { print $1 }' "$out")
smc_assert_ge "wrk: requests completed" "${n:-0}" 100
grep -q 'Non-2xx or 3xx responses' "$out" && smc_fail "wrk: non-2xx responses"
grep -q 'Socket errors' "$out" && smc_fail "wrk: $(grep 'Socket errors' "$out")"
smc_require_stats "$wrkdir"
smc_log "stats wrk: $(smc_stats_summary "$wrkdir")"
shm=$(smc_stats "$wrkdir" '.connections.shm')
short=$(smc_stats "$wrkdir" '.fallback["short-lived"] // 0')
tcp=$(smc_stats "$wrkdir" '.connections.tcp')
# the first 4, those already connecting meanwhile and a probe per second of the run
# (one exchange each: short however slow a loaded machine answers them)
smc_assert_ge "wrk: shm connections (the first ones)" "$shm" 4
smc_assert "wrk: $shm shm connections for $tcp short-lived: not under 1 in 10" \
	"$((shm * 10))" -le "$tcp"
smc_assert_ge "wrk: payload bytes over shm" "$(smc_stats "$wrkdir" '.bytes.shm.sent + .bytes.shm.received')" 1
smc_assert_ge "wrk: short-lived connections" "$short" 90
smc_assert_eq "wrk: every tcp connection is short-lived" "$tcp" "$short"
smc_assert_eq "wrk: pooled connections (nginx forks: no pool)" \
	"$(smc_stats "$wrkdir" '.events.shm_pooled')" 0

smc_stop_server nginx QUIT
smc_assert_eq "nginx exit status" "${SMC_SERVER_RC[nginx]}" 0
smc_require_stats "$srv"
smc_log "stats nginx: $(smc_stats_summary "$srv")"
# wrk may stop with up to its 10 connections still connecting: that many either way
smc_assert_ge "nginx: shm connections (the clients' ones)" \
	"$(smc_stats "$srv" '.connections.shm')" "$((shm + 8 - 10))"
nt=$(smc_stats "$srv" '.fallback["peer-not-smc"] // 0')
smc_assert_ge "nginx: the clients' TCP connections, seen as peer-not-smc" "$nt" "$((tcp + 1 - 10))"
smc_assert "nginx: at most $((tcp + 1 + 10)) peer-not-smc, got $nt" "$nt" -le "$((tcp + 1 + 10))"
smc_pass
