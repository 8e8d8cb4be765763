#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#
# Upgraded connections carried across exec into a new image under the library
# (core/sock/exec_carry.c), and descriptions of them that the library did not write.
#
# activate: systemd-socket-activate --accept under the library accepts each connection
# (upgraded), forks, and its child puts the socket on fd 3 and execs a Python server
# (LD_PRELOAD passed with -E) while the client is already streaming 4 MiB into the
# ring; the server reads it all, then answers with 4 MiB of its own and the SHA-256 of
# what it read. 10 sessions in a row. Checked: every byte both ways (digests), every
# connection upgraded (or, when a loaded host delayed its handshake past the fork or
# its timeout, plain TCP), the server's images counted every upgraded connection
# carried (events.exec_carried) and took its payload over shared memory, smcpstat lists the server's connection as
# carried, the client saw no downgrade and sent and received everything over shared
# memory, nothing fell back, no process is left.
#
# forge (tests/progs/exec_forge): a new image under the library gets SMC_EXEC_STATE
# naming a description with a cursor outside its ring, with cursors that are not the
# published ones (stale), with a pipe for its region, with a pipe for a doorbell: each
# record is refused, its socket reset (the server sees ECONNRESET), its doorbells and
# region closed, and fallback["exec-state"] and events.aborts count it; a description
# written for another process, and SMC_EXEC_STATE set by hand to /dev/null's
# descriptor, are ignored and the connection goes on. The variable is gone from the
# new image's environment in every case.
#
# corners: an epoll set inherited with the connection, and a connection finished both
# ways before the new image first touches it (below).
#
# The cases that carry need /proc/self/map_files (root); as another user the
# connections go back to TCP before the exec (exec.sh), which is checked here too.
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
. "$(dirname -- "${BASH_SOURCE[0]}")/lib.sh"

: "${SMC_EXEC_FORGE:=$top_builddir/tests/progs/exec_forge}"
: "${SMC_CLONE_VM_EXEC:=$top_builddir/tests/progs/clone_vm_exec}"
SESSIONS=${EXEC_CARRY_SESSIONS:-10}
BYTES=4194304

smc_init
smc_require_cmd python3 pgrep
smc_require_built "$SMC_EXEC_FORGE"
smc_require_built "$SMC_CLONE_VM_EXEC"

cat >"$SMC_TMP/serve_fd3.py" <<'EOF'
# The connection systemd-socket-activate --accept passed on fd 3: read to EOF, then
# answer with BYTES of a pattern and the SHA-256 of what was read.
import hashlib, os, socket, subprocess, sys
assert os.environ.get("LISTEN_FDS") == "1", os.environ.get("LISTEN_FDS")
s = socket.socket(fileno=3)
h = hashlib.sha256()
n = 0
while True:
    d = s.recv(262144)
    if not d:
        break
    h.update(d)
    n += len(d)
if len(sys.argv) > 2:  # what smcpstat says of this process now
    with open(sys.argv[3], "w") as out:
        subprocess.run([sys.argv[2], "-j", "-p", str(os.getpid())], stdout=out, check=True)
reply = bytes(range(256)) * (int(sys.argv[1]) // 256)
s.sendall(reply)
s.sendall(h.hexdigest().encode() + b"\n")
s.close()
print("SERVED", n, flush=True)
EOF
cat >"$SMC_TMP/client.py" <<'EOF'
# Streams BYTES of random data, half-closes, reads the answer, checks both digests.
import hashlib, os, socket, sys
port, size = int(sys.argv[1]), int(sys.argv[2])
data = os.urandom(size)
s = socket.create_connection(("127.0.0.1", port))
s.sendall(data)
s.shutdown(socket.SHUT_WR)
got = bytearray()
while True:
    d = s.recv(262144)
    if not d:
        break
    got += d
want = bytes(range(256)) * (size // 256)
if got[:size] != want:
    sys.exit("the answer differs from the pattern (%d bytes received)" % len(got))
if got[size:].decode().strip() != hashlib.sha256(data).hexdigest():
    sys.exit("the server read other bytes than were sent")
print("CLIENT ok", len(got), flush=True)
EOF

# ------------------------------------------------------------------ activate
activate() {
	local srv cli i rc bad=0 want_carry
	srv=$(smc_stats_dir activate-server)
	cli=$(smc_stats_dir activate-client)
	smc_free_port port
	# systemd-socket-activate passes on only the variables named (those that are set)
	local pass=(-E LD_PRELOAD -E SMC_STATS_FILE) v
	for v in SMC_BPF_DIR SMC_TRANSPORT ASAN_OPTIONS UBSAN_OPTIONS; do
		[ -n "${!v:-}" ] && pass+=(-E "$v")
	done
	smc_start_server activate "$srv" timeout -k 5 300 \
		systemd-socket-activate -l "127.0.0.1:$port" -a "${pass[@]}" \
		python3 "$SMC_TMP/serve_fd3.py" "$BYTES" "$top_builddir/tools/smcpstat" "$SMC_TMP/smcpstat.json"
	smc_wait_port activate "$port"
	for ((i = 0; i < SESSIONS; i++)); do
		SMC_CMD_TIMEOUT=60 smc_run "$cli" python3 "$SMC_TMP/client.py" "$port" "$BYTES" \
			>"$SMC_TMP/client-$i.log" 2>&1
		rc=$?
		if [ "$rc" != 0 ] || ! grep -q "^CLIENT ok" "$SMC_TMP/client-$i.log"; then
			smc_log "activate: session $i: exit status $rc: $(cat "$SMC_TMP/client-$i.log")"
			bad=$((bad + 1))
		fi
	done
	# the last server may still be writing its stats
	for ((i = 0; i < 50; i++)); do
		pgrep -f -- "$SMC_TMP/serve_fd3.py" >/dev/null || break
		sleep 0.1
	done
	smc_stop_server activate
	left=$(pgrep -a -f -- "$SMC_TMP/serve_fd3.py|127.0.0.1:$port" || true)
	[ -z "$left" ] || smc_fail "activate: processes left behind: $left"
	smc_assert_eq "activate: sessions that failed" "$bad" 0
	smc_require_stats "$cli"
	smc_require_stats "$srv"
	smc_log "stats activate client: $(smc_stats_summary "$cli")"
	smc_log "stats activate server: $(smc_stats_summary "$srv") carried=$(smc_stats "$srv" '.events.exec_carried // 0')"
	smc_assert_eq "activate: client aborts" "$(smc_stats "$cli" '.events.aborts')" 0
	smc_assert_eq "activate: server aborts" "$(smc_stats "$srv" '.events.aborts')" 0
	if [ "$SMC_TEST_EXPECT" = tcp ]; then
		smc_assert_eq "activate: client shm connections" "$(smc_stats "$cli" '.connections.shm')" 0
		return
	fi
	# a handshake that a loaded host delays past the fork (fork-pending) or its
	# timeout (handshake-failed) leaves that session on TCP: a fallback, not a failure
	local up fb late total
	up=$(smc_stats "$cli" '.connections.shm')
	fb=$(smc_stats "$cli" '.connections.tcp')
	late=$(smc_stats "$cli" '(.fallback["fork-pending"] // 0) + (.fallback["handshake-failed"] // 0)')
	total=$((2 * BYTES + 65))
	smc_assert_eq "activate: client connections, upgraded or not" $((up + fb)) "$SESSIONS"
	smc_assert_eq "activate: client fallbacks other than a late handshake" $((fb - late)) 0
	smc_assert_ge "activate: client connections upgraded" "$up" 1
	smc_assert_eq "activate: client bytes (shm + tcp)" \
		"$(smc_stats "$cli" '.bytes.shm.sent + .bytes.shm.received + .bytes.tcp.sent + .bytes.tcp.received')" \
		$((SESSIONS * total))
	if [ "$(id -u)" = 0 ]; then
		# once per exec: more where python3 is a script that execs the interpreter
		# (a version manager's shim), each image carrying it into the next
		smc_assert_ge "activate: connections carried into the servers" \
			"$(smc_stats "$srv" '.events.exec_carried // 0')" "$up"
		smc_assert_eq "activate: client saw downgrades" \
			"$(smc_stats "$cli" '.events.peer_downgrades // 0')" 0
		smc_assert_eq "activate: client bytes over shm" \
			"$(smc_stats "$cli" '.bytes.shm.sent + .bytes.shm.received')" $((up * total))
		smc_assert_eq "activate: server bytes received over shm" \
			"$(smc_stats "$srv" '.bytes.shm.received')" $((up * BYTES))
		smc_log "smcpstat in the last server: $(cat "$SMC_TMP/smcpstat.json")"
		if [ "$fb" = 0 ]; then
			smc_assert_eq "activate: smcpstat shows the connection carried" \
				"$(jq '[.[] | select(.fd == 3 and .mode == "shm" and .carried)] | length' \
					"$SMC_TMP/smcpstat.json")" 1
		fi
	else
		smc_assert_eq "activate: connections carried (not root)" \
			"$(smc_stats "$srv" '.events.exec_carried // 0')" 0
		smc_assert_eq "activate: client saw every connection downgraded" \
			"$(smc_stats "$cli" '.events.peer_downgrades // 0')" "$up"
	fi
}

# ------------------------------------------------------------------ forge
forge() {
	local c dir out rc resets eofs
	smc_free_port port
	smc_start_server forge-echo - python3 -c '
import socket, sys, threading
l = socket.socket()
l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
l.bind(("127.0.0.1", int(sys.argv[1])))
l.listen(8)
def serve(c):
    try:
        while True:
            d = c.recv(65536)
            if not d:
                print("EOF", flush=True)
                break
            c.sendall(d)
    except ConnectionResetError:
        print("RESET", flush=True)
    c.close()
while True:
    c, _ = l.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()' "$port"
	smc_wait_port forge-echo "$port"
	for c in outside stale notmemfd badbell otherpid byhand; do
		dir=$(smc_stats_dir "forge-$c")
		out=$SMC_TMP/forge-$c.log
		SMC_LOG_LEVEL=warn SMC_CMD_TIMEOUT=30 smc_run "$dir" "$SMC_EXEC_FORGE" forge "$c" "$port" \
			>"$out" 2>&1
		rc=$?
		cat "$out"
		smc_assert_eq "forge $c: exit status" "$rc" 0
		grep -q "^CHECK $c ok\$" "$out" || smc_fail "forge $c: the new image did not pass its checks"
		smc_require_stats "$dir"
		case $c in
		otherpid | byhand)
			smc_assert_eq "forge $c: exec-state fallbacks" \
				"$(smc_stats "$dir" '.fallback["exec-state"] // 0')" 0
			smc_assert_eq "forge $c: aborts" "$(smc_stats "$dir" '.events.aborts')" 0
			;;
		*)
			smc_assert_eq "forge $c: exec-state fallbacks" \
				"$(smc_stats "$dir" '.fallback["exec-state"] // 0')" 1
			smc_assert_eq "forge $c: aborts" "$(smc_stats "$dir" '.events.aborts')" 1
			grep -q "refused" "$out" || smc_fail "forge $c: no warning about the refused record"
			;;
		esac
		smc_assert_eq "forge $c: connections carried" \
			"$(smc_stats "$dir" '.events.exec_carried // 0')" 0
	done
	sleep 0.3
	smc_stop_server forge-echo
	resets=$(grep -c '^RESET$' "$(smc_server_log forge-echo)")
	eofs=$(grep -c '^EOF$' "$(smc_server_log forge-echo)")
	smc_assert_eq "forge: connections the server saw reset" "$resets" 4
	smc_assert_eq "forge: connections the server saw closed" "$eofs" 2
}

# ------------------------------------------------------------------ corners
# tests/progs/exec_cases.py: what the new image sees must be what TCP shows.
#  epoll: the connection is registered in an epoll set that the new image inherits and
#    waits on: the set must report the client's line (the emulation's entries mean
#    nothing to the new image: such a connection goes back to TCP, and the set gets
#    the socket);
#  done: the connection is finished both ways (read to EOF, answered, shut down and
#    closed by the parent, closed by the client) before a forked child's exec'd image
#    first touches it: its recv sees EOF, its send EPIPE, nothing is refused or reset;
#  clone-vm (tests/progs/clone_vm_exec): a child made by clone(CLONE_VM | CLONE_VFORK)
#    execs /bin/true with the connection inherited; the parent, whose memory the child
#    shared, goes on using the connection (the carry held its locks for ever before).
corners() {
	local prog=$top_srcdir/tests/progs/exec_cases.py dir out what want
	smc_free_port port
	dir=$(smc_stats_dir epoll)
	smc_start_server epoll "$dir" timeout 30 python3 "$prog" epoll-server "$port"
	smc_wait_log epoll '^listening'
	out=$(SMC_CMD_TIMEOUT=30 smc_run "$dir" python3 "$prog" epoll-client "$port" 2>&1)
	smc_wait_server_exit epoll 30
	smc_log "epoll: $out"
	[ "$out" = "CLIENT got b'ECHO hello\n'" ] ||
		smc_fail "epoll: the new image's inherited epoll set did not report the connection ($(cat "$(smc_server_log epoll)"))"
	smc_assert_eq "epoll: aborts" "$(smc_stats "$dir" '.events.aborts')" 0
	for what in recv send; do
		smc_free_port port
		dir=$(smc_stats_dir "done-$what")
		smc_start_server "done-$what" "$dir" timeout 30 python3 "$prog" done-server "$port" \
			"$SMC_TMP/done-$what.out" "$what"
		smc_wait_log "done-$what" '^listening'
		out=$(SMC_CMD_TIMEOUT=30 smc_run "$dir" python3 "$prog" done-client "$port" 2>&1)
		smc_wait_server_exit "done-$what" 30
		want="recv b''"
		[ "$what" = send ] && want="error BrokenPipeError"
		smc_log "done-$what: $out; the child's image: $(cat "$SMC_TMP/done-$what.out")"
		smc_assert_eq "done-$what: the child's image saw" "$(cat "$SMC_TMP/done-$what.out")" "$want"
		smc_assert_eq "done-$what: refused carried connections" \
			"$(smc_stats "$dir" '.fallback["exec-state"] // 0')" 0
		smc_assert_eq "done-$what: aborts" "$(smc_stats "$dir" '.events.aborts')" 0
	done
	# a child sharing the client's memory (clone(CLONE_VM | CLONE_VFORK)) execs with the
	# connection inherited: nothing is carried out of that memory, the parent goes on
	dir=$(smc_stats_dir clone-vm)
	smc_start_server clone-vm "$dir" timeout 30 python3 "$top_srcdir/tests/progs/echo_server.py" 1
	smc_wait_log clone-vm '^port '
	read -r _ port < <(grep -m1 '^port ' "$(smc_server_log clone-vm)")
	out=$(SMC_CMD_TIMEOUT=20 smc_run "$dir" "$SMC_CLONE_VM_EXEC" "$port" 2>&1)
	smc_wait_server_exit clone-vm 30
	smc_log "clone-vm: $out"
	smc_assert_eq "clone-vm: the parent after its child's exec" "$out" OK
	smc_assert_eq "clone-vm: aborts" "$(smc_stats "$dir" '.events.aborts')" 0
	smc_assert_eq "clone-vm: connections carried" "$(smc_stats "$dir" '.events.exec_carried // 0')" 0
}

activate
forge
corners
smc_pass
