#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#
# A client that confines itself, then connects (a privilege-separated daemon's session
# process: vsftpd's connecting for an active-mode data transfer, sshd's or dovecot's
# login processes): chroot() into an empty directory (Python), a mount namespace of its
# own with a tmpfs over the C library's directory, or a Landlock domain that reads no
# file (tests/progs/confine_connect; skipped where the kernel has no Landlock). The
# library loads libevent only when its progress thread first starts, which in that
# process is after the confinement, where libevent's file is out of reach: its
# chroot(), unshare(), setns() and syscall() wrappers must load it first (without,
# the connection stayed TCP). Each client's bytes come back intact; the server's stats
# show the connection over shared memory (the client's stats file may be out of its
# reach). Then a process that makes no connection: libevent and libibverbs are not in
# its memory at all.
# Needs root (chroot, mounts).
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
. "$(dirname -- "$0")/lib.sh"

smc_init
smc_require_cmd python3
[ "$(id -u)" = 0 ] || smc_skip "needs root (chroot)"

mkdir -p "$SMC_TMP/empty"
cat >"$SMC_TMP/client.py" <<'PY'
import encodings.idna, os, socket, sys  # idna: imported on first use, out of reach after
data = os.urandom(1 << 20)
os.chroot(sys.argv[2])
os.chdir("/")
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
s.sendall(data)
back = b""
while len(back) < len(data):
    d = s.recv(65536)
    if not d:
        break
    back += d
s.close()
sys.exit(back != data)
PY

CONFINE=$top_builddir/tests/progs/confine_connect
smc_require_built "$CONFINE"
for how in chroot mountns landlock; do
	smc_free_port port
	srv=$(smc_stats_dir "server-$how")
	cli=$(smc_stats_dir "client-$how")
	smc_start_server "echo-$how" "$srv" python3 "$top_srcdir/tests/progs/echo_server.py" 1
	smc_wait_log "echo-$how" '^port '
	read -r _ port < <(grep -m1 '^port ' "$(smc_server_log "echo-$how")")
	if [ "$how" = chroot ]; then
		out=$(smc_run "$cli" python3 "$SMC_TMP/client.py" "$port" "$SMC_TMP/empty" 2>&1)
		rc=$?
		bytes=$((2 << 20))
	else
		out=$(smc_run "$cli" "$CONFINE" "$how" "$port" 2>&1)
		rc=$?
		bytes=$((2 * 65536))
	fi
	if [ "$rc" = 77 ]; then
		smc_log "$how: not available here ($out)"
		smc_stop_server "echo-$how"
		continue
	fi
	smc_assert_eq "$how client: echoed back intact (exit status; $out)" "$rc" 0
	smc_wait_server_exit "echo-$how" 10
	smc_assert_eq "$how: echo server exit status" "${SMC_SERVER_RC[echo-$how]}" 0
	smc_expect_payload "$srv" "$bytes" "server of the $how client"
done

# Loaded on need only: a process that made no connection has neither library mapped.
maps=$(smc_run "$(smc_stats_dir idle)" cat /proc/self/maps)
smc_assert_eq "libevent mapped in a process without connections" \
	"$(grep -c 'libevent' <<<"$maps")" 0
smc_assert_eq "libibverbs mapped in a process without connections" \
	"$(grep -c 'libibverbs' <<<"$maps")" 0
smc_assert_ge "the library itself mapped (the check saw a preloaded process)" \
	"$(grep -c 'libsmc_preload' <<<"$maps")" 1
smc_pass
