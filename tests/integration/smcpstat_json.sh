#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#
# smcpstat's machine-readable output against live connections: a preloaded redis-server
# with two preloaded redis-cli clients that keep their connection open (a PING every
# 0.2 s), and a plain redis-cli that is not listed. `smcpstat -j` and `smcpstat -j -t`
# must validate against tools/smcpstat.schema.json; the totals must be the sums of the
# rows of the same output (connections per mode, processes, bytes per mode, fallback
# reasons); the filters -p (pid and name), -P (port), -m (mode) and their combination must
# pick exactly the right rows, and their totals follow; bad filter values exit 2; the
# table's totals line must match the JSON totals of the same filter.
# With SMC_TEST_EXPECT=tcp nothing may be listed in mode shm.
# Exit: 0 pass, 1 fail, 77 skip (redis or python3's jsonschema missing), 99 hard error.

# shellcheck source=tests/integration/lib.sh
. "$(cd -- "$(dirname -- "$0")" && pwd)/lib.sh"

smc_require_cmd redis-server redis-cli python3
python3 -c 'import jsonschema' 2>/dev/null ||
	smc_skip "python3's jsonschema module is missing (Debian: python3-jsonschema)"
smc_init

SMCPSTAT=$top_builddir/tools/smcpstat
SCHEMA=$top_srcdir/tools/smcpstat.schema.json
[ -x "$SMCPSTAT" ] || smc_hard_error "smcpstat not built: $SMCPSTAT"

# validate FILE: FILE is valid against the schema.
validate() {
	python3 - "$SCHEMA" "$1" <<'PY' || smc_fail "$1 does not match $SCHEMA: $(cat "$1")"
import json, sys, jsonschema
schema = json.load(open(sys.argv[1]))
jsonschema.Draft7Validator.check_schema(schema)
jsonschema.validate(json.load(open(sys.argv[2])), schema)
PY
}

smc_free_port port
smc_start_server redis "$(smc_stats_dir server)" redis-server --port "$port" \
	--bind 127.0.0.1 --save '' --appendonly no --daemonize no
smc_wait_port redis "$port"
for c in cli1 cli2; do
	smc_start_server "$c" "$(smc_stats_dir "$c")" redis-cli -p "$port" -r -1 -i 0.2 ping
done
smc_start_server plain - redis-cli -p "$port" -r -1 -i 0.2 ping
SPID=${SMC_SERVER_PID[redis]}
C1=${SMC_SERVER_PID[cli1]}
C2=${SMC_SERVER_PID[cli2]}

# Until the server lists three connections (two shm, the plain one is not listed), at
# most 20 s: each client has to connect and finish its handshake.
want=2
[ "$SMC_TEST_EXPECT" = tcp ] && want=0
for ((i = 0; i < 200; i++)); do
	n=$("$SMCPSTAT" -j -p "$SPID" | jq '[.[] | select(.mode == "shm")] | length')
	[ "$n" = "$want" ] && [ "$(grep -c PONG "$SMC_TMP/cli2.log")" -gt 0 ] && break
	sleep 0.1
done

"$SMCPSTAT" -j >"$SMC_TMP/array.json" || smc_fail "smcpstat -j exited $?"
validate "$SMC_TMP/array.json"
"$SMCPSTAT" -j -t >"$SMC_TMP/all.json" || smc_fail "smcpstat -j -t exited $?"
validate "$SMC_TMP/all.json"
smc_log "smcpstat -j -t:"
cat "$SMC_TMP/all.json"

if [ "$SMC_TEST_EXPECT" = tcp ]; then
	smc_assert_eq "shm connections listed in pass-through mode" \
		"$(jq '.totals.connections.shm' "$SMC_TMP/all.json")" 0
	smc_pass
fi

# ------------------------------------------------------------------ the rows
# ours FILE: the rows of FILE between our processes and redis's port (other tests' or a
# user's processes may be listed too).
ours() {
	jq -c --argjson s "$SPID" --argjson c1 "$C1" --argjson c2 "$C2" --argjson p "$port" \
		'(if type == "array" then . else .connections end) |
		 [.[] | select((.pid == $s or .pid == $c1 or .pid == $c2) and
			(.local_port == $p or .peer_port == $p))]' "$1"
}
rows=$(ours "$SMC_TMP/all.json")
smc_assert_eq "rows of the server and its two preloaded clients" "$(jq length <<<"$rows")" 4
jq -e --argjson s "$SPID" --argjson p "$port" 'all(.[]; .mode == "shm" and .state == "active"
	and .reason == "none" and .bytes_sent > 0 and .bytes_received > 0 and
	(if .pid == $s then .side == "server" and .local_port == $p and .comm == "redis-server"
	 else .side == "client" and .peer_port == $p and .comm == "redis-cli" end))' \
	<<<"$rows" >/dev/null || smc_fail "unexpected rows: $rows"
P1=$(jq --argjson c "$C1" '.[] | select(.pid == $c) | .local_port' <<<"$rows")
P2=$(jq --argjson c "$C2" '.[] | select(.pid == $c) | .local_port' <<<"$rows")
smc_assert "client ports found ($P1, $P2)" -n "$P1" -a -n "$P2"
smc_assert_eq "server rows whose peer is a preloaded client" \
	"$(jq --argjson s "$SPID" --argjson a "$P1" --argjson b "$P2" \
		'[.[] | select(.pid == $s and (.peer_port == $a or .peer_port == $b))] | length' \
		<<<"$rows")" 2

# ------------------------------------------------------------------ totals = sums of the rows
# check_totals FILE: FILE's totals are the sums over its own rows.
check_totals() {
	jq -e '.connections as $c | .totals as $t |
		($t.processes == ([$c[].pid] | unique | length)) and
		all("shm", "ib", "tcp"; . as $m |
			$t.connections[$m] == ([$c[] | select(.mode == $m)] | length) and
			$t.bytes[$m].sent == ([$c[] | select(.mode == $m) | .bytes_sent] | add // 0) and
			$t.bytes[$m].received == ([$c[] | select(.mode == $m) | .bytes_received] | add // 0)) and
		($t.fallback == ([$c[] | select(.reason != "none") | .reason] | group_by(.) |
			map({key: .[0], value: length}) | from_entries))' "$1" >/dev/null ||
		smc_fail "totals of $1 are not the sums of its rows: $(cat "$1")"
}
check_totals "$SMC_TMP/all.json"
jq -e '.totals.connections.shm >= 4 and .totals.bytes.shm.sent > 0 and .totals.processes >= 3' \
	"$SMC_TMP/all.json" >/dev/null || smc_fail "totals miss our connections"

# ------------------------------------------------------------------ filters
# filtered LABEL WANT-ROWS JQ-CONDITION ARGS...: smcpstat -j -t ARGS lists WANT-ROWS rows,
# all satisfying JQ-CONDITION, with totals that add up and agree with the table's line.
filtered() {
	local label=$1 want=$2 cond=$3 f=$SMC_TMP/$1.json line
	shift 3
	"$SMCPSTAT" -j -t "$@" >"$f" || smc_fail "smcpstat -j -t $* exited $?"
	validate "$f"
	check_totals "$f"
	smc_assert_eq "rows listed by smcpstat $*" "$(jq '.connections | length' "$f")" "$want"
	jq -e --argjson s "$SPID" --argjson c1 "$C1" --argjson c2 "$C2" --argjson p "$port" \
		--argjson p1 "$P1" "all(.connections[]; $cond)" "$f" >/dev/null ||
		smc_fail "smcpstat $* listed a row it should not: $(cat "$f")"
	line=$("$SMCPSTAT" -t "$@" | tail -n 1)
	jq -e --arg line "$line" '.totals.connections as $n |
		$line | startswith("Total: \($n.shm + $n.ib + $n.tcp) connection") and
		contains("(shm \($n.shm), ib \($n.ib), tcp \($n.tcp))")' \
		"$f" >/dev/null || smc_fail "smcpstat -t $*: totals line '$line' against $(cat "$f")"
	smc_log "$label: $(jq -c .totals "$f")"
}
filtered pid 2 '.pid == $s' -p "$SPID"
filtered name-client 2 '.comm == "redis-cli" and (.pid == $c1 or .pid == $c2)' -p redis-cli
filtered port 2 '(.pid == $s or .pid == $c1) and (.local_port == $p1 or .peer_port == $p1)' \
	-P "$P1"
filtered name-and-port 1 '.pid == $s and .peer_port == $p1' --process redis-server --port "$P1"
filtered mode-tcp-ours 0 'false' -p "$SPID" -m tcp
filtered mode-shm-ours 2 '.mode == "shm" and .pid == $s' --pid "$SPID" --mode shm
for bad in "-m rdma" "-P 0" "-P 70000" "-p 0" "-p ''"; do
	eval "\"\$SMCPSTAT\" $bad" >/dev/null 2>&1
	smc_assert_eq "exit status of smcpstat $bad" "$?" 2
done

smc_stop_server cli1
smc_stop_server cli2
smc_stop_server plain
smc_stop_server redis
smc_pass
