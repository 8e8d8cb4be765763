#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#
# Negotiation through the SMC TCP option across network namespaces (containers on one
# host). Root: sets up the eBPF program (smc_preload.sh --setup, under a map directory
# and rendezvous directory of its own so that concurrent tests keep their setup), two
# network namespaces joined by a veth pair, and captures on the veth with tcpdump.
#
#  1. server and client preloaded, in different namespaces: the payload moves over
#     shared memory on both sides (stats); SYN and SYN-ACK carry the option; the only
#     TCP payload is the client's CLC Proposal (SMC-R eyecatcher);
#  2. server not preloaded: the SYN carries the option, the SYN-ACK does not; the wire
#     carries exactly the application's request and response, no CLC byte; the client
#     counts peer-not-smc;
#  3. client not preloaded, server preloaded: no option in the SYN, the application's
#     bytes exactly, the server counts peer-not-smc;
#  4. a kernel AF_SMC client, played by tests/progs/clc_peer: a malformed Proposal resets
#     that connection only; SMC v2 and SMC-D v1 Proposals are declined ("no SMC
#     device") and the application's bytes follow;
#  5. a kernel AF_SMC server, played by clc_peer, against a preloaded client: its
#     Decline, or its SMC-R Accept, which the client declines; then plain TCP;
#  6. both in one namespace with the map present: shared memory.
# Skips (77) when network namespaces, veth or the eBPF program are not available.
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
# shellcheck disable=SC2034 # read by lib.sh
SMC_TEST_KEEP_TRANSPORT=1 # the library decides by itself, case by case
SMC_TEST_EXPECT=shm       # case 1 and 4 are about upgrading
. "$(dirname -- "$0")/lib.sh"

[ "$(id -u)" = 0 ] || smc_skip "needs root (network namespaces, eBPF)"
smc_init
smc_require_cmd ip nsenter tcpdump python3 bpftool
CLC_PEER=$top_builddir/tests/progs/clc_peer
smc_require_built "$SMC_STREAM" "$CLC_PEER"

NS_A=smcA$$
NS_B=smcB$$
VETH_A=smcva$$
VETH_B=smcvb$$
ADDR_A=10.213.0.1
ADDR_B=10.213.0.2
export SMC_BPF_DIR=/sys/fs/bpf/smc-netns-$$
export SMC_RDV_DIR=/run/smc-netns-$$
BPF_OBJ=${SMC_BPF_OBJ:-$top_builddir/bpf/smc_tcpopt.bpf.o}
setup_done=0

netns_cleanup() {
	[ -n "$smc_capture_pid" ] && kill "$smc_capture_pid" 2>/dev/null
	ip netns del "$NS_A" 2>/dev/null
	ip netns del "$NS_B" 2>/dev/null
	if [ "$setup_done" = 1 ]; then
		SMC_BPF_OBJ=$BPF_OBJ "$SMC_WRAPPER" --teardown >/dev/null 2>&1 ||
			echo "netns: teardown of $SMC_BPF_DIR failed"
	fi
	rm -rf -- "$SMC_RDV_DIR"
}
# lib.sh's cleanup reads the exit status first: keep it for it
trap '_rc=$?; netns_cleanup; (exit $_rc); _smc_cleanup' EXIT

# ------------------------------------------------------------------ setup

ip netns add "$NS_A" 2>/dev/null && ip netns add "$NS_B" 2>/dev/null ||
	smc_skip "cannot create network namespaces"
ip link add "$VETH_A" type veth peer name "$VETH_B" 2>/dev/null || smc_skip "no veth support"
ip link set "$VETH_A" netns "$NS_A" && ip link set "$VETH_B" netns "$NS_B" &&
	ip -n "$NS_A" addr add "$ADDR_A/24" dev "$VETH_A" &&
	ip -n "$NS_B" addr add "$ADDR_B/24" dev "$VETH_B" &&
	ip -n "$NS_A" link set "$VETH_A" up && ip -n "$NS_B" link set "$VETH_B" up &&
	ip -n "$NS_A" link set lo up && ip -n "$NS_B" link set lo up ||
	smc_hard_error "cannot configure the veth pair"

[ -f "$BPF_OBJ" ] || smc_hard_error "eBPF object not built: $BPF_OBJ"
if ! out=$(SMC_BPF_OBJ=$BPF_OBJ "$SMC_WRAPPER" --setup 2>&1); then
	smc_skip "eBPF setup not possible here: $out"
fi
setup_done=1
smc_log "$out"

wait_port_ns() { # wait_port_ns NAME NS PORT
	local i
	for ((i = 0; i < 200; i++)); do
		[ -n "$(ss -N "$2" -Hltn "sport = :$3" 2>/dev/null)" ] && return 0
		_smc_group_alive "${SMC_SERVER_PID[$1]}" || smc_fail "server '$1' exited before listening"
		sleep 0.1
	done
	smc_fail "server '$1' not listening on port $3"
}

# capture_start LABEL PORT / capture_stop: the capture helpers of lib.sh, here.
capture_start() { smc_capture_start "$1" "$2" "$VETH_A" nsenter "--net=/run/netns/$NS_A"; }
capture_stop() { smc_capture_stop; }

REQRESP=$top_srcdir/tests/integration/reqresp.py
REQ='smc-netns request: 0123456789 abcdefghijklmnopqrstuvwxyz'
RESP='smc-netns response: ZYXWVUTSRQPONMLKJIHGFEDCBA 9876543210'

# ------------------------------------------------------------------ cases

# Commands run in a namespace with nsenter: network namespace only, so /sys/fs/bpf stays
# visible (`ip netns exec` mounts a fresh /sys and would hide the map).

NSA=(nsenter "--net=/run/netns/$NS_A")
NSB=(nsenter "--net=/run/netns/$NS_B")

# 1: both preloaded, one namespace each: shared memory through the path rendezvous
N=$((8 << 20))
smc_free_port port
srv=$(smc_stats_dir netns-server)
cli=$(smc_stats_dir netns-client)
capture_start netns "$port"
smc_start_server netns-server "$srv" "${NSA[@]}" "$SMC_STREAM" server "$port" --bind "$ADDR_A" \
	--count 1
wait_port_ns netns-server "$NS_A" "$port"
smc_run "$cli" "${NSB[@]}" "$SMC_STREAM" client "$ADDR_A" "$port" --bytes "$N" \
	--seed "$RANDOM$RANDOM" >"$SMC_TMP/netns-client.out" 2>&1
rc=$?
cat "$SMC_TMP/netns-client.out"
smc_wait_server_exit netns-server 60
capture_stop
smc_assert_eq "client (two namespaces) exit status" "$rc" 0
smc_assert_eq "server (two namespaces) exit status" "${SMC_SERVER_RC[netns-server]}" 0
smc_expect_payload "$srv" "$((2 * N))" "server in $NS_A"
smc_expect_payload "$cli" "$((2 * N))" "client in $NS_B"
smc_assert_eq "SMC option in the SYN" "$(smc_pcap_syn_opt "$pcap" 02)" yes
smc_assert_eq "SMC option in the SYN-ACK" "$(smc_pcap_syn_opt "$pcap" 12)" yes
# the client's TCP payload is one CLC Proposal (SMC-R eyecatcher, its own length), and
# the server sent none: its Accept went over the rendezvous socket
proposal=$(smc_pcap_stream "$pcap" "$(smc_pcap_packets "$pcap" | awk '$3 == "02" { print $1; exit }')")
smc_log "client's TCP payload: $proposal"
case $proposal in
e2d4c3d901*) ;;
*) smc_fail "the client's TCP payload is not a CLC Proposal: $proposal" ;;
esac
smc_assert_eq "client's TCP payload length (the Proposal's length field)" \
	"$((${#proposal} / 2))" "$((16#${proposal:10:4}))"
smc_assert_eq "server's TCP payload" "$(smc_pcap_stream "$pcap" "$port")" ""
left=$(find "$SMC_RDV_DIR" -maxdepth 1 -type s)
[ -z "$left" ] || smc_fail "rendezvous sockets left in $SMC_RDV_DIR: $left"

# plain LABEL SERVER-STATS CLIENT-STATS: the fixed request/response across the namespaces
# ("-" = not preloaded), checked byte for byte on the wire.
plain() {
	local label=$1 sdir=$2 cdir=$3 rc
	smc_free_port port
	capture_start "$label" "$port"
	smc_start_server "$label" "$sdir" "${NSA[@]}" python3 "$REQRESP" server \
		"$ADDR_A" "$port" "$REQ" "$RESP"
	wait_port_ns "$label" "$NS_A" "$port"
	smc_run "$cdir" "${NSB[@]}" python3 "$REQRESP" client "$ADDR_A" "$port" \
		"$REQ" "$RESP" >"$SMC_TMP/$label-client.out" 2>&1
	rc=$?
	cat "$SMC_TMP/$label-client.out"
	smc_wait_server_exit "$label" 30
	cat "$(smc_server_log "$label")"
	capture_stop
	smc_assert_eq "$label: client exit status" "$rc" 0
	smc_assert_eq "$label: server exit status" "${SMC_SERVER_RC[$label]}" 0
	# exactly the application's bytes in each direction: no CLC byte
	smc_assert_eq "$label: server's bytes on the wire" "$(smc_pcap_stream "$pcap" "$port")" \
		"$(smc_hex_of "$RESP")"
	smc_assert_eq "$label: client's bytes on the wire" \
		"$(smc_pcap_stream "$pcap" "$(smc_pcap_packets "$pcap" | awk '$3 == "02" { print $1; exit }')")" \
		"$(smc_hex_of "$REQ")"
}

# 2: server not preloaded
cli=$(smc_stats_dir plain-server-client)
plain plain-server - "$cli"
smc_assert_eq "plain server: SMC option in the SYN" "$(smc_pcap_syn_opt "$pcap" 02)" yes
smc_assert_eq "plain server: SMC option in the SYN-ACK" "$(smc_pcap_syn_opt "$pcap" 12)" no
smc_expect_fallback "$cli" peer-not-smc 1 "preloaded client, plain server"

# 3: client not preloaded
srv=$(smc_stats_dir plain-client-server)
plain plain-client "$srv" -
smc_assert_eq "plain client: SMC option in the SYN" "$(smc_pcap_syn_opt "$pcap" 02)" no
smc_assert_eq "plain client: SMC option in the SYN-ACK" "$(smc_pcap_syn_opt "$pcap" 12)" no
smc_expect_fallback "$srv" peer-not-smc 1 "preloaded server, plain client"

# 4: a kernel AF_SMC client (played by clc_peer) against a preloaded server: a
# malformed Proposal resets that connection only; an SMC v2 Proposal and an SMC-D v1
# Proposal get a v1 Decline "no SMC device" and the application's bytes follow
for mode in bad v2 v1d; do
	srv=$(smc_stats_dir "kclient-$mode")
	smc_free_port port
	smc_start_server "kclient-$mode" "$srv" "${NSA[@]}" python3 "$REQRESP" server \
		"$ADDR_A" "$port" "clc_peer request" "clc_peer response"
	wait_port_ns "kclient-$mode" "$NS_A" "$port"
	out=$("${NSB[@]}" "$CLC_PEER" client "$ADDR_A" "$port" "$mode" 2>&1)
	rc=$?
	smc_log "clc_peer client $mode: $out"
	smc_assert_eq "kernel-like client ($mode) exit status" "$rc" 0
	if [ "$mode" = bad ]; then
		# the server survives it and serves the next client
		out=$("${NSB[@]}" "$CLC_PEER" client "$ADDR_A" "$port" v2 2>&1) ||
			smc_fail "kernel-like client after a malformed one: $out"
	fi
	smc_wait_server_exit "kclient-$mode" 30
	cat "$(smc_server_log "kclient-$mode")"
	smc_assert_eq "server (kernel-like client $mode) exit status" \
		"${SMC_SERVER_RC[kclient-$mode]}" 0
	smc_expect_fallback "$srv" not-local 1 "preloaded server, kernel-like client $mode"
	[ "$mode" = bad ] && smc_assert_ge "aborted connections (malformed Proposal)" \
		"$(smc_stats "$srv" '.events.aborts')" 1
done

# 5: a kernel AF_SMC server (played by clc_peer) against a preloaded client: its
# Decline, or its Accept (which the client declines), then plain TCP
for mode in decline accept; do
	cli=$(smc_stats_dir "kserver-$mode")
	smc_free_port port
	smc_start_server "kserver-$mode" - "${NSA[@]}" "$CLC_PEER" server "$port" "$mode"
	wait_port_ns "kserver-$mode" "$NS_A" "$port"
	smc_run "$cli" "${NSB[@]}" python3 "$REQRESP" client "$ADDR_A" "$port" \
		"clc_peer request" "clc_peer response" >"$SMC_TMP/kserver-$mode.out" 2>&1
	rc=$?
	cat "$SMC_TMP/kserver-$mode.out"
	smc_wait_server_exit "kserver-$mode" 30
	cat "$(smc_server_log "kserver-$mode")"
	smc_assert_eq "client (kernel-like server $mode) exit status" "$rc" 0
	smc_assert_eq "kernel-like server ($mode) exit status" "${SMC_SERVER_RC[kserver-$mode]}" 0
	if [ "$mode" = decline ]; then
		smc_expect_fallback "$cli" declined 1 "preloaded client, kernel-like server $mode"
	else
		smc_expect_fallback "$cli" not-local 1 "preloaded client, kernel-like server $mode"
	fi
done

# 6: one namespace, map present
smc_free_port port
srv=$(smc_stats_dir samens-server)
cli=$(smc_stats_dir samens-client)
smc_start_server samens-server "$srv" "${NSA[@]}" "$SMC_STREAM" server "$port" --bind 127.0.0.1 \
	--count 1
wait_port_ns samens-server "$NS_A" "$port"
smc_run "$cli" "${NSA[@]}" "$SMC_STREAM" client 127.0.0.1 "$port" --bytes "$N" \
	--seed "$RANDOM$RANDOM" >"$SMC_TMP/samens-client.out" 2>&1
rc=$?
cat "$SMC_TMP/samens-client.out"
smc_wait_server_exit samens-server 60
smc_assert_eq "client (one namespace) exit status" "$rc" 0
smc_assert_eq "server (one namespace) exit status" "${SMC_SERVER_RC[samens-server]}" 0
smc_expect_payload "$srv" "$((2 * N))" "server, one namespace"
smc_expect_payload "$cli" "$((2 * N))" "client, one namespace"
smc_pass
