#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#
# Apache 2.4 with mpm_event (a master and two forked children of 64 worker threads and a
# listener thread each, sendfile on, TCP_DEFER_ACCEPT on its listener as always), its
# own minimal configuration, in the foreground; ab and curl as clients; everything
# under smc_preload.sh:
#  - curl fetches a 64 MiB file (sendfile, write completion through the listener
#    thread's epoll set) and a 1 MiB one, byte-identical;
#  - ab with keep-alive (small and 1 MiB files) and without (a connection per request,
#    upgraded anyway: SMC_SHORT_CONN_US=0): every request completes, "Failed requests: 0",
#    no non-2xx response;
#  - no child died (same child pids, no "exit signal" line in the error log) and the
#    access log holds every request answered 200;
#  - each child is back to its idle sockets, eventfds, epoll sets, memfds and memfd
#    mappings afterwards; then the transport through the stats of every process.
# As root the children run as nobody (Apache refuses to serve as root); otherwise as
# the current user.
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
. "$(dirname -- "$0")/lib.sh"

MODULES=${APACHE_MODULES:-/usr/lib/apache2/modules}
HUGE_MIB=64

smc_require_cmd apache2 ab curl
[ -f "$MODULES/mod_mpm_event.so" ] || smc_skip "no mod_mpm_event.so in $MODULES"
smc_init
smc_free_port port
srv=$(smc_stats_dir server)
cli=$(smc_stats_dir client)
smc_make_www apache
head -c $((HUGE_MIB << 20)) /dev/urandom >"$www/huge.bin"

user=
if [ "$(id -u)" = 0 ]; then
	id nobody >/dev/null 2>&1 || smc_skip "running as root and there is no user nobody"
	user="User nobody
Group $(id -gn nobody)"
	# the children read the documents and write their stats as nobody
	chmod 0755 "$SMC_TMP" "$www" || smc_hard_error "chmod $SMC_TMP"
	chmod 0777 "$srv" || smc_hard_error "chmod $srv"
fi

# Two children that are never replaced: as many threads as MaxRequestWorkers, spares up
# to all of them, no per-child connection limit.
cat >"$SMC_TMP/httpd.conf" <<CONF
ServerRoot $SMC_TMP
DefaultRuntimeDir $SMC_TMP
LoadModule mpm_event_module $MODULES/mod_mpm_event.so
LoadModule authz_core_module $MODULES/mod_authz_core.so
ServerName 127.0.0.1
Listen 127.0.0.1:$port
$user
PidFile $SMC_TMP/apache.pid
ErrorLog $SMC_TMP/apache-error.log
LogLevel info
LogFormat "%>s %B" status
CustomLog $SMC_TMP/access.log status
DocumentRoot $www
<Directory $www>
	Require all granted
</Directory>
StartServers 2
ServerLimit 2
ThreadsPerChild 64
MaxRequestWorkers 128
MinSpareThreads 1
MaxSpareThreads 128
MaxConnectionsPerChild 0
KeepAlive On
MaxKeepAliveRequests 0
EnableSendfile On
CONF

smc_start_server apache "$srv" apache2 -DFOREGROUND -f "$SMC_TMP/httpd.conf"
smc_wait_port apache "$port"
smc_wait_log apache-error 'resuming normal operations'
url=http://127.0.0.1:$port
master=${SMC_SERVER_PID[apache]}

# children: the pids of the master's children, one line
children() {
	ps -o pid= --ppid "$master" | tr -s ' \n' ' ' | sed 's/^ //; s/ $//'
}
for ((i = 0; i < 100; i++)); do
	[ "$(children | wc -w)" = 2 ] && break
	sleep 0.1
done
kids=$(children)
[ "$(echo "$kids" | wc -w)" = 2 ] || smc_fail "apache started children '$kids', expected 2"
smc_log "apache master $master, children $kids"

requests=0
# ab_run LABEL N ARGS...: one ab run of N requests; all must complete with 2xx.
ab_run() {
	local label=$1 n=$2 out=$SMC_TMP/ab-$1.out
	shift 2
	smc_log "ab $label: $n requests"
	smc_run "$cli" ab -q -n "$n" "$@" >"$out" 2>&1 ||
		smc_fail "ab $label failed (status $?): $(tail -5 "$out")"
	grep -E 'Complete requests|Failed requests|Non-2xx|Keep-Alive requests|Requests per second' "$out"
	grep -q "^Complete requests: *$n\$" "$out" || smc_fail "ab $label: not $n requests complete"
	grep -q '^Failed requests: *0$' "$out" ||
		smc_fail "ab $label: $(grep -A1 '^Failed requests' "$out" | tr -s ' \n' ' ')"
	grep -q 'Non-2xx responses' "$out" && smc_fail "ab $label: $(grep 'Non-2xx' "$out")"
	requests=$((requests + n))
}

# fetch FILE...: one curl, one keep-alive connection, each file checked.
fetch() {
	local f args=()
	for f in "$@"; do
		args+=(-o "$SMC_TMP/got-$f" "$url/$f")
	done
	smc_run "$cli" curl -sS --fail "${args[@]}" || smc_fail "curl $* failed (status $?)"
	for f in "$@"; do
		smc_assert_same_file "$f fetched by curl" "$SMC_TMP/got-$f" "$www/$f"
	done
	requests=$((requests + $#))
}

# The first request of each child: a 64 MiB answer runs through write completion.
fetch huge.bin big.bin
fetch huge.bin small.txt

# Idle baseline of each child, after its first connections (the library's lazily
# created state exists then).
ab_run warm-up 200 -k -c 8 "$url/small.txt"
sleep 1 # the warm-up's connections close
declare -A base=()
for k in $kids; do
	base[$k]=$(smc_proc_resources "$k")
done

ab_run keepalive-small 20000 -k -c 20 "$url/small.txt"
ab_run keepalive-big 1000 -k -c 10 "$url/big.bin"
SMC_SHORT_CONN_US=0 ab_run close-small 2000 -c 10 "$url/small.txt"
fetch huge.bin

smc_assert_eq "apache children (none died and was replaced)" "$(children)" "$kids"
for k in $kids; do
	smc_expect_resources "apache child" "$k" "${base[$k]}" 15
done

smc_stop_server apache TERM 30
smc_assert_eq "apache exit status" "${SMC_SERVER_RC[apache]}" 0
crashed=$(grep -E 'exit signal|Segmentation fault' "$SMC_TMP/apache-error.log")
[ -z "$crashed" ] || smc_fail "apache children crashed: $crashed"
errors=$(grep -cE '\[[a-z_]+:(emerg|alert|crit)\]' "$SMC_TMP/apache-error.log")
smc_assert_eq "emerg/alert/crit lines in apache's error log" "$errors" 0
ok=$(grep -c '^200 ' "$SMC_TMP/access.log")
smc_assert_ge "200 responses in apache's access log" "$ok" "$requests"

# The three 64 MiB answers at least, and the 1 MiB ones, through every process's stats.
payload=$((3 * (HUGE_MIB << 20) + 1001 * 1048576))
smc_expect_payload "$srv" "$payload" "apache master+children"
smc_expect_payload "$cli" "$payload" "ab+curl"
smc_pass
