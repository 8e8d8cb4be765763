#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#
# Per-process counts across fork (include/smc_preload.h): a parent with N upgraded
# connections forks a child that makes M connections of its own, sends K bytes over
# them and J more over one of the parent's connections, and exits; then the parent
# exits. The child's SMC_STATS_FILE shows exactly its M connections and its own K + J
# bytes, none of the parent's; the parent's shows exactly its N connections and its own
# bytes, none of the child's. The sink server counts every connection and byte once,
# and the two sides agree.
# A forked child that execs a program which makes no connection (/bin/true) with an
# upgraded connection inherited: the connection is carried into /bin/true's image
# (root: core/sock/exec_carry.c), whose stats file counts it, and nothing is
# downgraded; as another user the child's downgrade, written just before its exec,
# stays in its stats file (the new image counted nothing and leaves it), and the sink
# counts the peer's downgrade.
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
. "$(dirname -- "$0")/lib.sh"

: "${SMC_FORK:=$top_builddir/tests/progs/smc_fork}"
N=5 M=3 K=300000

smc_init
smc_require_built "$SMC_FORK"
export SMC_SHORT_CONN_US=0

smc_free_port port
srv=$(smc_stats_dir sink)
cli=$(smc_stats_dir counts)
smc_start_server sink "$srv" "$SMC_FORK" sink "$port"
smc_wait_port sink "$port"

out=$SMC_TMP/counts.out
smc_run "$cli" "$SMC_FORK" counts 127.0.0.1 "$port" --conns "$N" --child-conns "$M" \
	--bytes "$K" >"$out" 2>&1
rc=$?
cat "$out"
smc_assert_eq "smc_fork counts exit status" "$rc" 0
smc_stop_server sink TERM 20
smc_assert_eq "sink exit status" "${SMC_SERVER_RC[sink]}" 0

read -r ppid pconns pbytes < <(sed -n 's/^PARENT pid=\([0-9]*\) conns=\([0-9]*\) bytes=\([0-9]*\)$/\1 \2 \3/p' "$out")
read -r cpid cconns cbytes < <(sed -n 's/^CHILD pid=\([0-9]*\) conns=\([0-9]*\) bytes=\([0-9]*\)$/\1 \2 \3/p' "$out")
[ -n "${ppid:-}" ] && [ -n "${cpid:-}" ] || smc_fail "smc_fork counts did not report both processes"
smc_assert_eq "parent's own connections" "$pconns" "$N"
smc_assert_eq "child's own connections" "$cconns" "$M"
pfile=$cli/$ppid.json cfile=$cli/$cpid.json
[ -f "$pfile" ] || smc_fail "no stats file of the parent ($pfile)"
[ -f "$cfile" ] || smc_fail "no stats file of the child ($cfile)"
smc_log "parent: $(jq -c . "$pfile")"
smc_log "child:  $(jq -c . "$cfile")"

mode=$SMC_TEST_EXPECT
smc_assert_eq "parent's $mode connections" "$(jq ".connections.$mode" "$pfile")" "$N"
smc_assert_eq "parent's bytes sent over $mode" "$(jq ".bytes.$mode.sent" "$pfile")" "$pbytes"
smc_assert_eq "child's $mode connections (none of the parent's)" \
	"$(jq ".connections.$mode" "$cfile")" "$M"
smc_assert_eq "child's bytes sent over $mode (its own only)" \
	"$(jq ".bytes.$mode.sent" "$cfile")" "$cbytes"
smc_assert_eq "child's fallbacks" "$(jq -c '.fallback' "$cfile")" "{}"
smc_assert_eq "parent's fallbacks" "$(jq -c '.fallback' "$pfile")" "{}"
# the sink saw every connection and byte once: the sum of the two is the truth
smc_expect_payload "$srv" $((pbytes + cbytes)) "sink"
smc_assert_eq "sink's $mode connections" "$(smc_stats "$srv" ".connections.$mode")" $((N + M))
smc_assert_eq "sink's bytes received over $mode" \
	"$(smc_stats "$srv" ".bytes.$mode.received")" $((pbytes + cbytes))

cat >"$SMC_TMP/sink.py" <<'PY'
import socket, sys
ls = socket.socket()
ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
ls.bind(("127.0.0.1", int(sys.argv[1])))
ls.listen(1)
print("listening", flush=True)
c, _ = ls.accept()
n = 0
while True:
    b = c.recv(65536)
    if not b:
        break
    n += len(b)
print("received %d" % n, flush=True)
PY
cat >"$SMC_TMP/forkexec.py" <<'PY'
import os, socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
s.sendall(b"a" * 100000)
os.set_inheritable(s.fileno(), True)
pid = os.fork()
if pid == 0:
    os.execv("/bin/true", ["true"])
os.waitpid(pid, 0)
print("child %d" % pid, flush=True)
s.sendall(b"b" * 100000)
s.close()
PY
smc_free_port port
srv=$(smc_stats_dir sink-exec)
cli=$(smc_stats_dir forkexec)
smc_start_server sinkexec "$srv" python3 "$SMC_TMP/sink.py" "$port"
smc_wait_log sinkexec '^listening'
out=$(smc_run "$cli" python3 "$SMC_TMP/forkexec.py" "$port" 2>&1)
rc=$?
smc_assert_eq "fork+exec client exit status" "$rc" 0
smc_wait_server_exit sinkexec 20
grep -q '^received 200000$' "$(smc_server_log sinkexec)" || smc_fail "the sink did not get 200000 bytes"
cpid=$(sed -n 's/^child \([0-9]*\)$/\1/p' <<<"$out")
[ -n "$cpid" ] || smc_fail "the fork+exec client did not report its child: $out"
cfile=$cli/$cpid.json
smc_require_stats "$srv"
if [ "$mode" = shm ]; then
	[ -f "$cfile" ] || smc_fail "no stats file of the exec'ing child ($cfile)"
	smc_log "exec'ing child: $(jq -c . "$cfile")"
	if [ "$(id -u)" = 0 ]; then
		# /bin/true loads the library: the connection is carried into it
		# (core/sock/exec_carry.c), and its exit leaves it to the parent
		smc_assert_eq "exec'ing child's events.exec_carried" "$(jq '.events.exec_carried' "$cfile")" 1
		smc_assert_eq "exec'ing child's events.downgrades" "$(jq '.events.downgrades' "$cfile")" 0
		smc_assert_eq "sink's events.peer_downgrades" "$(smc_stats "$srv" '.events.peer_downgrades')" 0
	else
		smc_assert_eq "exec'ing child's events.downgrades" "$(jq '.events.downgrades' "$cfile")" 1
		smc_assert_ge "sink's events.peer_downgrades" "$(smc_stats "$srv" '.events.peer_downgrades')" 1
	fi
else
	smc_assert_eq "sink's events.peer_downgrades" "$(smc_stats "$srv" '.events.peer_downgrades')" 0
fi
smc_pass
