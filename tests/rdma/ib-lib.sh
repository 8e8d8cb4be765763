# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
# shellcheck shell=bash
#
# Shared part of the application tests over SMC-R (tests/rdma/*.sh but ib_stream.sh):
# sourced by a test that then runs once on the host, where it re-runs itself inside the
# Soft-RoCE VM of tests/vm (vm-lib.sh: skip 77 without qemu), and once inside, where
# tests/integration/lib.sh drives the programs under smc_preload.sh with
# SMC_TRANSPORT=ib on both ends.

# shellcheck source=tests/vm/vm-lib.sh
. "$(dirname -- "${BASH_SOURCE[0]}")/../vm/vm-lib.sh"
: "${SMC_VM_TEST_TIMEOUT:=420}"
vm_enter "$@"

ls /sys/class/infiniband/ 2>/dev/null | grep -q . || vm_skip "no RDMA device in the VM"
export SMC_TRANSPORT=ib
# An SMC-R handshake under TCG (QP setup, link confirmation through the progress
# threads) takes about 20x what it takes on hardware, more while other VMs load the
# host: the default 2 s sent a handshake to TCP now and then.
export SMC_HANDSHAKE_TIMEOUT_MS=${SMC_HANDSHAKE_TIMEOUT_MS:-10000}
# shellcheck source=tests/integration/lib.sh
. "$(dirname -- "${BASH_SOURCE[0]}")/../integration/lib.sh"

# ib_expect_payload DIR MIN_BYTES [LABEL]: the processes whose stats are in DIR moved at
# least MIN_BYTES (sent + received) over RDMA, had at least one ib connection, no
# connection that fell back to TCP (beyond SMC_TEST_TOLERATE reasons, default
# peer-closed, at most 1% + 2), no shared-memory connection, and no RNR. (Failed work
# completions are not checked: a peer process that exits leaves its link to the
# survivor, whose keepalive then fails it with a retry-exceeded completion.)
ib_expect_payload() {
	local dir=$1 min=$2 label=${3:-$(basename -- "$1")} tolerate conns bytes shm rnr tcp closed
	[ "$min" -ge 1 ] || min=1
	smc_require_stats "$dir"
	tolerate=$(printf '"%s",' ${SMC_TEST_TOLERATE:-peer-closed})
	# one jq start (about a second under TCG) for every number (no /dev/fd in the VM)
	read -r conns bytes shm rnr tcp closed <<<"$(jq -rs --argjson tol "[${tolerate%,}]" '
		[ (map(.connections.ib) | add), (map(.bytes.ib.sent + .bytes.ib.received) | add),
		  (map(.connections.shm) | add), (map(.events.rnr // 0) | add),
		  (map(.connections.tcp) | add),
		  (map(.fallback as $f | $tol | map($f[.] // 0) | add) | add) ] | @tsv' \
		"$dir"/*.json)"
	smc_log "stats $label: ib connections $conns, ib bytes $bytes, shm connections $shm," \
		"tcp connections $tcp ($closed tolerated), rnr $rnr"
	smc_assert_ge "$label: ib connections" "$conns" 1
	smc_assert_ge "$label: payload bytes over ib (sent+received)" "$bytes" "$min"
	smc_assert_eq "$label: shm connections" "$shm" 0
	smc_assert_eq "$label: RNR events" "$rnr" 0
	[ "$((tcp - closed))" = 0 ] ||
		smc_fail "$label: $((tcp - closed)) connection(s) fell back to TCP: $(jq -sc 'map(.fallback)' "$dir"/*.json)"
	[ "$closed" -le "$((conns / 100 + 2))" ] ||
		smc_fail "$label: $closed connections closed by the peer during the handshake"
}
