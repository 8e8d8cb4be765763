#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#
# haproxy (two threads, its own configuration, in the foreground) in front of nginx,
# with curl and wrk as clients, every process under smc_preload.sh, so both hops can
# upgrade: client -> haproxy and haproxy -> nginx. Three frontends on the same backend:
# "mode tcp", "mode tcp" with "option splice-auto" (splice() between the sockets and a
# pipe) and "mode http" (haproxy parses and keeps server connections alive).
#  - through each frontend curl fetches the 1 MiB file and a small one twice over one
#    keep-alive connection, byte-identical;
#  - wrk with keep-alive through each frontend, and with a connection per request
#    through the http one: requests completed, no non-2xx answer, no socket error;
#  - haproxy is back to its idle sockets, eventfds, epoll sets, memfds and memfd
#    mappings afterwards (its idle server connections purged), exits 0,
#    and nginx's access log holds every 200; then the transport through the stats of
#    the clients, of haproxy (both of its sides) and of nginx.
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
. "$(dirname -- "$0")/lib.sh"

smc_require_cmd haproxy nginx curl wrk
smc_init
smc_free_port web
smc_free_port tcp_port
smc_free_port splice_port
smc_free_port http_port
web_stats=$(smc_stats_dir nginx)
px=$(smc_stats_dir haproxy)
cli=$(smc_stats_dir client)
smc_make_www haproxy

smc_start_nginx "$web_stats" "$web" 1 \
	"access_log $SMC_TMP/access.log; sendfile on; keepalive_requests 1000000;"

cat >"$SMC_TMP/haproxy.cfg" <<CONF
global
	nbthread 2
	maxconn 2000
	pidfile $SMC_TMP/haproxy.pid
defaults
	timeout connect 5s
	timeout client 30s
	timeout server 30s
	log stderr format short local0 warning
frontend tcp
	mode tcp
	bind 127.0.0.1:$tcp_port
	default_backend web_tcp
frontend splice
	mode tcp
	option splice-auto
	bind 127.0.0.1:$splice_port
	default_backend web_splice
frontend http
	mode http
	bind 127.0.0.1:$http_port
	default_backend web_http
backend web_tcp
	mode tcp
	server nginx 127.0.0.1:$web
backend web_splice
	mode tcp
	option splice-auto
	server nginx 127.0.0.1:$web
backend web_http
	mode http
	http-reuse always
	# idle server connections are closed 100 ms after use (5 s by default)
	server nginx 127.0.0.1:$web pool-purge-delay 100
CONF
smc_start_server haproxy "$px" haproxy -db -f "$SMC_TMP/haproxy.cfg"
for p in "$tcp_port" "$splice_port" "$http_port"; do
	smc_wait_port haproxy "$p"
done
hpid=${SMC_SERVER_PID[haproxy]}

requests=0
# fetch PORT LABEL: big.bin and small.txt twice each over one curl connection.
fetch() {
	local port=$1 label=$2 f args=()
	for f in big.bin small.txt big.bin small.txt; do
		args+=(-o "$SMC_TMP/got-$label-${#args[@]}-$f" "http://127.0.0.1:$port/$f")
	done
	smc_run "$cli" curl -sS --fail "${args[@]}" || smc_fail "curl through $label failed (status $?)"
	for f in "$SMC_TMP"/got-"$label"-*; do
		smc_assert_same_file "${f##*/} through $label" "$f" "$www/${f##*-}"
	done
	requests=$((requests + 4))
}

# wrk_run PORT LABEL SECONDS PATH [WRK ARGS...]
wrk_run() {
	local port=$1 label=$2 secs=$3 path=$4 out=$SMC_TMP/wrk-$2.out
	shift 4
	smc_log "wrk $label"
	smc_run "$cli" wrk -t2 -c16 -d"$secs" "$@" "http://127.0.0.1:$port/$path" >"$out" 2>&1 ||
		smc_fail "wrk $label failed (status $?): $(cat "$out")"
	smc_wrk_check "$label" "$out"
	requests=$((requests + smc_wrk_n))
}

fetch "$tcp_port" tcp
fetch "$splice_port" splice
fetch "$http_port" http
# idle, after connections in both of its threads (each has an epoll set, whose shadow
# set and doorbell come with its first upgraded connection)
wrk_run "$http_port" warm-up 1s small.txt
sleep 1
base=$(smc_proc_resources "$hpid")

wrk_run "$tcp_port" tcp 3s small.txt
wrk_run "$splice_port" splice-big 2s big.bin
wrk_run "$http_port" http 3s small.txt
wrk_run "$http_port" http-big 2s big.bin
SMC_SHORT_CONN_US=0 wrk_run "$http_port" http-close 3s small.txt -H 'Connection: close'
fetch "$tcp_port" tcp-again
fetch "$http_port" http-again

smc_expect_resources haproxy "$hpid" "$base" 15
# soft stop: haproxy exits once its connections are done
smc_stop_server haproxy USR1 30
smc_assert_eq "haproxy exit status" "${SMC_SERVER_RC[haproxy]}" 0
smc_stop_server nginx QUIT
smc_assert_eq "nginx exit status" "${SMC_SERVER_RC[nginx]}" 0

ok=$(awk '$9 == 200' "$SMC_TMP/access.log" | wc -l)
smc_assert_ge "200 responses in nginx's access log" "$ok" "$requests"

# The 1 MiB files fetched by curl (two in each of five fetches) crossed both hops: in each process group's stats, on each side of haproxy.
payload=$((10 * 1048576))
# wrk exits with connections still in the handshake: tolerated on the servers only, up
# to its 16 connections of the run that opens one per request, on each hop
export SMC_TEST_INFLIGHT=16
SMC_TEST_TOLERATE="peer-closed peer-not-smc" smc_expect_payload "$px" $((2 * payload)) haproxy
SMC_TEST_TOLERATE="peer-closed peer-not-smc" smc_expect_payload "$web_stats" "$payload" nginx
unset SMC_TEST_INFLIGHT
smc_expect_payload "$cli" "$payload" "curl+wrk"
smc_pass
