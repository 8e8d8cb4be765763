#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#
# The library keeps its own time. libfaketime, preloaded beside it, replaces the C
# library's clock_gettime; with a frozen clock (FAKETIME="2000-01-01 00:00:00")
# CLOCK_MONOTONIC stops too. A server writes 100,000 bytes to a client that reads
# nothing yet, and exits: its exit waits for the client to read, 2 s at most
# (conn_orphan.h). When that bound was measured on the faked clock it never passed, and
# the server's exit waited for as long as its client did not read. Both orders of the
# two libraries in LD_PRELOAD. Then the client reads every byte.
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
. "$(dirname -- "$0")/lib.sh"

smc_init
smc_require_cmd python3
[ "$SMC_TEST_EXPECT" = shm ] || smc_skip "the exit's wait for an unread peer: shm mode only"
FT=
for f in /usr/lib/*/faketime/libfaketime.so.1 /usr/lib/faketime/libfaketime.so.1; do
	[ -f "$f" ] && FT=$f && break
done
[ -n "$FT" ] || smc_skip "libfaketime not installed (Debian: libfaketime)"

SERVER='
import socket, sys
l = socket.socket()
l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
l.bind(("127.0.0.1", int(sys.argv[1])))
l.listen(1)
print("listening", flush=True)
c, _ = l.accept()
c.sendall(b"x" * 100000)
'
CLIENT='
import os, socket, sys, time
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
while not os.path.exists(sys.argv[2]):
    time.sleep(0.05)
n = 0
while True:
    b = s.recv(65536)
    if not b:
        break
    n += len(b)
print(n, flush=True)
'

run_case() {
	local name=$1 preload=$2 port srv cli go out
	smc_free_port port
	srv=$(smc_stats_dir "server-$name")
	cli=$(smc_stats_dir "client-$name")
	go=$SMC_TMP/go-$name
	out=$SMC_TMP/client-$name.out
	LD_PRELOAD=$preload FAKETIME="2000-01-01 00:00:00" \
		smc_start_server "server-$name" "$srv" python3 -c "$SERVER" "$port"
	smc_wait_log "server-$name" listening
	smc_run "$cli" python3 -c "$CLIENT" "$port" "$go" >"$out" 2>&1 &
	local cpid=$!
	# the client reads only once the server is gone: 2 s of waiting and the exit
	smc_wait_server_exit "server-$name" 20
	smc_assert_eq "$name: server exit status" "${SMC_SERVER_RC[server-$name]}" 0
	touch "$go"
	wait "$cpid" || smc_fail "$name: client failed: $(cat "$out")"
	smc_assert_eq "$name: bytes the client read" "$(cat "$out")" 100000
	smc_require_stats "$srv"
	smc_assert_eq "$name: server's bytes over shm" "$(smc_stats "$srv" '.bytes.shm.sent')" 100000
	smc_assert_eq "$name: client's bytes over shm" "$(smc_stats "$cli" '.bytes.shm.received')" 100000
}

smc_log "libfaketime first, the library after it"
run_case ft-first "$FT"
smc_log "the library first, libfaketime after it"
run_case lib-first "$SMC_PRELOAD_LIB $FT"
smc_pass
