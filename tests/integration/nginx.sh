#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#
# nginx (master + 2 forked workers, sendfile on) with curl and wrk, all under
# smc_preload.sh: files come back byte-identical, wrk's keep-alive and
# "Connection: close" runs complete with only 2xx answers and no socket errors, and
# nginx's access log agrees; then the transport through the stats of every process.
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
. "$(dirname -- "$0")/lib.sh"

smc_require_cmd nginx curl wrk
smc_init
smc_free_port port
srv=$(smc_stats_dir server)
cli=$(smc_stats_dir client)
smc_make_www nginx

smc_start_nginx "$srv" "$port" 2 \
	"access_log $SMC_TMP/access.log; sendfile on; keepalive_requests 1000000;"
url=http://127.0.0.1:$port

# Whole files, twice each over one keep-alive connection.
for f in big.bin small.txt; do
	smc_run "$cli" curl -sS --fail -o "$SMC_TMP/got1-$f" "$url/$f" -o "$SMC_TMP/got2-$f" "$url/$f" ||
		smc_fail "curl $f failed"
	smc_assert_same_file "$f fetched by curl (1st)" "$SMC_TMP/got1-$f" "$www/$f"
	smc_assert_same_file "$f fetched by curl (2nd)" "$SMC_TMP/got2-$f" "$www/$f"
done
curl_requests=4

# wrk_run LABEL DURATION PATH [WRK ARGS...]: prints the number of requests completed.
wrk_total=0
wrk_run() {
	local label=$1 secs=$2 path=$3 out=$SMC_TMP/wrk-$1.out
	shift 3
	smc_log "wrk $label"
	smc_run "$cli" wrk -t2 -c20 -d"$secs" "$@" "$url/$path" >"$out" 2>&1 ||
		smc_fail "wrk $label failed (status $?): $(cat "$out")"
	smc_wrk_check "$label" "$out"
	wrk_total=$((wrk_total + smc_wrk_n))
}

wrk_run keepalive-small 3s small.txt
wrk_run keepalive-big 2s big.bin
# A connection per request: upgraded anyway (SMC_SHORT_CONN_US=0), for the churn through
# nginx's workers; short_conn.sh runs the same under the default policy.
SMC_SHORT_CONN_US=0 wrk_run close-small 3s small.txt -H 'Connection: close'

smc_stop_server nginx QUIT
smc_assert_eq "nginx exit status" "${SMC_SERVER_RC[nginx]}" 0

# nginx's own count of successful responses covers at least what the clients completed
# (wrk does not count requests still in flight when it stops).
ok_responses=$(awk '$9 == 200' "$SMC_TMP/access.log" | wc -l)
smc_assert_ge "200 responses in nginx's access log" "$ok_responses" $((wrk_total + curl_requests))
errors=$(grep -c '\[\(alert\|crit\|emerg\)\]' "$SMC_TMP/nginx-error.log")
smc_assert_eq "alert/crit/emerg lines in nginx's error log" "$errors" 0

# At least the two 1 MiB files went through both sides.
# wrk exits with connections still in the handshake: tolerated on the server only, up to
# its 20 connections of the run that opens one per request
SMC_TEST_TOLERATE="peer-closed peer-not-smc" SMC_TEST_INFLIGHT=20 \
	smc_expect_payload "$srv" $((2 * 1048576)) "nginx master+workers"
smc_expect_payload "$cli" $((2 * 1048576)) "curl+wrk"
smc_pass
