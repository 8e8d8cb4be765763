#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#
# vsftpd under the library, curl as its client under the library too: anonymous FTP on
# a private config, passive mode, downloads of a 4 MiB random file and of a listing,
# one after the other and several on one control connection; every file intact
# (sha256), none slow. vsftpd starts each session's processes with the raw clone system
# call (syscall(SYS_clone, CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWNET | SIGCHLD, NULL),
# not fork()): the connection the listener accepted must stay the session's when the
# listener closes its copy (tests/integration/clone.sh covers each kind of clone).
# The session then puts the control connection on its stdin and stdout (plain TCP,
# reason stdio) and hands the data connections between its processes over a unix
# socket (plain TCP): the client's stats show its connections upgraded, then taken
# back to TCP by the server, and no abort. No session process may be left.
# Needs root (vsftpd chroots and makes namespaces) and the vsftpd package.
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
. "$(dirname -- "$0")/lib.sh"

smc_init
smc_require_cmd curl pgrep
VSFTPD=${SMC_VSFTPD:-/usr/sbin/vsftpd}
[ -x "$VSFTPD" ] || smc_skip "vsftpd is not installed"
[ "$(id -u)" = 0 ] || smc_skip "needs root (vsftpd chroots and makes namespaces)"
id ftp >/dev/null 2>&1 || smc_skip "needs the user ftp (the vsftpd package makes it)"

d=$SMC_TMP/ftp
chmod 0711 "$SMC_TMP"
mkdir -p "$d/root/pub" "$d/empty" && chmod 0755 "$d" "$d/root" "$d/root/pub" "$d/empty"
head -c 4194304 /dev/urandom >"$d/root/pub/big.bin" || smc_hard_error "no random file"
echo small >"$d/root/pub/small.txt"
chmod 0644 "$d/root/pub/"*
want=$(sha256sum <"$d/root/pub/big.bin")
smc_free_port port
smc_free_port pasv
cat >"$d/vsftpd.conf" <<CONF
listen=YES
listen_address=127.0.0.1
listen_port=$port
background=NO
anonymous_enable=YES
anon_root=$d/root
local_enable=NO
write_enable=NO
pasv_enable=YES
pasv_min_port=$pasv
pasv_max_port=$((pasv + 40))
port_enable=NO
secure_chroot_dir=$d/empty
xferlog_enable=NO
CONF

srv=$(smc_stats_dir server)
cli=$(smc_stats_dir client)
smc_start_server vsftpd "$srv" "$VSFTPD" "$d/vsftpd.conf"
smc_wait_port vsftpd "$port"
spid=${SMC_SERVER_PID[vsftpd]}
url=ftp://127.0.0.1:$port/pub

for i in 1 2 3 4 5 6; do
	start=$(date +%s%N)
	got=$(smc_run "$cli" curl -sS -m 20 "$url/big.bin" | sha256sum)
	ms=$((($(date +%s%N) - start) / 1000000))
	smc_log "download $i: ${ms} ms"
	smc_assert_eq "download $i intact" "$got" "$want"
	[ "$ms" -lt 5000 ] || smc_fail "download $i took $ms ms"
done
list=$(smc_run "$cli" curl -sS -m 20 "$url/")
case $list in *big.bin*) ;; *) smc_fail "the listing does not name big.bin: $list" ;; esac
got=$(smc_run "$cli" curl -sS -m 30 "$url/small.txt" "$url/big.bin" "$url/big.bin" | sha256sum)
smc_assert_eq "three files on one control connection" "$got" \
	"$( (echo small; cat "$d/root/pub/big.bin" "$d/root/pub/big.bin") | sha256sum)"

# every session's processes are gone (only the listener is left)
for ((i = 0; i < 100; i++)); do
	[ -z "$(pgrep -P "$spid")" ] && break
	sleep 0.1
done
smc_assert_eq "session processes left" "$(pgrep -P "$spid" | wc -l)" 0
smc_stop_server vsftpd TERM 20

smc_require_stats "$cli"
smc_log "stats client: $(smc_stats_summary "$cli")"
smc_assert_eq "client: aborts" "$(smc_stats "$cli" '.events.aborts // 0')" 0
smc_assert_ge "client: tcp payload bytes" "$(smc_stats "$cli" '.bytes.tcp.received')" \
	$((8 * 4194304))
if [ "$SMC_TEST_EXPECT" = shm ]; then
	# 8 control and 10 data connections
	smc_assert_eq "client: connections upgraded" "$(smc_stats "$cli" '.connections.shm')" 18
	smc_assert_eq "client: each taken back to TCP by the server" \
		"$(smc_stats "$cli" '.events.peer_downgrades // 0')" 18
fi
smc_pass
