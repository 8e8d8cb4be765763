#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#
# Node's cluster module with NODE_CLUSTER_SCHED_POLICY=none: the primary binds the
# listening socket and hands it to each of 2 workers over their IPC channel (SCM_RIGHTS)
# before anyone listens, and each worker calls listen() on it itself; both accept. The
# worker that listened first has a socket it did not make: the library tracks it at its
# listen() (before, it was left untracked while the second worker, which received it
# listening, registered the rendezvous name, and each client whose connection the first
# worker accepted waited out its 2 s handshake timeout: handshake-failed). Both ends under
# smc_preload.sh, CLIENTS curl runs, one connection each: every answer right, every
# connection upgraded on both sides, both workers served some.
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
. "$(dirname -- "$0")/lib.sh"

CLIENTS=20

smc_require_cmd node curl
smc_init
smc_free_port port
srv=$(smc_stats_dir server)
cli=$(smc_stats_dir client)

cat >"$SMC_TMP/cluster.js" <<'JS'
'use strict';
const cluster = require('cluster');
const http = require('http');
const port = Number(process.argv[2]);
if (cluster.isPrimary) {
	let up = 0;
	for (let i = 0; i < 2; i++)
		cluster.fork().on('listening', () => { if (++up === 2) console.log('ready'); });
	process.on('SIGTERM', () => {
		for (const id in cluster.workers) cluster.workers[id].process.kill('SIGTERM');
		process.exit(0);
	});
} else {
	http.createServer((req, res) => {
		res.end('worker ' + process.pid + ' ' + req.url + '\n');
	}).listen(port, '127.0.0.1');
	process.on('SIGTERM', () => process.exit(0));
}
JS

NODE_CLUSTER_SCHED_POLICY=none smc_start_server cluster "$srv" node "$SMC_TMP/cluster.js" "$port"
smc_wait_log cluster '^ready'

declare -A served=()
for ((i = 0; i < CLIENTS; i++)); do
	out=$(smc_run "$cli" curl -sS --fail "http://127.0.0.1:$port/r$i" 2>&1) ||
		smc_fail "curl $i failed: $out"
	[[ $out =~ ^worker\ ([0-9]+)\ /r$i$ ]] || smc_fail "curl $i: wrong answer '$out'"
	served[${BASH_REMATCH[1]}]=1
done
smc_log "workers that answered: ${!served[*]}"
smc_assert_eq "workers that answered" "${#served[@]}" 2
smc_stop_server cluster TERM

smc_require_stats "$cli"
smc_require_stats "$srv"
smc_log "stats client: $(smc_stats_summary "$cli")"
smc_log "stats server: $(smc_stats_summary "$srv")"
smc_assert_eq "client: connections that failed their handshake" \
	"$(smc_stats "$cli" '.fallback["handshake-failed"] // 0')" 0
smc_expect_connections "$cli" "$CLIENTS" "curl"
smc_expect_connections "$srv" "$CLIENTS" "node workers"
# every request and answer: the curl request line alone is more than 20 bytes
smc_expect_payload "$cli" $((CLIENTS * 20)) "curl"
smc_pass
