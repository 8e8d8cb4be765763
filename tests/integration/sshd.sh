#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#
# OpenSSH under the library on both sides: sshd -D -r (no re-exec per connection: a
# program exec'd over an upgraded connection is not supported yet) with its own host
# key, config and authorized key in the test's directory, ssh and scp as clients. An ssh
# command returns a 4 MiB random file, scp uploads and downloads one, then a few more
# sessions follow one another; every file must arrive intact (sha256).
# What it proves beyond the transfers: sshd forks a child per connection ([accepted])
# that forks again (the pre-authentication child, under a seccomp sandbox with
# RLIMIT_NOFILE and RLIMIT_FSIZE 0, core/sandbox.h, and the session) while the library's
# threads run: no child may hang (every sshd child is gone after its session) and the
# listening sshd keeps no fd of them. Payload: the clients' stats show it moved over
# shared memory; on the server only the listener writes stats (sshd's per-connection
# processes end with _exit()), and it must have upgraded every connection it accepted
# but the one of a plain ssh client, which must work as without the library.
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
ssh_opts=(-i "$d/client_key" -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null
	-o BatchMode=yes -o LogLevel=ERROR -o ConnectTimeout=20)

srv=$(smc_stats_dir sshd)
cli=$(smc_stats_dir clients)
smc_start_server sshd "$srv" "$sshd_bin" -D -r -e -f "$d/sshd_config" -p "$port"
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

sessions=7 # one connection each: warm-up, ssh cat, scp up, scp down, 3 sequential
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

want=$(sha256sum <"$d/big" | cut -d' ' -f1)
for i in 1 2 3; do
	smc_log "sequential session $i"
	got=$(remote "session $i" sha256sum "$d/big" | cut -d' ' -f1)
	smc_assert_eq "session $i: the server's sha256 of the file" "$got" "$want"
	sshd_children_gone "session $i"
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

# three transfers of 4 MiB at least, each by an ssh process under the library
smc_expect_payload "$cli" $((3 * 4194304)) "ssh and scp clients"
smc_require_stats "$srv"
smc_log "stats sshd: $(smc_stats_summary "$srv")"
smc_assert_eq "connections the listening sshd upgraded" \
	"$(smc_stats "$srv" ".connections.$SMC_TEST_EXPECT")" "$sessions"
if [ "$SMC_TEST_EXPECT" = shm ]; then
	smc_assert_eq "connections the listening sshd left as TCP (the plain client's)" \
		"$(smc_stats "$srv" '.connections.tcp')" 1
	smc_assert_eq "why the plain client's connection stayed TCP" \
		"$(jq -c '.fallback' "$srv"/*.json)" '{"peer-not-smc":1}'
fi
smc_pass
