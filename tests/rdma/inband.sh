#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#
# SMC-R negotiated in-band, on the TCP connection, after the SMC TCP option (the
# cross-host protocol, run on one host: SMC_TRANSPORT=ib makes two processes on one host
# use it), in the Soft-RoCE VM of tests/vm with `smc_preload.sh --setup` (private map
# and rendezvous directories):
#
#  1. SMC_TRANSPORT=ib on both ends: smc_stream both ways at once; the stats of both
#     sides account for the payload over "ib" with no RNR; a capture on lo shows the
#     option in SYN and SYN-ACK, the client's TCP payload is exactly an SMC-R Proposal
#     and a Confirm (+ "CRD" credits), the server's exactly an Accept (+ credits): no
#     application byte on TCP;
#  2. SMC_TRANSPORT=ib on the client, shm on the server: the server declines (modes do
#     not match, 0x03040000), both count the fallback as "declined", and the TCP
#     payload is the Proposal, the Decline and then exactly the application's bytes;
#  3. a kernel-like SMC-R server (tests/progs/clc_peer: an Accept without our credits
#     extension) against an ib client: the client declines it (at its next handshake
#     tick) and the request and response then go over TCP ("not-local").
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
: "${SMC_VM_TEST_TIMEOUT:=200}"
. "$(dirname -- "$0")/ib-lib.sh"

: "${RDMA_INBAND_BYTES:=8m}"      # case 1, over RDMA
: "${RDMA_INBAND_TCP_BYTES:=128k}" # case 2, over TCP: all of it goes through the capture

smc_init
CLC_PEER=$top_builddir/tests/progs/clc_peer
smc_require_built "$SMC_STREAM" "$CLC_PEER"
vm_require_cmd tcpdump bpftool
export SMC_BPF_OBJ=${SMC_BPF_OBJ:-$top_builddir/bpf/smc_tcpopt.bpf.o}
export SMC_BPF_DIR=/sys/fs/bpf/smc-inband-$$
export SMC_RDV_DIR=/run/smc-inband-$$
[ -f "$SMC_BPF_OBJ" ] || smc_hard_error "eBPF object not built: $SMC_BPF_OBJ"
setup_done=0
inband_cleanup() {
	[ -n "$smc_capture_pid" ] && kill "$smc_capture_pid" 2>/dev/null
	[ "$setup_done" = 1 ] && "$SMC_WRAPPER" --teardown >/dev/null 2>&1
	rm -rf -- "$SMC_RDV_DIR"
}
# lib.sh's cleanup reads the exit status first: keep it for it
trap '_rc=$?; inband_cleanup; (exit $_rc); _smc_cleanup' EXIT
out=$("$SMC_WRAPPER" --setup 2>&1) || smc_fail "smc_preload.sh --setup failed in the VM: $out"
setup_done=1


# capture_start LABEL PORT / capture_stop: the capture helpers of lib.sh, here.
capture_start() { smc_capture_start "$1" "$2" lo; }
capture_stop() { smc_capture_stop; }

# clc_walk HEX: the CLC messages at the start of a TCP payload (hex), one word each:
# the type ("01" Proposal .. "04" Decline), "+crd" when the credits extension follows,
# then "rest=N": the bytes after them.
clc_walk() {
	local h=$1 o=0 t l words=""
	while [ "${h:o:8}" = e2d4c3d9 ]; do
		t=${h:o+8:2}
		l=$((16#${h:o+10:4}))
		[ "$l" -ge 12 ] || break
		o=$((o + 2 * l))
		if { [ "$t" = 02 ] || [ "$t" = 03 ]; } && [ "${h:o:6}" = 435244 ]; then
			words+="$t+crd "
			o=$((o + 8))
		else
			words+="$t "
		fi
	done
	echo "${words}rest=$(((${#h} - o) / 2))"
}

# stream LABEL SERVER_TRANSPORT BYTES: smc_stream both ways, client SMC_TRANSPORT=ib.
stream() {
	local label=$1 st=$2 bytes=$3 rc
	n=$(smc_bytes_of "$bytes")
	smc_free_port port
	srv=$(smc_stats_dir "server-$label")
	cli=$(smc_stats_dir "client-$label")
	capture_start "$label" "$port"
	smc_start_server "server-$label" "$srv" env "SMC_TRANSPORT=$st" "$SMC_STREAM" server \
		"$port" --bind 127.0.0.1 --mode block
	smc_wait_port "server-$label" "$port"
	smc_log "$label: $bytes each way, client ib, server $st"
	smc_run "$cli" "$SMC_STREAM" client 127.0.0.1 "$port" --bytes "$bytes" \
		--seed "$RANDOM$RANDOM" --mode block >"$SMC_TMP/client-$label.out" 2>&1
	rc=$?
	cat "$SMC_TMP/client-$label.out"
	smc_wait_server_exit "server-$label" 60
	capture_stop
	cat "$(smc_server_log "server-$label")"
	smc_assert_eq "$label: smc_stream client exit status" "$rc" 0
	smc_assert_eq "$label: smc_stream server exit status" "${SMC_SERVER_RC[server-$label]}" 0
	grep -q "^OK client conn=0 bytes_sent=$n bytes_received=$n " \
		"$SMC_TMP/client-$label.out" || smc_fail "$label: client did not report $n bytes each way"
	grep -q "^OK server conn=0 bytes_sent=$n bytes_received=$n " \
		"$(smc_server_log "server-$label")" ||
		smc_fail "$label: server did not report $n bytes each way"
	smc_assert_eq "$label: SMC option in the SYN" "$(smc_pcap_syn_opt "$pcap" 02)" yes
	smc_assert_eq "$label: SMC option in the SYN-ACK" "$(smc_pcap_syn_opt "$pcap" 12)" yes
	cport=$(smc_pcap_packets "$pcap" | awk '$3 == "02" { print $1; exit }')
	cstream=$(smc_pcap_stream "$pcap" "$cport")
	sstream=$(smc_pcap_stream "$pcap" "$port")
	smc_log "$label: client's TCP payload: $(clc_walk "$cstream")," \
		"server's: $(clc_walk "$sstream")"
}

# ------------------------------------------------ 1. ib on both ends: SMC-R in-band
stream ib ib "$RDMA_INBAND_BYTES"
ib_expect_payload "$srv" $((2 * n)) "server (ib)"
ib_expect_payload "$cli" $((2 * n)) "client (ib)"
smc_assert_eq "ib: client's TCP payload (Proposal, Confirm+credits, nothing else)" \
	"$(clc_walk "$cstream")" "01 03+crd rest=0"
smc_assert_eq "ib: server's TCP payload (Accept+credits, nothing else)" \
	"$(clc_walk "$sstream")" "02+crd rest=0"

# ------------------------------------------------ 2. ib client, shm server: Decline, TCP
stream decline shm "$RDMA_INBAND_TCP_BYTES"
smc_expect_fallback "$cli" declined $((2 * n)) "client (ib vs shm)"
smc_expect_fallback "$srv" declined $((2 * n)) "server (shm vs ib)"
smc_assert_eq "decline: client ib connections" "$(smc_stats "$cli" '.connections.ib')" 0
smc_assert_eq "decline: server ib connections" "$(smc_stats "$srv" '.connections.ib')" 0
# what each application wrote (smc_stream's own header included) follows the CLC bytes
csent=$(smc_stats "$cli" '.bytes.tcp.sent')
ssent=$(smc_stats "$srv" '.bytes.tcp.sent')
smc_assert_ge "decline: client's application bytes" "$csent" "$n"
smc_assert_ge "decline: server's application bytes" "$ssent" "$n"
smc_assert_eq "decline: client's TCP payload (Proposal, then the application's)" \
	"$(clc_walk "$cstream")" "01 rest=$csent"
smc_assert_eq "decline: server's TCP payload (Decline, then the application's)" \
	"$(clc_walk "$sstream")" "04 rest=$ssent"
smc_assert_eq "decline: the Decline's reason (modes do not match)" "${sstream:32:8}" 03040000

# ------------------------------------------------ 3. a kernel's lone Accept: declined
cat >"$SMC_TMP/reqresp.py" <<'PY'
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
s.sendall(b"clc_peer request\n")
data = b""
while not data.endswith(b"\n"):
    d = s.recv(4096)
    if not d:
        break
    data += d
sys.exit(0 if data == b"clc_peer response\n" else 1)
PY
smc_free_port port
cli=$(smc_stats_dir kaccept)
smc_start_server kaccept - "$CLC_PEER" server "$port" accept
smc_wait_port kaccept "$port"
smc_run "$cli" python3 "$SMC_TMP/reqresp.py" "$port"
rc=$?
smc_wait_server_exit kaccept 30
cat "$(smc_server_log kaccept)"
smc_assert_eq "kernel-like Accept: client exit status (response exact)" "$rc" 0
smc_assert_eq "kernel-like Accept: server exit status" "${SMC_SERVER_RC[kaccept]}" 0
smc_expect_fallback "$cli" not-local 1 "ib client, kernel-like server's Accept"
smc_pass
