#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#
# A client that sets TCP_QUICKACK 0 before a nonblocking connect(), as haproxy's health
# checks do, or TCP_DEFER_ACCEPT: the kernel holds the handshake's last ACK for the
# first request, and the server's kernel queues the connection for accept() only when
# that ACK comes. Over the
# rings the request does not carry it: each connection waited for the client's 200 ms
# delayed-ACK timer, and haproxy marked a healthy backend down. Ten request/response
# cycles to a Python server, each with the full SMC handshake (SMC_SHORT_CONN_US=0),
# then ten with the defaults (the later ones on a pooled slot): at most two cycles in
# ten may take 150 ms or more (the stall is never shorter than 200 ms, and a loaded
# machine may delay one or two), the answers are whole, the payload moved over shared
# memory, and both options read back after connect() as they do over plain TCP.
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
. "$(dirname -- "$0")/lib.sh"

smc_require_cmd python3
smc_init

cat >"$SMC_TMP/server.py" <<'PY'
import socket, sys
ls = socket.socket()
ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
ls.bind(("127.0.0.1", 0))
ls.listen(16)
print("port %d" % ls.getsockname()[1], flush=True)
for _ in range(int(sys.argv[1])):
    c, _ = ls.accept()
    req = b""
    while not req.endswith(b"\n"):
        d = c.recv(100)
        if not d:
            break
        req += d
    c.sendall(req * 100)
    c.close()
PY

cat >"$SMC_TMP/client.py" <<'PY'
import select, socket, sys, time
port, n, opt = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
slow, bad, acks = 0, 0, set()
for i in range(n):
    t = time.monotonic()
    s = socket.socket()
    s.setblocking(False)
    if opt == "quickack":
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_QUICKACK, 0)
    else:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_DEFER_ACCEPT, 5)
    try:
        s.connect(("127.0.0.1", port))
    except BlockingIOError:
        pass
    select.select([], [s], [], 10)
    acks.add((s.getsockopt(socket.IPPROTO_TCP, socket.TCP_QUICKACK),
              s.getsockopt(socket.IPPROTO_TCP, socket.TCP_DEFER_ACCEPT)))
    req = b"request %d\n" % i
    s.send(req)
    data = b""
    while True:
        r, _, _ = select.select([s], [], [], 10)
        if not r:
            break
        d = s.recv(65536)
        if not d:
            break
        data += d
    s.close()
    ms = (time.monotonic() - t) * 1000
    slow += ms >= 150
    bad += data != req * 100
    print("cycle %d: %.1f ms, %d bytes" % (i, ms, len(data)))
    time.sleep(0.02)
print("RESULT slow=%d bad=%d after_connect=%s" % (slow, bad, sorted(acks)))
PY

N=10
for opt in quickack defer; do
	# the reference: plain TCP
	smc_start_server "plain-$opt" - python3 "$SMC_TMP/server.py" "$N"
	smc_wait_log "plain-$opt" '^port '
	read -r _ port < <(grep -m1 '^port ' "$SMC_TMP/plain-$opt.log")
	ref=$(timeout -k 5 "$SMC_CMD_TIMEOUT" python3 "$SMC_TMP/client.py" "$port" "$N" "$opt" |
		grep RESULT)
	smc_wait_server_exit "plain-$opt" 10
	smc_log "$opt, plain TCP: $ref"
	ref_opts=${ref##*after_connect=}

	for mode in full pooled; do
		name=$opt-$mode
		srv=$(smc_stats_dir "server-$name")
		cli=$(smc_stats_dir "client-$name")
		if [ "$mode" = full ]; then
			export SMC_SHORT_CONN_US=0
		else
			unset SMC_SHORT_CONN_US
		fi
		smc_start_server "server-$name" "$srv" python3 "$SMC_TMP/server.py" "$N"
		smc_wait_log "server-$name" '^port '
		read -r _ port < <(grep -m1 '^port ' "$SMC_TMP/server-$name.log")
		smc_run "$cli" python3 "$SMC_TMP/client.py" "$port" "$N" "$opt" \
			>"$SMC_TMP/client-$name.out" 2>&1
		rc=$?
		out=$(grep RESULT "$SMC_TMP/client-$name.out")
		smc_log "$name: $out (exit $rc)"
		smc_assert_eq "$name: client exit status" "$rc" 0
		smc_wait_server_exit "server-$name" 10
		[[ $out =~ slow=([0-9]+)\ bad=([0-9]+) ]] ||
			smc_fail "$name: no result: $(tail -3 "$SMC_TMP/client-$name.out")"
		smc_assert "$name: ${BASH_REMATCH[1]} of $N cycles took 150 ms or more (200 ms: the held ACK)" \
			"${BASH_REMATCH[1]}" -le 2
		smc_assert_eq "$name: answers not whole" "${BASH_REMATCH[2]}" 0
		smc_assert_eq "$name: (TCP_QUICKACK, TCP_DEFER_ACCEPT) after connect(), as over TCP" \
			"${out##*after_connect=}" "$ref_opts"
		smc_expect_payload "$cli" 1 "client $name"
	done
done
unset SMC_SHORT_CONN_US
smc_pass
