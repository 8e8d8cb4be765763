#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#
# A program that dup2()s its own file onto a descriptor number the library's background
# thread holds (libevent's epoll set and its pipe, parked from 1024 up): the program
# gets the number, as without the library, and the thread's descriptor moves elsewhere
# (core/base/evlib_fds.h). Before, the next connection hung: libevent's epoll_wait()
# and epoll_ctl() went to the program's file. The client makes one connection (the
# thread starts), takes those numbers with dup2 of a pipe, checks that what it writes
# through them comes out of its pipe, then makes three more connections. Checks: every
# echo intact, no hang, all four connections over shared memory.
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
. "$(dirname -- "$0")/lib.sh"

smc_init
smc_require_cmd python3

cat >"$SMC_TMP/client.py" <<'PY'
import os, socket, sys
port = int(sys.argv[1])
data = os.urandom(100000)
def echo():
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(data)
    s.shutdown(socket.SHUT_WR)
    back = b""
    while True:
        d = s.recv(65536)
        if not d:
            break
        back += d
    s.close()
    return back == data
ok = echo()
def kind(fd):
    try:
        return os.readlink("/proc/self/fd/%d" % fd)
    except OSError:
        return ""
taken = sorted(int(f) for f in os.listdir("/proc/self/fd")
               if int(f) >= 1024 and kind(int(f)).startswith(("anon_inode:[eventpoll]", "pipe:")))
r, w = os.pipe()
for fd in taken:
    os.dup2(w, fd)
    os.write(fd, b"%d;" % fd)
got = os.read(r, 4096).decode()
mine = got == "".join("%d;" % fd for fd in taken)
print("took %s, the program's writes through them %s" % (taken, "came through" if mine else "were LOST: " + got))
for _ in range(3):
    ok = echo() and ok
print("echoes intact" if ok else "an echo was WRONG")
sys.exit(0 if ok and mine and taken else 1)
PY

srv=$(smc_stats_dir server)
cli=$(smc_stats_dir client)
smc_start_server echo "$srv" python3 "$top_srcdir/tests/progs/echo_server.py" 4
smc_wait_log echo '^port '
read -r _ port < <(grep -m1 '^port ' "$(smc_server_log echo)")
out=$(smc_run "$cli" python3 "$SMC_TMP/client.py" "$port" 2>&1)
rc=$?
smc_log "$out"
smc_assert_eq "client: numbers taken, writes through them and echoes intact (exit status)" "$rc" 0
smc_wait_server_exit echo 20
smc_assert_eq "echo server exit status" "${SMC_SERVER_RC[echo]}" 0
smc_expect_payload "$cli" $((2 * 4 * 100000)) "client"
smc_expect_connections "$cli" 4 "client"
smc_pass
