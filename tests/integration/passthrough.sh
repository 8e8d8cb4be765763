#!/bin/sh
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#
# The preload layer must be invisible: every interposed call returns what libc returns,
# with the same errno. Runs tests/progs/passthrough_check (one line per check) without and
# with LD_PRELOAD and requires the same, all-passing, output; then runs a few ordinary
# programs (ls, a shell pipeline, a Python socket script) under the library.
# Builds nothing. Exit 0 pass, 1 fail, 77 skip.

set -u

top_builddir=${top_builddir:-.}
check_prog=$top_builddir/tests/progs/passthrough_check
lib=${SMC_PRELOAD_LIB:-}

if [ -z "$lib" ]; then
	echo "SKIP: SMC_PRELOAD_LIB is not set (run through make check)"
	exit 77
fi
if [ ! -f "$lib" ]; then
	echo "FAIL: $lib does not exist"
	exit 1
fi
if [ ! -x "$check_prog" ]; then
	echo "SKIP: $check_prog is not built"
	exit 77
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/passthrough.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM
# Sanitizer runtimes must stay first in LD_PRELOAD; in a sanitizer build the check
# program links libasan itself, after our preloaded library.
preload="${LD_PRELOAD:+$LD_PRELOAD:}$lib"
ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0"
export ASAN_OPTIONS
failed=0

fail() {
	echo "FAIL: $*"
	failed=1
}

# ---------------------------------------------------------------- exported symbols
# Every interposed name is exported; the library's internals are not (it is built
# with -fvisibility=hidden and must not capture application symbols).
if command -v nm >/dev/null 2>&1; then
	nm -D --defined-only "$lib" | awk '{print $NF}' | sed 's/@.*//' | sort -u >"$tmp/exports"
	for sym in socket socketpair bind listen accept accept4 connect read readv write writev \
		recv recvfrom recvmsg recvmmsg send sendto sendmsg sendmmsg sendfile sendfile64 \
		splice close close_range shutdown dup dup2 dup3 fcntl fcntl64 ioctl getsockopt \
		setsockopt getsockname getpeername poll ppoll select pselect epoll_create \
		epoll_create1 epoll_ctl epoll_wait epoll_pwait epoll_pwait2 fork vfork daemon syscall \
		io_uring_setup io_uring_queue_init io_uring_queue_init_params \
		__read_chk __recv_chk __recvfrom_chk __poll_chk __ppoll_chk \
		__close __connect __dup2 __fcntl __fork __poll __read __select __send __vfork __write; do
		grep -qx "$sym" "$tmp/exports" || fail "$sym is not exported by $lib"
	done
	for sym in fdtab_peek fdtab_get fdtab_set real_init smc_real_fns smc_impl_read; do
		grep -qx "$sym" "$tmp/exports" && fail "internal symbol $sym is exported"
	done
else
	echo "note: nm not found, export list not checked"
fi

# ---------------------------------------------------------------- the check program
timeout 300 "$check_prog" >"$tmp/plain.out" 2>"$tmp/plain.err"
plain_rc=$?
LD_PRELOAD=$preload timeout 300 "$check_prog" >"$tmp/preload.out" 2>"$tmp/preload.err"
preload_rc=$?

if [ "$plain_rc" -ne 0 ]; then
	fail "passthrough_check fails WITHOUT the library (rc $plain_rc): Linux does not behave as the checks expect"
	grep -v '^ok ' "$tmp/plain.out"
	cat "$tmp/plain.err"
fi
if [ "$preload_rc" -ne 0 ]; then
	fail "passthrough_check fails with LD_PRELOAD (rc $preload_rc)"
	grep -v '^ok ' "$tmp/preload.out"
	cat "$tmp/preload.err"
fi
if ! diff -u "$tmp/plain.out" "$tmp/preload.out" >"$tmp/diff"; then
	fail "output differs with LD_PRELOAD:"
	cat "$tmp/diff"
fi
tail -n 1 "$tmp/preload.out"

# ---------------------------------------------------------------- ordinary programs
if ! LD_PRELOAD=$preload ls / >"$tmp/ls.out" 2>&1 || ! grep -qx 'etc' "$tmp/ls.out"; then
	fail "ls under the library"
	cat "$tmp/ls.out"
fi

out=$(LD_PRELOAD=$preload sh -c 'echo hi | cat' 2>&1)
[ "$out" = "hi" ] || fail "sh -c 'echo hi | cat' printed '$out'"

if command -v python3 >/dev/null 2>&1; then
	cat >"$tmp/sock.py" <<'PY'
import os, select, selectors, socket, subprocess, sys

srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
srv.bind(("127.0.0.1", 0))
srv.listen(4)
cli = socket.create_connection(srv.getsockname())
conn, peer = srv.accept()
assert peer == cli.getsockname(), (peer, cli.getsockname())

payload = bytes(range(256)) * 4096          # 1 MiB
pid = os.fork()
if pid == 0:
    conn.close()
    cli.sendall(payload)
    cli.shutdown(socket.SHUT_WR)
    os._exit(0)
got = bytearray()
while True:
    chunk = conn.recv(65536)
    if not chunk:
        break
    got += chunk
_, status = os.waitpid(pid, 0)
assert status == 0 and bytes(got) == payload, (status, len(got))

conn.sendall(b"ping")
r, _, _ = select.select([cli], [], [], 5)
assert r == [cli]
assert cli.recv(16) == b"ping"

sel = selectors.DefaultSelector()
cli.setblocking(False)
sel.register(cli, selectors.EVENT_READ, "cli")
assert sel.select(0.05) == []
try:
    cli.recv(16)
    raise SystemExit("recv on empty nonblocking socket did not raise")
except BlockingIOError:
    pass
conn.sendall(b"pong")
events = sel.select(5)
assert [key.data for key, _ in events] == ["cli"]
assert cli.recv(16) == b"pong"
sel.close()

a, b = socket.socketpair()
a.sendall(b"pair")
assert b.recv(16) == b"pair"
with cli.makefile("rb") as f, conn.makefile("wb") as g:
    g.write(b"line\n"); g.flush()
    cli.setblocking(True)
    assert f.readline() == b"line\n"

res = subprocess.run(["sh", "-c", "echo sub"], capture_output=True, check=True)
assert res.stdout == b"sub\n"
for s in (a, b, cli, conn, srv):
    s.close()
print("python ok")
PY
	out=$(LD_PRELOAD=$preload timeout 120 python3 "$tmp/sock.py" 2>&1)
	[ "$out" = "python ok" ] || fail "python socket script: $out"
else
	echo "note: python3 not found, python check skipped"
fi

if [ "$failed" -ne 0 ]; then
	exit 1
fi
echo "PASS: passthrough"
exit 0
