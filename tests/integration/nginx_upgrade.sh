#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#
# nginx's binary upgrade (SIGUSR2: the master forks a child that execs the nginx binary
# with the listeners in the NGINX variable) under the library. nginx hands the new binary
# only the environment it lets through, without LD_PRELOAD: the new master and its
# workers run without the library, beside the old ones, on the same listener. With both
# accepting, curl (preloaded) asks 12 times on new connections, on the same-host
# rendezvous: every answer complete, and every connection plain TCP at once with reason
# peer-not-smc: the exec shut the listener's rendezvous name, which the old master
# shares. Before, a client that a new worker accepted waited for an answer nobody
# gave, until its handshake timeout (handshake-failed: 2 s, wrk counted it as a timeout).
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
. "$(dirname -- "$0")/lib.sh"

smc_require_cmd nginx curl
smc_init
[ "$SMC_TEST_EXPECT" = shm ] || smc_skip "the rendezvous name of a listener: shm mode only"
# the rendezvous is the path under test: a TCP option set up on this machine stays out
export SMC_BPF_DIR=/sys/fs/bpf/smc-nginx-upgrade-none-$$
smc_free_port port
srv=$(smc_stats_dir server)
cli=$(smc_stats_dir client)
smc_make_www nginx-upgrade

# nginx refuses a binary upgrade unless it runs as a daemon (its parent not the one it
# started with), and execs its argv[0] as given: started by its full path in the
# background, stopped through its pid files
cat >"$SMC_TMP/nginx.conf" <<CONF
user $(id -un) $(id -gn);
worker_processes 1;
pid $SMC_TMP/nginx.pid;
error_log $SMC_TMP/nginx-error.log warn;
events { worker_connections 256; }
http {
	access_log off;
	client_body_temp_path $SMC_TMP/tmp-body;
	proxy_temp_path $SMC_TMP/tmp-proxy;
	fastcgi_temp_path $SMC_TMP/tmp-fastcgi;
	uwsgi_temp_path $SMC_TMP/tmp-uwsgi;
	scgi_temp_path $SMC_TMP/tmp-scgi;
	server { listen 127.0.0.1:$port; root $www; }
}
CONF
stop_all() {
	local f p
	for f in "$SMC_TMP/nginx.pid.oldbin" "$SMC_TMP/nginx.pid"; do
		p=$(cat "$f" 2>/dev/null) && [ -n "$p" ] && kill -QUIT "$p" 2>/dev/null
	done
	for ((i = 0; i < 100; i++)); do
		pgrep -f "nginx.*$SMC_TMP/nginx.conf" >/dev/null || return 0
		sleep 0.1
	done
	pkill -KILL -f "nginx.*$SMC_TMP/nginx.conf"
	return 1
}
# before the library's own cleanup, with the test's exit status kept for it
trap 'rc=$?; stop_all; (exit "$rc"); _smc_cleanup' EXIT
smc_run "$srv" "$(command -v nginx)" -e "$SMC_TMP/nginx-error.log" -p "$SMC_TMP/" -c "$SMC_TMP/nginx.conf" ||
	smc_fail "nginx did not start: $(cat "$SMC_TMP/nginx-error.log")"
for ((i = 0; i < 100; i++)); do
	old=$(cat "$SMC_TMP/nginx.pid" 2>/dev/null) && [ -n "$old" ] && break
	sleep 0.1
done
[ -n "$old" ] || smc_fail "nginx wrote no pid file"
kill -USR2 "$old"
for ((i = 0; i < 200; i++)); do
	[ -f "$SMC_TMP/nginx.pid.oldbin" ] && new=$(cat "$SMC_TMP/nginx.pid" 2>/dev/null) &&
		[ -n "$new" ] && [ "$new" != "$old" ] &&
		[ "$(pgrep -c -P "$new")" -ge 1 ] && break
	sleep 0.1
done
[ "$i" -lt 200 ] || smc_fail "nginx's new master or its worker did not start"
smc_log "old master $old, new master $new (without the library)"
grep -q 'LD_PRELOAD' "/proc/$new/environ" && smc_fail "the new master kept LD_PRELOAD"

for ((i = 0; i < 12; i++)); do
	smc_run "$cli" curl -sS --fail -o "$SMC_TMP/got-$i" "http://127.0.0.1:$port/small.txt" ||
		smc_fail "curl $i failed"
	cmp -s "$SMC_TMP/got-$i" "$www/small.txt" || smc_fail "curl $i: wrong answer"
done
smc_require_stats "$cli"
smc_log "stats curl: $(smc_stats_summary "$cli")"
smc_assert_eq "curl: handshake-failed" "$(smc_stats "$cli" '.fallback["handshake-failed"] // 0')" 0
smc_assert_eq "curl: peer-not-smc" "$(smc_stats "$cli" '.fallback["peer-not-smc"] // 0')" 12
smc_assert_eq "curl: aborts" "$(smc_stats "$cli" '.events.aborts')" 0

stop_all || smc_fail "nginx did not stop on SIGQUIT"
trap _smc_cleanup EXIT
smc_require_stats "$srv"
smc_log "stats old nginx: $(smc_stats_summary "$srv")"
smc_pass
