# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#
# Workloads of bench/run that run common servers the way they are deployed: nginx as a
# reverse proxy, Apache (mpm_event), PostgreSQL with pgbench, Node's http module and
# haproxy. Each runs TCP and SMC rounds alternated, every process of the SMC round
# under the library (both hops of a proxy); the target is SMC >= TCP. Sourced by
# bench/run; start_server, run_client, check_stats, record, free_port... are bench/lib.sh's.

# proxy_conf DIR PORT UPSTREAM-PORT: an nginx (1 worker) that proxies everything to
# 127.0.0.1:UPSTREAM-PORT over HTTP/1.1 keep-alive connections.
proxy_conf() {
	mkdir -p "$1/logs"
	cat >"$1/nginx.conf" <<EOF
daemon off;
master_process on;
worker_processes 1;
user root;
pid $1/nginx.pid;
error_log $1/logs/error.log warn;
env LD_PRELOAD;
env SMC_STATS_FILE;
events { worker_connections 1024; }
http {
    access_log off;
    keepalive_requests 1000000;
    client_body_temp_path $1/tmp_body;
    proxy_temp_path $1/tmp_proxy;
    fastcgi_temp_path $1/tmp_fastcgi;
    uwsgi_temp_path $1/tmp_uwsgi;
    scgi_temp_path $1/tmp_scgi;
    upstream origin {
        server 127.0.0.1:$3;
        # more than wrk's 50 connections: none is closed after its request
        keepalive 128;
    }
    server {
        listen 127.0.0.1:$2;
        location / {
            proxy_pass http://origin;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
        }
    }
}
EOF
}

# origin_start MODE SDIR DIR LABEL: the nginx (1 worker) behind a proxy, on a new port
# (sets origin_port and origin_pid).
origin_start() {
	origin_port=$(free_port)
	nginx_conf "$3" "$origin_port" 1
	start_server "$1" "$2" "$LOGS/$4.log" -- -- nginx -p "$3" -c "$3/nginx.conf"
	origin_pid=$SERVER_PID
}

# wrk_rps MODE SDIR URL LABEL: wrk's requests/s (empty on failure or errors).
wrk_rps() {
	local out
	out=$(run_client "$1" "$2" $((WRK_D + 30)) -- wrk -t1 -c50 -d"${WRK_D}s" "$3" 2>&1)
	echo "$out" >"$LOGS/wrk-$4.log"
	if grep -q 'Non-2xx\|Socket errors' <<<"$out"; then
		log "$4: $(grep 'Non-2xx\|Socket errors' <<<"$out")"
		return
	fi
	awk '/^Requests\/sec:/ { print $2 }' <<<"$out"
}

wl_proxy() {
	local r mode sdir up front upid fpid dir v
	for ((r = 1; r <= ROUNDS; r++)); do
		for mode in $(modes_for_round "$r"); do
			sdir=$(new_sdir nginx_proxy "$mode" "$r")
			dir="$OUT/tmp/proxy-$mode-$r"
			origin_start "$mode" "$sdir" "$dir/origin" "proxy-origin-$mode-$r"
			up=$origin_port upid=$origin_pid
			front=$(free_port)
			proxy_conf "$dir/front" "$front" "$up"
			start_server "$mode" "$sdir" "$LOGS/proxy-front-$mode-$r.log" -- -- \
				nginx -p "$dir/front" -c "$dir/front/nginx.conf"
			fpid=$SERVER_PID
			v=
			wait_listen "$up" && wait_listen "$front" &&
				v=$(wrk_rps "$mode" "$sdir" "http://127.0.0.1:$front/index.html" "proxy-$mode-$r")
			stop_server "$fpid" QUIT
			stop_server "$upid" QUIT
			record nginx_proxy_keepalive rps "$mode" "$r" "$v" "$(check_stats "$mode" "$sdir")"
		done
	done
}

# apache_conf DIR PORT: Apache with mpm_event serving DIR/html on 127.0.0.1:PORT.
apache_conf() {
	local m=/usr/lib/apache2/modules
	mkdir -p "$1/html" "$1/logs"
	printf '<html><body>%s</body></html>\n' "$(head -c 512 /dev/zero | tr '\0' 'x')" >"$1/html/index.html"
	cat >"$1/httpd.conf" <<EOF
ServerRoot $1
ServerName localhost
Listen 127.0.0.1:$2
PidFile $1/httpd.pid
ErrorLog $1/logs/error.log
LogLevel warn
LoadModule mpm_event_module $m/mod_mpm_event.so
LoadModule authz_core_module $m/mod_authz_core.so
User nobody
Group nogroup
DocumentRoot $1/html
<Directory $1/html>
    Require all granted
</Directory>
KeepAlive On
MaxKeepAliveRequests 0
# every child from the start and none reaped: a child that stops closes its clients'
# keep-alive connections, which ab counts as failed requests
# and workers to spare over ab's 50 connections: a child short of workers closes
# keep-alive connections too
StartServers 4
ServerLimit 4
ThreadsPerChild 64
MaxRequestWorkers 256
MinSpareThreads 64
MaxSpareThreads 256
EOF
	chmod -R a+rX "$1"
}

# ab_rps MODE SDIR URL LABEL [AB ARGS]: ab's requests/s, empty when a request failed.
ab_rps() {
	local mode=$1 sdir=$2 url=$3 label=$4 out
	shift 4
	out=$(run_client "$mode" "$sdir" 120 -- ab -q -c 50 -n "$AB_N" "$@" "$url" 2>&1)
	echo "$out" >"$LOGS/ab-$label.log"
	if ! grep -q '^Failed requests: *0$' <<<"$out" || grep -q 'Non-2xx' <<<"$out"; then
		log "$label: $(grep -E 'Failed requests|Non-2xx|apr_' <<<"$out" | tr '\n' ' ')"
		return
	fi
	awk '/^Requests per second:/ { print $4 }' <<<"$out"
}

# apache_round MODE SDIR LABEL [AB ARGS]: one Apache, one ab run against it; prints ab's
# requests/s (empty on a failure), logs crashed children.
apache_round() {
	local mode=$1 sdir=$2 label=$3 dir port apid v=
	shift 3
	dir="$OUT/tmp/apache-$label"
	port=$(free_port)
	apache_conf "$dir" "$port"
	chmod 1777 "$sdir"
	start_server "$mode" "$sdir" "$LOGS/apache-$label.log" -- -- \
		apache2 -DFOREGROUND -f "$dir/httpd.conf"
	apid=$SERVER_PID
	wait_listen "$port" && v=$(ab_rps "$mode" "$sdir" "http://127.0.0.1:$port/index.html" "$label" "$@")
	stop_server "$apid" WINCH
	grep -q 'exit signal' "$dir/logs/error.log" 2>/dev/null &&
		log "apache $label: $(grep -c 'exit signal' "$dir/logs/error.log") crashed children"
	echo "$v"
}

wl_apache() {
	local r mode sdir ka close
	for ((r = 1; r <= ROUNDS; r++)); do
		for mode in $(modes_for_round "$r"); do
			sdir=$(new_sdir apache "$mode" "$r")
			ka=$(apache_round "$mode" "$sdir" "ka-$mode-$r" -k)
			record apache_ab_keepalive rps "$mode" "$r" "$ka" "$(check_stats "$mode" "$sdir")"
			# a connection per request to a server that forks: TCP by design (no pool)
			sdir=$(new_sdir apache_close "$mode" "$r")
			close=$(apache_round "$mode" "$sdir" "close-$mode-$r")
			record apache_ab_conn_per_request rps "$mode" "$r" "$close" \
				"$(check_stats "$mode" "$sdir" tcp-ok)"
		done
	done
}

# PostgreSQL's binaries live in a versioned directory.
pg_bin() {
	local d
	for d in /usr/lib/postgresql/*/bin; do
		[ -x "$d/postgres" ] && { echo "$d"; return 0; }
	done
	return 1
}

# pg_start MODE SDIR LOG PORT: the postmaster on $PG_DATA (as the postgres user: setpriv
# execs, so SERVER_PID is the postmaster itself).
pg_start() {
	start_server "$1" "$2" "$3" -- -- "${PG_AS[@]}" "$PG_BIN/postgres" -D "$PG_DATA" -p "$4" \
		-c listen_addresses=127.0.0.1 -c unix_socket_directories="$PG_DATA" \
		-c fsync=off -c synchronous_commit=off -c max_connections=50
}

# pgbench_tps MODE SDIR PORT LABEL [PGBENCH ARGS]: tps, empty when a transaction failed.
pgbench_tps() {
	local mode=$1 sdir=$2 port=$3 label=$4 out
	shift 4
	out=$(run_client "$mode" "$sdir" 60 -- "${PG_AS[@]}" pgbench -h 127.0.0.1 -p "$port" \
		-c 4 -j 2 -T "$PG_T" "$@" postgres 2>&1)
	echo "$out" >"$LOGS/pgbench-$label.log"
	grep -q '^number of failed transactions: 0 ' <<<"$out" ||
		{ log "pgbench $label: $(grep -E 'failed|error|FATAL' <<<"$out" | head -3 | tr '\n' ' ')"; return; }
	awk '/^tps = / && /without initial/ { print $3 }' <<<"$out"
}

wl_pgbench() {
	local r mode sdir port ppid tpcb sel
	PG_BIN=$(pg_bin) || { log "pgbench: PostgreSQL is not installed"; return; }
	id postgres >/dev/null 2>&1 || { log "pgbench: no postgres user"; return; }
	PG_AS=(setpriv --reuid=postgres --regid=postgres --init-groups --)
	PG_DATA="$OUT/tmp/pgdata"
	rm -rf "$PG_DATA"
	mkdir -p "$PG_DATA"
	chown postgres: "$PG_DATA"
	"${PG_AS[@]}" "$PG_BIN/initdb" -D "$PG_DATA" -A trust >"$LOGS/initdb.log" 2>&1 ||
		{ log "pgbench: initdb failed"; return; }
	# the tables, once, over TCP: the rounds measure the benchmark alone
	port=$(free_port)
	pg_start tcp - "$LOGS/postgres-init.log" "$port"
	ppid=$SERVER_PID
	wait_listen "$port" && "${PG_AS[@]}" pgbench -h 127.0.0.1 -p "$port" -i -s 4 postgres \
		>"$LOGS/pgbench-init.log" 2>&1 || log "pgbench -i failed"
	stop_server "$ppid" INT
	for ((r = 1; r <= ROUNDS; r++)); do
		for mode in $(modes_for_round "$r"); do
			sdir=$(new_sdir pgbench "$mode" "$r")
			chmod 1777 "$sdir"
			port=$(free_port)
			pg_start "$mode" "$sdir" "$LOGS/postgres-$mode-$r.log" "$port"
			ppid=$SERVER_PID
			tpcb= sel=
			if wait_listen "$port"; then
				tpcb=$(pgbench_tps "$mode" "$sdir" "$port" "tpcb-$mode-$r")
				sel=$(pgbench_tps "$mode" "$sdir" "$port" "S-$mode-$r" -S)
			fi
			stop_server "$ppid" INT
			record pgbench_tpcb_c4 tps "$mode" "$r" "$tpcb" "$(check_stats "$mode" "$sdir")"
			record pgbench_select_c4 tps "$mode" "$r" "$sel" "$(check_stats "$mode" "$sdir")"
		done
	done
	rm -rf "$PG_DATA"
}

wl_node() {
	local r mode sdir port npid ka per
	command -v node >/dev/null || { log "node: not installed"; return; }
	for ((r = 1; r <= ROUNDS; r++)); do
		for mode in $(modes_for_round "$r"); do
			sdir=$(new_sdir node "$mode" "$r")
			port=$(free_port)
			start_server "$mode" "$sdir" "$LOGS/node-server-$mode-$r.log" -- -- \
				node "$BENCH_DIR/node_http.js" server "$port"
			npid=$SERVER_PID
			ka= per=
			if wait_listen "$port"; then
				ka=$(wrk_rps "$mode" "$sdir" "http://127.0.0.1:$port/" "node-$mode-$r")
				per=$(run_client "$mode" "$sdir" 60 -- node "$BENCH_DIR/node_http.js" \
					client "$port" "$NODE_REQS" 2>&1 | tee "$LOGS/node-client-$mode-$r.log" |
					awk '/^RPS / { print $2 }')
			fi
			stop_server "$npid" TERM
			record node_http_keepalive rps "$mode" "$r" "$ka" "$(check_stats "$mode" "$sdir")"
			record node_http_conn_per_request rps "$mode" "$r" "$per" "$(check_stats "$mode" "$sdir")"
		done
	done
}

# haproxy_conf FILE MODE PORT BACKEND-PORT
haproxy_conf() {
	cat >"$1" <<EOF
global
    maxconn 1000
defaults
    mode $2
    timeout connect 5s
    timeout client 30s
    timeout server 30s
    option http-keep-alive
frontend fe
    bind 127.0.0.1:$3
    default_backend be
backend be
    http-reuse always
    server origin 127.0.0.1:$4
EOF
}

wl_haproxy() {
	local r mode sdir up front upid hpid dir v hmode
	command -v haproxy >/dev/null || { log "haproxy: not installed"; return; }
	for hmode in http tcp; do
		for ((r = 1; r <= ROUNDS; r++)); do
			for mode in $(modes_for_round "$r"); do
				sdir=$(new_sdir "haproxy_$hmode" "$mode" "$r")
				dir="$OUT/tmp/haproxy-$hmode-$mode-$r"
				origin_start "$mode" "$sdir" "$dir/origin" "haproxy-origin-$hmode-$mode-$r"
				up=$origin_port upid=$origin_pid
				front=$(free_port)
				haproxy_conf "$dir/haproxy.cfg" "$hmode" "$front" "$up"
				start_server "$mode" "$sdir" "$LOGS/haproxy-$hmode-$mode-$r.log" -- -- \
					haproxy -db -f "$dir/haproxy.cfg"
				hpid=$SERVER_PID
				v=
				wait_listen "$up" && wait_listen "$front" &&
					v=$(wrk_rps "$mode" "$sdir" "http://127.0.0.1:$front/index.html" \
						"haproxy-$hmode-$mode-$r")
				stop_server "$hpid" USR1
				stop_server "$upid" QUIT
				record "haproxy_${hmode}_keepalive" rps "$mode" "$r" "$v" "$(check_stats "$mode" "$sdir")"
			done
		done
	done
}

# systemd-socket-activate --accept forks and execs a new program for each connection,
# with the connection on fd 3 (socat reading it to /dev/null): under the library the
# connection is carried into that program over shared memory (events.exec_carried; as
# another user than root it goes back to TCP at the exec). A socat client streams
# ACTIVATE_BYTES of zeros, timed from connect to the end of its write.
wl_activate() {
	local r mode sdir port spid t0 t1 mbps
	command -v systemd-socket-activate >/dev/null ||
		{ log "activate: systemd-socket-activate not installed"; return; }
	for ((r = 1; r <= ROUNDS; r++)); do
		for mode in $(modes_for_round "$r"); do
			sdir=$(new_sdir activate "$mode" "$r")
			port=$(free_port)
			start_server "$mode" "$sdir" "$LOGS/activate-server-$mode-$r.log" -- -- \
				systemd-socket-activate -l "127.0.0.1:$port" -a -E LD_PRELOAD \
				-E SMC_STATS_FILE socat -b 262144 -u FD:3 /dev/null
			spid=$SERVER_PID
			mbps=
			if wait_listen "$port"; then
				t0=$(date +%s%N)
				if run_client "$mode" "$sdir" 120 -- socat -b 262144 -u \
					"/dev/zero,readbytes=$ACTIVATE_BYTES" "TCP:127.0.0.1:$port" \
					>"$LOGS/activate-client-$mode-$r.log" 2>&1; then
					t1=$(date +%s%N)
					mbps=$(awk -v b="$ACTIVATE_BYTES" -v ns=$((t1 - t0)) \
						'BEGIN { printf "%.0f", b / (ns / 1000) }')
				fi
			fi
			sleep 0.5 # the exec'd socat writes its stats as it exits
			stop_server "$spid" TERM
			record activate_stream MBps "$mode" "$r" "$mbps" "$(check_stats "$mode" "$sdir")"
		done
	done
}

# One-shot clients: a new process per connection (redis-cli ping, as a cron job, a health
# check or a shell script runs it), ONESHOT_N of them in a row, timed in all: the cost
# of the library's start in each process (its load, the first connection's thread and
# handshake, its exit) against one request. oneshot_redis_cli: both ends in the mode
# (after four processes the command's first connections stay TCP, hs_history.h, so
# its smc rows are mostly plain TCP by design: the stats note says how many);
# oneshot_plain_server: the server never preloaded, the clients preloaded in the smc
# rows (plain TCP by design: what the library costs a client of an ordinary server).
wl_oneshot() {
	local r mode sdir port spid t0 t1 v smode kind
	command -v redis-cli >/dev/null || { log "oneshot: redis-cli not installed"; return; }
	for kind in redis_cli plain_server; do
		for ((r = 1; r <= ROUNDS; r++)); do
			for mode in $(modes_for_round "$r"); do
				sdir=$(new_sdir "oneshot-$kind" "$mode" "$r")
				port=$(free_port)
				smode=$mode
				[ "$kind" = plain_server ] && smode=tcp
				start_server "$smode" "$sdir" "$LOGS/oneshot-$kind-server-$mode-$r.log" -- -- \
					redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no
				spid=$SERVER_PID
				v=
				if wait_listen "$port"; then
					t0=$(date +%s%N)
					if run_client "$mode" "$sdir" 300 N="$ONESHOT_N" P="$port" -- bash -c \
						'for ((i = 0; i < N; i++)); do redis-cli -p "$P" ping >/dev/null || exit 1; done' \
						>"$LOGS/oneshot-$kind-client-$mode-$r.log" 2>&1; then
						t1=$(date +%s%N)
						v=$(awk -v n="$ONESHOT_N" -v ns=$((t1 - t0)) \
							'BEGIN { printf "%.1f", n / (ns / 1e9) }')
					fi
				fi
				stop_server "$spid" TERM
				if [ "$kind" = plain_server ]; then
					record oneshot_plain_server conn_per_s "$mode" "$r" "$v" \
						"$(check_stats "$mode" "$sdir" tcp-ok)"
				else
					record oneshot_redis_cli conn_per_s "$mode" "$r" "$v" \
						"$(check_stats "$mode" "$sdir" tcp-ok)"
				fi
			done
		done
	done
}
