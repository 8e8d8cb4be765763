#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#
# A client that chroots into an empty directory, then connects (a privilege-separated
# daemon's session process: vsftpd's connecting for an active-mode data transfer, sshd's
# or dovecot's login processes). The library loads libevent only when its progress
# thread first starts, which in that process is after the chroot, where libevent's file
# is not: its chroot() wrapper must load it first (without it the connection stayed
# TCP). The client checks 1 MiB echoed back byte for byte; the server's stats show the
# connection over shared memory (the client's stats file is out of its reach after the
# chroot). Then a process that neither chroots nor connects: libevent and libibverbs are
# not in its memory at all.
# Needs root (chroot).
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
. "$(dirname -- "$0")/lib.sh"

smc_init
smc_require_cmd python3
[ "$(id -u)" = 0 ] || smc_skip "needs root (chroot)"

mkdir -p "$SMC_TMP/empty"
cat >"$SMC_TMP/server.py" <<'PY'
import socket
ls = socket.socket()
ls.bind(("127.0.0.1", 0))
ls.listen(4)
print("port %d" % ls.getsockname()[1], flush=True)
c, _ = ls.accept()
while True:
    d = c.recv(65536)
    if not d:
        break
    c.sendall(d)
c.close()
PY
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

srv=$(smc_stats_dir server)
cli=$(smc_stats_dir client)
smc_start_server echo "$srv" python3 "$SMC_TMP/server.py"
smc_wait_log echo '^port '
read -r _ port < <(grep -m1 '^port ' "$(smc_server_log echo)")
out=$(smc_run "$cli" python3 "$SMC_TMP/client.py" "$port" "$SMC_TMP/empty" 2>&1)
smc_assert_eq "chrooted client: 1 MiB echoed back intact (exit status; $out)" "$?" 0
smc_wait_server_exit echo 10
smc_assert_eq "echo server exit status" "${SMC_SERVER_RC[echo]}" 0
smc_expect_payload "$srv" $((2 << 20)) "server of the chrooted client"

# Loaded on need only: a process that made no connection has neither library mapped.
maps=$(smc_run "$(smc_stats_dir idle)" cat /proc/self/maps)
smc_assert_eq "libevent mapped in a process without connections" \
	"$(grep -c 'libevent' <<<"$maps")" 0
smc_assert_eq "libibverbs mapped in a process without connections" \
	"$(grep -c 'libibverbs' <<<"$maps")" 0
smc_assert_ge "the library itself mapped (the check saw a preloaded process)" \
	"$(grep -c 'libsmc_preload' <<<"$maps")" 1
smc_pass
