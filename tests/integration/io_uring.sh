#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#
# io_uring's sends and receives reach the kernel without passing through the library,
# so a process that uses io_uring must have its connections on plain TCP: the
# connections it makes once it has a ring are not upgraded, and those upgraded before
# its first ring go back to TCP when it makes it, without losing a byte.
# tests/progs/io_uring_check, both sides under smc_preload.sh, every byte checked:
#  1. the server's ring made with syscall(SYS_io_uring_setup), data through its own
#     SQ/CQ ring, the client plain, 1 MiB each way: made before listen(), the listener
#     announces no SMC (the client sees peer-not-smc); made between listen() and
#     accept(), the server declines the client's proposal (declined); fallback
#     io-uring either way;
#  2. the client's ring made through liburing, the server plain: the client does not
#     offer SMC (fallback io-uring);
#  3. a client that starts with a ring inherited across exec (the descriptor scan at
#     load), moving its data with send/recv: fallback io-uring all the same.
#     Nothing moves over shared memory in 1-3.
#  4. midstream: the connection is upgraded with no ring anywhere; one side reads and
#     writes 256 KiB with send/recv while its peer writes its whole stream from a
#     thread and holds its reads, so when that side then makes its ring both rings
#     hold bytes not read yet; it moves the next 1 MiB each way through the ring on
#     the same socket, then 64 KiB each way with send/recv, and both read the end of
#     the stream. The server with a raw ring, the client with liburing, the server
#     with 64 KiB rings (the peer's writer waits for room when the ring is made), and
#     a control with no ring. Checked: every byte at its offset both ways, both exit
#     0; the side that made the ring counts events.downgrades >= 1, its peer
#     events.peer_downgrades >= 1; both count the connection upgraded and no fallback
#     reason, bytes over shm (before the ring) and over TCP (after it); the peer
#     received exactly its peer's stream (shm + tcp); each process, once the
#     connection is closed, holds no more sockets, eventfds, epoll sets, memfds or
#     memfd mappings than when it was idle before it (after a short warm-up
#     connection, which brings the library's per-process descriptors), and no process
#     is left behind. The control: everything over shm, nothing downgraded.
# shm mode only (the test is about the upgrade decision). IO_URING_CASES (labels
# separated by blanks: server-raw, server-raw-late, client-liburing, client-inherited,
# mid-control, mid-server-raw, mid-client-liburing, mid-small-rings) runs only those.
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
. "$(dirname -- "$0")/lib.sh"

BYTES=$((1 << 20))
CHECK=$top_builddir/tests/progs/io_uring_check
smc_require_built "$CHECK"
smc_init
[ "$SMC_TEST_EXPECT" = shm ] || smc_skip "about the upgrade decision: shm mode only"
grep -qx 0 /proc/sys/kernel/io_uring_disabled 2>/dev/null ||
	[ ! -e /proc/sys/kernel/io_uring_disabled ] || smc_skip "io_uring is disabled (kernel.io_uring_disabled)"

# want LABEL: whether IO_URING_CASES selects the case.
want() {
	[ -z "${IO_URING_CASES:-}" ] || [[ " $IO_URING_CASES " == *" $1 "* ]]
}

# pair LABEL SERVER-ARGS CLIENT-PREFIX... -- CLIENT-RING: one connection (SERVER-ARGS:
# RING [ring-after-listen], one word); leaves the stats in stats-server-LABEL and
# stats-client-LABEL. Returns 1 when IO_URING_CASES leaves the case out.
pair() {
	local label=$1 sring cring port srv cli out rc
	want "$label" || return 1
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

if pair server-raw raw -- none; then
	# the ring side's bytes never pass through the library: none are counted there
	smc_expect_fallback "$SMC_TMP/stats-server-server-raw" io-uring 0 "server (raw ring)"
	smc_expect_fallback "$SMC_TMP/stats-client-server-raw" peer-not-smc $((2 * BYTES)) \
		"client of the raw-ring server"
fi
if pair server-raw-late "raw ring-after-listen" -- none; then
	smc_expect_fallback "$SMC_TMP/stats-server-server-raw-late" io-uring 0 \
		"server (raw ring made after listen)"
	smc_expect_fallback "$SMC_TMP/stats-client-server-raw-late" declined $((2 * BYTES)) \
		"client of the server whose ring came after listen"
fi
if pair client-liburing none -- liburing; then
	smc_expect_fallback "$SMC_TMP/stats-client-client-liburing" io-uring 0 "client (liburing)"
	smc_expect_fallback "$SMC_TMP/stats-server-client-liburing" peer-not-smc $((2 * BYTES)) \
		"server of the liburing client"
fi
if pair client-inherited none "$CHECK" exec-with-ring -- none; then
	smc_expect_fallback "$SMC_TMP/stats-client-client-inherited" io-uring $((2 * BYTES)) \
		"client (inherited ring)"
fi

# ------------------------------------------------------------------ midstream

# As in io_uring_check.c: MID_PRE bytes each way before the ring, MID_TAIL after it,
# MID_WARM_UP each way on the warm-up connection.
MID_PRE=262144
MID_TAIL=65536
MID_WARM_UP=8
MID_TOTAL=$((MID_PRE + BYTES + MID_TAIL))
# the program ends itself after 60 s (MID_TIMEOUT)
MID_WAIT=70

# mid_pid LOG ROLE: the pid of the READY line.
mid_pid() {
	sed -n "s/^READY $2 pid=\([0-9]*\)\$/\1/p" "$1" | head -n 1
}

# mid_stats WHAT DIR: what both sides of a downgraded connection show: it and the
# warm-up connection counted upgraded, no connection on TCP from the start and no
# fallback reason; the downgrade counts logged.
mid_stats() {
	local what=$1 dir=$2
	smc_require_stats "$dir"
	smc_log "stats $what: $(smc_stats_summary "$dir") downgrades=$(smc_stats "$dir" '.events.downgrades // 0') peer_downgrades=$(smc_stats "$dir" '.events.peer_downgrades // 0')"
	smc_assert_eq "$what: connections upgraded (the warm-up's and this one)" \
		"$(smc_stats "$dir" '.connections.shm')" 2
	smc_assert_eq "$what: tcp connections" "$(smc_stats "$dir" '.connections.tcp')" 0
	smc_assert_eq "$what: fallback reasons" "$(smc_stats "$dir" '[.fallback[]] | add // 0')" 0
}

# midstream LABEL SIDE RING: one io_uring_check midstream connection; SIDE (server or
# client) makes its RING (none: the control) in mid-stream, the other side is its
# peer. Stats in stats-server-LABEL and stats-client-LABEL.
midstream() {
	local label=$1 side=$2 ring=$3 port gate r dir mode rring peer rdir pdir
	local -A pid base
	want "$label" || return 0
	smc_free_port port
	gate=$SMC_TMP/gate-$label
	mkdir -p "$gate" || smc_hard_error "mkdir $gate"
	if [ "$ring" = none ]; then
		smc_log "midstream $label: no ring (control), $MID_TOTAL bytes each way"
	else
		smc_log "midstream $label: the $side makes a $ring ring in mid-stream, $MID_TOTAL bytes each way"
	fi
	for r in server client; do
		dir=$(smc_stats_dir "$r-$label")
		if [ "$r" = "$side" ]; then
			mode=midstream rring=$ring
		else
			mode=midstream-peer rring=none
		fi
		smc_start_server "$r-$label" "$dir" "$CHECK" "$r" "$port" "$BYTES" "$rring" "$mode" \
			"$gate"
		[ "$r" = server ] && smc_wait_port "$r-$label" "$port"
	done
	# idle after the warm-up connection
	for r in server client; do
		smc_wait_log "$r-$label" "^(READY|FAIL|TIMEOUT|SKIP) ${r}[ :]"
		grep -q "^SKIP $r" "$(smc_server_log "$r-$label")" &&
			smc_skip "$(grep -h "^SKIP" "$(smc_server_log "$r-$label")" | head -n 1)"
		pid[$r]=$(mid_pid "$(smc_server_log "$r-$label")" "$r")
		[ -n "${pid[$r]}" ] || smc_fail "midstream $label: the $r did not start: $(cat "$(smc_server_log "$r-$label")")"
		base[$r]=$(smc_proc_resources "${pid[$r]}")
	done
	for r in server client; do
		: >"$gate/go-$r"
	done
	for r in server client; do
		smc_wait_log "$r-$label" "^(DONE|FAIL|TIMEOUT|SKIP) ${r}[ :]" "$MID_WAIT"
	done
	for r in server client; do
		if grep -q "^DONE $r " "$(smc_server_log "$r-$label")"; then
			smc_expect_resources "midstream $label: the $r after its close" "${pid[$r]}" \
				"${base[$r]}"
		fi
		: >"$gate/end-$r"
	done
	for r in server client; do
		smc_wait_server_exit "$r-$label" 20
		cat "$(smc_server_log "$r-$label")"
	done
	for r in server client; do
		smc_log "stats $r ($label): $(smc_stats_summary "$SMC_TMP/stats-$r-$label")"
	done
	grep -q '^SKIP' "$(smc_server_log "server-$label")" "$(smc_server_log "client-$label")" &&
		smc_skip "$(grep -h '^SKIP' "$(smc_server_log "server-$label")" \
			"$(smc_server_log "client-$label")" | head -n 1)"
	for r in server client; do
		smc_assert_eq "midstream $label: $r exit status" "${SMC_SERVER_RC[$r-$label]}" 0
		grep -q "^OK $r bytes=$MID_TOTAL .* sent=$MID_TOTAL received=$MID_TOTAL\$" \
			"$(smc_server_log "$r-$label")" ||
			smc_fail "midstream $label: the $r did not move $MID_TOTAL bytes each way"
	done
	rdir=$SMC_TMP/stats-$side-$label
	if [ "$side" = server ]; then peer=client; else peer=server; fi
	pdir=$SMC_TMP/stats-$peer-$label
	if [ "$ring" = none ]; then
		smc_expect_payload "$rdir" $((2 * MID_TOTAL)) "$side ($label)"
		smc_expect_payload "$pdir" $((2 * MID_TOTAL)) "$peer ($label)"
		for dir in "$rdir" "$pdir"; do
			smc_assert_eq "$label: downgrades without a ring" \
				"$(smc_stats "$dir" '(.events.downgrades // 0) + (.events.peer_downgrades // 0)')" 0
		done
		return
	fi
	mid_stats "$side ($label)" "$rdir"
	mid_stats "$peer ($label)" "$pdir"
	smc_assert_ge "$side ($label): events.downgrades" \
		"$(smc_stats "$rdir" '.events.downgrades // 0')" 1
	smc_assert_ge "$peer ($label): events.peer_downgrades" \
		"$(smc_stats "$pdir" '.events.peer_downgrades // 0')" 1
	# The ring side's bytes through the ring pass no interposed function: its stats hold
	# what went through send/recv, before the ring (shm) and after it (tcp).
	smc_assert_ge "$side ($label): bytes sent over shm before the ring" \
		"$(smc_stats "$rdir" '.bytes.shm.sent')" "$MID_PRE"
	smc_assert_ge "$side ($label): bytes received over shm before the ring" \
		"$(smc_stats "$rdir" '.bytes.shm.received')" "$MID_PRE"
	smc_assert_ge "$side ($label): bytes over tcp after the ring (sent+received)" \
		"$(smc_stats "$rdir" '.bytes.tcp.sent + .bytes.tcp.received')" $((2 * MID_TAIL))
	smc_assert_ge "$peer ($label): bytes over shm before the downgrade" \
		"$(smc_stats "$pdir" '.bytes.shm.sent + .bytes.shm.received')" 1
	smc_assert_ge "$peer ($label): bytes over tcp after the downgrade" \
		"$(smc_stats "$pdir" '.bytes.tcp.sent + .bytes.tcp.received')" 1
	# everything the peer reads passes through the library (the warm-up's bytes too);
	# what it sends may count twice (written to the ring, then sent again over TCP when
	# not read there)
	smc_assert_eq "$peer ($label): bytes received (shm + tcp)" \
		"$(smc_stats "$pdir" '.bytes.shm.received + .bytes.tcp.received')" \
		$((MID_TOTAL + MID_WARM_UP))
	smc_assert_ge "$peer ($label): bytes sent (shm + tcp)" \
		"$(smc_stats "$pdir" '.bytes.shm.sent + .bytes.tcp.sent')" "$MID_TOTAL"
}

midstream mid-control server none
midstream mid-server-raw server raw
midstream mid-client-liburing client liburing
# rings smaller than what is in flight: the peer's writer waits for room in the ring
# the server reads from when the server makes its ring
SMC_RCVBUF=64k SMC_SNDBUF=64k midstream mid-small-rings server raw
smc_pass
