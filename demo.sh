#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#
# demo.sh: build smc-preload and run redis-benchmark against redis-server twice, once
# with both under smc_preload.sh and once over plain TCP, and print the two results side
# by side with what the library says each connection used.
#
# Installs missing packages with apt-get when run as root on Debian. Options:
#   --requests N   requests per test (default 100000)
#   --no-install   never call apt-get

set -euo pipefail

cd -- "$(dirname -- "$0")"
top=$PWD

REQUESTS=100000
CLIENTS=50
VALUE_SIZE=1024
install=1
while [ $# -gt 0 ]; do
	case $1 in
	--requests) REQUESTS=$2; shift 2 ;;
	--no-install) install=0; shift ;;
	-h | --help) awk 'NR > 2 && !/^#/ { exit } NR > 3 { sub(/^# ?/, ""); print }' "$0"; exit 0 ;;
	*) echo "demo.sh: unknown option $1 (try --help)" >&2; exit 2 ;;
	esac
done

PACKAGES=(build-essential autoconf automake libtool pkg-config libibverbs-dev librdmacm-dev
	libevent-dev check libbpf-dev clang llvm redis-server redis-tools jq procps iproute2)

say() { printf '\n==== %s\n' "$*"; }

# ------------------------------------------------------------------ dependencies

# shellcheck source=tools/apt-install.sh
. "$(dirname -- "$0")/tools/apt-install.sh"
install_packages() {
	local p
	if [ "$install" = 0 ]; then
		for p in "${PACKAGES[@]}"; do
			dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' ||
				{ echo "demo.sh: missing package $p (--no-install given)" >&2; exit 1; }
		done
		return 0
	fi
	apt_install_missing "${PACKAGES[@]}" || exit 1
}

install_packages

# ------------------------------------------------------------------ build

say "building (build-demo/)"
{ [ -x configure ] && [ -f build-aux/install-sh ]; } || autoreconf -fi
mkdir -p build-demo
(cd build-demo && { [ -f Makefile ] || "$top/configure" -q; } && make -s -j2)
export SMC_PRELOAD_LIB=$top/build-demo/.libs/libsmc_preload.so
wrapper=$top/smc_preload.sh
[ -f "$SMC_PRELOAD_LIB" ] || { echo "demo.sh: build produced no $SMC_PRELOAD_LIB" >&2; exit 1; }

# ------------------------------------------------------------------ run

tmp=$(mktemp -d "${TMPDIR:-/tmp}/smc-demo.XXXXXX")
server_pid=

cleanup() {
	if [ -n "$server_pid" ] && kill -0 "$server_pid" 2>/dev/null; then
		kill -KILL "$server_pid" 2>/dev/null || true
	fi
	rm -rf -- "$tmp"
}
trap cleanup EXIT

free_port() {
	local p
	while :; do
		p=$((20000 + RANDOM % 20000))
		[ -z "$(ss -Htan "( sport = :$p )")" ] && { echo "$p"; return; }
	done
}

# run_pair LABEL PREFIX...: redis-server and redis-benchmark, each started as
# PREFIX... PROGRAM ARGS; results to $tmp/LABEL.csv.
run_pair() {
	local label=$1 port i
	shift
	port=$(free_port)
	"$@" redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no \
		--daemonize no --loglevel warning >"$tmp/$label-server.log" 2>&1 &
	server_pid=$!
	for ((i = 0; i < 100; i++)); do
		[ -n "$(ss -Hltn "sport = :$port")" ] && break
		kill -0 "$server_pid" 2>/dev/null || { cat "$tmp/$label-server.log"; exit 1; }
		sleep 0.1
	done
	say "redis-benchmark over $label: -c $CLIENTS -n $REQUESTS -d $VALUE_SIZE -t set,get"
	timeout 600 "$@" redis-benchmark -h 127.0.0.1 -p "$port" -c "$CLIENTS" -n "$REQUESTS" \
		-d "$VALUE_SIZE" -t set,get --csv >"$tmp/$label.csv"
	# The library writes its stats when the server exits: stop it cleanly and wait.
	kill -TERM "$server_pid"
	for ((i = 0; i < 100; i++)); do
		kill -0 "$server_pid" 2>/dev/null || break
		sleep 0.1
	done
	wait "$server_pid" || true
	server_pid=
}

mkdir -p "$tmp/stats"
run_pair smc env SMC_STATS_FILE="$tmp/stats/%p.json" "$wrapper"
run_pair tcp env

# ------------------------------------------------------------------ report

rps() { # rps FILE TEST
	awk -F, -v t="\"$2\"" '$1 == t { gsub(/"/, "", $2); print $2 }' "$1"
}

say "requests per second (higher is better)"
printf '%-6s %14s %14s %10s\n' test smc_preload "plain TCP" "SMC/TCP"
for t in SET GET; do
	s=$(rps "$tmp/smc.csv" "$t")
	p=$(rps "$tmp/tcp.csv" "$t")
	awk -v t="$t" -v s="$s" -v p="$p" \
		'BEGIN { printf "%-6s %14.0f %14.0f %9.2fx\n", t, s, p, (p > 0 ? s / p : 0) }'
done

say "what the library reports (all processes under smc_preload.sh)"
jq -s '{connections: {shm: (map(.connections.shm) | add), ib: (map(.connections.ib) | add),
		tcp: (map(.connections.tcp) | add)},
	fallback: (map(.fallback | to_entries) | add | group_by(.key)
		| map({key: .[0].key, value: (map(.value) | add)}) | from_entries),
	bytes_over_shm: (map(.bytes.shm.sent + .bytes.shm.received) | add),
	bytes_over_tcp: (map(.bytes.tcp.sent + .bytes.tcp.received) | add)}' "$tmp"/stats/*.json |
	tee "$tmp/summary.json"
if [ "$(jq '.connections.shm' "$tmp/summary.json")" = 0 ]; then
	echo
	echo "Note: no connection used shared memory, so the smc_preload column measured the"
	echo "library's TCP pass-through (see the fallback reasons above)."
fi
