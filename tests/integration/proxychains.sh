#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#
# A client under proxychains4 and the library, the library first in LD_PRELOAD:
# proxychains' connect() runs inside ours, connects a socket of its own to the SOCKS
# proxy (microsocks), speaks SOCKS on it and dup2()s it over the program's descriptor.
# The library's connection went with the old socket (a double free in its progress
# thread in about 1 client in 10 before), and the new socket stays plain TCP. Then the
# other order (proxychains first, its connect() calls ours for its proxy socket). Each
# client uploads 4 MiB through the proxy to a socat server that hashes what it got;
# the proxy runs under the library too, so its hop to the server is upgraded.
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
. "$(dirname -- "$0")/lib.sh"

ROUNDS=20
PCL=/usr/lib/x86_64-linux-gnu/libproxychains.so.4

smc_init
smc_require_cmd python3 socat microsocks sha256sum
[ -f "$PCL" ] || smc_skip "proxychains4 is not installed ($PCL)"
export SMC_SHORT_CONN_US=0 # every connection upgraded with a full handshake, no pool

UP='
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
s.sendall(open(sys.argv[2], "rb").read())
r = b""
while True:
    b = s.recv(4096)
    if not b:
        break
    r += b
print(r.decode().split()[0], flush=True)
'

head -c 4194304 /dev/urandom >"$SMC_TMP/data"
want=$(sha256sum <"$SMC_TMP/data" | cut -d' ' -f1)
smc_free_port proxy_port
smc_free_port server_port
printf 'strict_chain\nquiet_mode\n[ProxyList]\nsocks5 127.0.0.1 %s\n' "$proxy_port" \
	>"$SMC_TMP/proxychains.conf"
export PROXYCHAINS_CONF_FILE=$SMC_TMP/proxychains.conf

proxy=$(smc_stats_dir proxy)
server=$(smc_stats_dir server)
smc_start_server proxy "$proxy" microsocks -i 127.0.0.1 -p "$proxy_port"
smc_start_server server "$server" socat "TCP-LISTEN:$server_port,reuseaddr,fork" \
	SYSTEM:"head -c 4194304 | sha256sum"
smc_wait_port proxy "$proxy_port"
smc_wait_port server "$server_port"

for order in library-first proxychains-first; do
	dir=$(smc_stats_dir "client-$order")
	preload=${SMC_TEST_PRELOAD_FIRST:+$SMC_TEST_PRELOAD_FIRST:}$SMC_PRELOAD_LIB:$PCL
	[ "$order" = proxychains-first ] &&
		preload=${SMC_TEST_PRELOAD_FIRST:+$SMC_TEST_PRELOAD_FIRST:}$PCL:$SMC_PRELOAD_LIB
	for ((i = 1; i <= ROUNDS; i++)); do
		# freed memory filled, so that a use after free in the library shows within a few rounds
		got=$(env SMC_STATS_FILE="$dir/%p.json" LD_PRELOAD="$preload" \
			GLIBC_TUNABLES=glibc.malloc.perturb=165 \
			timeout -k 5 "$SMC_CMD_TIMEOUT" python3 -c "$UP" "$server_port" \
			"$SMC_TMP/data" 2>"$SMC_TMP/client-$order.err") ||
			smc_fail "$order: round $i: the client failed (status $?): $(head -5 "$SMC_TMP/client-$order.err")"
		[ "$got" = "$want" ] || smc_fail "$order: round $i: the server hashed $got, not $want"
	done
	smc_require_stats "$dir"
	smc_log "stats client ($order): $(smc_stats_summary "$dir")"
	smc_assert_eq "$order: client aborts" "$(smc_stats "$dir" '.events.aborts')" 0
	# library first, its connect() sees the socket swapped: nothing is ours to count
	[ "$order" = library-first ] &&
		smc_assert_eq "$order: client shm connections" "$(smc_stats "$dir" '.connections.shm')" 0
done
smc_stop_server server
smc_stop_server proxy
# socat's children (one per client) hashed what the proxy relayed to them
smc_expect_payload "$server" $((2 * ROUNDS * 4194304)) "server"
smc_pass
