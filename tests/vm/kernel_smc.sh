#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#
# kernel_smc.sh: interoperation with the kernel's own SMC (AF_SMC, smc.ko), in the VM of
# run-vm.sh, with the SMC TCP option set up (`smc_preload.sh --setup`):
#
#   1. a kernel AF_SMC client against a preloaded server;
#   2. a preloaded client against a kernel AF_SMC server.
#
# The kernel and the library both put the SMC option on the wire, so each side goes on
# to CLC. In this VM the kernel finds no SMC-R device it can use (Soft-RoCE has RoCE v2
# GIDs only, and SMC-Rv2 does not run over loopback), so it sends a Decline (see
# tests/vm/README.md); the library must take it, or answer the kernel's Decline, and
# both ends continue over TCP. Checked: the application's bytes arrive exactly (a
# checksummed request and response, both ways: tests/vm/kernel_peer.py), the kernel
# server's accept() returns the connection, and the library's stats show the connection
# as tcp with the fallback reason $SMC_TEST_KERNEL_REASON (default "declined"), nothing
# over shm or ib.

# shellcheck source=tests/vm/vm-lib.sh
. "$(dirname -- "$0")/vm-lib.sh"
vm_enter "$@"

# ------------------------------------------------------------------ inside the VM
SMC_TEST_TIMEOUT=${SMC_TEST_TIMEOUT:-200}
SMC_CMD_TIMEOUT=${SMC_CMD_TIMEOUT:-60}
# shellcheck source=tests/integration/lib.sh
. "$VM_HERE/../integration/lib.sh"
smc_init
vm_require_cmd python3 bpftool
reason=${SMC_TEST_KERNEL_REASON:-declined}
peer=(python3 "$VM_HERE/kernel_peer.py")
export SMC_BPF_OBJ=${SMC_BPF_OBJ:-$top_builddir/bpf/smc_tcpopt.bpf.o}
[ -f "$SMC_BPF_OBJ" ] || smc_hard_error "eBPF object not built: $SMC_BPF_OBJ"
"$SMC_WRAPPER" --setup || smc_fail "smc_preload.sh --setup failed in the VM"
grep -qw '^smc' /proc/modules || smc_skip "the VM's kernel has no smc module loaded"

# check_exchange CLIENT_JSON SERVER_JSON: both sides saw the same request and response.
check_exchange() {
	local c=$1 s=$2 k
	smc_assert_eq "client digests" "$(jq -r .digests_ok <<<"$c")" true
	for k in request_bytes request_sha256 response_bytes response_sha256; do
		smc_assert_eq "$k seen by client and server" "$(jq -r ".$k" <<<"$c")" \
			"$(jq -r ".$k" <<<"$s")"
	done
}

# check_library_side STATSDIR LABEL MIN_BYTES: one tcp connection that fell back with
# the expected reason, nothing upgraded.
check_library_side() {
	local dir=$1 label=$2 min=$3
	smc_expect_fallback "$dir" "$reason" "$min" "$label"
	smc_assert_eq "$label: ib connections" "$(smc_stats "$dir" '.connections.ib // 0')" 0
}

request=300000
respond=500000
min=$((request + respond))

# ------------------------------------------------ 1. kernel client -> preloaded server
smc_free_port port
stats=$(smc_stats_dir lib-server)
smc_start_server lib-server "$stats" "${peer[@]}" app-server --port "$port" \
	--respond "$respond"
smc_wait_port lib-server "$port"
client=$(smc_run - "${peer[@]}" app-client --smc --port "$port" --request "$request") ||
	smc_fail "kernel AF_SMC client failed: $client"
smc_log "kernel client: $client"
smc_wait_server_exit lib-server 30
server=$(grep '"role": "server"' "$(smc_server_log lib-server)")
smc_log "preloaded server: $server"
[ -n "$server" ] || smc_fail "the preloaded server did not answer"
check_exchange "$client" "$server"
check_library_side "$stats" "preloaded server" "$min"

# ------------------------------------------------ 2. preloaded client -> kernel server
smc_free_port port
stats=$(smc_stats_dir lib-client)
smc_start_server kernel-server - "${peer[@]}" app-server --smc --port "$port" \
	--respond "$respond"
smc_wait_port kernel-server "$port"
client=$(smc_run "$stats" "${peer[@]}" app-client --port "$port" --request "$request") ||
	smc_fail "preloaded client failed: $client"
smc_log "preloaded client: $client"
smc_wait_server_exit kernel-server 30
server=$(grep '"role": "server"' "$(smc_server_log kernel-server)")
smc_log "kernel server: $server"
[ -n "$server" ] || smc_fail "the kernel AF_SMC server's accept() did not return the connection"
check_exchange "$client" "$server"
check_library_side "$stats" "preloaded client" "$min"
# For the log: the kernel's own fallback reasons (client side from 1., server from 2.).
smc_log "kernel fallback counters: $("${peer[@]}" fallback-stats)"

smc_pass
