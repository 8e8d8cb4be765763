#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#
# memcached (-t 4) with memcslap set, get and mget loads, all under smc_preload.sh.
# memcslap exits 0 even when it cannot reach the server, so its report is parsed and
# memcached's own counters (memcstat) must account for every operation; then the
# transport through the stats.
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
. "$(dirname -- "$0")/lib.sh"

CONCURRENCY=8
EXECUTE=5000

smc_require_cmd memcached memcslap memcstat
smc_init
smc_free_port port
srv=$(smc_stats_dir server)
cli=$(smc_stats_dir client)
servers=127.0.0.1:$port

# -u: memcached refuses to run as root without it; ignored for other users.
smc_start_server memcached "$srv" memcached -t 4 -p "$port" -U 0 -l 127.0.0.1 -u "$(id -un)"
smc_wait_port memcached "$port"

# slap TEST: one memcslap run; it must report the full key count and no error.
slap() {
	local t=$1 out=$SMC_TMP/slap-$1.out err=$SMC_TMP/slap-$1.err keys
	smc_log "memcslap --test=$t"
	smc_run "$cli" memcslap --servers="$servers" --concurrency="$CONCURRENCY" \
		--execute-number="$EXECUTE" --test="$t" >"$out" 2>"$err" ||
		smc_fail "memcslap $t failed (status $?): $(cat "$err")"
	cat "$out" "$err"
	[ -s "$err" ] && smc_fail "memcslap $t wrote errors: $(head -n 5 "$err")"
	keys=$(awk -v t="$t" '$1 == "Time" && $2 == "to" && $3 == t && $5 == "keys" { print $4 }' "$out")
	smc_assert_eq "memcslap $t: keys reported" "${keys:-none}" $((CONCURRENCY * EXECUTE))
}

slap set
slap get
slap mget

# get and mget each preload EXECUTE keys with set, then read CONCURRENCY*EXECUTE.
stat=$(smc_run "$cli" memcstat --servers="$servers") || smc_fail "memcstat failed"
value() { printf '%s\n' "$stat" | awk -v k="$1:" '$1 == k { print $2 }'; }
smc_assert_ge "memcached cmd_set" "$(value cmd_set)" $((CONCURRENCY * EXECUTE + 2 * EXECUTE))
smc_assert_ge "memcached cmd_get" "$(value cmd_get)" $((2 * CONCURRENCY * EXECUTE))
smc_assert_eq "memcached get_misses" "$(value get_misses)" 0
smc_assert_eq "memcached get_hits = cmd_get" "$(value get_hits)" "$(value cmd_get)"

smc_stop_server memcached INT
smc_assert_eq "memcached exit status" "${SMC_SERVER_RC[memcached]}" 0

# Every get returned a value: at least one byte per operation each way.
smc_expect_payload "$srv" $((4 * CONCURRENCY * EXECUTE)) "memcached"
smc_expect_payload "$cli" $((4 * CONCURRENCY * EXECUTE)) "memcslap+memcstat"
smc_pass
