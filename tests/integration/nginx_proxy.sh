#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#
# nginx as a reverse proxy in front of another nginx, everything under smc_preload.sh:
# client -> front nginx -> upstream nginx. The front's worker adds each upstream socket
# to its epoll set before connect() (ADD EPOLLIN|EPOLLOUT|EPOLLRDHUP|EPOLLET, then
# connect = EINPROGRESS), so both hops are upgraded only if that registration follows
# the socket into the emulation. Two proxy modes: (a) upstream keepalive (HTTP/1.1,
# `keepalive 16`, Connection ""), (b) a new upstream connection per request
# (Connection: close). curl fetches a 1 MiB file byte-identical through each, wrk runs
# with only 2xx answers and no socket errors, neither error log has alert/crit/emerg
# lines, the stats of every process show the payload over shared memory on both hops,
# and once every connection is closed the workers hold no more fds, memfds or
# mappings than after a warm-up round.
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
. "$(dirname -- "$0")/lib.sh"

# mappings a worker may gain after the warm-up (library state created on demand)
PROXY_MAPS_SLACK=${PROXY_MAPS_SLACK:-16}
# SMC_TEST_CLIENT_LIB: the library curl and wrk run with instead (the sanitizer pass
# runs the two nginx under the instrumented library; curl does not start with the ASan
# runtime preloaded, see test.sh)

smc_require_cmd nginx curl wrk
smc_init
smc_free_port up_port
smc_free_port front_port
up=$(smc_stats_dir upstream)
front=$(smc_stats_dir front)
cli=$(smc_stats_dir client)
warm=$(smc_stats_dir warm-up)
smc_make_www proxy

smc_start_nginx "$up" "$up_port" 2 \
	"access_log $SMC_TMP/upstream-access.log; keepalive_requests 1000000;" upstream
# keepalive_timeout in the upstream block: idle upstream connections close soon after
# the load, so the leak check below finds every connection gone. wrk stops with
# requests in flight; proxy_ignore_client_abort lets the front finish their upstream
# connections instead of closing them in the middle of their handshake (counted as a
# failed handshake, like a client that exits mid-connect). A connection per
# request is upgraded anyway (SMC_SHORT_CONN_US=0), as in nginx.sh: short_conn.sh
# covers the default policy.
SMC_SHORT_CONN_US=0 smc_start_nginx "$front" "$front_port" 2 \
	"access_log $SMC_TMP/front-access.log; keepalive_requests 1000000;
	upstream ka { server 127.0.0.1:$up_port; keepalive 16; keepalive_timeout 1s; }
	upstream cl { server 127.0.0.1:$up_port; }" front \
	"proxy_ignore_client_abort on;
	location /ka/ { proxy_pass http://ka/; proxy_http_version 1.1;
		proxy_set_header Connection \"\"; }
	location /close/ { proxy_pass http://cl/; proxy_http_version 1.1;
		proxy_set_header Connection close; }"
url=http://127.0.0.1:$front_port

# workers_census NAME: "workers fds memfds mappings", summed over NAME's workers
workers_census() {
	local pgid=${SMC_SERVER_PID[$1]} pid fds=0 memfds=0 maps=0 n=0
	for pid in $(ps -e -o pid=,pgid=,args= |
		awk -v g="$pgid" '$2 == g && /worker process/ { print $1 }'); do
		fds=$((fds + $(find "/proc/$pid/fd" -mindepth 1 -maxdepth 1 | wc -l)))
		memfds=$((memfds + $(find "/proc/$pid/fd" -mindepth 1 -maxdepth 1 -lname '/memfd:*' | wc -l)))
		maps=$((maps + $(wc -l <"/proc/$pid/maps")))
		n=$((n + 1))
	done
	echo "$n $fds $memfds $maps"
}

# Every connection on either port closed (wrk, curl, idle upstream keepalive ones).
wait_all_closed() {
	local i
	for ((i = 0; i < 150; i++)); do
		[ -z "$(ss -Htn state established \
			"( sport = :$front_port or dport = :$front_port or sport = :$up_port or dport = :$up_port )")" ] &&
			return 0
		sleep 0.1
	done
	smc_fail "connections still open 15s after the load: $(ss -Htn state established)"
}

client_run() {
	if [ -n "${SMC_TEST_CLIENT_LIB:-}" ]; then
		SMC_TEST_PRELOAD_FIRST='' SMC_PRELOAD_LIB=$SMC_TEST_CLIENT_LIB smc_run "$@"
	else
		smc_run "$@"
	fi
}

# fetch STATSDIR MODE: the 1 MiB and the small file through location MODE, twice each
fetch() {
	local f
	for f in big.bin small.txt; do
		client_run "$1" curl -sS --fail --max-time 60 -o "$SMC_TMP/got1-$2-$f" "$url/$2/$f" \
			-o "$SMC_TMP/got2-$2-$f" "$url/$2/$f" || smc_fail "curl $2/$f failed"
		smc_assert_same_file "$2/$f through the proxy (1st)" "$SMC_TMP/got1-$2-$f" "$www/$f"
		smc_assert_same_file "$2/$f through the proxy (2nd)" "$SMC_TMP/got2-$2-$f" "$www/$f"
	done
}

# wrk_run STATSDIR LABEL DURATION PATH: adds the requests completed to wrk_total.
wrk_total=0
wrk_run() {
	local dir=$1 label=$2 secs=$3 path=$4 out=$SMC_TMP/wrk-$2.out
	smc_log "wrk $label"
	client_run "$dir" wrk -t2 -c20 -d"$secs" "$url/$path" >"$out" 2>&1 ||
		smc_fail "wrk $label failed (status $?): $(cat "$out")"
	smc_wrk_check "$label" "$out"
	wrk_total=$((wrk_total + smc_wrk_n))
}

# Warm-up: the library's lazily created state exists afterwards.
for mode in ka close; do
	fetch "$warm" "$mode"
	wrk_run "$warm" "warm-up-$mode" 1s "$mode/small.txt"
done
wait_all_closed
read -r n front_fds front_memfds front_maps < <(workers_census front)
smc_assert_eq "front worker processes" "$n" 2
read -r n up_fds up_memfds up_maps < <(workers_census upstream)
smc_assert_eq "upstream worker processes" "$n" 2
smc_log "after the warm-up: front fds $front_fds memfds $front_memfds maps $front_maps," \
	"upstream fds $up_fds memfds $up_memfds maps $up_maps"

for mode in ka close; do
	fetch "$cli" "$mode"
	wrk_run "$cli" "$mode-small" 3s "$mode/small.txt"
	wrk_run "$cli" "$mode-big" 2s "$mode/big.bin"
done
requests=$((wrk_total + 16))

wait_all_closed
read -r n fds memfds maps < <(workers_census front)
smc_log "after the load: front fds $fds memfds $memfds maps $maps"
smc_assert_eq "front workers' fds after the load" "$fds" "$front_fds"
smc_assert_eq "front workers' memfds after the load" "$memfds" "$front_memfds"
smc_assert "front workers' mappings grew from $front_maps to $maps" "$maps" -le $((front_maps + PROXY_MAPS_SLACK))
read -r n fds memfds maps < <(workers_census upstream)
smc_log "after the load: upstream fds $fds memfds $memfds maps $maps"
smc_assert_eq "upstream workers' fds after the load" "$fds" "$up_fds"
smc_assert_eq "upstream workers' memfds after the load" "$memfds" "$up_memfds"
smc_assert "upstream workers' mappings grew from $up_maps to $maps" "$maps" -le $((up_maps + PROXY_MAPS_SLACK))

smc_stop_server front QUIT
smc_stop_server upstream QUIT
smc_assert_eq "front nginx exit status" "${SMC_SERVER_RC[front]}" 0
smc_assert_eq "upstream nginx exit status" "${SMC_SERVER_RC[upstream]}" 0

for name in front upstream; do
	ok=$(awk '$9 == 200' "$SMC_TMP/$name-access.log" | wc -l)
	smc_assert_ge "200 responses in the $name's access log" "$ok" "$requests"
	errors=$(grep -c '\[\(alert\|crit\|emerg\)\]' "$SMC_TMP/$name-error.log")
	smc_assert_eq "alert/crit/emerg lines in the $name's error log" "$errors" 0
done

# Every process that had connections moved payload over shm: the client's (hop 1), the
# upstream's (hop 2) and the front's (both).
for dir in "$cli" "$front" "$up"; do
	smc_require_stats "$dir"
	if [ "$SMC_TEST_EXPECT" = shm ]; then
		# shellcheck disable=SC2046 # our file names
		idle=$(jq -s 'map(select((.connections.shm + .connections.tcp) > 0 and
			(.bytes.shm.sent + .bytes.shm.received) == 0)) | length' \
			$(find "$dir" -maxdepth 1 -name '*.json'))
		smc_assert_eq "processes in $(basename "$dir") with connections but no shm payload" "$idle" 0
	fi
done
# wrk exits with connections still in the handshake: tolerated on the servers only
SMC_TEST_TOLERATE="peer-closed peer-not-smc" \
	smc_expect_payload "$up" $((4 * 1048576)) "upstream nginx (hop 2)"
SMC_TEST_TOLERATE="peer-closed peer-not-smc" \
	smc_expect_payload "$front" $((8 * 1048576)) "front nginx (both hops)"
smc_expect_payload "$cli" $((4 * 1048576)) "curl+wrk (hop 1)"
smc_pass
