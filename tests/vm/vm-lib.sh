# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
# shellcheck shell=bash
#
# Shared helpers for the tests that run inside the VM of run-vm.sh (sourced, bash only).
#
# A VM test is one script that runs twice: started by `make check` on the host, it calls
# vm_enter, which re-runs the same script with the same arguments inside a VM and exits
# with its status (77 when the VM cannot be had); inside the VM (SMC_IN_VM=1) vm_enter
# returns and the test goes on, with the source and build trees at the same paths,
# root, bpffs, cgroup2, a Soft-RoCE device "rxelo" on lo and the smc module loaded.
#
#   . "$(dirname -- "$0")/vm-lib.sh"
#   vm_enter "$@"
#   ... runs in the VM ...
#
# SMC_VM_TEST_TIMEOUT bounds the VM of one test in seconds (default 300, boot included).

VM_HERE=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)
VM_RUN=$VM_HERE/run-vm.sh
VM_TEST_NAME=$(basename -- "$0" .sh)

vm_log() {
	printf '[%s %s%s] %s\n' "$(date +%H:%M:%S.%3N)" "$VM_TEST_NAME" \
		"${SMC_IN_VM:+ (vm)}" "$*"
}

vm_fail() {
	printf 'FAIL: %s: %s\n' "$VM_TEST_NAME" "$*"
	exit 1
}

vm_skip() {
	printf 'SKIP: %s: %s\n' "$VM_TEST_NAME" "$*"
	exit 77
}

# vm_enter ARGS...: on the host, run this script inside the VM and exit with its status;
# inside the VM, return.
vm_enter() {
	[ "${SMC_IN_VM:-0}" = 1 ] && return 0
	local rc
	vm_log "booting the VM (run-vm.sh, limit ${SMC_VM_TEST_TIMEOUT:-300}s)"
	SMC_VM_VERBOSE=1 bash "$VM_RUN" -t "${SMC_VM_TEST_TIMEOUT:-300}" -- bash "$0" "$@"
	rc=$?
	case $rc in
	0) vm_log "passed in the VM" ;;
	77) vm_log "skipped (see above)" ;;
	124) vm_log "the VM did not finish in time" ;;
	*) vm_log "failed in the VM (status $rc)" ;;
	esac
	exit "$rc"
}

# vm_require_cmd CMD...: inside the VM, skip when a program is missing.
vm_require_cmd() {
	local c
	for c in "$@"; do
		command -v "$c" >/dev/null 2>&1 || vm_skip "'$c' is not installed"
	done
}

# vm_free_port: prints a TCP port nobody uses in the VM (the VM starts empty, so a random
# one in 20000-49999 not listed by ss is enough).
vm_free_port() {
	local p
	while :; do
		p=$((20000 + (RANDOM * 32768 + RANDOM) % 30000))
		[ -z "$(ss -Htan "( sport = :$p or dport = :$p )" 2>/dev/null)" ] && break
	done
	echo "$p"
}
