#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#
# tests/integration/exec.sh over SMC-R on Soft-RoCE, in the VM of tests/vm, both ends
# with SMC_TRANSPORT=ib: an RDMA connection handed to a new program (exec, posix_spawn,
# fork then exec) or to a forked child goes back to plain TCP without losing a byte
# (CDC_WENT_TCP and the peer's answer, then the peer re-sends over TCP what was not
# read); the stats show payload over ib before and TCP after. Fewer cases and smaller
# streams than on the host (TCG): RDMA_EXEC_CASES, RDMA_EXEC_BYTES.
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
# every case boots nothing but costs 15-30 s under TCG: more than the usual bound
: "${SMC_VM_TEST_TIMEOUT:=600}"
export SMC_TEST_TIMEOUT=${SMC_TEST_TIMEOUT:-480}
. "$(dirname -- "$0")/ib-lib.sh"

EXEC_BYTES=${RDMA_EXEC_BYTES:-2m}
EXEC_CASES=${RDMA_EXEC_CASES:-control server-keep server-nopreload client-keep server-fork-exec server-fork socat-nofork}
# shellcheck source=tests/integration/exec.sh
. "$(dirname -- "$0")/../integration/exec.sh"
