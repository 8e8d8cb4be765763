#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#
# OpenSSH under the library on both sides: sshd -D started the default way, so it
# re-execs itself for every connection it accepts (its child execs sshd -R with the
# connection as stdin and stdout), with its own host key, config and authorized key in
# the test's directory, ssh and scp as clients. An ssh command returns a 4 MiB random
# file, scp uploads and downloads one, a command reads 16 MiB from ssh's stdin and
# returns its sha256, a few sessions follow one another, then 20 more in a row; every
# file must arrive intact (sha256).
# What it proves beyond the transfers: the listener upgrades each connection at
# accept(), and its child, before the exec, takes the connection back to plain TCP
# without losing a byte (the client's banner may already be in the ring); the
# re-exec'd sshd forks again (the pre-authentication child, under a seccomp sandbox
# with RLIMIT_NOFILE and RLIMIT_FSIZE 0, core/base/sandbox.h, and the session): no child may
# hang (every sshd child is gone after its session) and the listening sshd keeps no fd
# of them. Stats: each ssh client's connection was upgraded and its peer downgraded it
# (events.peer_downgrades, one per session), the payload after that counted as TCP; on
# the server the listener's own file shows every connection it accepted upgraded but
# the one of a plain ssh client, which must work as without the library (the
# per-connection processes may leave files of their own, written before the exec or at
# an exit(), none of which counts the listener's connections).
# Needs root (sshd's privilege separation); skips without the OpenSSH programs.
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
. "$(dirname -- "$0")/lib.sh"

smc_init
smc_require_cmd sshd ssh scp ssh-keygen pgrep
[ "$(id -u)" = 0 ] || smc_skip "needs root (sshd's privilege separation)"
sshd_bin=$(command -v sshd)
# sshd's privilege separation directory (the package creates it at boot)
mkdir -p /run/sshd && chmod 0755 /run/sshd

d=$SMC_TMP/ssh
mkdir -p "$d" && chmod 0700 "$d"
ssh-keygen -q -t ed25519 -N '' -f "$d/host_key" || smc_hard_error "ssh-keygen (host key)"
ssh-keygen -q -t ed25519 -N '' -f "$d/client_key" || smc_hard_error "ssh-keygen (client key)"
cp "$d/client_key.pub" "$d/authorized_keys" && chmod 0600 "$d/authorized_keys"
smc_free_port port
cat >"$d/sshd_config" <<CONF
ListenAddress 127.0.0.1
Port $port
HostKey $d/host_key
PidFile $d/sshd.pid
AuthorizedKeysFile $d/authorized_keys
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
UseDNS no
PrintMotd no
# in-process: scp speaks SFTP by default, and nothing is exec'd for it
Subsystem sftp internal-sftp
LogLevel VERBOSE
CONF
head -c 4194304 /dev/urandom >"$d/big" || smc_hard_error "no random file"
head -c 16777216 /dev/urandom >"$d/big16" || smc_hard_error "no random file"
ssh_opts=(-i "$d/client_key" -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null
	-o BatchMode=yes -o LogLevel=ERROR -o ConnectTimeout=20)

srv=$(smc_stats_dir sshd)
cli=$(smc_stats_dir clients)
# no -r: sshd re-execs itself (an absolute path) for every connection
smc_start_server sshd "$srv" "$sshd_bin" -D -e -f "$d/sshd_config" -p "$port"
smc_wait_port sshd "$port"
listener=${SMC_SERVER_PID[sshd]}

# Every per-connection sshd is gone soon after its session (one stuck on a lock it
# inherited from a thread it does not have would stay).
sshd_children_gone() {
	local i
	for ((i = 0; i < 100; i++)); do
		[ -z "$(pgrep -P "$listener")" ] && return 0
		sleep 0.1
	done
	smc_fail "after $1: sshd children still running: $(pgrep -a -P "$listener")"
}

# (called in $(...) too: the connections are counted by the caller, in $sessions)
remote() { # remote WHAT CMD... (the command's output on stdout)
	local what=$1
	shift
	smc_run "$cli" ssh "${ssh_opts[@]}" -p "$port" root@127.0.0.1 "$@" ||
		smc_fail "$what: ssh exited with status $?"
}
copy() { # copy WHAT FROM TO
	smc_run "$cli" scp -q "${ssh_opts[@]}" -P "$port" "$2" "$3" ||
		smc_fail "$1: scp exited with status $?"
}

# one connection each: warm-up, ssh cat, scp up, scp down, stdin, 3 sequential, 20 in a row
sessions=28
smc_log "warm-up session"
[ "$(remote warm-up echo ready)" = ready ] || smc_fail "warm-up session: no answer"
sshd_children_gone "the warm-up session"
fds_before=$(ls "/proc/$listener/fd" | wc -l)

smc_log "ssh: a command that returns 4 MiB"
remote "ssh cat" cat "$d/big" >"$d/via_ssh"
smc_assert_same_file "4 MiB through ssh" "$d/via_ssh" "$d/big"
sshd_children_gone "the ssh cat session"

smc_log "scp: upload and download of 4 MiB"
copy "scp upload" "$d/big" "root@127.0.0.1:$d/uploaded"
smc_assert_same_file "4 MiB uploaded with scp" "$d/uploaded" "$d/big"
sshd_children_gone "the scp upload"
copy "scp download" "root@127.0.0.1:$d/big" "$d/downloaded"
smc_assert_same_file "4 MiB downloaded with scp" "$d/downloaded" "$d/big"
sshd_children_gone "the scp download"

smc_log "ssh: a command that reads 16 MiB from ssh's stdin"
want16=$(sha256sum <"$d/big16" | cut -d' ' -f1)
got=$(remote "ssh sha256sum <16 MiB" sha256sum <"$d/big16" | cut -d' ' -f1)
smc_assert_eq "16 MiB through ssh's stdin: the server's sha256" "$got" "$want16"
sshd_children_gone "the ssh stdin session"

want=$(sha256sum <"$d/big" | cut -d' ' -f1)
for i in 1 2 3; do
	smc_log "sequential session $i"
	got=$(remote "session $i" sha256sum "$d/big" | cut -d' ' -f1)
	smc_assert_eq "session $i: the server's sha256 of the file" "$got" "$want"
	sshd_children_gone "session $i"
done

smc_log "20 sessions in a row"
for i in $(seq 1 20); do
	got=$(remote "session $i of 20" echo "row $i")
	smc_assert_eq "session $i of 20: the answer" "$got" "row $i"
	sshd_children_gone "session $i of 20"
done

# a client without the library: plain TCP, and the sandboxed child reads and writes it
# with read() and write() as it would without the library (it may not call recvfrom)
smc_log "a plain ssh client"
got=$(smc_run - ssh "${ssh_opts[@]}" -p "$port" root@127.0.0.1 echo plain) ||
	smc_fail "plain ssh client: exit status $?"
smc_assert_eq "plain ssh client's answer" "$got" plain
sshd_children_gone "the plain client's session"

fds_after=$(ls "/proc/$listener/fd" | wc -l)
smc_assert_eq "the listening sshd's open fds after $((sessions + 1)) sessions" "$fds_after" "$fds_before"
smc_stop_server sshd TERM 20

# The payload: three transfers of 4 MiB and 16 MiB at least, each by an ssh process
# under the library, over TCP after the downgrade.
min=$((3 * 4194304 + 16777216))
if [ "$SMC_TEST_EXPECT" = shm ]; then
	smc_require_stats "$cli"
	smc_log "stats ssh and scp clients: $(smc_stats_summary "$cli") peer_downgrades=$(smc_stats "$cli" '.events.peer_downgrades // 0')"
	smc_assert_eq "connections the ssh clients upgraded" \
		"$(smc_stats "$cli" '.connections.shm')" "$sessions"
	smc_assert_eq "connections of the ssh clients that fell back" \
		"$(smc_stats "$cli" '.connections.tcp')" 0
	smc_assert_ge "the ssh clients' connections their peer downgraded before its exec" \
		"$(smc_stats "$cli" '.events.peer_downgrades // 0')" "$sessions"
	smc_assert_ge "the ssh clients' payload over TCP after the downgrades" \
		"$(smc_stats "$cli" '.bytes.tcp.sent + .bytes.tcp.received')" "$min"
else
	smc_expect_payload "$cli" "$min" "ssh and scp clients"
fi
# The listener's own file: the per-connection processes (its children, and the images
# they exec) count none of its connections.
smc_require_stats "$srv"
lst=$srv/$listener.json
[ -f "$lst" ] || smc_fail "no stats file of the listening sshd (pid $listener) in $srv"
smc_log "stats sshd: $(smc_stats_summary "$srv") downgrades=$(smc_stats "$srv" '.events.downgrades // 0')"
smc_log "stats of the listening sshd: $(jq -c '{connections, fallback}' "$lst")"
if [ "$SMC_TEST_EXPECT" = shm ]; then
	smc_assert_eq "connections the listening sshd upgraded" \
		"$(jq '.connections.shm' "$lst")" "$sessions"
	smc_assert_eq "connections the listening sshd left as TCP (the plain client's)" \
		"$(jq '.connections.tcp' "$lst")" 1
	smc_assert_eq "why the plain client's connection stayed TCP" \
		"$(jq -c '.fallback' "$lst")" '{"peer-not-smc":1}'
else
	smc_assert_eq "connections the listening sshd accepted, all TCP" \
		"$(jq '.connections.tcp' "$lst")" $((sessions + 1))
	smc_assert_eq "shm connections of the listening sshd" "$(jq '.connections.shm' "$lst")" 0
fi
smc_pass
