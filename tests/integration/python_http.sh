#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#
# python3 -m http.server and curl, both under smc_preload.sh: a 1 MiB random file and a
# small one, fetched several times (one connection each: http.server closes after every
# response), must come back byte-identical, and the server must log each request as 200.
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
. "$(dirname -- "$0")/lib.sh"

ROUNDS=5

smc_require_cmd python3 curl
smc_init
smc_free_port port
srv=$(smc_stats_dir server)
cli=$(smc_stats_dir client)
smc_make_www "python http"

# -u: unbuffered, so the request log is complete when we read it.
smc_start_server http "$srv" python3 -u -m http.server --bind 127.0.0.1 --directory "$www" "$port"
smc_wait_port http "$port"

args=()
for ((i = 0; i < ROUNDS; i++)); do
	for f in big.bin small.txt; do
		args+=(-o "$SMC_TMP/got-$i-$f" "http://127.0.0.1:$port/$f")
	done
done
smc_log "curl: $ROUNDS x (big.bin, small.txt)"
smc_run "$cli" curl -sS --fail "${args[@]}" || smc_fail "curl failed (status $?)"
for ((i = 0; i < ROUNDS; i++)); do
	for f in big.bin small.txt; do
		smc_assert_same_file "$f, round $i" "$SMC_TMP/got-$i-$f" "$www/$f"
	done
done

# SIGINT: http.server catches KeyboardInterrupt and exits normally (stats get written).
smc_stop_server http INT
smc_assert_eq "http.server exit status" "${SMC_SERVER_RC[http]}" 0
served=$(grep -c '"GET /[a-z]*\.[a-z]* HTTP/1\.1" 200' "$(smc_server_log http)")
smc_assert_eq "requests logged with status 200 by http.server" "$served" $((2 * ROUNDS))

smc_expect_payload "$srv" $((ROUNDS * 1048576)) "http.server"
smc_expect_payload "$cli" $((ROUNDS * 1048576)) "curl"
smc_pass
