#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#
# The SMC TCP option for processes that do not see the host's /sys: `ip netns exec`
# mounts a fresh sysfs over /sys (hiding /sys/fs/bpf), and a container has a mount
# namespace of its own. `smc_preload.sh --setup` pins the map a second time in a bpf file
# system inside the rendezvous directory, which both keep. Root; the eBPF setup, its
# namespaces and veth pairs are the test's own and removed on exit.
#
#  1. the second pin: the rendezvous directory 1733, its bpf mount root's 0755
#     (nosuid, nodev, noexec) holding the same maps as SMC_BPF_DIR (0666: smc_peer and
#     the withdrawn-ports map) and no program;
#     uid nobody can neither list the directory nor create, remove or replace anything in
#     the mount; --status names the pin a process uses, on the host and under ip netns
#     exec; tcpopt_check under ip netns exec, as root and as nobody;
#  2. server and client each under `ip netns exec` in its own namespace (veth): payload
#     over shared memory, the option in SYN and SYN-ACK;
#  3. against a plain peer, either side: exactly the application's bytes on the wire and
#     peer-not-smc on the preloaded side;
#  4. the same pair with a rendezvous directory that has no map: TCP, not-local (what
#     ip netns exec gave before the second pin), bytes intact;
#  5. a client in a mount and network namespace of its own (unshare --mount --net): its
#     own sysfs on /sys, a fresh /run holding only the rendezvous directory (bind mount):
#     shared memory;
#  6. --teardown: the second pin and its mount are gone, and the pin also from a mount
#     namespace that copied the mount while it was there.
# Skips (77) when not root, or when network namespaces, veth or the eBPF program are not
# available.
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
# shellcheck disable=SC2034 # read by lib.sh
SMC_TEST_KEEP_TRANSPORT=1 # the library decides by itself, case by case
SMC_TEST_EXPECT=shm
. "$(dirname -- "$0")/lib.sh"

[ "$(id -u)" = 0 ] || smc_skip "needs root (network namespaces, mounts, eBPF)"
smc_init
smc_require_cmd ip nsenter unshare setpriv tcpdump python3 bpftool
TCPOPT_CHECK=${TCPOPT_CHECK:-$top_builddir/tests/progs/tcpopt_check}
smc_require_built "$SMC_STREAM" "$TCPOPT_CHECK"
ip netns list >/dev/null 2>&1 || smc_skip "ip netns not available"

NS_A=smcxA$$
NS_B=smcxB$$
VETH_AB=smcxab$$
VETH_BA=smcxba$$
VETH_AC=smcxac$$
VETH_CA=smcxca$$
ADDR_A=10.214.0.1
ADDR_B=10.214.0.2
ADDR_AC=10.214.1.1
ADDR_C=10.214.1.2
export SMC_BPF_DIR=/sys/fs/bpf/smc-nsexec-$$
export SMC_RDV_DIR=/run/smc-nsexec-$$
RDV_BPF=$SMC_RDV_DIR/bpf
RDV_MAP=$RDV_BPF/smc_peer
BPF_OBJ=${SMC_BPF_OBJ:-$top_builddir/bpf/smc_tcpopt.bpf.o}
setup_done=0
ctr_pid=
holder_pid=

nsexec_cleanup() {
	[ -n "$smc_capture_pid" ] && kill "$smc_capture_pid" 2>/dev/null
	[ -n "$ctr_pid" ] && kill -KILL "$ctr_pid" 2>/dev/null
	[ -n "$holder_pid" ] && kill -KILL "$holder_pid" 2>/dev/null
	ip netns del "$NS_A" 2>/dev/null
	ip netns del "$NS_B" 2>/dev/null
	ip link del "$VETH_CA" 2>/dev/null
	if [ "$setup_done" = 1 ]; then
		SMC_BPF_OBJ=$BPF_OBJ "$SMC_WRAPPER" --teardown >/dev/null 2>&1 ||
			echo "netns_exec: teardown of $SMC_BPF_DIR failed"
	fi
	grep -q " $RDV_BPF " /proc/self/mounts && umount -l "$RDV_BPF"
	rm -rf -- "$SMC_RDV_DIR"
}
# lib.sh's cleanup reads the exit status first: keep it for it
trap '_rc=$?; nsexec_cleanup; (exit $_rc); _smc_cleanup' EXIT

as_nobody() {
	setpriv --reuid=65534 --regid=65534 --clear-groups -- "$@"
}

# ------------------------------------------------------------------ setup

ip netns add "$NS_A" 2>/dev/null && ip netns add "$NS_B" 2>/dev/null ||
	smc_skip "cannot create network namespaces"
ip link add "$VETH_AB" type veth peer name "$VETH_BA" 2>/dev/null || smc_skip "no veth support"
ip link set "$VETH_AB" netns "$NS_A" && ip link set "$VETH_BA" netns "$NS_B" &&
	ip -n "$NS_A" addr add "$ADDR_A/24" dev "$VETH_AB" &&
	ip -n "$NS_B" addr add "$ADDR_B/24" dev "$VETH_BA" &&
	ip -n "$NS_A" link set "$VETH_AB" up && ip -n "$NS_B" link set "$VETH_BA" up &&
	ip -n "$NS_A" link set lo up && ip -n "$NS_B" link set lo up ||
	smc_hard_error "cannot configure the veth pair"

[ -f "$BPF_OBJ" ] || smc_hard_error "eBPF object not built: $BPF_OBJ"
if ! out=$(SMC_BPF_OBJ=$BPF_OBJ "$SMC_WRAPPER" --setup 2>&1); then
	smc_skip "eBPF setup not possible here: $out"
fi
setup_done=1
smc_log "$out"
case $out in *warning*) smc_fail "--setup warned: $out" ;; esac

wait_port_ns() { # wait_port_ns NAME NS PORT
	local i
	for ((i = 0; i < 200; i++)); do
		[ -n "$(ss -N "$2" -Hltn "sport = :$3" 2>/dev/null)" ] && return 0
		_smc_group_alive "${SMC_SERVER_PID[$1]}" || smc_fail "server '$1' exited before listening"
		sleep 0.1
	done
	smc_fail "server '$1' not listening on port $3"
}

capture_start() { smc_capture_start "$1" "$2" "$VETH_AB" ip netns exec "$NS_A"; }

no_sockets_left() {
	local left
	left=$(find "$SMC_RDV_DIR" -maxdepth 1 -type s)
	[ -z "$left" ] || smc_fail "$1: rendezvous sockets left in $SMC_RDV_DIR: $left"
}

# ------------------------------------------------------------------ 1. the second pin
smc_log "1. the map's pin in the rendezvous directory, its modes and --status"
smc_assert_eq "owner and mode of $SMC_RDV_DIR" "$(stat -c '%u %a' "$SMC_RDV_DIR")" "0 1733"
smc_assert_eq "file system at $RDV_BPF" "$(stat -fc %T "$RDV_BPF")" bpf_fs
smc_assert_eq "owner and mode of $RDV_BPF" "$(stat -c '%u %a' "$RDV_BPF")" "0 1755"
opts=$(awk -v m="$RDV_BPF" '$2 == m { print $4 }' /proc/self/mounts)
case ,$opts, in *,nosuid,*nodev,*noexec,*) ;; *) smc_fail "mount options of $RDV_BPF: $opts" ;; esac
smc_assert_eq "owner and mode of $RDV_MAP" "$(stat -c '%u %a' "$RDV_MAP")" "0 666"
map_id=$(bpftool map show pinned "$SMC_BPF_DIR/smc_peer" | sed -n '1s/^\([0-9]*\):.*/\1/p')
smc_assert_eq "map pinned in $RDV_BPF (id) is the one in $SMC_BPF_DIR" \
	"$(bpftool map show pinned "$RDV_MAP" | sed -n '1s/^\([0-9]*\):.*/\1/p')" "$map_id"
# the kernel's own maps.debug / progs.debug (0400) are in every bpf mount; no program pin
# and the withdrawn-ports map beside it (core/sock/exec.c), the same one too, 0666
smc_assert_eq "owner and mode of $RDV_BPF/smc_withdrawn" \
	"$(stat -c '%u %a' "$RDV_BPF/smc_withdrawn")" "0 666"
smc_assert_eq "withdrawn-ports map pinned in $RDV_BPF (id) is the one in $SMC_BPF_DIR" \
	"$(bpftool map show pinned "$RDV_BPF/smc_withdrawn" | sed -n '1s/^\([0-9]*\):.*/\1/p')" \
	"$(bpftool map show pinned "$SMC_BPF_DIR/smc_withdrawn" | sed -n '1s/^\([0-9]*\):.*/\1/p')"
smc_assert_eq "entries of $RDV_BPF besides the kernel's" \
	"$(find "$RDV_BPF" -mindepth 1 -printf '%f\n' | grep -vx 'maps.debug\|progs.debug' | sort | tr '\n' ' ')" \
	"smc_peer smc_withdrawn "

as_nobody ls "$SMC_RDV_DIR" >/dev/null 2>&1 && smc_fail "nobody can list $SMC_RDV_DIR"
as_nobody touch "$RDV_BPF/x" 2>/dev/null && smc_fail "nobody can create a file in $RDV_BPF"
as_nobody mkdir "$RDV_BPF/d" 2>/dev/null && smc_fail "nobody can create a directory in $RDV_BPF"
as_nobody rm -f "$RDV_MAP" 2>/dev/null
[ -e "$RDV_MAP" ] || smc_fail "nobody removed $RDV_MAP"
as_nobody mv "$RDV_BPF" "$SMC_RDV_DIR/moved" 2>/dev/null && smc_fail "nobody renamed $RDV_BPF"
as_nobody touch "$SMC_RDV_DIR/c-probe" || smc_fail "nobody cannot create an entry in $SMC_RDV_DIR"
rm -f "$SMC_RDV_DIR/c-probe"

out=$("$SMC_WRAPPER" --status 2>&1)
rc=$?
printf '%s\n' "$out"
smc_assert_eq "--status on the host: exit status" "$rc" 0
grep -qx "  used here  $SMC_BPF_DIR/smc_peer" <<<"$out" || smc_fail "--status on the host names another pin"
out=$(ip netns exec "$NS_A" "$SMC_WRAPPER" --status 2>&1)
rc=$?
printf '%s\n' "$out"
smc_assert_eq "--status under ip netns exec: exit status" "$rc" 0
grep -qx "  used here  $RDV_MAP" <<<"$out" || smc_fail "--status under ip netns exec names another pin"
[ -e "$SMC_BPF_DIR" ] && ip netns exec "$NS_A" test -e "$SMC_BPF_DIR" &&
	smc_fail "$SMC_BPF_DIR is visible under ip netns exec: this test would not test anything"

out=$(ip netns exec "$NS_A" "$TCPOPT_CHECK" all fork closed 2>&1)
rc=$?
printf '%s\n' "$out"
smc_assert_eq "tcpopt_check under ip netns exec" "$rc" 0
nb=$SMC_TMP/nobody
mkdir -p "$nb" && cp "$TCPOPT_CHECK" "$nb/tcpopt_check" && chmod 0755 "$SMC_TMP" "$nb" ||
	smc_hard_error "cannot prepare $nb"
out=$(ip netns exec "$NS_A" setpriv --reuid=65534 --regid=65534 --clear-groups -- \
	"$nb/tcpopt_check" all 2>&1)
rc=$?
printf '%s\n' "$out"
smc_assert_eq "tcpopt_check under ip netns exec as nobody" "$rc" 0

# ------------------------------------------------------------------ 2. both preloaded
smc_log "2. server and client under ip netns exec, one namespace each"
N=$((4 << 20))
smc_free_port port
srv=$(smc_stats_dir exec-server)
cli=$(smc_stats_dir exec-client)
capture_start exec "$port"
smc_start_server exec-server "$srv" ip netns exec "$NS_A" "$SMC_STREAM" server "$port" \
	--bind "$ADDR_A" --count 1
wait_port_ns exec-server "$NS_A" "$port"
smc_run "$cli" ip netns exec "$NS_B" "$SMC_STREAM" client "$ADDR_A" "$port" --bytes "$N" \
	--seed "$RANDOM$RANDOM" >"$SMC_TMP/exec-client.out" 2>&1
rc=$?
cat "$SMC_TMP/exec-client.out"
smc_wait_server_exit exec-server 60
smc_capture_stop
smc_assert_eq "client (ip netns exec) exit status" "$rc" 0
smc_assert_eq "server (ip netns exec) exit status" "${SMC_SERVER_RC[exec-server]}" 0
smc_expect_payload "$srv" "$((2 * N))" "server in $NS_A"
smc_expect_payload "$cli" "$((2 * N))" "client in $NS_B"
smc_assert_eq "SMC option in the SYN" "$(smc_pcap_syn_opt "$pcap" 02)" yes
smc_assert_eq "SMC option in the SYN-ACK" "$(smc_pcap_syn_opt "$pcap" 12)" yes
no_sockets_left "both preloaded"

# ------------------------------------------------------------------ 3. a plain peer
REQRESP=$top_srcdir/tests/integration/reqresp.py
REQ='smc-netns-exec request: 0123456789 abcdefghijklmnopqrstuvwxyz'
RESP='smc-netns-exec response: ZYXWVUTSRQPONMLKJIHGFEDCBA 9876543210'

# reqresp LABEL SERVER-STATS CLIENT-STATS: the fixed request and response between a
# server in $NS_A and a client in $NS_B, both under ip netns exec ("-": not preloaded),
# checked byte for byte on the wire.
reqresp() {
	local label=$1 sdir=$2 cdir=$3 rc
	smc_free_port port
	capture_start "$label" "$port"
	smc_start_server "$label" "$sdir" ip netns exec "$NS_A" python3 "$REQRESP" \
		server "$ADDR_A" "$port" "$REQ" "$RESP"
	wait_port_ns "$label" "$NS_A" "$port"
	smc_run "$cdir" ip netns exec "$NS_B" python3 "$REQRESP" client "$ADDR_A" \
		"$port" "$REQ" "$RESP" >"$SMC_TMP/$label-client.out" 2>&1
	rc=$?
	cat "$SMC_TMP/$label-client.out"
	smc_wait_server_exit "$label" 30
	cat "$(smc_server_log "$label")"
	smc_capture_stop
	smc_assert_eq "$label: client exit status" "$rc" 0
	smc_assert_eq "$label: server exit status" "${SMC_SERVER_RC[$label]}" 0
	smc_assert_eq "$label: server's bytes on the wire" "$(smc_pcap_stream "$pcap" "$port")" \
		"$(smc_hex_of "$RESP")"
	smc_assert_eq "$label: client's bytes on the wire" \
		"$(smc_pcap_stream "$pcap" "$(smc_pcap_packets "$pcap" | awk '$3 == "02" { print $1; exit }')")" \
		"$(smc_hex_of "$REQ")"
}

smc_log "3. a plain server, then a plain client"
cli=$(smc_stats_dir plain-server-client)
reqresp plain-server - "$cli"
smc_assert_eq "plain server: SMC option in the SYN" "$(smc_pcap_syn_opt "$pcap" 02)" yes
smc_assert_eq "plain server: SMC option in the SYN-ACK" "$(smc_pcap_syn_opt "$pcap" 12)" no
smc_expect_fallback "$cli" peer-not-smc 1 "preloaded client (ip netns exec), plain server"

srv=$(smc_stats_dir plain-client-server)
reqresp plain-client "$srv" -
smc_assert_eq "plain client: SMC option in the SYN" "$(smc_pcap_syn_opt "$pcap" 02)" no
smc_assert_eq "plain client: SMC option in the SYN-ACK" "$(smc_pcap_syn_opt "$pcap" 12)" no
smc_expect_fallback "$srv" peer-not-smc 1 "preloaded server (ip netns exec), plain client"
no_sockets_left "plain peers"

# ------------------------------------------------------------------ 4. no map reachable
smc_log "4. both preloaded, a rendezvous directory without the map: TCP, not-local"
mkdir -m 1733 "$SMC_TMP/rdv-nomap" || smc_hard_error "mkdir $SMC_TMP/rdv-nomap"
srv=$(smc_stats_dir nomap-server)
cli=$(smc_stats_dir nomap-client)
SMC_RDV_DIR=$SMC_TMP/rdv-nomap reqresp nomap "$srv" "$cli"
smc_assert_eq "no map: SMC option in the SYN" "$(smc_pcap_syn_opt "$pcap" 02)" no
smc_expect_fallback "$cli" not-local 1 "client without a reachable map"
smc_require_stats "$srv"
smc_log "stats server without a reachable map: $(smc_stats_summary "$srv")"
smc_assert_ge "server without a reachable map: tcp connections" \
	"$(smc_stats "$srv" '.connections.tcp')" 1
smc_assert_eq "server without a reachable map: shm connections" \
	"$(smc_stats "$srv" '.connections.shm')" 0

# ------------------------------------------------------------------ 5. a container
smc_log "5. a client in its own mount and network namespace, only $SMC_RDV_DIR shared"
# The "container": unshare makes the namespaces and runs ctr.sh in them, which mounts
# its own sysfs, puts a fresh tmpfs on /run with only the rendezvous directory bound into
# it (recursively, with its bpf mount, as `-v DIR:DIR` does), waits for its end of the
# veth pair, then runs the client.
cat >"$SMC_TMP/ctr.sh" <<'SH'
set -u
fail() { echo "ctr: $*"; exit 99; }
mount -t sysfs sysfs /sys || fail "mount sysfs"
side=$SMC_TMP/ctr-rdv
mkdir -p "$side" && mount --rbind "$SMC_RDV_DIR" "$side" || fail "bind $SMC_RDV_DIR"
mount -t tmpfs -o mode=0755 tmpfs /run || fail "mount tmpfs on /run"
mkdir -p "$SMC_RDV_DIR" && mount --move "$side" "$SMC_RDV_DIR" || fail "move the bind mount"
echo "ctr: /run holds: $(ls -A /run | tr '\n' ' ')"
[ -e "$SMC_BPF_DIR" ] && fail "$SMC_BPF_DIR is visible"
[ -e "$SMC_RDV_DIR/bpf/smc_peer" ] || fail "no map under $SMC_RDV_DIR/bpf"
"$SMC_WRAPPER" --status | sed 's/^/ctr: /'
touch "$SMC_TMP/ctr-ready"
for ((i = 0; i < 200; i++)); do
	ip link show "$CTR_VETH" >/dev/null 2>&1 && break
	sleep 0.1
done
ip addr add "$CTR_ADDR/24" dev "$CTR_VETH" && ip link set "$CTR_VETH" up &&
	ip link set lo up || fail "cannot configure $CTR_VETH"
exec env SMC_STATS_FILE="$CTR_STATS/%p.json" ${SMC_TEST_PRELOAD_FIRST:+LD_PRELOAD=$SMC_TEST_PRELOAD_FIRST} \
	timeout -k 5 "$SMC_CMD_TIMEOUT" "$SMC_WRAPPER" "$SMC_STREAM" client "$CTR_SERVER" \
	"$CTR_PORT" --bytes "$CTR_BYTES" --seed "$RANDOM$RANDOM"
SH
ip link add "$VETH_AC" type veth peer name "$VETH_CA" &&
	ip link set "$VETH_AC" netns "$NS_A" &&
	ip -n "$NS_A" addr add "$ADDR_AC/24" dev "$VETH_AC" &&
	ip -n "$NS_A" link set "$VETH_AC" up || smc_hard_error "cannot configure the second veth pair"
smc_free_port port
srv=$(smc_stats_dir ctr-server)
cli=$(smc_stats_dir ctr-client)
smc_start_server ctr-server "$srv" ip netns exec "$NS_A" "$SMC_STREAM" server "$port" \
	--bind "$ADDR_AC" --count 1
wait_port_ns ctr-server "$NS_A" "$port"
env SMC_TMP="$SMC_TMP" CTR_VETH="$VETH_CA" CTR_ADDR="$ADDR_C" CTR_STATS="$cli" \
	CTR_SERVER="$ADDR_AC" CTR_PORT="$port" CTR_BYTES="$N" SMC_STREAM="$SMC_STREAM" \
	SMC_WRAPPER="$SMC_WRAPPER" SMC_CMD_TIMEOUT="$SMC_CMD_TIMEOUT" \
	SMC_TEST_PRELOAD_FIRST="$SMC_TEST_PRELOAD_FIRST" \
	unshare --mount --net --propagation private -- bash "$SMC_TMP/ctr.sh" \
	>"$SMC_TMP/ctr.out" 2>&1 &
ctr_pid=$!
for ((i = 0; i < 200; i++)); do
	[ -e "$SMC_TMP/ctr-ready" ] && break
	kill -0 "$ctr_pid" 2>/dev/null || break
	sleep 0.1
done
[ -e "$SMC_TMP/ctr-ready" ] || smc_fail "the container did not start: $(cat "$SMC_TMP/ctr.out")"
ip link set "$VETH_CA" netns "$ctr_pid" || smc_hard_error "cannot move $VETH_CA into the container"
wait "$ctr_pid"
rc=$?
ctr_pid=
cat "$SMC_TMP/ctr.out"
smc_wait_server_exit ctr-server 60
smc_assert_eq "client (container) exit status" "$rc" 0
smc_assert_eq "server (ip netns exec) exit status" "${SMC_SERVER_RC[ctr-server]}" 0
grep -qx "ctr:   used here  $RDV_MAP" "$SMC_TMP/ctr.out" ||
	smc_fail "--status in the container does not name $RDV_MAP"
smc_expect_payload "$srv" "$((2 * N))" "server in $NS_A"
smc_expect_payload "$cli" "$((2 * N))" "client in the container"
no_sockets_left "container"

# ------------------------------------------------------------------ 6. teardown
smc_log "6. --teardown removes the second pin, also where the mount was copied"
# a mount namespace copied now keeps its copy of the mount after the host's umount
unshare --mount --propagation private -- sleep 120 &
holder_pid=$!
for ((i = 0; i < 100; i++)); do
	[ "$(readlink "/proc/$holder_pid/ns/mnt")" != "$(readlink /proc/self/ns/mnt)" ] && break
	sleep 0.1
done
nsenter --mount --target "$holder_pid" test -e "$RDV_MAP" ||
	smc_hard_error "the copied mount namespace does not see $RDV_MAP"
out=$(SMC_BPF_OBJ=$BPF_OBJ "$SMC_WRAPPER" --teardown 2>&1)
rc=$?
smc_log "$out"
smc_assert_eq "--teardown exit status" "$rc" 0
setup_done=0
grep -q " $RDV_BPF " /proc/self/mounts && smc_fail "$RDV_BPF still mounted after --teardown"
[ -e "$RDV_BPF" ] && smc_fail "$RDV_BPF left after --teardown"
nsenter --mount --target "$holder_pid" test -e "$RDV_MAP" &&
	smc_fail "$RDV_MAP still visible in a mount namespace copied before --teardown"
kill -KILL "$holder_pid" 2>/dev/null
wait "$holder_pid" 2>/dev/null
holder_pid=
out=$(ip netns exec "$NS_A" "$SMC_WRAPPER" --status 2>&1)
rc=$?
smc_assert_eq "--status under ip netns exec after --teardown: exit status" "$rc" 3
smc_pass
