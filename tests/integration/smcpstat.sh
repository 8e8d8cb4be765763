#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#
# smcpstat(8) against live processes: a preloaded Python server and a preloaded Python
# client keep one connection open after moving a known number of bytes each way; smcpstat
# must list that connection on both sides, in mode shm, with the right ports, sides,
# RMB sizes and byte counts; -p must filter, -j must be valid JSON; a process that exits
# disappears from the list; as root, the same query run as user nobody sees nothing. The
# client has no stats thread before the first query (it starts then).
# With SMC_TEST_EXPECT=tcp (pass-through run) no shm connection may be listed.
# Exit: 0 pass, 1 fail, 77 skip (python3 missing), 99 hard error.

# shellcheck source=tests/integration/lib.sh
. "$(cd -- "$(dirname -- "$0")" && pwd)/lib.sh"

smc_require_cmd python3
smc_init

SMCPSTAT=$top_builddir/tools/smcpstat
[ -x "$SMCPSTAT" ] || smc_hard_error "smcpstat not built: $SMCPSTAT"

TO_SERVER=100000 # bytes the client sends
TO_CLIENT=70000  # bytes the server answers

cat >"$SMC_TMP/server.py" <<'PY'
import os, socket, sys, time
port, want, answer = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(("127.0.0.1", port))
srv.listen(4)
print("listening pid", os.getpid(), flush=True)
conn, peer = srv.accept()
got = 0
while got < want:
    chunk = conn.recv(65536)
    if not chunk:
        sys.exit("client closed early after %d bytes" % got)
    got += len(chunk)
conn.sendall(b"s" * answer)
print("ready pid %d peer_port %d" % (os.getpid(), peer[1]), flush=True)
time.sleep(600)
PY

cat >"$SMC_TMP/client.py" <<'PY'
import os, socket, sys, time
port, send, want = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
c = socket.create_connection(("127.0.0.1", port))
c.sendall(b"c" * send)
got = 0
while got < want:
    chunk = c.recv(65536)
    if not chunk:
        sys.exit("server closed early after %d bytes" % got)
    got += len(chunk)
print("ready pid %d local_port %d" % (os.getpid(), c.getsockname()[1]), flush=True)
time.sleep(600)
PY

smc_free_port SRV_PORT
smc_start_server server "$(smc_stats_dir server)" python3 "$SMC_TMP/server.py" "$SRV_PORT" \
	"$TO_SERVER" "$TO_CLIENT"
smc_wait_port server "$SRV_PORT"
smc_start_server client "$(smc_stats_dir client)" python3 "$SMC_TMP/client.py" "$SRV_PORT" \
	"$TO_SERVER" "$TO_CLIENT"
smc_wait_log server '^ready pid' 60
smc_wait_log client '^ready pid' 60

log_field() { # log_field NAME KEY: the number after KEY on NAME's "ready" line
	sed -n "s/^ready .*\b$2 \([0-9]*\).*/\1/p" "$(smc_server_log "$1")" | head -n 1
}
SPID=$(log_field server pid)
CPID=$(log_field client pid)
CLI_PORT=$(log_field client local_port)
smc_assert "client port seen by the server ($(log_field server peer_port)) is the client's ($CLI_PORT)" \
	"$(log_field server peer_port)" = "$CLI_PORT"
smc_log "server pid $SPID port $SRV_PORT, client pid $CPID port $CLI_PORT"

# The stats server's thread starts at the first query where the progress thread can
# watch its socket: until then the client has its own thread and the progress thread.
if [ "$SMC_TEST_EXPECT" = shm ]; then
	smc_assert_eq "client threads before the first query (its own, the progress thread)" \
		"$(awk '/^Threads:/ { print $2 }' "/proc/$CPID/status")" 2
fi

# ------------------------------------------------------------------ the listing
"$SMCPSTAT" -h >"$SMC_TMP/help.out" || smc_fail "smcpstat -h exited $?"
grep -q -- '-j' "$SMC_TMP/help.out" || smc_fail "smcpstat -h does not describe -j"
"$SMCPSTAT" -x >/dev/null 2>&1
smc_assert_eq "exit status of an unknown option" "$?" 2

"$SMCPSTAT" -v >"$SMC_TMP/table.out" 2>"$SMC_TMP/table.err" || smc_fail "smcpstat exited $?"
"$SMCPSTAT" -j >"$SMC_TMP/all.json" 2>"$SMC_TMP/json.err" || smc_fail "smcpstat -j exited $?"
smc_log "smcpstat:"
cat "$SMC_TMP/table.out"
jq -e 'type == "array"' "$SMC_TMP/all.json" >/dev/null ||
	smc_fail "smcpstat -j is not a JSON array: $(cat "$SMC_TMP/all.json")"
head -n 1 "$SMC_TMP/table.out" | grep -q '^ *PID .*MODE.*LOCAL.*PEER' ||
	smc_fail "table has no header line"

# conn_of PID: the JSON objects of PID's connections between our two ports.
conn_of() {
	jq -c --argjson pid "$1" --argjson a "$SRV_PORT" --argjson b "$CLI_PORT" \
		'[.[] | select(.pid == $pid and
			((.local_port == $a and .peer_port == $b) or
			 (.local_port == $b and .peer_port == $a)))]' "$SMC_TMP/all.json"
}

if [ "$SMC_TEST_EXPECT" = tcp ]; then
	smc_assert_eq "shm connections listed in pass-through mode" \
		"$(jq '[.[] | select(.mode == "shm")] | length' "$SMC_TMP/all.json")" 0
	smc_stop_server client
	smc_stop_server server
	smc_pass
fi

# check_side PID SIDE LOCAL_PORT PEER_PORT MIN_SENT MIN_RECEIVED
check_side() {
	local pid=$1 side=$2 lport=$3 pport=$4 sent=$5 recv=$6 objs n
	objs=$(conn_of "$pid")
	n=$(jq length <<<"$objs")
	smc_assert_eq "$side (pid $pid): connections listed between ports $SRV_PORT and $CLI_PORT" "$n" 1
	jq -e --arg side "$side" --argjson lp "$lport" --argjson pp "$pport" \
		--argjson sent "$sent" --argjson recv "$recv" '.[0] |
		.side == $side and .mode == "shm" and .state == "active" and .reason == "none" and
		.local_addr == "127.0.0.1" and .peer_addr == "127.0.0.1" and
		.local_port == $lp and .peer_port == $pp and
		.rx_size > 0 and .tx_size > 0 and
		.bytes_sent >= $sent and .bytes_received >= $recv and
		(.comm | startswith("python")) and .fd >= 0' <<<"$objs" >/dev/null ||
		smc_fail "$side (pid $pid): unexpected record $objs"
	grep -Eq "^ *$pid .*$side +active +shm +127\.0\.0\.1:$lport +127\.0\.0\.1:$pport " \
		"$SMC_TMP/table.out" || smc_fail "$side (pid $pid): no matching line in the table"
}
check_side "$SPID" server "$SRV_PORT" "$CLI_PORT" "$TO_CLIENT" "$TO_SERVER"
check_side "$CPID" client "$CLI_PORT" "$SRV_PORT" "$TO_SERVER" "$TO_CLIENT"

# The two ends of one connection have mirrored RMB sizes.
smc_assert_eq "server rx RMB = client tx RMB" "$(conn_of "$SPID" | jq '.[0].rx_size')" \
	"$(conn_of "$CPID" | jq '.[0].tx_size')"
smc_assert_eq "server tx RMB = client rx RMB" "$(conn_of "$SPID" | jq '.[0].tx_size')" \
	"$(conn_of "$CPID" | jq '.[0].rx_size')"

# ------------------------------------------------------------------ -p
"$SMCPSTAT" -j -p "$SPID" >"$SMC_TMP/server.json" || smc_fail "smcpstat -j -p exited $?"
jq -e --argjson pid "$SPID" 'length >= 1 and all(.[]; .pid == $pid)' "$SMC_TMP/server.json" \
	>/dev/null || smc_fail "smcpstat -p $SPID listed: $(cat "$SMC_TMP/server.json")"
"$SMCPSTAT" -p "$SPID" >"$SMC_TMP/server.out" || smc_fail "smcpstat -p exited $?"
grep -q "^ *$CPID " "$SMC_TMP/server.out" && smc_fail "smcpstat -p $SPID shows pid $CPID"

# ------------------------------------------------------------------ other users
if [ "$(id -u)" = 0 ] && command -v setpriv >/dev/null 2>&1 && id nobody >/dev/null 2>&1; then
	setpriv --reuid=nobody --regid="$(id -g nobody)" --clear-groups "$SMCPSTAT" -j \
		>"$SMC_TMP/nobody.json" 2>/dev/null || smc_fail "smcpstat as nobody exited $?"
	jq -e --argjson s "$SPID" --argjson c "$CPID" 'all(.[]; .pid != $s and .pid != $c)' \
		"$SMC_TMP/nobody.json" >/dev/null ||
		smc_fail "user nobody sees root's connections: $(cat "$SMC_TMP/nobody.json")"
else
	smc_log "not root (or no setpriv/nobody): other-user check skipped"
fi

# ------------------------------------------------------------------ a process that exits
smc_stop_server client
"$SMCPSTAT" -j >"$SMC_TMP/after.json" || smc_fail "smcpstat -j exited $?"
jq -e --argjson c "$CPID" 'all(.[]; .pid != $c)' "$SMC_TMP/after.json" >/dev/null ||
	smc_fail "pid $CPID still listed after it exited"
"$SMCPSTAT" -p "$CPID" >"$SMC_TMP/gone.out" || smc_fail "smcpstat -p (no such process) exited $?"
smc_assert_eq "lines for a process that is gone (header only)" "$(wc -l <"$SMC_TMP/gone.out")" 1
smc_stop_server server
smc_pass
