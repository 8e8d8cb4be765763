#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#
# Another local user holds same-host handshakes open (abstract names, no TCP option):
# user nobody keeps TCP connections to a preloaded root event-loop server
# (tests/progs/smc_churn, epoll) queued, each from a port whose per-connection rendezvous
# name it binds itself, so the server joins it inside accept() and the owner check
# passes (nobody owns both ends). It then never sends the Proposal ("silent"), or sends
# a valid one and never the Confirm ("proposal"). Meanwhile a preloaded root client
# makes short connections to the same server. Asserted: every legitimate connection
# works (upgraded or TCP, its exact response, no abort); the attacker received nothing
# but what its own connections were due (silent: no byte, no descriptor; proposal: the
# Accept of its own connections, never a byte of the legitimate payload); the server
# holds no more descriptors, memfds or mappings than before; and, last, the median
# delay the attack added per legitimate connection over a run without it is under
# ATTACK_MAX_MEDIAN_ADDED_MS (rdv_attack_lib.sh). The delays are reported whatever the
# outcome ("attack report").
# Skips (77) without root or without a user nobody.
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
# shellcheck disable=SC2034 # read by lib.sh
SMC_TEST_KEEP_TRANSPORT=1
SMC_TEST_EXPECT=shm
. "$(dirname -- "$0")/lib.sh"

[ "$(id -u)" = 0 ] || smc_skip "needs root (an attacker of another user)"
id -u nobody >/dev/null 2>&1 || smc_skip "no user nobody"
smc_require_cmd setpriv
smc_init
smc_require_built "$SMC_CHURN"
. "$(dirname -- "$0")/rdv_attack_lib.sh"
# every connection makes the full handshake, however short (libsmc_preload(7))
export SMC_SHORT_CONN_US=0
# the same-host rendezvous, never the TCP option, even where the host (or a concurrent
# test) has it set up: no map where the library looks for one
export SMC_BPF_DIR=/sys/fs/bpf/smc-rdv-attack-none-$$ SMC_RDV_DIR=$SMC_TMP/no-rdv-dir
# legitimate connections per run
LEGIT=${HOLD_LEGIT:-20}
LEGIT_PROPOSAL=${HOLD_LEGIT_PROPOSAL:-20}
# attack connections kept at the server at once, and the pause before the next try once
# the server let one go: each costs the server's accept() its short inline wait
# (core/negotiate/handshake.c) and then waits in the background until the server gives up on it
KEEP=${HOLD_KEEP:-8}
PAUSE_MS=${HOLD_PAUSE_MS:-20}

smc_free_port PORT
SRV_STATS=$(smc_stats_dir server)
smc_start_server server "$SRV_STATS" "$SMC_CHURN" server "$PORT" --bind 127.0.0.1 --mode epoll
smc_wait_port server "$PORT"
srv_pid=${SMC_SERVER_PID[server]}

# warm-up: the library's lazily created state (the progress thread, the server's
# first-connection allocations) is not part of what is measured
attack_legit warmup "$PORT" 3
sleep 0.5
base=$(smc_proc_resources "$srv_pid")

attack_legit baseline "$PORT" "$LEGIT"

# ---------------------------------------------------------------- silent holder
attack_start hold-silent hold "$PORT" 600 "$KEEP" "$PAUSE_MS" silent
attack_legit silent "$PORT" "$LEGIT"
attack_stop hold-silent
attack_delay "hold/silent (keep=$KEEP pause=${PAUSE_MS}ms)" baseline silent "$(attack_field tries)"
smc_assert_ge "silent: attack connections the server joined" "$(attack_field joined)" 1
joined_total=$(attack_field joined)
smc_assert_eq "silent: bytes the attacker received" "$(attack_field bytes)" 0
smc_assert_eq "silent: descriptors the attacker received" "$(attack_field fds)" 0
smc_assert_eq "silent: legitimate payload the attacker saw" "$(attack_field marker)" 0
smc_log "silent: the server held one try for up to $(attack_field maxhold_ms) ms"

# ---------------------------------------------------------------- Proposal, no Confirm
attack_legit baseline2 "$PORT" "$LEGIT_PROPOSAL"
attack_start hold-proposal hold "$PORT" 600 "$KEEP" "$PAUSE_MS" proposal
attack_legit proposal "$PORT" "$LEGIT_PROPOSAL"
attack_stop hold-proposal
attack_delay "hold/proposal-no-confirm (keep=$KEEP pause=${PAUSE_MS}ms)" baseline2 proposal "$(attack_field tries)"
smc_assert_ge "proposal: attack connections the server joined" "$(attack_field joined)" 1
joined_total=$((joined_total + $(attack_field joined)))
# Its own connections' Accepts (a memfd and two doorbells each) are what a client of
# those connections is due: the memfds are searched for the legitimate payload.
smc_assert_eq "proposal: descriptors beyond its own Accepts" \
	"$(attack_field fds)" $((3 * $(attack_field accepts)))
smc_assert_eq "proposal: legitimate payload the attacker saw" "$(attack_field marker)" 0
smc_log "proposal: the server held one try for up to $(attack_field maxhold_ms) ms"

# once the attacker is gone the server is back to its baseline and upgrades again
attack_legit after "$PORT" 3
smc_assert_eq "after the attacks: shm connections" \
	"$(smc_stats "$(smc_stats_dir after)" '.connections.shm // 0')" 3
smc_expect_resources server "$srv_pid" "$base" 40
smc_stop_server server
smc_require_stats "$SRV_STATS"
smc_log "stats server: $(smc_stats_summary "$SRV_STATS")"
# the held handshakes were left to the server's progress thread, not waited for inside
# accept(): at least one per try the server joined
smc_assert_ge "server: handshakes accept() left to the background" \
	"$(smc_stats "$SRV_STATS" '.events.hs_background // 0')" "$joined_total"
# (its exit status counts the attacker's connections, reset or closed before a request,
# as errors: not asserted)

attack_assert_delay
smc_pass
