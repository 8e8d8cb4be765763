#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#
# A hostile peer forges the shared block of its own connection (tests/progs/shm_forge.c):
# cursors two rings ahead, backwards, with reserved bits or counts beyond the ring,
# impossible rewinds, the victim's own rewind shown pending, flags in odd combinations,
# unknown flag bits, magic and holder counts trashed, pages hole-punched, a byte on the
# TCP channel. One attack per victim process; the victim is a preloaded asyncio echo
# server (Python's event loop on epoll: the library's epoll emulation). Per attack:
#  - the forger had both its connections upgraded (its stats: 2 shm, no tcp);
#  - the victim stays alive, exits cleanly on SIGTERM, and counts exactly the aborts
#    the attack must cost (events.aborts: 1 where the peer sent an invalid cursor,
#    rewind or TCP byte; 0 where it only announced a close or an abort, or forged what
#    nobody relies on), its three preloaded connections (warm-up, honest, attacked)
#    all shm, and the warm-up's plain one (which makes it likely that its progress
#    thread starts before the idle baseline is taken: a handshake needs it only when
#    the Proposal is late) TCP;
#  - the attacked connection ends within the forger's 10 s receive timeout, or keeps
#    working (an echo checked byte for byte) where the forgery is valid or ignored, or
#    (a producer cursor exactly a ring ahead: valid) stays open, echoing stale bytes;
#  - the honest connection, opened before the attack, echoes SHM_FORGE_BYTES checked
#    bytes after it;
#  - the victim's log names both connections' ends (the honest one a clean EOF after
#    all its bytes) and holds no sanitizer report;
#  - the victim holds no fd, memfd or mapping more than when idle once they closed.
# Under test.sh's sanitizer pass the library is the ASan/UBSan build and the victim
# runs with the ASan runtime preloaded (SMC_TEST_PRELOAD_FIRST): a read or write outside
# a ring aborts it and fails the "alive" check. SHM_FORGE_ATTACKS picks a subset.
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
. "$(dirname -- "$0")/lib.sh"

smc_require_cmd python3
smc_init
[ "$SMC_TEST_EXPECT" = shm ] || smc_skip "forges shared-memory blocks: shm mode only"
FORGE=$top_builddir/tests/progs/shm_forge
smc_require_built "$FORGE"
unset SMC_SHORT_CONN_US SMC_POOL_SLOTS SMC_POOL_RING SMC_TRANSPORT
export SMC_LOG_LEVEL=warn
: "${SHM_FORGE_BYTES:=4194304}"
py=/usr/bin/python3
[ -x "$py" ] || py=$(command -v python3)

cat >"$SMC_TMP/victim.py" <<'PY'
import asyncio, signal, sys

async def handle(reader, writer):
    peer = writer.get_extra_info("peername")[1]
    n, how = 0, "eof"
    try:
        while True:
            d = await reader.read(65536)
            if not d:
                break
            n += len(d)
            writer.write(d)
            await writer.drain()
    except Exception as e:
        how = "%s(%s)" % (type(e).__name__, getattr(e, "errno", ""))
    finally:
        print("END peer=%d bytes=%d how=%s" % (peer, n, how), flush=True)
        writer.close()
        try:
            await writer.wait_closed()
        except Exception:
            pass

async def main():
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    srv = await asyncio.start_server(handle, "127.0.0.1", int(sys.argv[1]))
    print("LISTENING", flush=True)
    async with srv:
        await stop.wait()

asyncio.run(main())
PY

attacks=$("$FORGE" list) || smc_hard_error "shm_forge list failed"
[ -n "${SHM_FORGE_ATTACKS:-}" ] &&
	attacks=$(awk -v want=" $SHM_FORGE_ATTACKS " 'index(want, " " $1 " ")' <<<"$attacks")
[ -n "$attacks" ] || smc_hard_error "no attack selected"
summary=()

# idle: no ring mapped any more (the warm-up's is freed a little after its close)
wait_idle() {
	local pid=$1 i now
	for ((i = 0; i < 100; i++)); do
		now=$(smc_proc_resources "$pid")
		case $now in *" memfds=0 memfd_maps=0") echo "$now"; return 0 ;; esac
		sleep 0.1
	done
	smc_fail "victim (pid $pid) still maps a ring 10 s after the warm-up closed: $now"
}

while read -r name want_aborts want; do
	smc_free_port port
	srv=$(smc_stats_dir "victim-$name")
	cli=$(smc_stats_dir "forger-$name")
	warm=$(smc_stats_dir "warmup-$name")
	# debug: the log says when the progress thread starts (see below)
	SMC_LOG_LEVEL=debug smc_start_server "victim-$name" "$srv" "$py" "$SMC_TMP/victim.py" "$port"
	smc_wait_port "victim-$name" "$port"
	pid=${SMC_SERVER_PID[victim-$name]}
	log=$(smc_server_log "victim-$name")
	smc_run "$warm" "$FORGE" warmup 127.0.0.1 "$port" >"$SMC_TMP/warmup-$name.out" 2>&1 ||
		smc_fail "$name: warm-up failed: $(cat "$SMC_TMP/warmup-$name.out")"
	base=$(wait_idle "$pid")
	base_lines=$(wc -l <"$log")

	out=$SMC_TMP/forge-$name.out
	smc_run "$cli" "$FORGE" "$name" 127.0.0.1 "$port" --bytes "$SHM_FORGE_BYTES" >"$out" 2>&1
	rc=$?
	cat "$out"
	smc_assert_eq "$name: forger exit status" "$rc" 0
	outcome=$(sed -n "s/^OUTCOME $name //p" "$out")
	case $want:$outcome in
	ended:"ended how="*) ;;
	works:works) ;;
	open:"open "*) ;;
	*) smc_fail "$name: attacked connection: '$outcome', expected $want" ;;
	esac
	grep -q "^HONEST ok bytes=$SHM_FORGE_BYTES\$" "$out" ||
		smc_fail "$name: the honest connection: $(grep '^HONEST' "$out")"
	read -r hport aport < <(sed -n 's/^PORTS honest=\([0-9]*\) attack=\([0-9]*\)$/\1 \2/p' "$out")
	[ -n "$aport" ] || smc_fail "$name: no PORTS line"

	kill -0 "$pid" 2>/dev/null || smc_fail "$name: the victim died: $(tail -20 "$log")"
	# The progress thread (its event loop's epoll and eventfd) is started for good by
	# the first handshake whose Proposal is late, which the warm-up's plain connection
	# only makes likely: when that came after the baseline, it is not a leak.
	if tail -n "+$((base_lines + 1))" "$log" | grep -q 'progress thread started'; then
		smc_log "$name: the victim's progress thread started after its baseline"
		base=$(awk '{ for (i = 1; i <= NF; i++) { split($i, kv, "=")
			if (kv[1] == "eventfds" || kv[1] == "epolls") $i = kv[1] "=" kv[2] + 1 }
			print }' <<<"$base")
	fi
	smc_expect_resources "victim ($name)" "$pid" "$base" 20
	smc_stop_server "victim-$name" TERM 20
	grep -E 'AddressSanitizer|runtime error|LeakSanitizer' "$log" &&
		smc_fail "$name: sanitizer report in the victim"
	smc_assert_eq "$name: victim exit status" "${SMC_SERVER_RC[victim-$name]}" 0
	grep -q "^END peer=$hport bytes=$((4096 + SHM_FORGE_BYTES)) how=eof\$" "$log" ||
		smc_fail "$name: the victim's end of the honest connection: $(grep "peer=$hport " "$log")"
	vend=$(grep "^END peer=$aport " "$log") ||
		smc_fail "$name: the victim never ended the attacked connection"
	why=$(grep -o 'peer sent an invalid [A-Za-z ]*' "$log" | head -1)

	smc_require_stats "$srv"
	smc_require_stats "$cli"
	aborts=$(smc_stats "$srv" '.events.aborts')
	smc_log "$name: victim $(smc_stats_summary "$srv")"
	# A zeroed header is invalid for the forger's own library too: whichever side
	# notices first aborts and tells the other (conn_abort_protocol), which then ends
	# on that reset without an abort of its own.
	if [ "$name" = punch-hdr ] && [ "$aborts" = 0 ] && grep -q "^OUTCOME $name ended how=reset" "$out"; then
		smc_log "$name: the forger's library aborted first; the victim took its reset"
	else
		smc_assert_eq "$name: victim aborts" "$aborts" "$want_aborts"
	fi
	smc_assert_eq "$name: victim shm connections" "$(smc_stats "$srv" '.connections.shm')" 3
	# the warm-up's plain connection (the library bypassed in the forger)
	smc_assert_eq "$name: victim tcp connections" "$(smc_stats "$srv" '.connections.tcp')" 1
	smc_assert_eq "$name: victim peer-not-smc" \
		"$(smc_stats "$srv" '.fallback["peer-not-smc"] // 0')" 1
	smc_assert_eq "$name: forger shm connections" "$(smc_stats "$cli" '.connections.shm')" 2
	smc_assert_eq "$name: forger tcp connections" "$(smc_stats "$cli" '.connections.tcp')" 0
	summary+=("$name: aborts=$aborts outcome='$outcome' victim: ${vend#END } ${why:+($why)}")
done <<<"$attacks"

smc_log "summary:"
printf '  %s\n' "${summary[@]}"
smc_pass
