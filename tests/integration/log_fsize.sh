#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#
# A process whose RLIMIT_FSIZE its log file has already reached (OpenSSH's privilege-
# separated child sets the limit to 0 before its sandbox) and that then connects, with
# SMC_LOG_LEVEL=debug and SMC_LOG_FILE a regular file. A write or a truncate past the
# limit raises SIGXFSZ, which kills by default (core/base/fsize.h): the library drops
# the log lines that would not fit, and a ring's memfd (a file too) that would not fit
# is not made. The program (Python, SIGXFSZ back to its default action) connects to
# itself and echoes 64 KiB; it must exit 0 (before: killed by SIGXFSZ at the first
# debug line, or at the ring's ftruncate), and the log file must not grow past the
# limit. Two limits: 1 MiB (the log file filled to it first) with 64 KiB rings, which
# fit: the connection is upgraded; the log's own size with the default 2 MiB rings,
# which do not: it stays TCP (resources).
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
. "$(dirname -- "$0")/lib.sh"

smc_init
smc_require_cmd python3
export SMC_SHORT_CONN_US=0

cat >"$SMC_TMP/fsize.py" <<'PY'
import os, resource, signal, socket, sys
signal.signal(signal.SIGXFSZ, signal.SIG_DFL)  # Python ignores it; a C program does not
log = sys.argv[1]
size = os.stat(log).st_size
resource.setrlimit(resource.RLIMIT_FSIZE, (size, resource.RLIM_INFINITY))
ls = socket.socket()
ls.bind(("127.0.0.1", 0))
ls.listen(1)
c = socket.create_connection(ls.getsockname())
s, _ = ls.accept()
data = os.urandom(65536)
c.sendall(data)
got = b""
while len(got) < len(data):
    got += s.recv(65536)
s.sendall(got)
back = b""
while len(back) < len(data):
    back += c.recv(65536)
assert back == data, "echo differs"
c.close(); s.close(); ls.close()
print("OK", size)
PY

# run LABEL FILL_BYTES [ENV...]: the program with its log file filled to FILL_BYTES
run() {
	local label=$1 fill=$2 dir log rc limit
	shift 2
	dir=$(smc_stats_dir "fsize-$label")
	log=$SMC_TMP/debug-$label.txt
	head -c "$fill" /dev/zero | tr '\0' '#' >"$log"
	(
		[ $# -eq 0 ] || export "$@"
		SMC_LOG_LEVEL=debug SMC_LOG_FILE="$log" \
			smc_run "$dir" python3 "$SMC_TMP/fsize.py" "$log"
	) >"$SMC_TMP/fsize-$label.out" 2>&1
	rc=$?
	smc_log "$label: exit $rc, $(cat "$SMC_TMP/fsize-$label.out")"
	smc_assert_eq "$label: the program's exit status (153: killed by SIGXFSZ)" "$rc" 0
	limit=$(awk '/^OK/ { print $2 }' "$SMC_TMP/fsize-$label.out")
	smc_assert_ge "$label: the limit the log file stays within" "$limit" "$(stat -c %s "$log")"
	smc_require_stats "$dir"
	smc_log "$label: stats $(smc_stats_summary "$dir")"
	fsize_dir=$dir
}

run fits $((1 << 20)) SMC_RCVBUF=64k SMC_SNDBUF=64k
[ "$SMC_TEST_EXPECT" = shm ] &&
	smc_assert_eq "fits: upgraded connections" "$(smc_stats "$fsize_dir" '.connections.shm')" 2
run tiny 0
smc_assert_eq "tiny: upgraded connections" "$(smc_stats "$fsize_dir" '.connections.shm')" 0
# the end that could not make its rings says why (the other counts the Decline)
[ "$SMC_TEST_EXPECT" = shm ] &&
	smc_assert_ge "tiny: connections that stayed TCP for resources" \
		"$(smc_stats "$fsize_dir" '.fallback.resources // 0')" 1
smc_pass
