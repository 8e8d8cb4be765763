#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#
# The SMC TCP option through eBPF: smc_preload.sh --setup / --status / --teardown and the
# library's side (core/negotiate/tcpopt.c, driven by tests/progs/tcpopt_check).
#
#  - --setup twice (idempotent; the eBPF object found in a build tree, installed, and
#    through SMC_BPF_OBJ); a partial setup is reported (exit 4) and repaired, leaving
#    no program attached twice; --status says loaded and attached, exit 0;
#  - tcpopt_check: the four opt-in cases (none, listener, client, both) give the
#    expected peer_sent on both ends, also over IPv6, in a forked child, and after the
#    application closed the map's fd; as uid nobody too;
#  - a capture on lo: the option (kind 254, length 6, ExID e2d4c3d9) is in the SYN when
#    the client opted in, in the SYN-ACK only when the listener opted in and the SYN had
#    it, never in any other segment, and nowhere for sockets that did not opt in;
#  - --setup as nobody fails, saying it needs root; --status as nobody works;
#  - --teardown twice (idempotent); --status then says not loaded (exit 3), the program
#    is detached; without the map the library answers -ENOENT and a preloaded pair still
#    upgrades through the same-host rendezvous.
#
# It uses its own pin directory (SMC_BPF_DIR=/sys/fs/bpf/smc_preload_test_PID; the bpf
# file system refuses dots in names), so a setup of the host (the default directory) is
# left alone, and tears it down on exit.
# Skips (77) when not root or when the kernel cannot run the program.
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
. "$(dirname -- "$0")/lib.sh"

TCPOPT_CHECK=${TCPOPT_CHECK:-$top_builddir/tests/progs/tcpopt_check}
: "${SMC_BPF_OBJ:=$top_builddir/bpf/smc_tcpopt.bpf.o}"
export SMC_BPF_OBJ
export SMC_BPF_DIR=/sys/fs/bpf/smc_preload_test_$$

[ "$(id -u)" = 0 ] || smc_skip "needs root (loads an eBPF program)"
smc_require_cmd setpriv
smc_init
smc_require_built "$TCPOPT_CHECK"
[ -f "$SMC_BPF_OBJ" ] || smc_hard_error "eBPF object not built: $SMC_BPF_OBJ"
# Missing tools are failures, not skips: test.sh installs them.
command -v bpftool >/dev/null 2>&1 || smc_fail "bpftool is not installed (apt-get install bpftool)"
command -v tcpdump >/dev/null 2>&1 || smc_fail "tcpdump is not installed (apt-get install tcpdump)"
# Header options from sock_ops programs came with Linux 5.10.
kver=$(uname -r)
kmaj=${kver%%.*}
kmin=${kver#*.}
kmin=${kmin%%[!0-9]*}
[ "$kmaj" -gt 5 ] || { [ "$kmaj" -eq 5 ] && [ "$kmin" -ge 10 ]; } ||
	smc_skip "kernel $kver has no BPF TCP header options (5.10 or later needed)"
bpftool prog show >/dev/null 2>&1 || smc_skip "bpf(2) is not permitted here (container without CAP_BPF?)"

export SMC_RDV_DIR=$SMC_TMP/rdv
wrapper=$SMC_WRAPPER

# Teardown on every exit, then lib.sh's cleanup with the test's exit status.
bpf_cleanup() {
	local rc=$?
	"$wrapper" --teardown >/dev/null 2>&1
	[ -n "${tcpdump_pid:-}" ] && kill "$tcpdump_pid" 2>/dev/null
	(exit "$rc")
	_smc_cleanup
}
trap bpf_cleanup EXIT

# run CMD...: stdout+stderr in $out, status in $rc.
run() {
	out=$("$@" 2>&1)
	rc=$?
}

as_nobody() {
	setpriv --reuid=65534 --regid=65534 --clear-groups -- "$@"
}

pinned_id() { # pinned_id prog|map PATH
	bpftool "$1" show pinned "$2" 2>/dev/null | sed -n '1s/^\([0-9][0-9]*\):.*/\1/p'
}

attached_ids() { # every sock_ops program id attached at the cgroup-v2 root
	local cg
	if [ "$(stat -fc %T /sys/fs/cgroup)" = cgroup2fs ]; then
		cg=/sys/fs/cgroup
	else
		cg=$(awk '$3 == "cgroup2" { print $2; exit }' /proc/self/mounts)
	fi
	[ -n "$cg" ] || return 0
	bpftool cgroup show "$cg" 2>/dev/null | awk '$2 ~ /sock_ops$/ { print $1 }'
}

# ------------------------------------------------------------------ setup
smc_log "not set up yet: --status"
run "$wrapper" --status
smc_assert_eq "--status before setup: exit status (not loaded)" "$rc" 3
case $out in *"not loaded"*) ;; *) smc_fail "--status before setup says: $out" ;; esac

smc_log "--setup with the object found in a build tree (SMC_BPF_OBJ unset)"
mkdir -p "$SMC_TMP/tree/bpf" "$SMC_TMP/inst/lib"
cp "$wrapper" "$SMC_TMP/tree/smc_preload.sh"
cp "$SMC_BPF_OBJ" "$SMC_TMP/tree/bpf/smc_tcpopt.bpf.o"
run env -u SMC_BPF_OBJ "$SMC_TMP/tree/smc_preload.sh" -v --setup
printf '%s\n' "$out"
smc_assert_eq "--setup (build tree) exit status" "$rc" 0
case $out in *"loaded $SMC_TMP/tree/bpf/smc_tcpopt.bpf.o"*) ;;
*) smc_fail "--setup did not load the build tree's object" ;; esac
run "$wrapper" --teardown
smc_assert_eq "--teardown after the build-tree setup" "$rc" 0

smc_log "--setup with the installed object (the line make install rewrites)"
n=$(grep -c '^SMC_INSTALLED_BPF_OBJ=' "$wrapper")
smc_assert_eq "lines SMC_INSTALLED_BPF_OBJ= in the wrapper" "$n" 1
cp "$wrapper" "$SMC_TMP/inst/smc_preload.sh"
cp "$SMC_BPF_OBJ" "$SMC_TMP/inst/lib/smc_tcpopt.bpf.o"
sed -i "s|^SMC_INSTALLED_BPF_OBJ=.*|SMC_INSTALLED_BPF_OBJ=\"$SMC_TMP/inst/lib/smc_tcpopt.bpf.o\"|" \
	"$SMC_TMP/inst/smc_preload.sh"
run env -u SMC_BPF_OBJ "$SMC_TMP/inst/smc_preload.sh" -v --setup
printf '%s\n' "$out"
smc_assert_eq "--setup (installed object) exit status" "$rc" 0
case $out in *"loaded $SMC_TMP/inst/lib/smc_tcpopt.bpf.o"*) ;;
*) smc_fail "--setup did not load the installed object" ;; esac
prog_id=$(pinned_id prog "$SMC_BPF_DIR/smc_tcpopt")
map_id=$(pinned_id map "$SMC_BPF_DIR/smc_peer")
[ -n "$prog_id" ] && [ -n "$map_id" ] || smc_fail "program or map not pinned under $SMC_BPF_DIR"

smc_log "--setup again (SMC_BPF_OBJ): idempotent"
for i in 1 2; do
	run "$wrapper" --setup
	smc_assert_eq "--setup again ($i) exit status" "$rc" 0
done
smc_assert_eq "program id after repeated --setup" "$(pinned_id prog "$SMC_BPF_DIR/smc_tcpopt")" "$prog_id"
smc_assert_eq "map id after repeated --setup" "$(pinned_id map "$SMC_BPF_DIR/smc_peer")" "$map_id"
smc_assert_eq "times program $prog_id is attached" "$(attached_ids | grep -cx "$prog_id")" 1
smc_assert_eq "mode of $SMC_BPF_DIR" "$(stat -c %a "$SMC_BPF_DIR")" 755
smc_assert_eq "mode of the map" "$(stat -c %a "$SMC_BPF_DIR/smc_peer")" 666
# the ports withdrawn from the option by processes before an exec (core/sock/exec.c)
smc_assert_eq "mode of the withdrawn-ports map" \
	"$(stat -c %a "$SMC_BPF_DIR/smc_withdrawn")" 666
smc_assert_eq "mode of $SMC_RDV_DIR" "$(stat -c %a "$SMC_RDV_DIR")" 1733

smc_log "a partial setup (the program's pin removed by hand) is reported and repaired"
rm -f "$SMC_BPF_DIR/smc_tcpopt"
run "$wrapper" --status
printf '%s\n' "$out"
smc_assert_eq "--status with the program's pin missing: exit status (partly)" "$rc" 4
run "$wrapper" --setup
smc_assert_eq "--setup over a partial setup: exit status" "$rc" 0
smc_assert_eq "times the unpinned program $prog_id is still attached" \
	"$(attached_ids | grep -cx "$prog_id")" 0
prog_id=$(pinned_id prog "$SMC_BPF_DIR/smc_tcpopt")
[ -n "$prog_id" ] || smc_fail "--setup did not pin the program again"
smc_assert_eq "times the new program $prog_id is attached" "$(attached_ids | grep -cx "$prog_id")" 1

run "$wrapper" --status
printf '%s\n' "$out"
smc_assert_eq "--status when set up: exit status" "$rc" 0
case $out in *"loaded and attached"*"$SMC_BPF_DIR/smc_peer"*) ;;
*) smc_fail "--status does not say loaded and attached" ;; esac

# ------------------------------------------------------------------ the library's view
smc_log "tcpopt_check: the four cases, IPv6, fork, a closed map fd"
run "$TCPOPT_CHECK" all fork closed
printf '%s\n' "$out"
smc_assert_eq "tcpopt_check all fork closed" "$rc" 0
run "$TCPOPT_CHECK" -6 all
printf '%s\n' "$out"
smc_assert_eq "tcpopt_check -6 all" "$rc" 0

smc_log "as uid nobody"
# nobody may not reach the build tree (a home directory): a copy it can run
nb=$SMC_TMP/nobody
mkdir -p "$nb" && cp "$TCPOPT_CHECK" "$nb/tcpopt_check" && chmod 0755 "$SMC_TMP" "$nb" ||
	smc_hard_error "cannot prepare $nb"
run as_nobody "$nb/tcpopt_check" all fork
printf '%s\n' "$out"
smc_assert_eq "tcpopt_check as nobody" "$rc" 0
run as_nobody "$wrapper" --setup
printf '%s\n' "$out"
smc_assert "--setup as nobody must fail" "$rc" -ne 0
case $out in *"needs root"*) ;; *) smc_fail "--setup as nobody does not say it needs root" ;; esac
run as_nobody "$wrapper" --status
smc_assert_eq "--status as nobody when set up: exit status" "$rc" 0

# ------------------------------------------------------------------ on the wire
# capture: runs tcpopt_check (IPv4 and IPv6) under a capture of lo into $pcap. Returns 1
# when the kernel dropped packets (the capture is then incomplete: try again). Only the
# headers are kept (-s): with the default snap length the capture ring holds a handful of
# frames and drops under load.
pcap=$SMC_TMP/lo.pcap
capture() {
	local i dropped
	rm -f "$pcap"
	tcpdump -i lo -nn -s 200 -B 4096 -U --immediate-mode -w "$pcap" tcp \
		2>"$SMC_TMP/tcpdump.err" &
	tcpdump_pid=$!
	for ((i = 0; i < 100; i++)); do
		grep -qs "listening on" "$SMC_TMP/tcpdump.err" && break
		kill -0 "$tcpdump_pid" 2>/dev/null || break
		sleep 0.1
	done
	grep -qs "listening on" "$SMC_TMP/tcpdump.err" ||
		smc_fail "tcpdump did not start: $(cat "$SMC_TMP/tcpdump.err")"
	"$TCPOPT_CHECK" all >"$SMC_TMP/wire4.txt" 2>&1
	rc4=$?
	"$TCPOPT_CHECK" -6 all >"$SMC_TMP/wire6.txt" 2>&1
	rc6=$?
	sleep 0.5 # the last segments reach the capture
	kill -INT "$tcpdump_pid"
	wait "$tcpdump_pid"
	tcpdump_pid=
	cat "$SMC_TMP/wire4.txt" "$SMC_TMP/wire6.txt" "$SMC_TMP/tcpdump.err"
	smc_assert_eq "tcpopt_check under capture (IPv4)" "$rc4" 0
	smc_assert_eq "tcpopt_check under capture (IPv6)" "$rc6" 0
	dropped=$(sed -n 's/^\([0-9]*\) packets\{0,1\} dropped by kernel.*/\1/p' "$SMC_TMP/tcpdump.err")
	[ "${dropped:-0}" = 0 ]
}

smc_log "capture on lo"
for attempt in 1 2 3 4; do
	capture && break
	[ "$attempt" = 4 ] && smc_fail "tcpdump dropped packets in 4 captures in a row"
	smc_log "tcpdump dropped packets: capturing again"
done

# One line per packet: SRC_PORT DST_PORT FLAGS HAS_OPTION, where HAS_OPTION means the
# bytes fe 06 e2 d4 c3 d9 are in the packet (the only payload bytes are "q" and "r").
tcpdump -nn -x -r "$pcap" 2>/dev/null | awk '
	function flush() {
		if (src != "") print src, dst, flags, (index(hex, "fe06e2d4c3d9") ? 1 : 0)
		src = ""; hex = ""
	}
	/^[0-9]/ {
		flush()
		if ($2 != "IP" && $2 != "IP6") next
		n = split($3, a, "."); src = a[n]
		d = $5; sub(/:$/, "", d); n = split(d, a, "."); dst = a[n]
		flags = $0; sub(/.*Flags \[/, "", flags); sub(/\].*/, "", flags)
		next
	}
	/^[ \t]+0x/ { for (i = 2; i <= NF; i++) hex = hex $i }
	END { flush() }' >"$SMC_TMP/packets.txt"

# check_wire CASE LPORT CPORT SYN SYNACK: SYN/SYNACK = 1 when it must carry the option.
check_wire() {
	local name=$1 l=$2 c=$3 want_syn=$4 want_synack=$5
	local counts syn syn_opt synack synack_opt other other_opt
	counts=$(awk -v l="$l" -v c="$c" '
		($1 == c && $2 == l) || ($1 == l && $2 == c) {
			if ($3 == "S") { syn++; syn_opt += $4 }
			else if ($3 == "S.") { synack++; synack_opt += $4 }
			else { other++; other_opt += $4 }
		}
		END { printf "%d %d %d %d %d %d\n", syn, syn_opt, synack, synack_opt, other, other_opt }
	' "$SMC_TMP/packets.txt")
	read -r syn syn_opt synack synack_opt other other_opt <<<"$counts"
	smc_log "wire $name ($c -> $l): SYN $syn_opt/$syn with the option, SYN-ACK $synack_opt/$synack, other $other_opt/$other"
	smc_assert_ge "$name: SYNs captured" "$syn" 1
	smc_assert_ge "$name: SYN-ACKs captured" "$synack" 1
	smc_assert_ge "$name: other segments captured" "$other" 3
	smc_assert_eq "$name: SYNs with the option" "$syn_opt" $((want_syn * syn))
	smc_assert_eq "$name: SYN-ACKs with the option" "$synack_opt" $((want_synack * synack))
	smc_assert_eq "$name: other segments with the option" "$other_opt" 0
}

for f in wire4 wire6; do
	for spec in "none 0 0" "listener 0 0" "client 1 0" "both 1 1"; do
		read -r name want_syn want_synack <<<"$spec"
		line=$(grep "^$name " "$SMC_TMP/$f.txt")
		l=$(sed -n 's/.* port=\([0-9]*\) .*/\1/p' <<<"$line")
		c=$(sed -n 's/.* cport=\([0-9]*\) .*/\1/p' <<<"$line")
		[ -n "$l" ] && [ -n "$c" ] || smc_fail "no ports for case $name in $f.txt"
		check_wire "$name/$f" "$l" "$c" "$want_syn" "$want_synack"
	done
done

# ------------------------------------------------------------------ teardown
smc_log "--teardown twice"
for i in 1 2; do
	run "$wrapper" --teardown
	printf '%s\n' "$out"
	smc_assert_eq "--teardown ($i) exit status" "$rc" 0
done
[ -e "$SMC_BPF_DIR" ] && smc_fail "$SMC_BPF_DIR still exists after --teardown"
smc_assert_eq "times program $prog_id is attached after --teardown" \
	"$(attached_ids | grep -cx "$prog_id")" 0
run "$wrapper" --status
printf '%s\n' "$out"
smc_assert_eq "--status after teardown: exit status (not loaded)" "$rc" 3
case $out in *"not loaded"*) ;; *) smc_fail "--status after teardown says: $out" ;; esac

# ------------------------------------------------------------------ without the map
smc_log "without the map"
run "$TCPOPT_CHECK" --no-map all fork
printf '%s\n' "$out"
smc_assert_eq "tcpopt_check --no-map (every call -ENOENT, connections work)" "$rc" 0

smc_free_port port
srv=$(smc_stats_dir server)
cli=$(smc_stats_dir client)
smc_start_server server "$srv" "$SMC_STREAM" server "$port" --bind 127.0.0.1
smc_wait_port server "$port"
smc_run "$cli" "$SMC_STREAM" client 127.0.0.1 "$port" --bytes 1m >"$SMC_TMP/client.out" 2>&1
rc=$?
cat "$SMC_TMP/client.out"
smc_wait_server_exit server 60
smc_assert_eq "preloaded smc_stream client without the map" "$rc" 0
smc_assert_eq "preloaded smc_stream server without the map" "${SMC_SERVER_RC[server]}" 0
smc_expect_payload "$srv" $((2 << 20)) server
smc_expect_payload "$cli" $((2 << 20)) client

smc_pass
