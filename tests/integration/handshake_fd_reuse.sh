#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#
# A program that closes a connection's descriptor while the library still negotiates it
# on its progress thread. The thread watches the handshake through a descriptor of its
# own (core/conn/conn_watch.c): libevent keys its events by number, and the number the program
# closed comes back at once, for the library's next socket or the program's.
# The client stops the server (SIGSTOP) around its connect, so that its handshake is
# still running when it closes, and lets it go on afterwards:
#   dup    - connect(), dup() the socket, close the original (a dup kept past close,
#            as Python's os.dup() + close or an exit with a dup open do); the server's
#            rendezvous socket, accepted next, takes the closed number. Before, that
#            handshake waited out its timeout and the server reset the connection
#            (the client's send failed with EPIPE; 1 exit in 20 lost its bytes).
#   reuse  - connect(), close() at once, then a second connection, which gets the same
#            number; the second must upgrade. The close must end the first socket at
#            once (no longer ESTABLISHED; the server reads EOF, not a reset).
# Each then moves N bytes to an echo server and checks them; both sides' stats must show
# them over shared memory and no connection gone to TCP, and the client must hold no
# descriptor of a TCP socket at its end. Runs on the same-host
# rendezvous and, as root with the eBPF object built, on the SMC TCP option (in band).
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
. "$(dirname -- "$0")/lib.sh"

smc_init
smc_require_cmd python3
export SMC_SHORT_CONN_US=0 # the full handshake for each connection, no pool

SERVER='
import os, socket, sys, time
open(sys.argv[4], "w").write(str(os.getpid()))
l = socket.socket()
l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
l.bind(("127.0.0.1", int(sys.argv[1])))
l.listen(8)
print("listening", flush=True)
n = int(sys.argv[2])
for k in range(int(sys.argv[3])):
    c, _ = l.accept()
    got = b""
    try:
        while len(got) < n:
            b = c.recv(65536)
            if not b:
                break
            got += b
        if got:
            c.sendall(got)
        print("connection %d: %d bytes" % (k, len(got)), flush=True)
    except OSError as e:
        print("connection %d: %s" % (k, e), flush=True)
    c.close()
print("served", flush=True)
'
CLIENT='
import os, signal, socket, subprocess, sys, time
port, n, case = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
server = int(open(sys.argv[4]).read())
data = bytes(i % 251 for i in range(n))
os.kill(server, signal.SIGSTOP)  # the kernel completes the TCP handshake alone
try:
    s = socket.create_connection(("127.0.0.1", port))
    time.sleep(0.1)  # the progress thread watches the handshake by now
    if case == "dup":
        fd = os.dup(s.fileno())
        s.close()
        s = socket.socket(fileno=fd)
    else:
        me = s.getsockname()
        s.close()
        # the close ended the socket (FIN) as without the library, whatever
        # descriptor the library keeps for its handshake
        ss = subprocess.run(["ss", "-tanH", "state", "established", "src", "%s:%d" % me],
                            stdout=subprocess.PIPE, universal_newlines=True).stdout
        if ss.strip():
            sys.exit("still established after close: " + ss)
        s = socket.create_connection(("127.0.0.1", port))
        time.sleep(0.1)
finally:
    os.kill(server, signal.SIGCONT)
s.sendall(data)
got = b""
while len(got) < n:
    b = s.recv(65536)
    if not b:
        break
    got += b
s.close()
if got != data:
    sys.exit("echo: %d bytes, %s" % (len(got), "equal" if got == data[:len(got)] else "different"))
# no descriptor of a TCP socket left, in whatever state (the handshake watch keeps
# one while it runs)
def tcp_fds():
    n = 0
    for f in os.listdir("/proc/self/fd"):
        try:
            if not os.readlink("/proc/self/fd/" + f).startswith("socket:"):
                continue
            t = socket.socket(fileno=os.dup(int(f)))
        except OSError:
            continue  # the descriptor of the listing itself
        n += t.family in (socket.AF_INET, socket.AF_INET6) and t.type == socket.SOCK_STREAM
        t.close()
    return n
for i in range(100):
    if tcp_fds() == 0:
        break
    time.sleep(0.02)
if tcp_fds():
    sys.exit("TCP socket descriptors left: %d" % tcp_fds())
'

run_path() {
	local path=$1 case srv cli N=200000 conns pidfile
	for case in dup reuse; do
		srv=$(smc_stats_dir "server-$path-$case")
		cli=$(smc_stats_dir "client-$path-$case")
		conns=1
		[ "$case" = reuse ] && conns=2 # the first one closes unused
		smc_free_port port
		pidfile=$SMC_TMP/srv-$path-$case.pid
		smc_start_server "srv-$path-$case" "$srv" python3 -c "$SERVER" "$port" "$N" "$conns" "$pidfile"
		smc_wait_port "srv-$path-$case" "$port"
		SMC_LOG_LEVEL=debug SMC_LOG_FILE="$SMC_TMP/cli-$path-$case.%p.smclog" \
			smc_run "$cli" python3 -c "$CLIENT" "$port" "$N" "$case" "$pidfile" \
			>"$SMC_TMP/cli-$path-$case.out" 2>&1 ||
			smc_fail "$path $case: client: $(cat "$SMC_TMP/cli-$path-$case.out")"
		smc_wait_server_exit "srv-$path-$case" 20
		# the first of reuse was closed unused: EOF, not a reset
		n=$(grep -c '^connection [0-9]*: [0-9]* bytes$' "$SMC_TMP/srv-$path-$case.log")
		smc_assert_eq "$path $case: connections served without error" "$n" "$conns"
		smc_require_stats "$cli"
		smc_require_stats "$srv"
		smc_log "$path $case: client $(smc_stats_summary "$cli"); server $(smc_stats_summary "$srv")"
		if [ "$SMC_TEST_EXPECT" = tcp ]; then
			smc_assert_eq "$path $case: shm connections in pass-through mode" \
				"$(smc_stats "$cli" '.connections.shm')" 0
			continue
		fi
		# reuse: the first one may count as shm too, when its handshake ends before it
		smc_assert_ge "$path $case: client shm connections" "$(smc_stats "$cli" '.connections.shm')" 1
		smc_assert_eq "$path $case: client tcp connections" "$(smc_stats "$cli" '.connections.tcp')" 0
		smc_assert_eq "$path $case: client shm bytes" \
			"$(smc_stats "$cli" '.bytes.shm.sent + .bytes.shm.received')" $((2 * N))
		smc_assert_ge "$path $case: server shm connections" "$(smc_stats "$srv" '.connections.shm')" 1
		smc_assert_eq "$path $case: server shm bytes" \
			"$(smc_stats "$srv" '.bytes.shm.sent + .bytes.shm.received')" $((2 * N))
	done
}

# the same-host rendezvous: no eBPF map, even where the host has the TCP option set up
# (the map is pinned under SMC_RDV_DIR too)
SMC_BPF_DIR=/sys/fs/bpf/smc-fdreuse-none-$$ SMC_RDV_DIR=$SMC_TMP/rdv-only run_path rendezvous

if [ "$(id -u)" != 0 ]; then
	smc_log "tcpopt: skipped (the TCP option needs root for its eBPF setup)"
	smc_pass
fi
BPF_OBJ=${SMC_BPF_OBJ:-$top_builddir/bpf/smc_tcpopt.bpf.o}
if [ ! -f "$BPF_OBJ" ]; then
	smc_log "tcpopt: skipped ($BPF_OBJ not built)"
	smc_pass
fi
export SMC_BPF_DIR=/sys/fs/bpf/smc-fdreuse-$$
setup_done=0
fdreuse_cleanup() {
	[ "$setup_done" = 1 ] && SMC_BPF_OBJ=$BPF_OBJ "$SMC_WRAPPER" --teardown >/dev/null 2>&1
}
# lib.sh's cleanup reads the exit status first: keep it for it
trap '_rc=$?; fdreuse_cleanup; (exit $_rc); _smc_cleanup' EXIT
out=$(SMC_BPF_OBJ=$BPF_OBJ "$SMC_WRAPPER" --setup 2>&1) ||
	smc_fail "eBPF setup failed: $out"
setup_done=1
run_path tcpopt
smc_pass
