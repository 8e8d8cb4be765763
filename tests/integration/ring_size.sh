#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#
# The default ring size follows the CPU's L2 cache (core/base/config.c fit_rings_to_cpu):
# twice the L2 per core, as a power of two, at least the table's 2m, at most 8m. The
# shim tests/progs/libfake_l2.so makes sysconf() report SMC_TEST_FAKE_L2 bytes of L2, so
# this machine can play a CPU with 2 MiB of L2 per core:
#   - --print-config shows SMC_RCVBUF/SMC_SNDBUF 4m and SMC_MEM_CAP 16g, marked as
#     raised for the CPU; with 1 MiB of L2 the table's 2m/8g; a value set in the
#     environment is kept as it is;
#   - a live connection between two such processes has 4 MiB RMBs on both sides
#     (smcpstat), and without the shim the size --print-config shows for this CPU;
#   - the payload moved over shm (the stats files).
# With SMC_TEST_EXPECT=tcp only the configuration part and the pass-through run.
# Exit: 0 pass, 1 fail, 77 skip (python3 missing), 99 hard error.

# shellcheck source=tests/integration/lib.sh
. "$(cd -- "$(dirname -- "$0")" && pwd)/lib.sh"

smc_require_cmd python3
smc_init

SHIM=$top_builddir/tests/progs/.libs/libfake_l2.so
SMCPSTAT=$top_builddir/tools/smcpstat
[ -f "$SHIM" ] || smc_hard_error "shim not built: $SHIM (make check builds it)"
[ -x "$SMCPSTAT" ] || smc_hard_error "smcpstat not built: $SMCPSTAT"
FIRST=${SMC_TEST_PRELOAD_FIRST:+$SMC_TEST_PRELOAD_FIRST }

# config L2 [VAR=VALUE...]: the --print-config output for a CPU with L2 bytes of L2 (the
# library prints it on stderr).
config() {
	local l2=$1
	shift
	env "$@" SMC_TEST_FAKE_L2="$l2" SMC_PRINT_CONFIG=1 \
		LD_PRELOAD="$FIRST$SHIM $SMC_PRELOAD_LIB" /bin/true 2>&1 >/dev/null ||
		smc_fail "--print-config exited $? (L2 $l2)"
}
# line OUTPUT NAME: NAME's line up to the doc comment.
line() {
	grep "^$2=" <<<"$1" | sed 's/  #.*//'
}

# ------------------------------------------------------------------ the configuration
out=$(config 2097152)
smc_assert_eq "L2 2m: SMC_RCVBUF" "$(line "$out" SMC_RCVBUF)" \
	"SMC_RCVBUF=4m  (default, raised for this CPU's L2 cache)"
smc_assert_eq "L2 2m: SMC_SNDBUF" "$(line "$out" SMC_SNDBUF)" \
	"SMC_SNDBUF=4m  (default, raised for this CPU's L2 cache)"
smc_assert_eq "L2 2m: SMC_MEM_CAP" "$(line "$out" SMC_MEM_CAP)" \
	"SMC_MEM_CAP=16g  (default, raised for this CPU's L2 cache)"
out=$(config 1048576)
smc_assert_eq "L2 1m: SMC_RCVBUF" "$(line "$out" SMC_RCVBUF)" "SMC_RCVBUF=2m  (default)"
smc_assert_eq "L2 1m: SMC_MEM_CAP" "$(line "$out" SMC_MEM_CAP)" "SMC_MEM_CAP=8g  (default)"
out=$(config 4194304 SMC_RCVBUF=1m)
smc_assert_eq "L2 4m, SMC_RCVBUF=1m: SMC_RCVBUF" "$(line "$out" SMC_RCVBUF)" \
	"SMC_RCVBUF=1m  (env)"
smc_assert_eq "L2 4m, SMC_RCVBUF=1m: SMC_SNDBUF" "$(line "$out" SMC_SNDBUF)" \
	"SMC_SNDBUF=8m  (default, raised for this CPU's L2 cache)"
# this machine, as it is
native=$(env SMC_PRINT_CONFIG=1 LD_PRELOAD="$FIRST$SMC_PRELOAD_LIB" /bin/true 2>&1 >/dev/null |
	sed -n 's/^SMC_RCVBUF=\([0-9]*[kmg]*\) .*/\1/p')
smc_log "this CPU: L2 $(getconf LEVEL2_CACHE_SIZE 2>/dev/null) bytes, default ring $native"
case $native in
*k) native=$((${native%k} * 1024)) ;;
*m) native=$((${native%m} * 1048576)) ;;
*g) native=$((${native%g} * 1073741824)) ;;
esac

# ------------------------------------------------------------------ live connections
cat >"$SMC_TMP/peer.py" <<'PY'
# peer.py server PORT BYTES DONEFILE | client PORT BYTES DONEFILE: one connection that
# carries BYTES each way (client first), stays open until DONEFILE exists, then closes cleanly.
import os, socket, sys, time
role, port, n, done = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
if role == "server":
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", port))
    srv.listen(1)
    s, _ = srv.accept()
else:
    s = socket.create_connection(("127.0.0.1", port))
def take(n):
    got = 0
    while got < n:
        chunk = s.recv(1 << 20)
        if not chunk:
            sys.exit("peer closed after %d bytes" % got)
        got += len(chunk)
# one direction at a time: both sending first would fill both rings and wait forever
if role == "server":
    take(n)
    s.sendall(b"s" * n)
else:
    s.sendall(b"c" * n)
    take(n)
print("ready pid %d" % os.getpid(), flush=True)
while not os.path.exists(done):
    time.sleep(0.05)
s.close()
PY

BYTES=3000000 # more than one 2 MiB ring, less than two 4 MiB ones

# pair LABEL EXPECTED_RING [FAKE_L2]: a connection between two processes that see FAKE_L2
# bytes of L2 (the real CPU without it); both RMBs must be EXPECTED_RING bytes.
pair() {
	local label=$1 want=$2 l2=${3:-} port sd cd spid cpid saved=$SMC_TEST_PRELOAD_FIRST
	if [ -n "$l2" ]; then
		export SMC_TEST_FAKE_L2=$l2
		SMC_TEST_PRELOAD_FIRST="$FIRST$SHIM"
	fi
	smc_free_port port
	sd=$(smc_stats_dir "$label-server")
	cd=$(smc_stats_dir "$label-client")
	rm -f "$SMC_TMP/done"
	smc_start_server "$label-server" "$sd" python3 "$SMC_TMP/peer.py" server "$port" \
		"$BYTES" "$SMC_TMP/done"
	smc_wait_port "$label-server" "$port"
	smc_start_server "$label-client" "$cd" python3 "$SMC_TMP/peer.py" client "$port" \
		"$BYTES" "$SMC_TMP/done"
	SMC_TEST_PRELOAD_FIRST=$saved
	unset SMC_TEST_FAKE_L2
	smc_wait_log "$label-server" '^ready pid' 60
	smc_wait_log "$label-client" '^ready pid' 60
	spid=$(sed -n 's/^ready pid \([0-9]*\).*/\1/p' "$(smc_server_log "$label-server")")
	cpid=$(sed -n 's/^ready pid \([0-9]*\).*/\1/p' "$(smc_server_log "$label-client")")
	"$SMCPSTAT" -j >"$SMC_TMP/$label.json" || smc_fail "smcpstat -j exited $?"
	if [ "$SMC_TEST_EXPECT" = shm ]; then
		for p in "$spid" "$cpid"; do
			smc_assert_eq "$label: pid $p: rx_size,tx_size" \
				"$(jq -r --argjson p "$p" '[.[] | select(.pid == $p and .mode == "shm")] |
					map("\(.rx_size),\(.tx_size)") | join(" ")' "$SMC_TMP/$label.json")" \
				"$want,$want"
		done
	fi
	touch "$SMC_TMP/done"
	smc_wait_server_exit "$label-client"
	smc_wait_server_exit "$label-server"
	smc_assert_eq "$label: client exit status" "${SMC_SERVER_RC[$label-client]}" 0
	smc_assert_eq "$label: server exit status" "${SMC_SERVER_RC[$label-server]}" 0
	smc_expect_payload "$sd" $((2 * BYTES)) "$label server"
	smc_expect_payload "$cd" $((2 * BYTES)) "$label client"
}

pair l2-2m 4194304 2097152
pair native "$native"
smc_pass
