#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#
# A program linked with libev (h2load, Debian package nghttp2-client): libev exports
# libevent's function names for its compatibility layer, and they come first in the
# program's global namespace. The library's progress thread must still run libevent's
# own code (core/base/evlib.h): h2load against a preloaded HTTP server, both ends preloaded,
# completes every request over shared memory. It crashed (SIGSEGV in libev's
# ev_timer_start, called as event_add) on the first upgraded connection.
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
. "$(dirname -- "$0")/lib.sh"

smc_init
smc_require_cmd h2load python3
# python's http.server closes every connection after its answer: upgrade them all, the
# short-connection policy is short_conn.sh's
export SMC_SHORT_CONN_US=0

srv=$(smc_stats_dir server)
cli=$(smc_stats_dir h2load)
smc_free_port port
mkdir -p "$SMC_TMP/www" && echo "hello from a preloaded server" >"$SMC_TMP/www/index.html"
smc_start_server http "$srv" python3 -m http.server -b 127.0.0.1 -d "$SMC_TMP/www" "$port"
smc_wait_port http "$port"
for c in 1 4; do
	out=$(smc_run "$cli" h2load --h1 -n 200 -c "$c" "http://127.0.0.1:$port/" 2>&1)
	rc=$?
	smc_assert_eq "h2load -c $c exit status ($(echo "$out" | tail -3))" "$rc" 0
	echo "$out" | grep -q "^requests: 200 total, 200 started, 200 done, 200 succeeded" ||
		smc_fail "h2load -c $c: not every request succeeded: $(echo "$out" | grep '^requests')"
done
smc_stop_server http INT
smc_expect_payload "$cli" 1 h2load
smc_assert_eq "aborts" "$(smc_stats "$cli" '.events.aborts')" 0
smc_pass
