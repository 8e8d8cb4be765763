#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#
# Node.js (libuv) http server and a Node http client, both under smc_preload.sh. libuv
# closes its sockets with syscall(SYS_close): the connections must be released all the
# same.
#  1. keep-alive agent (2 sockets): 200 small requests and 5 of a 1 MiB random file,
#     every body exact, payload over shared memory on both sides, no fallback;
#  2. a new connection per request (agent: false), 300 sequential requests: every body
#     exact. Afterwards the server process has as many fds and memfd mappings as after
#     the first connections (a small constant allowed for the library's lazily made
#     parts and the pools, core/shm/pool.h), smcpstat lists none of its connections, and
#     no connection fell back for mem-cap;
#  3. with UV_USE_IO_URING=1 on a libuv that has io_uring (1.45 on), which libuv sets up
#     through syscall(): a server and a keep-alive client keep their connections TCP
#     (fallback io-uring on both sides), every body exact;
#  4. requests per second of the per-request loop, under the library and with
#     SMC_TRANSPORT=tcp for both processes, 3 rounds each, logged with their ratio (a
#     measurement, not an assertion).
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
. "$(dirname -- "$0")/lib.sh"

SMALL_N=200
BIG_N=5
PER_REQUEST_N=${NODE_PER_REQUEST_N:-300}
SPEED_N=${NODE_SPEED_N:-1000}
SPEED_ROUNDS=${NODE_SPEED_ROUNDS:-3}
FD_SLACK=8

smc_require_cmd node
smc_init
SMCPSTAT=$top_builddir/tools/smcpstat
smc_require_built "$SMCPSTAT"
smc_make_www node

cat >"$SMC_TMP/server.js" <<'JS'
'use strict';
const http = require('http');
const fs = require('fs');
const [port, dir] = [Number(process.argv[2]), process.argv[3]];
const files = { '/small.txt': fs.readFileSync(dir + '/small.txt'),
		'/big.bin': fs.readFileSync(dir + '/big.bin') };
const server = http.createServer((req, res) => {
	const body = files[req.url];
	if (!body) { res.writeHead(404); res.end(); return; }
	res.writeHead(200, { 'Content-Type': 'application/octet-stream',
			     'Content-Length': body.length });
	res.end(body);
});
server.keepAliveTimeout = 60000;
server.listen(port, '127.0.0.1', () => console.log(`listening pid ${process.pid}`));
process.on('SIGTERM', () => {
	server.closeAllConnections();
	server.close(() => process.exit(0));
});
JS

cat >"$SMC_TMP/client.js" <<'JS'
'use strict';
const http = require('http');
const fs = require('fs');
const [mode, port, dir, n] = [process.argv[2], Number(process.argv[3]), process.argv[4],
			      Number(process.argv[5])];
const want = { '/small.txt': fs.readFileSync(dir + '/small.txt'),
	       '/big.bin': fs.readFileSync(dir + '/big.bin') };
const agent = mode === 'keepalive' ? new http.Agent({ keepAlive: true, maxSockets: 2 }) : false;

function get(path) {
	return new Promise((resolve, reject) => {
		const req = http.get({ host: '127.0.0.1', port, path, agent }, (res) => {
			const chunks = [];
			res.on('data', (d) => chunks.push(d));
			res.on('end', () => {
				const body = Buffer.concat(chunks);
				if (res.statusCode !== 200 || !body.equals(want[path]))
					reject(new Error(`${path}: status ${res.statusCode}, ` +
							 `${body.length} bytes, expected ${want[path].length}`));
				else
					resolve(body.length);
			});
			res.on('error', reject);
		});
		req.on('error', reject);
	});
}

(async () => {
	let bytes = 0;
	const start = process.hrtime.bigint();
	if (mode === 'keepalive') {
		const all = [];
		for (let i = 0; i < n; i++) all.push(get('/small.txt'));
		for (let i = 0; i < 5; i++) all.push(get('/big.bin'));
		for (const b of await Promise.all(all)) bytes += b;
		agent.destroy();
	} else {
		for (let i = 0; i < n; i++) bytes += await get('/small.txt');
	}
	const s = Number(process.hrtime.bigint() - start) / 1e9;
	console.log(`OK ${mode} requests=${mode === 'keepalive' ? n + 5 : n} bytes=${bytes} ` +
		    `rps=${(n / s).toFixed(1)}`);
})().catch((e) => { console.error(`FAIL ${e.message}`); process.exit(1); });
JS

# fds and memfd mappings of process $1: "FDS MEMFD_MAPS"
proc_resources() {
	echo "$(find "/proc/$1/fd" -mindepth 1 -maxdepth 1 2>/dev/null | wc -l)" \
		"$(grep -c '/memfd:' "/proc/$1/maps" 2>/dev/null)"
}

# node_client STATSDIR MODE N: runs the client, prints its OK line.
node_client() {
	local out=$SMC_TMP/client-$2-$RANDOM.out
	smc_run "$1" node "$SMC_TMP/client.js" "$2" "$port" "$www" "$3" >"$out" 2>&1 ||
		smc_fail "node client ($2) failed: $(cat "$out")"
	grep '^OK ' "$out" || smc_fail "node client ($2): no OK line: $(cat "$out")"
}

smc_free_port port
srv=$(smc_stats_dir server)
# A cap of 64 connections' rings (SMC_RCVBUF + SMC_SNDBUF, 4 MiB each): connections that
# were not released would exhaust it within the per-request loop (fallback mem-cap).
SMC_MEM_CAP=256m smc_start_server node "$srv" node "$SMC_TMP/server.js" "$port" "$www"
smc_wait_log node '^listening pid' 30
spid=$(sed -n 's/^listening pid \([0-9]*\)$/\1/p' "$(smc_server_log node)")

# 1. keep-alive
ka=$(smc_stats_dir client-keepalive)
line=$(node_client "$ka" keepalive "$SMALL_N")
smc_log "keep-alive: $line"
smc_expect_payload "$ka" $((BIG_N * 1048576)) "client (keep-alive)"

# 2. a connection per request; the baseline after a few of them (lazily made parts)
pr=$(smc_stats_dir client-per-request)
node_client "$(smc_stats_dir client-warmup)" per-request 20 >/dev/null
read -r fds0 maps0 <<<"$(proc_resources "$spid")"
smc_log "server pid $spid before: $fds0 fds, $maps0 memfd mappings"
line=$(node_client "$pr" per-request "$PER_REQUEST_N")
smc_log "per-request: $line"
for ((i = 0; i < 50; i++)); do
	read -r fds maps <<<"$(proc_resources "$spid")"
	[ "$fds" -le $((fds0 + FD_SLACK)) ] && [ "$maps" -le $((maps0 + FD_SLACK)) ] && break
	sleep 0.1
done
smc_log "server pid $spid after $PER_REQUEST_N connections: $fds fds, $maps memfd mappings"
smc_assert "server: $fds fds after $PER_REQUEST_N connections, $fds0 before (+$FD_SLACK allowed)" \
	"$fds" -le $((fds0 + FD_SLACK))
smc_assert "server: $maps memfd mappings after $PER_REQUEST_N connections, $maps0 before (+$FD_SLACK allowed)" \
	"$maps" -le $((maps0 + FD_SLACK))
"$SMCPSTAT" -j -p "$spid" >"$SMC_TMP/smcpstat.json" || smc_fail "smcpstat exited $?"
smc_assert_eq "server: connections smcpstat lists once every client is gone" \
	"$(jq length "$SMC_TMP/smcpstat.json")" 0
smc_expect_payload "$pr" $((PER_REQUEST_N * $(wc -c <"$www/small.txt"))) "client (per-request)"
smc_log "client (per-request): $(smc_stats "$pr" '.events.shm_pooled') connections on a pool slot"
smc_assert_eq "client (per-request): connections" \
	"$(smc_stats "$pr" '.connections.shm + .connections.tcp')" "$PER_REQUEST_N"

# 3. libuv's io_uring
uv=$(node -p process.versions.uv)
if [ "$SMC_TEST_EXPECT" != shm ]; then
	smc_log "part 3 (the upgrade decision) runs in shm mode only"
elif [ "$(printf '%s\n' 1.45.0 "$uv" | sort -V | head -n 1)" = 1.45.0 ]; then
	smc_free_port uport
	usrv=$(smc_stats_dir server-io-uring)
	ucli=$(smc_stats_dir client-io-uring)
	UV_USE_IO_URING=1 smc_start_server node-uring "$usrv" node "$SMC_TMP/server.js" "$uport" "$www"
	smc_wait_log node-uring '^listening pid' 30
	out=$SMC_TMP/client-io-uring.out
	UV_USE_IO_URING=1 smc_run "$ucli" node "$SMC_TMP/client.js" keepalive "$uport" "$www" \
		"$SMALL_N" >"$out" 2>&1 || smc_fail "node client (io_uring) failed: $(cat "$out")"
	smc_log "io_uring: $(grep '^OK ' "$out")"
	smc_stop_server node-uring
	smc_expect_fallback "$usrv" io-uring $((BIG_N * 1048576)) "server (libuv io_uring)"
	smc_expect_fallback "$ucli" io-uring $((BIG_N * 1048576)) "client (libuv io_uring)"
else
	smc_log "libuv $uv has no io_uring: part 3 skipped"
fi

# 4. speed: the same loop under the library and as plain TCP (both processes with
# SMC_TRANSPORT=tcp), rounds interleaved
speed() { # speed STATSDIR PORT [env...]: requests per second of one round
	local dir=$1 p=$2 out
	shift 2
	out=$(env "$@" SMC_STATS_FILE="$dir/%p.json" timeout 120 "$SMC_WRAPPER" node \
		"$SMC_TMP/client.js" per-request "$p" "$www" "$SPEED_N" 2>&1) ||
		smc_fail "speed round failed: $out"
	sed -n 's/^OK .* rps=\([0-9.]*\)$/\1/p' <<<"$out"
}
median() { printf '%s\n' "$@" | sort -g | sed -n "$((($# + 1) / 2))p"; }
measure_speed() {
	local tport sp_smc sp_tcp r lib=() tcp=() a b
	smc_free_port tport
	SMC_TRANSPORT=tcp smc_start_server node-tcp "$(smc_stats_dir server-tcp)" node \
		"$SMC_TMP/server.js" "$tport" "$www"
	smc_wait_log node-tcp '^listening pid' 30
	sp_smc=$(smc_stats_dir speed-smc)
	sp_tcp=$(smc_stats_dir speed-tcp)
	for ((r = 0; r < SPEED_ROUNDS; r++)); do
		lib+=("$(speed "$sp_smc" "$port")")
		tcp+=("$(speed "$sp_tcp" "$tport" SMC_TRANSPORT=tcp)")
	done
	smc_stop_server node-tcp
	a=$(median "${lib[@]}")
	b=$(median "${tcp[@]}")
	smc_log "per-request requests/s ($SPEED_N a round), library: ${lib[*]}; TCP: ${tcp[*]}"
	smc_log "per-request speed vs TCP, medians: $a / $b = $(awk -v a="$a" -v b="$b" \
		'BEGIN { printf "%.2fx", a / b }')"
	smc_log "stats of the rounds under the library: $(smc_stats_summary "$sp_smc")," \
		"$(smc_stats "$sp_smc" '.events.shm_pooled') on a pool slot"
}
[ "$SMC_TEST_EXPECT" = shm ] && [ "$SPEED_ROUNDS" -gt 0 ] && measure_speed

smc_stop_server node
smc_assert_eq "node server exit status" "${SMC_SERVER_RC[node]}" 0
smc_require_stats "$srv"
smc_assert_eq "server: connections that fell back for mem-cap" \
	"$(smc_stats "$srv" '.fallback["mem-cap"] // 0')" 0
smc_expect_payload "$srv" $((BIG_N * 1048576)) server
smc_pass
