# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
# shellcheck shell=bash
#
# Shared part of the SMC-R tests between two VMs (tests/vm/twovm_*.sh), sourced: on the
# host it boots the pair of run-twovm.sh and exits with their status (77 without qemu);
# in each VM it loads tests/integration/lib.sh and tests/rdma/ib-lib.sh's
# ib_expect_payload, runs `smc_preload.sh --setup` (the eBPF TCP-option program) and
# waits for the other VM to have done the same. VM 1 takes the server role, VM 2 the
# client role; the stats of each side are checked in its own VM.
#
# Both ends run with the library's default transport (SMC_TWOVM_TRANSPORT overrides,
# e.g. ib): between two hosts "auto" must find SMC-R by itself, through the TCP option and
# then the in-band CLC handshake; there is no same-host path between two VMs.

# shellcheck source=tests/vm/vm-lib.sh
. "$(dirname -- "${BASH_SOURCE[0]}")/vm-lib.sh"
: "${SMC_VM_TEST_TIMEOUT:=300}"
twovm_enter "$@"

# ib-lib.sh's vm_enter returns at once in a VM; it sets SMC_TRANSPORT=ib, which a user
# between two hosts would not.
# shellcheck source=tests/rdma/ib-lib.sh
. "$VM_HERE/../rdma/ib-lib.sh"
if [ -n "${SMC_TWOVM_TRANSPORT:-}" ]; then
	export SMC_TRANSPORT=$SMC_TWOVM_TRANSPORT
else
	unset SMC_TRANSPORT
fi
# lib.sh's watchdog ends the test a little before run-twovm.sh stops the VM, so the
# reason gets printed
SMC_TEST_TIMEOUT=$((SMC_VM_TEST_TIMEOUT - 40))
TWOVM_SERVER=10.99.0.1
[ -e /sys/class/infiniband/rxe0 ] || vm_skip "no rxe0 in the VM"

smc_init
export SMC_BPF_OBJ=${SMC_BPF_OBJ:-$top_builddir/bpf/smc_tcpopt.bpf.o}
[ -f "$SMC_BPF_OBJ" ] || smc_hard_error "eBPF object not built: $SMC_BPF_OBJ"
out=$("$SMC_WRAPPER" --setup 2>&1) || smc_fail "smc_preload.sh --setup failed in VM $SMC_VM_ID: $out"
smc_log "VM $SMC_VM_ID ($SMC_VM_ADDR): TCP option set up, transport ${SMC_TRANSPORT:-auto}"
twovm_barrier setup 120

twovm_server() { [ "$SMC_VM_ID" = 1 ]; }

# twovm_serve NAME STATSDIR CMD...: VM 1 starts the server CMD (its @PORT@ replaced by a
# free port) under the library, waits until it listens and publishes the port as
# NAME.port; sets port. With TWOVM_CAPTURE=1, a capture of the port on eth0 runs from
# before the server starts (smc_capture_stop ends it; $pcap names it).
twovm_serve() {
	local name=$1 dir=$2
	shift 2
	smc_free_port port
	[ "${TWOVM_CAPTURE:-0}" = 1 ] && smc_capture_start "$name" "$port" eth0
	smc_start_server "$name" "$dir" "${@//@PORT@/$port}"
	smc_wait_port "$name" "$port" 60
	twovm_put "$name.port" "$port"
}

# twovm_exit_within NAME SECONDS: waits up to SECONDS for server NAME's process group to
# end, without failing; returns 1 if it still runs (its status is then left unset).
twovm_exit_within() {
	local name=$1 secs=$2 i pid=${SMC_SERVER_PID[$1]}
	for ((i = 0; i < secs * 5; i++)); do
		_smc_group_alive "$pid" || break
		twovm_nap 0.2
	done
	_smc_group_alive "$pid" && return 1
	wait "$pid"
	SMC_SERVER_RC[$name]=$?
	return 0
}

# twovm_stream_case LABEL BYTES MODE-ARGS...: smc_stream between the VMs, BYTES each way at
# once, every byte checked by the receiver; server in VM 1, client in VM 2. Each side
# checks the program's result and its stats: the whole stream over ib, no RNR, no
# fallback.
twovm_stream_case() {
	local label=$1 bytes=$2 n dir out rc
	shift 2
	n=$(smc_bytes_of "$bytes")
	dir=$(smc_stats_dir "$label")
	if twovm_server; then
		twovm_serve "$label" "$dir" "$SMC_STREAM" server @PORT@ --bind "$SMC_VM_ADDR" "$@"
		smc_wait_server_exit "$label" 180
		cat "$(smc_server_log "$label")"
		if [ "${TWOVM_CAPTURE:-0}" = 1 ]; then
			# negotiated by the TCP option: it is in the client's SYN and our SYN-ACK
			smc_capture_stop
			smc_assert_eq "$label: SMC option in the SYN" "$(smc_pcap_syn_opt "$pcap" 02)" yes
			smc_assert_eq "$label: SMC option in the SYN-ACK" "$(smc_pcap_syn_opt "$pcap" 12)" yes
		fi
		smc_assert_eq "$label: smc_stream server exit status" "${SMC_SERVER_RC[$label]}" 0
		grep -q "^OK server conn=0 bytes_sent=$n bytes_received=$n " "$(smc_server_log "$label")" ||
			smc_fail "$label: server did not report $n bytes each way"
		ib_expect_payload "$dir" $((2 * n)) "server ($label)"
	else
		twovm_get port "$label.port"
		out=$SMC_TMP/$label.out
		smc_log "$label: $bytes each way to $TWOVM_SERVER:$port"
		smc_run "$dir" "$SMC_STREAM" client "$TWOVM_SERVER" "$port" --bytes "$bytes" \
			--seed "$RANDOM$RANDOM" "$@" >"$out" 2>&1
		rc=$?
		cat "$out"
		smc_assert_eq "$label: smc_stream client exit status" "$rc" 0
		grep -q "^OK client conn=0 bytes_sent=$n bytes_received=$n " "$out" ||
			smc_fail "$label: client did not report $n bytes each way"
		ib_expect_payload "$dir" $((2 * n)) "client ($label)"
	fi
	twovm_barrier "$label.done" 120
}
