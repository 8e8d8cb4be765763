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

# ------------------------------------------------------------------ two VMs (run-twovm.sh)
#
# A two-VM test is one script that runs three times: on the host, twovm_enter re-runs it
# in both VMs of run-twovm.sh at once and exits with their combined status; in each VM it
# returns, with SMC_VM_ID 1 (by convention the server role) or 2 (the client role),
# SMC_VM_ADDR and SMC_VM_PEER_ADDR. The two sides meet through named files: twovm_put
# publishes a value, twovm_get waits for the other VM's; every wait has a deadline and ends
# early when the other VM's command has ended, so a side that failed never leaves the
# other waiting for the whole time limit.
#
#   . "$(dirname -- "$0")/vm-lib.sh"
#   twovm_enter "$@"
#   if [ "$SMC_VM_ID" = 1 ]; then ...; twovm_put port "$port"; else twovm_get port port; ...; fi
#
# SMC_VM_TEST_TIMEOUT bounds each VM (default 300 s, boot included); the consoles are
# saved in $top_builddir/tests/vm/NAME.consoles (SMC_TWOVM_CONSOLES overrides).

VM_RUN_TWO=$VM_HERE/run-twovm.sh
TWOVM_SYNC=/run/smcvm/sync

# twovm_enter ARGS...: on the host, run this script in both VMs and exit with their status;
# inside a VM, return.
twovm_enter() {
	[ "${SMC_IN_VM:-0}" = 1 ] && return 0
	local rc out=${SMC_TWOVM_CONSOLES:-${top_builddir:-.}/tests/vm/$VM_TEST_NAME.consoles}
	vm_log "booting two VMs (run-twovm.sh, limit ${SMC_VM_TEST_TIMEOUT:-300}s, consoles in $out)"
	bash "$VM_RUN_TWO" -t "${SMC_VM_TEST_TIMEOUT:-300}" -o "$out" -- bash "$0" "$@"
	rc=$?
	case $rc in
	0) vm_log "passed in both VMs" ;;
	77) vm_log "skipped (see above)" ;;
	124) vm_log "a VM did not finish in time" ;;
	*) vm_log "failed in a VM (status $rc)" ;;
	esac
	exit "$rc"
}

# twovm_nap SECONDS: sleep without starting a process (a FIFO nobody writes, made by
# twovm-init.sh).
twovm_nap() {
	read -r -t "$1" _ <>/run/smcvm-nap || :
}

# twovm_put NAME [VALUE]: publish NAME (with VALUE, default 1) for the other VM; written
# whole, then renamed, so the reader never sees half a value.
twovm_put() {
	if ! printf '%s\n' "${2-1}" >"$TWOVM_SYNC/.$SMC_VM_ID.$1.tmp" ||
		! mv -f "$TWOVM_SYNC/.$SMC_VM_ID.$1.tmp" "$TWOVM_SYNC/$SMC_VM_ID.$1"; then
		vm_fail "cannot write $TWOVM_SYNC/$SMC_VM_ID.$1"
	fi
}

# twovm_get VAR NAME [SECONDS]: wait until the other VM published NAME and set VAR to its
# value. Fails the test (exit 1) after SECONDS (default 120), or as soon as the other VM's
# command ended without publishing it.
twovm_get() {
	local _peer=$((3 - SMC_VM_ID)) _secs=${3:-120} _i _v
	for ((_i = 0; _i < _secs * 5; _i++)); do
		if [ -f "$TWOVM_SYNC/$_peer.$2" ]; then
			read -r _v <"$TWOVM_SYNC/$_peer.$2"
			printf -v "$1" '%s' "$_v"
			return 0
		fi
		[ -f "/run/smcvm/rc.$_peer" ] &&
			vm_fail "VM $_peer ended (status $(cat "/run/smcvm/rc.$_peer")) without '$2'"
		twovm_nap 0.2
	done
	vm_fail "VM $_peer did not publish '$2' within ${_secs}s"
}

# twovm_barrier NAME [SECONDS]: both VMs reach NAME before either goes on.
twovm_barrier() {
	local _b
	twovm_put "$1"
	twovm_get _b "$1" "${2:-120}"
}
