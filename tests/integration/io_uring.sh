#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#
# A process that uses io_uring keeps its connections plain TCP: io_uring's sends and
# receives reach the kernel without passing through the library. tests/lib/
# io_uring_check moves 1 MiB each way, every byte checked, both sides under
# smc_preload.sh:
#  1. the server's ring made with syscall(SYS_io_uring_setup), data through its own
#     SQ/CQ ring, the client plain: made before listen(), the listener announces no
#     SMC (the client sees peer-not-smc); made between listen() and accept(), the
#     server declines the client's proposal (declined); fallback io-uring either way;
#  2. the client's ring made through liburing, the server plain: the client does not
#     offer SMC (fallback io-uring);
#  3. a client that starts with a ring inherited across exec (the descriptor scan at
#     load), moving its data with send/recv: fallback io-uring all the same.
# Nothing moves over shared memory in any of them.
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
. "$(dirname -- "$0")/lib.sh"

BYTES=$((1 << 20))
CHECK=$top_builddir/tests/lib/io_uring_check
smc_require_built "$CHECK"
smc_init
[ "$SMC_TEST_EXPECT" = shm ] || smc_skip "about the upgrade decision: shm mode only"
grep -qx 0 /proc/sys/kernel/io_uring_disabled 2>/dev/null ||
	[ ! -e /proc/sys/kernel/io_uring_disabled ] || smc_skip "io_uring is disabled (kernel.io_uring_disabled)"

# pair LABEL SERVER-ARGS CLIENT-PREFIX... -- CLIENT-RING: one connection (SERVER-ARGS:
# RING [ring-after-listen], one word); leaves the stats in stats-server-LABEL and
# stats-client-LABEL.
pair() {
	local label=$1 sring cring port srv cli out rc
	read -r -a sring <<<"$2"
	shift 2
	local prefix=()
	while [ "$1" != -- ]; do
		prefix+=("$1")
		shift
	done
	cring=$2
	smc_free_port port
	srv=$(smc_stats_dir "server-$label")
	cli=$(smc_stats_dir "client-$label")
	smc_start_server "server-$label" "$srv" "$CHECK" server "$port" "$BYTES" "${sring[@]}"
	smc_wait_port "server-$label" "$port"
	out=$SMC_TMP/client-$label.out
	smc_run "$cli" "${prefix[@]}" "$CHECK" client "$port" "$BYTES" "$cring" >"$out" 2>&1
	rc=$?
	cat "$out"
	smc_wait_server_exit "server-$label" 60
	cat "$(smc_server_log "server-$label")"
	grep -q '^SKIP' "$out" "$(smc_server_log "server-$label")" && smc_skip "$(grep -h '^SKIP' \
		"$out" "$(smc_server_log "server-$label")" | head -n 1)"
	smc_assert_eq "client ($label) exit status" "$rc" 0
	smc_assert_eq "server ($label) exit status" "${SMC_SERVER_RC[server-$label]}" 0
	grep -q "^OK client bytes=$BYTES " "$out" || smc_fail "client ($label) did not finish"
	grep -q "^OK server bytes=$BYTES " "$(smc_server_log "server-$label")" ||
		smc_fail "server ($label) did not finish"
}

pair server-raw raw -- none
# the ring side's bytes never pass through the library: none are counted there
smc_expect_fallback "$SMC_TMP/stats-server-server-raw" io-uring 0 "server (raw ring)"
smc_expect_fallback "$SMC_TMP/stats-client-server-raw" peer-not-smc $((2 * BYTES)) \
	"client of the raw-ring server"

pair server-raw-late "raw ring-after-listen" -- none
smc_expect_fallback "$SMC_TMP/stats-server-server-raw-late" io-uring 0 \
	"server (raw ring made after listen)"
smc_expect_fallback "$SMC_TMP/stats-client-server-raw-late" declined $((2 * BYTES)) \
	"client of the server whose ring came after listen"

pair client-liburing none -- liburing
smc_expect_fallback "$SMC_TMP/stats-client-client-liburing" io-uring 0 "client (liburing)"
smc_expect_fallback "$SMC_TMP/stats-server-client-liburing" peer-not-smc $((2 * BYTES)) \
	"server of the liburing client"

pair client-inherited none "$CHECK" exec-with-ring -- none
smc_expect_fallback "$SMC_TMP/stats-client-client-inherited" io-uring $((2 * BYTES)) \
	"client (inherited ring)"
smc_pass
